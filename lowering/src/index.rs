//! Indexing with tensors: `x[i0, :, i2]` (aten.index.Tensor) reads through
//! data-dependent indices; scatter and index_put write through them.
//!
//! Every data-dependent index is a `Bounded` scalar: the kernel checks it and
//! reports a `KernelCheckError` (an `IndexError` and a `RuntimeError`, as eager
//! raises one or the other) instead of reading or writing out of bounds. A
//! negative index wraps once for `aten.index` and `index_put`
//! (`Negatives::Wrap`) and is out of range for gather, embedding, `index_select`
//! and the scatters (`Negatives::Reject`), as their eager kernels have it;
//! `index_add`/`index_copy` decompose to `index_put`, so their decompositions
//! move a negative index below the range first. (On CUDA, by default, a kernel
//! traps instead: `IndexChecks::Device`.)
//!
//! `index` and `index_put` place their dims by NumPy's rule (`Placement`): the
//! index tensors' broadcast dims stand where adjacent indexed dims were, first
//! when a `None` separates them, so `index_add` and `index_copy` along a later
//! dim (an `index_put` whose indices start with `None`) lower too.
//!
//! Scatters copy `self`, then run serial stages (`Stage::store_indirect`, run in
//! index order). Those that add (`scatter_add`, `index_put` with `accumulate`,
//! hence `index_add`) on float16/bfloat16 add into a float32 copy of `self`,
//! rounded once when read, as ATen's sorted scatter-add does. `scatter_reduce`,
//! `index_reduce` and `scatter(reduce=)` are the same serial stage combining
//! with add, mul, max or min; without `include_self` a first stage writes the
//! identity (a max or min: one of the values) at each point written, and a
//! mean divides by a count scattered alongside (floored for integers). How the
//! CPU runs such stages is `codegen-cpu`'s (`lower_kernel.rs`, `exec/indirect.rs`).

use crate::ir::graph::{Arg, Node};
use crate::ir::loops::{BinaryOp, BufId, Kernel, Negatives, ScalarId, ScalarOp, Stage, Step};
use crate::ir::op::Op;
use crate::ir::{DType, Expr};
use crate::lazy::{vars, Lazy};
use crate::lower::{Handled, Lowerer};
use crate::shape::norm_dim;
use crate::LowerError;

/// Where `x[indices]` puts its dimensions, NumPy's rule: the index tensors
/// broadcast into `b_ndim` dims, placed where the indexed dims were when
/// those are adjacent, first otherwise; the other dims keep their order.
struct Placement {
    /// The position of the broadcast index dims in the result.
    b_start: usize,
    /// Per dim of `x`: its position in the result, or None if indexed.
    dims: Vec<Option<usize>>,
}

impl Placement {
    fn new(ndim: usize, indexed: &[usize], b_ndim: usize) -> Placement {
        let adjacent = indexed.windows(2).all(|w| w[1] == w[0] + 1);
        let b_start = if adjacent { indexed[0] } else { 0 };
        let mut next = if adjacent { 0 } else { b_ndim };
        let dims = (0..ndim)
            .map(|d| {
                if indexed.contains(&d) {
                    if d == b_start && adjacent {
                        next += b_ndim;
                    }
                    None
                } else {
                    next += 1;
                    Some(next - 1)
                }
            })
            .collect();
        Placement { b_start, dims }
    }

    /// Sizes of `x[indices]` for `x` of `sizes`, the index dims `b_sizes`.
    fn sizes(&self, sizes: &[Expr], b_sizes: &[Expr]) -> Vec<Expr> {
        let mut out = vec![Expr::c(1); b_sizes.len() + self.dims.iter().flatten().count()];
        out[self.b_start..self.b_start + b_sizes.len()].clone_from_slice(b_sizes);
        for (d, pos) in self.dims.iter().enumerate() {
            if let Some(p) = pos {
                out[*p] = sizes[d].clone();
            }
        }
        out
    }
}

/// The index tensors of an index or index_put: (dim, tensor) per tensor
/// entry; None entries keep their dim whole.
fn index_tensors(l: &Lowerer, node: &Node) -> Result<Vec<(usize, Lazy)>, LowerError> {
    let op = node.target.as_str();
    let list = node.arg(1, "indices").as_list().ok_or_else(|| crate::unsupported(op, "indices"))?;
    let mut indexed = Vec::new();
    for (d, item) in list.iter().enumerate() {
        if let Arg::Tensor(v) = item {
            if matches!(l.graph.meta(*v).dtype, DType::Bool | DType::U8) {
                return Err(crate::unsupported(op, "boolean mask index"));
            }
            indexed.push((d, l.value(*v, op)?));
        }
    }
    if indexed.is_empty() {
        return Err(crate::unsupported(op, "no index tensors"));
    }
    Ok(indexed)
}

/// The sizes the index tensors broadcast to.
fn broadcast_sizes(indexed: &[(usize, Lazy)]) -> Vec<Expr> {
    let b_ndim = indexed.iter().map(|(_, l)| l.ndim()).max().unwrap_or(0);
    let mut b_sizes = vec![Expr::c(1); b_ndim];
    for (_, l) in indexed {
        let shift = b_ndim - l.ndim();
        for (k, size) in l.sizes.iter().enumerate() {
            if !size.is_const(1) {
                b_sizes[k + shift] = size.clone();
            }
        }
    }
    b_sizes
}

impl Lowerer<'_> {
    /// Each index tensor broadcast to `b_sizes` and read at the result's
    /// index dims (from `b_start`), as (dim, value) pairs.
    fn placed_indices(
        &mut self,
        indexed: &[(usize, Lazy)],
        b_sizes: &[Expr],
        b_start: usize,
        sizes: &[Expr],
    ) -> Vec<(usize, ScalarId)> {
        let map: Vec<Expr> = (0..b_sizes.len()).map(|j| Expr::v((b_start + j) as u32)).collect();
        indexed
            .iter()
            .map(|(d, lazy)| {
                let b = self.broadcast_to(lazy, b_sizes);
                (*d, self.view(&b, sizes.to_vec(), &map).value)
            })
            .collect()
    }

    /// `x[i0, :, i2]`-style indexing with tensors (aten.index.Tensor).
    pub(crate) fn advanced_index(&mut self, node: &Node, sizes: &[Expr]) -> Result<ScalarId, LowerError> {
        let x = self.tensor_arg(node, 0, "self")?;
        let indexed = index_tensors(self, node)?;
        let b_ndim = sizes.len() + indexed.len() - x.ndim();
        let dims: Vec<usize> = indexed.iter().map(|(d, _)| *d).collect();
        let place = Placement::new(x.ndim(), &dims, b_ndim);
        let b_sizes = sizes[place.b_start..place.b_start + b_ndim].to_vec();
        let index: Vec<Option<Expr>> = place.dims.iter().map(|p| p.map(|p| Expr::v(p as u32))).collect();
        let indirect = self.placed_indices(&indexed, &b_sizes, place.b_start, sizes);
        Ok(self.gather_load(&x, &index, &indirect, sizes, Negatives::Wrap))
    }

    /// scatter(self, dim, index, src|value), scatter_add, scatter_reduce,
    /// index_reduce and index_put(self, indices, values, accumulate): copy
    /// `self`, then serial scatter stages.
    pub(crate) fn scatter(&mut self, node: &Node, sizes: &[Expr], out: DType) -> Result<Handled, LowerError> {
        let op = node.target.as_str();
        let x = self.tensor_arg(node, 0, "self")?;
        let out_v = node.outputs.first().copied().ok_or_else(|| crate::invalid(op, "no output"))?;
        let strides = self.meta_strides(out_v);
        let (reduce, include_self) = reduction(node)?;
        // Half precision reduces in a float32 copy, rounded once at the
        // end, as ATen's sorted scatter-add does: rounding after every add
        // loses most of the sum's bits when many indices repeat.
        let store = if reduce.is_some() { crate::reduce::acc_dtype(out) } else { out };
        let x = self.broadcast_to(&x, sizes);
        let x = if store != x.dtype { self.cast_lazy(x, store) } else { x };
        let buf = self.realize(&x, Some(strides.clone()));
        let buffer = self.prog.buffer(buf).clone();
        let (ranges, mut address, indirect_src, value) = if node.op != Op::IndexPut {
            let d = norm_dim(node.arg(1, "dim").as_int().unwrap_or(0), sizes.len());
            let idx = self.tensor_arg(node, 2, "index")?;
            let (ranges, idx_value) = if node.op == Op::IndexReduce {
                // A 1-D index along `d`, read at the source's point.
                let src = self.tensor_arg(node, 3, "source")?;
                let map = [if src.ndim() == 0 { Expr::zero() } else { Expr::v(d as u32) }];
                (src.sizes.clone(), self.view(&idx, src.sizes.clone(), &map).value)
            } else {
                (idx.sizes.clone(), idx.value)
            };
            let value = match node.arg(3, "src") {
                Arg::Tensor(v) => {
                    let src = self.value(*v, op)?;
                    let map = vars(src.ndim());
                    self.view(&src, ranges.clone(), &map).value
                }
                a => {
                    let f = a.as_float().ok_or_else(|| crate::unsupported(op, "value"))?;
                    self.prog.scalars.constant(f, out)
                }
            };
            let mut address = buffer.offset.clone();
            for k in 0..sizes.len() {
                if k != d {
                    address = address.add(&Expr::v(k as u32).mul(&buffer.strides[k]));
                }
            }
            (ranges, address, vec![(d, idx_value)], value)
        } else {
            // The points written are those of `x[indices]`; None entries
            // (index_add's decomposition puts them before its dim) keep
            // their dims whole.
            let indexed = index_tensors(self, node)?;
            let values = self.tensor_arg(node, 2, "values")?;
            let b_sizes = broadcast_sizes(&indexed);
            let dims: Vec<usize> = indexed.iter().map(|(d, _)| *d).collect();
            let place = Placement::new(sizes.len(), &dims, b_sizes.len());
            let ranges = place.sizes(sizes, &b_sizes);
            let indirect = self.placed_indices(&indexed, &b_sizes, place.b_start, &ranges);
            let vb = self.broadcast_to(&values, &ranges);
            let mut address = buffer.offset.clone();
            for (d, pos) in place.dims.iter().enumerate() {
                if let Some(p) = pos {
                    address = address.add(&Expr::v(*p as u32).mul(&buffer.strides[d]));
                }
            }
            (ranges, address, indirect, vb.value)
        };
        let mut store_indirect = Vec::new();
        for (d, v) in indirect_src {
            // A 0-dim self is indexed as one element along dim 0.
            let (size, stride) = match (sizes.get(d), buffer.strides.get(d)) {
                (Some(size), Some(stride)) => (size.clone(), stride.clone()),
                _ => (Expr::c(1), Expr::c(1)),
            };
            let v = self.prog.scalars.cast(v, DType::I64);
            let negatives = if node.op == Op::IndexPut { Negatives::Wrap } else { Negatives::Reject };
            let bounded = self.prog.scalars.add(ScalarOp::Bounded(v, size, negatives), DType::I64);
            store_indirect.push((bounded, stride));
        }
        address = address.simplify(&self.ctx_for(&ranges));
        let value = self.prog.scalars.cast(value, store);
        let target = Target { ranges, address, indirect: store_indirect };
        let Some(reduce) = reduce else {
            self.scatter_stage(buf, &target, value, None);
            return Ok(Handled::Native(vec![self.load_buffer(buf)]));
        };
        if !include_self {
            // Start each point written from the reduction's identity; a max
            // or min from one of its own values.
            let first = match reduce {
                Reduce::Sum | Reduce::Mean => self.prog.scalars.constant(0.0, store),
                Reduce::Prod => self.prog.scalars.constant(1.0, store),
                Reduce::Amax | Reduce::Amin => value,
            };
            self.scatter_stage(buf, &target, first, None);
        }
        let combine = match reduce {
            Reduce::Sum | Reduce::Mean => BinaryOp::Add,
            Reduce::Prod => BinaryOp::Mul,
            Reduce::Amax => BinaryOp::Max,
            Reduce::Amin => BinaryOp::Min,
        };
        self.scatter_stage(buf, &target, value, Some(combine));
        let mut lazy = self.load_buffer(buf);
        if reduce == Reduce::Mean {
            // Divided by how many values each point met (itself included),
            // floored for integers; a point none was written to keeps self.
            let start = self.prog.scalars.constant(if include_self { 1.0 } else { 0.0 }, store);
            let counts = Lazy { sizes: sizes.to_vec(), value: start, dtype: store };
            let counts = self.realize(&counts, Some(strides));
            let one = self.prog.scalars.constant(1.0, store);
            self.scatter_stage(counts, &target, one, Some(BinaryOp::Add));
            let n = self.load_buffer(counts).value;
            let n = self.prog.scalars.binary(BinaryOp::Max, n, one, store);
            let div = if store.is_float() { BinaryOp::Div } else { BinaryOp::FloorDiv };
            lazy.value = self.prog.scalars.binary(div, lazy.value, n, store);
        }
        Ok(Handled::Native(vec![if store != out { self.cast_lazy(lazy, out) } else { lazy }]))
    }

    /// One serial stage writing `value` (combined with what is there by
    /// `combine`) at each point of `target` in `buf`.
    fn scatter_stage(&mut self, buf: BufId, target: &Target, mut value: ScalarId, combine: Option<BinaryOp>) {
        if let Some(op) = combine {
            let dtype = self.prog.buffer(buf).dtype;
            let load =
                ScalarOp::Load { buf, index: target.address.clone(), indirect: target.indirect.clone(), mask: None };
            let old = self.prog.scalars.add(load, dtype);
            value = self.prog.scalars.binary(op, old, value, dtype);
        }
        let stage = Stage {
            out: buf,
            ranges: target.ranges.clone(),
            reduce: None,
            value,
            store: target.address.clone(),
            store_indirect: target.indirect.clone(),
        };
        self.prog.steps.push(Step::Kernel(Kernel { outer: target.ranges.clone(), stages: vec![stage] }));
    }
}

/// The points a scatter writes: its loop ranges, and per point the address
/// in the written buffer (`indirect`: data-dependent index times stride).
struct Target {
    ranges: Vec<Expr>,
    address: Expr,
    indirect: Vec<(ScalarId, Expr)>,
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Reduce {
    Sum,
    Prod,
    Mean,
    Amax,
    Amin,
}

/// How a scatter combines what it writes with what is there, and whether
/// `self`'s values take part: None for a plain write.
fn reduction(node: &Node) -> Result<(Option<Reduce>, bool), LowerError> {
    let op = node.target.as_str();
    let named = |pos: usize| match node.arg(pos, "reduce") {
        Arg::Str(r) => match r.as_str() {
            "sum" => Ok(Reduce::Sum),
            "prod" => Ok(Reduce::Prod),
            "mean" => Ok(Reduce::Mean),
            "amax" => Ok(Reduce::Amax),
            "amin" => Ok(Reduce::Amin),
            other => Err(crate::unsupported(op, format!("reduce={other:?}"))),
        },
        other => Err(crate::unsupported(op, format!("reduce={other}"))),
    };
    let include_self = node.arg(5, "include_self").as_bool().unwrap_or(true);
    Ok(match node.op {
        Op::ScatterAdd => (Some(Reduce::Sum), true),
        Op::IndexPut => (node.arg(3, "accumulate").as_bool().unwrap_or(false).then_some(Reduce::Sum), true),
        Op::ScatterReduce | Op::IndexReduce => (Some(named(4)?), include_self),
        // The older scatter(..., reduce="add" | "multiply").
        Op::Scatter => match node.kwarg("reduce") {
            Arg::None => (None, true),
            Arg::Str(r) if r == "add" => (Some(Reduce::Sum), true),
            Arg::Str(r) if r == "multiply" => (Some(Reduce::Prod), true),
            other => return Err(crate::unsupported(op, format!("reduce={other}"))),
        },
        _ => (None, true),
    })
}
