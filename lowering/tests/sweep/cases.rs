//! One valid single-node graph per rule (and per path through it where the
//! paths read different arguments), as PyTorch's metadata would give it.

use rdyn_ir::DType;

use super::{Case, Tensor, A};
use A::{B, F, I, L, N, S, T};

fn f(sizes: &[i64]) -> Tensor {
    Tensor { sizes: sizes.to_vec(), dtype: DType::F32, transposed: false }
}

fn i(sizes: &[i64]) -> Tensor {
    Tensor { sizes: sizes.to_vec(), dtype: DType::I64, transposed: false }
}

fn b(sizes: &[i64]) -> Tensor {
    Tensor { sizes: sizes.to_vec(), dtype: DType::Bool, transposed: false }
}

fn ints(values: &[i64]) -> A {
    L(values.iter().map(|v| I(*v)).collect())
}

fn case(target: &'static str, inputs: Vec<Tensor>, args: Vec<A>, outputs: Vec<Tensor>) -> Case {
    Case { target, inputs, args, kwargs: vec![], outputs }
}

impl Case {
    fn kw(mut self, name: &'static str, a: A) -> Case {
        self.kwargs.push((name, a));
        self
    }
}

/// The four ops issue 38 names.
pub fn named() -> Vec<Case> {
    vec![
        case("aten.repeat.default", vec![f(&[2, 3])], vec![T(0), ints(&[2, 1, 2])], vec![f(&[2, 2, 6])]),
        case("aten.repeat.default", vec![f(&[2, 3])], vec![T(0), ints(&[3, 2])], vec![f(&[6, 6])]),
        case(
            "aten.split_with_sizes.default",
            vec![f(&[5, 4])],
            vec![T(0), ints(&[2, 3]), I(0)],
            vec![f(&[2, 4]), f(&[3, 4])],
        ),
        case(
            "aten.split_with_sizes.default",
            vec![f(&[3, 4])],
            vec![T(0), ints(&[1, 3]), I(-1)],
            vec![f(&[3, 1]), f(&[3, 3])],
        ),
        case("aten.embedding.default", vec![f(&[10, 4]), i(&[2, 3])], vec![T(0), T(1)], vec![f(&[2, 3, 4])]),
        case("aten.embedding.default", vec![f(&[10, 4]), i(&[])], vec![T(0), T(1)], vec![f(&[4])]),
        case("aten.diagonal.default", vec![f(&[3, 4, 5])], vec![T(0), I(1), I(0), I(2)], vec![f(&[4, 3])]),
        case("aten.diagonal.default", vec![f(&[3, 4])], vec![T(0), I(-1)], vec![f(&[2])]),
        case("aten.diagonal.default", vec![f(&[3, 4])], vec![T(0)], vec![f(&[3])]),
    ]
}

/// The other views and data movement.
fn views() -> Vec<Case> {
    vec![
        case("aten.view.default", vec![f(&[4, 6])], vec![T(0), ints(&[24])], vec![f(&[24])]),
        case("aten.permute.default", vec![f(&[2, 3, 4])], vec![T(0), ints(&[2, 0, 1])], vec![f(&[4, 2, 3])]),
        case("aten.transpose.int", vec![f(&[2, 3, 4])], vec![T(0), I(0), I(2)], vec![f(&[4, 3, 2])]),
        case("aten.t.default", vec![f(&[3, 4])], vec![T(0)], vec![f(&[4, 3])]),
        case("aten.expand.default", vec![f(&[3, 1])], vec![T(0), ints(&[2, 3, 4])], vec![f(&[2, 3, 4])]),
        case("aten.unsqueeze.default", vec![f(&[3, 4])], vec![T(0), I(1)], vec![f(&[3, 1, 4])]),
        case("aten.squeeze.dim", vec![f(&[3, 1, 4])], vec![T(0), I(1)], vec![f(&[3, 4])]),
        case("aten.slice.Tensor", vec![f(&[6, 4])], vec![T(0), I(0), I(1), I(5), I(2)], vec![f(&[2, 4])]),
        case("aten.select.int", vec![f(&[3, 4])], vec![T(0), I(1), I(2)], vec![f(&[3])]),
        case("aten.unfold.default", vec![f(&[8, 3])], vec![T(0), I(0), I(3), I(2)], vec![f(&[3, 3, 3])]),
        case("aten.flip.default", vec![f(&[3, 4])], vec![T(0), ints(&[0])], vec![f(&[3, 4])]),
        case(
            "aten.as_strided.default",
            vec![f(&[4, 6])],
            vec![T(0), ints(&[3, 2]), ints(&[6, 1]), I(1)],
            vec![f(&[3, 2])],
        ),
        case("aten.cat.default", vec![f(&[2, 3]), f(&[2, 5])], vec![L(vec![T(0), T(1)]), I(1)], vec![f(&[2, 8])]),
        case("aten.constant_pad_nd.default", vec![f(&[3, 4])], vec![T(0), ints(&[1, 2]), F(0.0)], vec![f(&[3, 7])]),
        case("aten.tril.default", vec![f(&[4, 4])], vec![T(0), I(0)], vec![f(&[4, 4])]),
        case("aten.roll.default", vec![f(&[3, 4])], vec![T(0), ints(&[1]), ints(&[1])], vec![f(&[3, 4])]),
        case(
            "aten.slice_scatter.default",
            vec![f(&[6, 4]), f(&[2, 4])],
            vec![T(0), T(1), I(0), I(1), I(5), I(2)],
            vec![f(&[6, 4])],
        ),
        case("aten.select_scatter.default", vec![f(&[3, 4]), f(&[4])], vec![T(0), T(1), I(0), I(1)], vec![f(&[3, 4])]),
        case(
            "aten.diagonal_scatter.default",
            vec![f(&[3, 4]), f(&[3])],
            vec![T(0), T(1), I(0), I(0), I(1)],
            vec![f(&[3, 4])],
        ),
    ]
}

/// Creation ops.
fn creation() -> Vec<Case> {
    vec![
        case("aten.arange.start_step", vec![], vec![I(0), I(10), I(2)], vec![i(&[5])]),
        case("aten.iota.default", vec![], vec![I(5), I(0), I(1)], vec![i(&[5])]),
        case("aten.full.default", vec![], vec![ints(&[2, 3]), F(1.5)], vec![f(&[2, 3])]),
        case("aten.zeros.default", vec![], vec![ints(&[2, 3])], vec![f(&[2, 3])]),
        case("aten.ones_like.default", vec![f(&[2, 3])], vec![T(0)], vec![f(&[2, 3])]),
        case("aten.scalar_tensor.default", vec![], vec![F(2.5)], vec![f(&[])]),
    ]
}

/// Reads and writes through data.
fn indexing() -> Vec<Case> {
    vec![
        case("aten.gather.default", vec![f(&[5, 7]), i(&[5, 3])], vec![T(0), I(1), T(1)], vec![f(&[5, 3])]),
        case("aten.index_select.default", vec![f(&[5, 7]), i(&[3])], vec![T(0), I(0), T(1)], vec![f(&[3, 7])]),
        case("aten.index.Tensor", vec![f(&[5, 7]), i(&[3])], vec![T(0), L(vec![T(1)])], vec![f(&[3, 7])]),
        case("aten.index.Tensor", vec![f(&[5, 7]), i(&[3])], vec![T(0), L(vec![N, T(1)])], vec![f(&[5, 3])]),
        case(
            "aten.scatter.src",
            vec![f(&[5, 7]), i(&[5, 3]), f(&[5, 3])],
            vec![T(0), I(1), T(1), T(2)],
            vec![f(&[5, 7])],
        ),
        case("aten.scatter.value", vec![f(&[5, 7]), i(&[5, 3])], vec![T(0), I(1), T(1), F(2.0)], vec![f(&[5, 7])]),
        case(
            "aten.scatter_add.default",
            vec![f(&[5, 7]), i(&[5, 3]), f(&[5, 3])],
            vec![T(0), I(1), T(1), T(2)],
            vec![f(&[5, 7])],
        ),
        case(
            "aten.scatter_reduce.two",
            vec![f(&[5, 7]), i(&[5, 3]), f(&[5, 3])],
            vec![T(0), I(1), T(1), T(2), S("mean"), B(false)],
            vec![f(&[5, 7])],
        ),
        case(
            "aten.index_put.default",
            vec![f(&[5, 7]), i(&[3]), f(&[3, 7])],
            vec![T(0), L(vec![T(1)]), T(2), B(true)],
            vec![f(&[5, 7])],
        ),
        case(
            "aten.index_put.default",
            vec![f(&[5, 7]), i(&[3]), f(&[5, 3])],
            vec![T(0), L(vec![N, T(1)]), T(2)],
            vec![f(&[5, 7])],
        ),
        case(
            "aten.index_reduce.default",
            vec![f(&[5, 7]), i(&[3]), f(&[3, 7])],
            vec![T(0), I(0), T(1), T(2), S("amax")],
            vec![f(&[5, 7])],
        ),
        case("aten.searchsorted.Tensor", vec![f(&[4, 6]), f(&[4, 3])], vec![T(0), T(1)], vec![i(&[4, 3])]),
        case("aten.searchsorted.Tensor", vec![f(&[6]), f(&[4, 3]), i(&[6])], vec![T(0), T(1)], vec![i(&[4, 3])])
            .kw("sorter", T(2)),
        case("aten.bucketize.Tensor", vec![f(&[3, 4]), f(&[6])], vec![T(0), T(1)], vec![i(&[3, 4])])
            .kw("right", B(true)),
    ]
}

/// Reductions, scans and sorts.
fn reductions() -> Vec<Case> {
    let x = || vec![f(&[4, 6])];
    vec![
        case("aten.sum.dim_IntList", x(), vec![T(0), ints(&[1]), B(false)], vec![f(&[4])]),
        case("aten.sum.default", x(), vec![T(0)], vec![f(&[])]),
        case("aten.prod.dim_int", x(), vec![T(0), I(1), B(false)], vec![f(&[4])]),
        case("aten.mean.dim", x(), vec![T(0), ints(&[0]), B(true)], vec![f(&[1, 6])]),
        case("aten.amax.default", x(), vec![T(0), ints(&[1]), B(false)], vec![f(&[4])]),
        case("aten.max.dim", x(), vec![T(0), I(1), B(false)], vec![f(&[4]), i(&[4])]),
        case("aten.max.other", vec![f(&[4, 6]), f(&[6])], vec![T(0), T(1)], vec![f(&[4, 6])]),
        case("aten.argmax.default", x(), vec![T(0), I(1), B(false)], vec![i(&[4])]),
        case("aten.argmin.default", x(), vec![T(0), N, B(true)], vec![i(&[1, 1])]),
        case("aten.any.dim", vec![b(&[4, 6])], vec![T(0), I(1)], vec![b(&[4])]),
        case("aten.var.correction", x(), vec![T(0), ints(&[1])], vec![f(&[4])]).kw("correction", I(1)),
        case("aten.std.correction", x(), vec![T(0), ints(&[1])], vec![f(&[4, 1])]).kw("keepdim", B(true)),
        case("aten.var_mean.correction", x(), vec![T(0), ints(&[1])], vec![f(&[4]), f(&[4])]),
        case("aten.logsumexp.default", x(), vec![T(0), ints(&[1]), B(false)], vec![f(&[4])]),
        case("aten.cumsum.default", x(), vec![T(0), I(1)], vec![f(&[4, 6])]),
        case("aten.cummax.default", x(), vec![T(0), I(1)], vec![f(&[4, 6]), i(&[4, 6])]),
        case("aten.logcumsumexp.default", x(), vec![T(0), I(0)], vec![f(&[4, 6])]),
        case("aten.sort.default", x(), vec![T(0), I(1), B(false)], vec![f(&[4, 6]), i(&[4, 6])]),
        case("aten.sort.stable", x(), vec![T(0)], vec![f(&[4, 6]), i(&[4, 6])]).kw("dim", I(0)),
        case("aten.topk.default", x(), vec![T(0), I(2), I(1)], vec![f(&[4, 2]), i(&[4, 2])]),
        case("aten.kthvalue.default", x(), vec![T(0), I(2), I(1), B(false)], vec![f(&[4]), i(&[4])]),
        case("aten.median.default", x(), vec![T(0)], vec![f(&[])]),
        case("aten.median.dim", x(), vec![T(0), I(1), B(true)], vec![f(&[4, 1]), i(&[4, 1])]),
        case("aten.nanmedian.dim", x(), vec![T(0), I(0)], vec![f(&[6]), i(&[6])]),
    ]
}

/// Pooling, normalization, GEMMs and convolutions.
fn library() -> Vec<Case> {
    let window = || vec![ints(&[2, 2]), ints(&[2, 2]), ints(&[0, 0]), B(false), B(true), N];
    let conv = |stride: &[i64], pad: &[i64], groups: i64| {
        vec![ints(stride), ints(pad), ints(&[1, 1]), B(false), ints(&[0, 0]), I(groups)]
    };
    let args = |head: Vec<A>, tail: Vec<A>| [head, tail].concat();
    vec![
        case("aten.avg_pool2d.default", vec![f(&[1, 2, 6, 6])], args(vec![T(0)], window()), vec![f(&[1, 2, 3, 3])]),
        case(
            "aten.avg_pool2d_backward.default",
            vec![f(&[1, 2, 3, 3]), f(&[1, 2, 6, 6])],
            args(vec![T(0), T(1)], window()),
            vec![f(&[1, 2, 6, 6])],
        ),
        case(
            "aten._native_batch_norm_legit_no_training.default",
            vec![f(&[2, 3, 4, 4]), f(&[3]), f(&[3]), f(&[3]), f(&[3])],
            vec![T(0), T(1), T(2), T(3), T(4), F(0.1), F(1e-5)],
            vec![f(&[2, 3, 4, 4]), f(&[0]), f(&[0])],
        ),
        case(
            "aten.native_batch_norm.default",
            vec![f(&[2, 3, 4, 4]), f(&[3]), f(&[3]), f(&[3]), f(&[3])],
            vec![T(0), T(1), T(2), T(3), T(4), B(false), F(0.1), F(1e-5)],
            vec![f(&[2, 3, 4, 4]), f(&[0]), f(&[0])],
        ),
        case(
            "aten.native_layer_norm.default",
            vec![f(&[4, 6]), f(&[6]), f(&[6])],
            vec![T(0), ints(&[6]), T(1), T(2), F(1e-5)],
            vec![f(&[4, 6]), f(&[4, 1]), f(&[4, 1])],
        ),
        case("aten.mm.default", vec![f(&[4, 5]), f(&[5, 3])], vec![T(0), T(1)], vec![f(&[4, 3])]),
        case("aten.bmm.default", vec![f(&[2, 4, 5]), f(&[2, 5, 3])], vec![T(0), T(1)], vec![f(&[2, 4, 3])]),
        case("aten.addmm.default", vec![f(&[3]), f(&[4, 5]), f(&[5, 3])], vec![T(0), T(1), T(2)], vec![f(&[4, 3])])
            .kw("beta", F(0.5)),
        case(
            "aten.convolution.default",
            vec![f(&[1, 4, 3, 3]), f(&[8, 4, 1, 1]), f(&[8])],
            args(vec![T(0), T(1), T(2)], conv(&[1, 1], &[0, 0], 1)),
            vec![f(&[1, 8, 3, 3])],
        ),
        case(
            "aten.convolution.default",
            vec![f(&[1, 3, 4, 4]), f(&[8, 3, 2, 2])],
            args(vec![T(0), T(1), N], conv(&[2, 2], &[0, 0], 1)),
            vec![f(&[1, 8, 2, 2])],
        ),
        case(
            "aten.convolution.default",
            vec![f(&[1, 4, 6, 6]), f(&[4, 1, 3, 3]), f(&[4])],
            args(vec![T(0), T(1), T(2)], conv(&[1, 1], &[1, 1], 4)),
            vec![f(&[1, 4, 6, 6])],
        ),
        case(
            "aten.convolution.default",
            vec![f(&[1, 16, 32, 32]), f(&[4, 16, 3, 3])],
            args(vec![T(0), T(1), N], conv(&[1, 1], &[1, 1], 1)),
            vec![f(&[1, 4, 32, 32])],
        ),
    ]
}

/// Elementwise ops.
fn pointwise() -> Vec<Case> {
    let x = || vec![f(&[4, 6])];
    let xy = || vec![f(&[4, 6]), f(&[6])];
    vec![
        case("aten.exp.default", x(), vec![T(0)], vec![f(&[4, 6])]),
        case("aten.isnan.default", x(), vec![T(0)], vec![b(&[4, 6])]),
        case("aten.gelu.default", x(), vec![T(0)], vec![f(&[4, 6])]).kw("approximate", S("tanh")),
        case("aten.round.decimals", x(), vec![T(0)], vec![f(&[4, 6])]).kw("decimals", I(2)),
        case("aten.angle.default", x(), vec![T(0)], vec![f(&[4, 6])]),
        case("aten.add.Tensor", xy(), vec![T(0), T(1)], vec![f(&[4, 6])]).kw("alpha", F(2.0)),
        case("aten.div.Tensor_mode", xy(), vec![T(0), T(1)], vec![f(&[4, 6])]).kw("rounding_mode", S("floor")),
        case("aten.eq.Scalar", x(), vec![T(0), I(3)], vec![b(&[4, 6])]),
        case("aten.pow.Tensor_Scalar", x(), vec![T(0), F(2.0)], vec![f(&[4, 6])]),
        case("aten.remainder.Scalar", vec![i(&[4, 6])], vec![T(0), I(-3)], vec![i(&[4, 6])]),
        case("aten.polygamma.default", x(), vec![I(1), T(0)], vec![f(&[4, 6])]),
        case("aten.where.self", vec![b(&[4, 6]), f(&[4, 6]), f(&[6])], vec![T(0), T(1), T(2)], vec![f(&[4, 6])]),
        case("aten.clamp.default", x(), vec![T(0), F(-1.0), F(1.0)], vec![f(&[4, 6])]),
        case("aten.hardtanh.default", x(), vec![T(0), F(0.0), F(6.0)], vec![f(&[4, 6])]),
        case("aten.lerp.Scalar", xy(), vec![T(0), T(1), F(0.5)], vec![f(&[4, 6])]),
        case("aten.addcmul.default", vec![f(&[4, 6]), f(&[6]), f(&[4, 1])], vec![T(0), T(1), T(2)], vec![f(&[4, 6])])
            .kw("value", F(0.5)),
        case("aten.gelu_backward.default", vec![f(&[4, 6]), f(&[4, 6])], vec![T(0), T(1)], vec![f(&[4, 6])]),
        case("aten.clone.default", x(), vec![T(0)], vec![f(&[4, 6])]),
        case("aten._to_copy.default", x(), vec![T(0)], vec![Tensor { dtype: DType::F64, ..f(&[4, 6]) }]),
        case("aten.copy.default", xy(), vec![T(0), T(1)], vec![f(&[4, 6])]),
        case("aten.histc.default", x(), vec![T(0), I(8)], vec![f(&[8])]),
    ]
}

/// Every case the sweep mutates.
pub fn all() -> Vec<Case> {
    [named(), views(), creation(), indexing(), reductions(), library(), pointwise()].concat()
}
