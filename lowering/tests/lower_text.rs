#![allow(clippy::panic, clippy::unwrap_used)] // a test reports failure by panicking
//! Lowering decisions pinned as IR text: small graphs built by hand, lowered,
//! and checked with `check:` substrings against the printed loop IR.

use rdyn_ir::graph::{Arg, Graph, Input, Node, TensorMeta, ValueId};
use rdyn_ir::loops::contiguous_strides;
use rdyn_ir::op::parse_target;
use rdyn_ir::{Ctx, DType, Device, Expr};
use rdyn_lowering::{lower_with, InputLayout, LowerOptions};

struct Builder {
    graph: Graph,
}

impl Builder {
    fn new() -> Builder {
        Builder { graph: Graph::default() }
    }

    fn value(&mut self, sizes: &[i64]) -> ValueId {
        let sizes: Vec<Expr> = sizes.iter().map(|s| Expr::c(*s)).collect();
        self.graph.values.push(TensorMeta {
            strides: contiguous_strides(&sizes),
            sizes,
            offset: Expr::zero(),
            dtype: DType::F32,
            device: Device::Cpu,
        });
        ValueId(self.graph.values.len() as u32 - 1)
    }

    fn input(&mut self, sizes: &[i64]) -> ValueId {
        let v = self.value(sizes);
        self.graph.inputs.push(Input::Tensor(v));
        v
    }

    /// `v`, typed bool.
    fn boolean(&mut self, v: ValueId) -> ValueId {
        self.graph.values[v.0 as usize].dtype = DType::Bool;
        v
    }

    fn int_input(&mut self, sizes: &[i64]) -> ValueId {
        let v = self.input(sizes);
        self.graph.values[v.0 as usize].dtype = DType::I64;
        v
    }

    fn node(&mut self, target: &str, args: Vec<Arg>, out: &[i64]) -> ValueId {
        let v = self.value(out);
        self.node_into(target, args, vec![v]);
        v
    }

    /// A node writing `outputs`.
    fn node_into(&mut self, target: &str, args: Vec<Arg>, outputs: Vec<ValueId>) {
        let index = self.graph.nodes.len() as u32;
        let op = parse_target(target).0;
        self.graph.nodes.push(Node { index, op, target: target.into(), args, kwargs: vec![], outputs });
    }

    fn lower(self, outputs: &[ValueId]) -> (String, rdyn_lowering::NodeCounts) {
        self.lower_for(outputs, LowerOptions::default())
    }

    fn lower_for(mut self, outputs: &[ValueId], options: LowerOptions) -> (String, rdyn_lowering::NodeCounts) {
        self.graph.outputs = outputs.iter().map(|v| Arg::Tensor(*v)).collect();
        let layouts: Vec<Option<InputLayout>> = self
            .graph
            .inputs
            .iter()
            .map(|i| match i {
                Input::Tensor(v) => {
                    let m = self.graph.meta(*v);
                    Some(InputLayout { sizes: m.sizes.clone(), strides: m.strides.clone(), offset: Expr::zero() })
                }
                _ => None,
            })
            .collect();
        match lower_with(&self.graph, &layouts, &Ctx::default(), options) {
            Ok(l) => {
                // Every program lowered here also reads back from its text.
                let text = l.program.to_string();
                let back = rdyn_ir::parse::program(&text).map(|p| p.to_string());
                assert_eq!(back, Ok(text.clone()));
                (text, l.counts)
            }
            Err(e) => (format!("error: {e}"), Default::default()),
        }
    }
}

fn check(text: &str, expected: &[&str]) {
    let mut rest = text;
    for line in expected {
        match rest.find(line) {
            Some(at) => rest = &rest[at + line.len()..],
            None => panic!("check: {line:?} not found (in order) in:\n{text}"),
        }
    }
}

fn t(v: ValueId) -> Arg {
    Arg::Tensor(v)
}

#[test]
fn pointwise_chain_is_one_kernel_with_no_temporaries() {
    let mut b = Builder::new();
    let x = b.input(&[4, 6]);
    let y = b.input(&[6]);
    let a = b.node("aten.add.Tensor", vec![t(x), t(y)], &[4, 6]);
    let r = b.node("aten.relu.default", vec![t(a)], &[4, 6]);
    let (text, counts) = b.lower(&[r]);
    assert_eq!(text.matches("kernel k").count(), 1, "{text}");
    check(&text, &["load buf0[6*i0 + i1]", "load buf1[i1]", "add", "max", "return (buf2)"]);
    assert_eq!(counts.native, 2);
    assert_eq!(counts.fallback, 0);
}

#[test]
fn permute_and_view_are_index_rewrites() {
    let mut b = Builder::new();
    let x = b.input(&[4, 6]);
    let p = b.node(
        "aten.permute.default",
        vec![t(x), Arg::List(vec![Arg::Int(Expr::c(1)), Arg::Int(Expr::c(0))])],
        &[6, 4],
    );
    let e = b.node("aten.exp.default", vec![t(p)], &[6, 4]);
    let v = b.node("aten.view.default", vec![t(e), Arg::List(vec![Arg::Int(Expr::c(24))])], &[24]);
    let n = b.node("aten.neg.default", vec![t(v)], &[24]);
    let (text, _) = b.lower(&[n]);
    // The reshape of the (lazy) transposed value reads x through div/mod.
    check(&text, &["kernel k0 outer [24]", "load buf0[(i0 // 4) + 6*(i0 % 4)]", "exp", "neg"]);
}

#[test]
fn unsupported_op_falls_back_and_is_counted() {
    let mut b = Builder::new();
    let x = b.input(&[8]);
    let c = b.node("aten.histc.default", vec![t(x), Arg::Int(Expr::c(8))], &[8]);
    let r = b.node("aten.relu.default", vec![t(c)], &[8]);
    let (text, counts) = b.lower(&[r]);
    check(&text, &["extern fallback aten.histc.default (buf0) -> (buf1)", "kernel k0", "load buf1[i0]"]);
    assert_eq!(counts.fallback, 1);
    assert_eq!(counts.fallback_ops.get("aten.histc.default"), Some(&1));
}

#[test]
fn cumsum_is_a_masked_prefix_reduction_fused_with_its_epilogue() {
    let mut b = Builder::new();
    // Long enough to stay a reduction (a window under 16 points is unrolled).
    let x = b.input(&[32]);
    let c = b.node("aten.cumsum.default", vec![t(x), Arg::Int(Expr::c(0))], &[32]);
    let r = b.node("aten.relu.default", vec![t(c)], &[32]);
    let (text, counts) = b.lower(&[r]);
    check(&text, &["kernel k0 outer [32]", "sum over [32]", "le t2, t3", "where", "max"]);
    assert_eq!(text.matches("kernel k").count(), 1, "{text}");
    assert_eq!(counts.fallback, 0);
}

#[test]
fn a_float_sum_over_a_short_window_is_a_pointwise_sum() {
    // 2x2 windows (a nearest upsampling's gradient): four loads added in the
    // reduction's order, no reduction stage, fused with the ReLU after it.
    let mut b = Builder::new();
    let x = b.input(&[4, 6, 2, 2]);
    let dims = Arg::List(vec![Arg::Int(Expr::c(2)), Arg::Int(Expr::c(3))]);
    let s = b.node("aten.sum.dim_IntList", vec![t(x), dims, Arg::Bool(false)], &[4, 6]);
    let r = b.node("aten.relu.default", vec![t(s)], &[4, 6]);
    let (text, counts) = b.lower(&[r]);
    check(
        &text,
        &[
            "kernel k0 outer [4, 6]",
            "load buf0[24*i0 + 4*i1]",
            "load buf0[24*i0 + 4*i1 + 1]",
            "add",
            "load buf0[24*i0 + 4*i1 + 3]",
            "max",
        ],
    );
    assert!(!text.contains("sum over"), "{text}");
    assert_eq!(text.matches("kernel k").count(), 1, "{text}");
    assert_eq!(counts.fallback, 0);
    // A window of 16 points stays a reduction.
    let mut b = Builder::new();
    let x = b.input(&[4, 16]);
    let dims = Arg::List(vec![Arg::Int(Expr::c(1))]);
    let s = b.node("aten.sum.dim_IntList", vec![t(x), dims, Arg::Bool(false)], &[4]);
    let (text, _) = b.lower(&[s]);
    check(&text, &["sum over [16]"]);
}

#[test]
fn topk_is_a_sort_step_whose_readers_fuse_behind_it() {
    let mut b = Builder::new();
    let x = b.input(&[4, 50]);
    let args = vec![t(x), Arg::Int(Expr::c(3)), Arg::Int(Expr::c(1))];
    let (values, indices) = values_and_indices(&mut b, "aten.topk.default", args, &[4, 3]);
    let r = b.node("aten.relu.default", vec![t(values)], &[4, 3]);
    let options = LowerOptions { cpu_kernels: true, ..LowerOptions::default() };
    let (text, counts) = b.lower_for(&[r, indices], options);
    check(&text, &["extern sort dim 1 descending first 3 (buf0) -> (buf1, buf2)", "kernel k0", "load buf1[", "max"]);
    assert_eq!(counts.fallback, 0, "{text}");
}

/// A node returning values (float32) and int64 indices of sizes `out`.
fn values_and_indices(b: &mut Builder, target: &str, args: Vec<Arg>, out: &[i64]) -> (ValueId, ValueId) {
    let (values, indices) = (b.value(out), b.value(out));
    b.graph.values[indices.0 as usize].dtype = DType::I64;
    b.node_into(target, args, vec![values, indices]);
    (values, indices)
}

/// A sort node of an input `[n]`.
fn sort_of(b: &mut Builder, n: i64) -> (ValueId, ValueId) {
    let x = b.input(&[n]);
    values_and_indices(b, "aten.sort.default", vec![t(x)], &[n])
}

#[test]
fn sorts_without_cpu_kernels_rank_by_reductions_up_to_2048() {
    let mut b = Builder::new();
    let (values, indices) = sort_of(&mut b, 8);
    let (text, counts) = b.lower(&[values, indices]);
    // Ranks: a sum over the line; then the index of each rank: another.
    check(&text, &["sum over [8]", "lt", "sum over [8]", "eq"]);
    assert_eq!(counts.fallback, 0, "{text}");
    let mut b = Builder::new();
    let (values, indices) = sort_of(&mut b, 4096);
    let (text, counts) = b.lower(&[values, indices]);
    check(&text, &["extern fallback aten.sort.default (buf0) -> (buf1, buf2)"]);
    assert_eq!(counts.fallback, 1);
}

#[test]
fn reduction_with_epilogue_is_one_kernel() {
    let mut b = Builder::new();
    let x = b.input(&[32, 16]);
    let dims = Arg::List(vec![Arg::Int(Expr::c(-1))]);
    let s = b.node("aten.sum.dim_IntList", vec![t(x), dims, Arg::Bool(true)], &[32, 1]);
    let d = b.node("aten.div.Tensor", vec![t(x), t(s)], &[32, 16]);
    let (text, _) = b.lower(&[d]);
    assert_eq!(text.matches("kernel k").count(), 1, "{text}");
    check(&text, &["sum over [16]", "load buf1[i0]", "div"]);
}

/// An embedding row that three stages read (x, x - mean, (x - mean)^2) is
/// gathered once into a buffer: recomputed, each reader would redo the
/// bounds-checked gather on every row.
#[test]
fn gathered_rows_with_several_readers_are_stored_once() {
    let mut b = Builder::new();
    let table = b.input(&[100, 16]);
    let ids = b.int_input(&[8]);
    let e = b.node("aten.embedding.default", vec![t(table), t(ids)], &[8, 16]);
    let dim = || Arg::List(vec![Arg::Int(Expr::c(1))]);
    let mean = b.node("aten.mean.dim", vec![t(e), dim(), Arg::Bool(true)], &[8, 1]);
    let centred = b.node("aten.sub.Tensor", vec![t(e), t(mean)], &[8, 16]);
    let sq = b.node("aten.mul.Tensor", vec![t(centred), t(centred)], &[8, 16]);
    let var = b.node("aten.mean.dim", vec![t(sq), dim(), Arg::Bool(true)], &[8, 1]);
    let out = b.node("aten.div.Tensor", vec![t(centred), t(var)], &[8, 16]);
    let (text, counts) = b.lower(&[out]);
    assert_eq!(counts.fallback, 0, "{text}");
    assert_eq!(text.matches("bounded").count(), 1, "{text}");
}

/// ReLU6 as PyTorch decomposes it, `where(x >= 0 | isnan(x), x, 0)` then
/// `where(y <= 6 | isnan(y), y, 6)`, lowers to one max and one min.
#[test]
fn decomposed_relu6_is_max_and_min() {
    let mut b = Builder::new();
    let x = b.input(&[8]);
    let mut y = x;
    for (cmp, c) in [("aten.ge.Scalar", 0.0), ("aten.le.Scalar", 6.0)] {
        let nan = b.node("aten.isnan.default", vec![t(y)], &[8]);
        let nan = b.boolean(nan);
        let inside = b.node(cmp, vec![t(y), Arg::Float(c)], &[8]);
        let inside = b.boolean(inside);
        let keep = b.node("aten.bitwise_or.Tensor", vec![t(inside), t(nan)], &[8]);
        let keep = b.boolean(keep);
        let bound = b.node("aten.scalar_tensor.default", vec![Arg::Float(c)], &[]);
        y = b.node("aten.where.self", vec![t(keep), t(y), t(bound)], &[8]);
    }
    let (text, counts) = b.lower(&[y]);
    assert_eq!(counts.fallback, 0, "{text}");
    check(&text, &["max", "min", "return"]);
    assert!(!text.contains("where") && !text.contains("isnan"), "{text}");
}

/// A causal `masked_fill(~(m & ones), -inf)` as the decomposition writes
/// it: `where(not(m & true), -inf, x)` lowers to `where(m, x, -inf)`,
/// with neither the `and` with a constant nor the `not`.
#[test]
fn masked_fill_of_a_negated_mask_swaps_the_select() {
    let mut b = Builder::new();
    let x = b.input(&[8]);
    let m = b.input(&[8]);
    let m = b.boolean(m);
    let ones = b.node("aten.full.default", vec![Arg::List(vec![Arg::Int(Expr::c(8))]), Arg::Bool(true)], &[8]);
    let ones = b.boolean(ones);
    let both = b.node("aten.bitwise_and.Tensor", vec![t(m), t(ones)], &[8]);
    let both = b.boolean(both);
    let not = b.node("aten.bitwise_not.default", vec![t(both)], &[8]);
    let not = b.boolean(not);
    let fill = b.node("aten.scalar_tensor.default", vec![Arg::Float(f64::NEG_INFINITY)], &[]);
    let y = b.node("aten.where.self", vec![t(not), t(fill), t(x)], &[8]);
    let (text, counts) = b.lower(&[y]);
    assert_eq!(counts.fallback, 0, "{text}");
    check(&text, &["where", "return"]);
    assert!(!text.contains(" not ") && !text.contains(" and "), "{text}");
}

#[test]
fn outputs_share_storage_only_through_views() {
    // return (clone(x), t(x)): the clone is a copy, the transpose x itself.
    let mut b = Builder::new();
    let x = b.input(&[4, 6]);
    let c = b.node("aten.clone.default", vec![t(x)], &[4, 6]);
    let tr = b.node("aten.t.default", vec![t(x)], &[6, 4]);
    b.graph.values[tr.0 as usize].strides = vec![Expr::c(1), Expr::c(6)];
    let (text, _) = b.lower(&[c, tr]);
    check(&text, &["buf1: float32[4, 6] strides [6, 1] offset 0 (temp)", "(view of buf0)", "buf1[6*i0 + i1] = stage"]);
    check(&text, &["return (buf1, buf2)"]);

    // y = x + 1; return (y, clone(y), t(y)): y and t(y) share a buffer, the
    // clone has its own.
    let mut b = Builder::new();
    let x = b.input(&[4, 6]);
    let y = b.node("aten.add.Tensor", vec![t(x), Arg::Float(1.5)], &[4, 6]);
    let c = b.node("aten.clone.default", vec![t(y)], &[4, 6]);
    let tr = b.node("aten.t.default", vec![t(y)], &[6, 4]);
    b.graph.values[tr.0 as usize].strides = vec![Expr::c(1), Expr::c(6)];
    let (text, _) = b.lower(&[y, c, tr]);
    assert_eq!(text.matches(" = stage").count(), 2, "{text}");
    check(&text, &["buf3: float32[6, 4] strides [1, 6] offset 0 (view of buf1)", "return (buf1, buf2, buf3)"]);
}

/// A 3x3 convolution over `[2, 32, 56, 56]` (channels-last wins: the weight
/// is under an eighth of the input), its ReLU read by a second one.
fn conv_relu_conv(b: &mut Builder) -> (ValueId, ValueId) {
    let ints = |v: &[i64]| Arg::List(v.iter().map(|n| Arg::Int(Expr::c(*n))).collect());
    let conv = |b: &mut Builder, x: ValueId, w: ValueId| {
        let args = vec![
            t(x),
            t(w),
            Arg::None,
            ints(&[1, 1]),
            ints(&[1, 1]),
            ints(&[1, 1]),
            Arg::Bool(false),
            ints(&[0, 0]),
            Arg::Int(Expr::c(1)),
        ];
        b.node("aten.convolution.default", args, &[2, 32, 56, 56])
    };
    let x = b.input(&[2, 32, 56, 56]);
    let (w1, w2) = (b.input(&[32, 32, 3, 3]), b.input(&[32, 32, 3, 3]));
    let c1 = conv(b, x, w1);
    let r = b.node("aten.relu.default", vec![t(c1)], &[2, 32, 56, 56]);
    (r, conv(b, r, w2))
}

#[test]
fn an_output_of_free_layout_is_what_the_convolution_reads() {
    let options = LowerOptions { cpu_kernels: true, ..LowerOptions::default() };
    // Pinned (eager's NCHW): the ReLU is stored NCHW and copied channels-last.
    let mut b = Builder::new();
    let (r, y) = conv_relu_conv(&mut b);
    let (text, _) = b.lower_for(&[r, y], options);
    assert_eq!(text.matches("max").count(), 2, "{text}");
    check(&text, &["buf9: float32[2, 32, 56, 56] strides [100352, 3136, 56, 1]", "return (buf9, buf10)"]);
    // Free (a training forward's saved activations): the ReLU is computed
    // once, channels-last, and both outputs are the buffers the
    // convolutions read and wrote.
    let mut b = Builder::new();
    let (r, y) = conv_relu_conv(&mut b);
    b.graph.free_layout = vec![0, 1];
    let (text, _) = b.lower_for(&[r, y], options);
    assert_eq!(text.matches("max").count(), 1, "{text}");
    check(&text, &["extern library aten.convolution.default (buf6, buf7) -> (buf8)", "return (buf6, buf8)"]);
    check(&text, &["buf6: float32[2, 32, 56, 56] strides [100352, 1, 1792, 32]"]);
}
