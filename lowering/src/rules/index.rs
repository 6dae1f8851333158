//! Reads and writes through data: `gather`, `index_select` and `embedding`;
//! indexing with tensors, `x[i0, :, i2]` (aten.index.Tensor); scatter and
//! index_put.
//!
//! Reads go through `gather_load`: a view where the indices are index
//! expressions provably in range (nearest upsampling's float source index
//! among them, `scaled_index`), else a bounds-checked gather.
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

use rdyn_ir::graph::{Arg, Node};
use rdyn_ir::loops::{BinaryOp, BufId, Buffer, Kernel, Negatives, ScalarId, ScalarOp, Scalars, Stage, Step};
use rdyn_ir::op::Op;
use rdyn_ir::{Ctx, DType, Expr};

use super::common::{acc_dtype, check_dtype, check_index_dtype, checked_dim, disagree, int_arg, native, norm_dim};
use crate::error::{agree, invalid, shape, unsupported, LowerError};
use crate::lazy::{vars, Lazy};
use crate::lowerer::{Handled, Lowerer, Res, RECOMPUTE_LIMIT};

/// `gather(x, dim, index)` and `index_select(x, dim, index)`.
pub(super) fn gather(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let op = node.target.as_str();
    let x = lw.tensor_arg(node, 0, "self")?;
    let n = x.ndim();
    if n == 0 {
        return Err(unsupported(op, "0-dim input"));
    }
    let d = checked_dim(int_arg(node.arg(1, "dim"), 0, "dim", op)?, n, "dim", op)?;
    let idx = lw.tensor_arg(node, 2, "index")?;
    check_index_dtype(op, "the index", idx.dtype)?;
    // gather: the index's sizes (it has the input's rank); index_select:
    // the input's, the index's length along `d` (a 1-D or 0-dim index).
    let expected = match node.op {
        Op::Gather if idx.ndim() == n => idx.sizes.clone(),
        Op::Gather => return Err(invalid(op, format!("the index has rank {}; expected the input's {n}", idx.ndim()))),
        _ if idx.ndim() <= 1 => {
            let mut expected = x.sizes.clone();
            expected[d] = idx.sizes.first().cloned().unwrap_or_else(|| Expr::c(1));
            expected
        }
        _ => return Err(invalid(op, format!("the index has rank {}; expected 0 or 1", idx.ndim()))),
    };
    if !agree(&sizes, &expected) {
        let why = format!("an index of sizes {} into an input of sizes {}", shape(&idx.sizes), shape(&x.sizes));
        return Err(disagree(op, &sizes, why, &expected));
    }
    let idx_value = if node.op == Op::Gather {
        idx.value
    } else {
        let ctx = lw.ctx_for(&sizes);
        lw.prog.scalars.substitute(idx.value, &[Expr::v(d as u32)], &ctx)
    };
    let mut index: Vec<Option<Expr>> = vars(n).into_iter().map(Some).collect();
    index[d] = None;
    let value = lw.gather_load(&x, &index, &[(d, idx_value)], &sizes, Negatives::Reject);
    native(sizes, value, out)
}

/// `embedding(weight, indices)`: rows of the weight.
pub(super) fn embedding(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let op = node.target.as_str();
    let (sizes, out) = lw.out_meta(node)?;
    let w = lw.tensor_arg(node, 0, "weight")?;
    let idx = lw.tensor_arg(node, 1, "indices")?;
    if w.ndim() != 2 {
        return Err(invalid(op, format!("the weight has rank {}; expected 2", w.ndim())));
    }
    check_index_dtype(op, "the index tensor", idx.dtype)?;
    check_dtype(op, "the output", out, "the weight", w.dtype)?;
    // A row of the weight per index.
    let expected = [idx.sizes.as_slice(), &w.sizes[1..]].concat();
    if !agree(&sizes, &expected) {
        let why = format!("indices of sizes {} into a weight of sizes {}", shape(&idx.sizes), shape(&w.sizes));
        return Err(disagree(op, &sizes, why, &expected));
    }
    let k = idx.ndim() as u32;
    let value = lw.gather_load(&w, &[None, Some(Expr::v(k))], &[(0, idx.value)], &sizes, Negatives::Reject);
    native(sizes, value, out)
}

/// `x[i0, :, i2]`-style indexing with tensors (aten.index.Tensor).
pub(super) fn index(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let value = lw.advanced_index(node, &sizes)?;
    native(sizes, value, out)
}

/// scatter, scatter_add, scatter_reduce, index_reduce and index_put.
pub(super) fn scatter(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    lw.scatter(node, &sizes, out)
}

/// Reads through data.
impl Lowerer<'_> {
    /// Read `src` at per-dimension indices: `index[d]` is an expression over
    /// the output variables, or a data value (`indirect`) for gathered dims.
    /// Indices that are index expressions provably inside the tensor make
    /// this a view (fusable, no buffer); the rest are bounds-checked gathers.
    /// Callers give one `index` entry per dim of `src` and `indirect` dims
    /// among them (what they check of the node's ranks), so `src.sizes[d]`
    /// and the strides of `src`'s buffer exist.
    pub(super) fn gather_load(
        &mut self,
        src: &Lazy,
        index: &[Option<Expr>],
        indirect: &[(usize, ScalarId)],
        out_sizes: &[Expr],
        negatives: Negatives,
    ) -> ScalarId {
        let ctx = self.ctx_for(out_sizes);
        let mut direct: Vec<Option<Expr>> = index.to_vec();
        let mut all_direct = true;
        for (d, value) in indirect {
            let as_i64 = self.prog.scalars.cast(*value, DType::I64);
            let folded = self.prog.scalars.as_index(as_i64).or_else(|| scaled_index(&self.prog.scalars, as_i64, &ctx));
            let folded = folded.filter(|e| match (e.bounds(&ctx), src.sizes[*d].as_const()) {
                (Some((lo, hi)), Some(n)) => lo >= 0 && hi < n,
                _ => false,
            });
            match folded {
                Some(e) => direct[*d] = Some(e),
                None => all_direct = false,
            }
        }
        if all_direct {
            let map: Vec<Expr> = direct.into_iter().map(|e| e.unwrap_or_else(Expr::zero)).collect();
            return self.view(src, out_sizes.to_vec(), &map).value;
        }
        let buf = self.buffer_for_extern(src);
        let buffer = self.prog.buffer(buf).clone();
        let mut address = buffer.offset.clone();
        for (d, e) in index.iter().enumerate() {
            if let Some(e) = e {
                address = address.add(&e.mul(&buffer.strides[d]));
            }
        }
        let mut ind = Vec::new();
        for (d, value) in indirect {
            let v = self.prog.scalars.cast(*value, DType::I64);
            let bounded = self.prog.scalars.add(ScalarOp::Bounded(v, buffer.sizes[*d].clone(), negatives), DType::I64);
            ind.push((bounded, buffer.strides[*d].clone()));
        }
        self.prog.scalars.add(ScalarOp::Load { buf, index: address, indirect: ind, mask: None }, buffer.dtype)
    }
}

/// The most index values [`scaled_index`] checks one by one.
const SCALED_INDEX_CHECKS: i64 = 1 << 16;

/// `trunc(float(e) · c)`, the source index of nearest upsampling as
/// PyTorch's decomposition computes it, as the index `(p·e) // q` for the
/// first `q <= 64` (with `p = round(c·q)`) that gives the same value for
/// every value `e` takes under `ctx`, each checked in `c`'s float type. A
/// view of the source then (the split makes `e // 2` rows of 2 lanes),
/// where the float index had been a bounds-checked gather computed lane by
/// lane (a 2x upsampling of `[2, 64, 32, 32]`: 2.4 ms, eager 1.2 ms).
fn scaled_index(scalars: &Scalars, value: ScalarId, ctx: &Ctx) -> Option<Expr> {
    let ScalarOp::Cast(product) = scalars.get(value).op else { return None };
    let float = scalars.dtype(product);
    let ScalarOp::Binary(BinaryOp::Mul, a, b) = scalars.get(product).op else { return None };
    let (index, c) = match (&scalars.get(a).op, &scalars.get(b).op) {
        (_, ScalarOp::Const { bits }) => (a, f64::from_bits(*bits)),
        (ScalarOp::Const { bits }, _) => (b, f64::from_bits(*bits)),
        _ => return None,
    };
    let ScalarOp::Cast(inner) = scalars.get(index).op else { return None };
    let e = scalars.as_index(inner)?;
    let (lo, hi) = e.bounds(ctx)?;
    let checkable = lo >= 0 && hi - lo < SCALED_INDEX_CHECKS && c > 0.0 && scalars.dtype(index) == float;
    if !checkable || !matches!(float, DType::F32 | DType::F64) {
        return None;
    }
    let scaled = |v: i64| match float {
        DType::F32 => ((v as f32) * (c as f32)).trunc() as i64,
        _ => ((v as f64) * c).trunc() as i64,
    };
    (1..=64).find_map(|q| {
        let p = (c * q as f64).round() as i64;
        let same = p > 0 && (lo..=hi).all(|v| scaled(v) == (p * v).div_euclid(q));
        same.then(|| e.scale(p).floordiv(&Expr::c(q), ctx))
    })
}

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
/// At most one entry per dim of the `ndim`-dim tensor indexed.
fn index_tensors(l: &Lowerer<'_>, node: &Node, ndim: usize) -> Result<Vec<(usize, Lazy)>, LowerError> {
    let op = node.target.as_str();
    let list = node.arg(1, "indices").as_list().ok_or_else(|| unsupported(op, "indices"))?;
    if list.len() > ndim {
        return Err(invalid(op, format!("{} indices for a rank-{ndim} input; expected at most {ndim}", list.len())));
    }
    let mut indexed = Vec::new();
    for (d, item) in list.iter().enumerate() {
        if let Arg::Tensor(v) = item {
            let dtype = l.graph.meta(*v).dtype;
            if matches!(dtype, DType::Bool | DType::U8) {
                return Err(unsupported(op, "boolean mask index"));
            }
            check_index_dtype(op, &format!("index {d}"), dtype)?;
            indexed.push((d, l.value(*v, op)?));
        }
    }
    if indexed.is_empty() {
        return Err(unsupported(op, "no index tensors"));
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
    pub(super) fn advanced_index(&mut self, node: &Node, sizes: &[Expr]) -> Result<ScalarId, LowerError> {
        let x = self.tensor_arg(node, 0, "self")?;
        let indexed = index_tensors(self, node, x.ndim())?;
        let dims: Vec<usize> = indexed.iter().map(|(d, _)| *d).collect();
        let b_expected = broadcast_sizes(&indexed);
        let place = Placement::new(x.ndim(), &dims, b_expected.len());
        let expected = place.sizes(&x.sizes, &b_expected);
        if !agree(sizes, &expected) {
            let why = format!("indices of {} dims into an input of sizes {}", b_expected.len(), shape(&x.sizes));
            return Err(disagree(&node.target, sizes, why, &expected));
        }
        // The output's rank is `expected`'s: this is `b_expected.len()`.
        let b_ndim = sizes.len() + indexed.len() - x.ndim();
        let b_sizes = sizes[place.b_start..place.b_start + b_ndim].to_vec();
        let index: Vec<Option<Expr>> = place.dims.iter().map(|p| p.map(|p| Expr::v(p as u32))).collect();
        let indirect = self.placed_indices(&indexed, &b_sizes, place.b_start, sizes);
        Ok(self.gather_load(&x, &index, &indirect, sizes, Negatives::Wrap))
    }

    /// scatter(self, dim, index, src|value), scatter_add, scatter_reduce,
    /// index_reduce and index_put(self, indices, values, accumulate): copy
    /// `self`, then serial scatter stages.
    pub(super) fn scatter(&mut self, node: &Node, sizes: &[Expr], out: DType) -> Result<Handled, LowerError> {
        let op = node.target.as_str();
        let x = self.tensor_arg(node, 0, "self")?;
        let out_v = node.outputs.first().copied().ok_or_else(|| invalid(op, "no output"))?;
        let strides = self.meta_strides(out_v);
        let (reduce, include_self) = reduction(node)?;
        // Half precision reduces in a float32 copy, rounded once at the
        // end, as ATen's sorted scatter-add does: rounding after every add
        // loses most of the sum's bits when many indices repeat.
        let store = if reduce.is_some() { acc_dtype(out) } else { out };
        let x = self.broadcast_to(&x, sizes);
        let x = if store != x.dtype { self.cast_lazy(x, store) } else { x };
        let buf = self.realize(&x, Some(strides.clone()));
        let buffer = self.prog.buffer(buf).clone();
        let (ranges, mut address, indirect_src, value) = if node.op != Op::IndexPut {
            self.dim_points(node, sizes, &buffer, out)?
        } else {
            self.index_put_points(node, sizes, &buffer)?
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

    /// The points `scatter`, `scatter_add`, `scatter_reduce` and
    /// `index_reduce` write along `dim` into `buffer` (`self` copied).
    fn dim_points(&mut self, node: &Node, sizes: &[Expr], buffer: &Buffer, out: DType) -> Result<Points, LowerError> {
        let op = node.target.as_str();
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
                let src = self.scatter_source(src);
                let map = vars(src.ndim());
                self.view(&src, ranges.clone(), &map).value
            }
            a => {
                let f = a.as_float().ok_or_else(|| unsupported(op, "value"))?;
                self.prog.scalars.constant(f, out)
            }
        };
        let mut address = buffer.offset.clone();
        for k in 0..sizes.len() {
            if k != d {
                address = address.add(&Expr::v(k as u32).mul(&buffer.strides[k]));
            }
        }
        Ok((ranges, address, vec![(d, idx_value)], value))
    }

    /// The points `index_put` writes into `buffer` (`self` copied): those
    /// of `x[indices]`; None entries (index_add's decomposition puts them
    /// before its dim) keep their dims whole.
    fn index_put_points(&mut self, node: &Node, sizes: &[Expr], buffer: &Buffer) -> Result<Points, LowerError> {
        let indexed = index_tensors(self, node, sizes.len())?;
        let values = self.tensor_arg(node, 2, "values")?;
        let values = self.scatter_source(values);
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
        Ok((ranges, address, indirect, vb.value))
    }

    /// The values a scatter writes, stored first when computing them costs
    /// more than `RECOMPUTE_LIMIT`: a scatter stage runs serially (in
    /// parallel only across leading dims it writes disjointly), and its
    /// compiled form takes loads whose index varies along its lanes only
    /// affinely, so a value with its own arithmetic (an average pool's
    /// gradient, windows and divisors, feeding a max pool's gradient)
    /// would be computed on one thread, interpreted. Stored, it is computed
    /// in parallel by a pointwise kernel and the scatter loads it.
    fn scatter_source(&mut self, values: Lazy) -> Lazy {
        if self.body_size(&values) <= RECOMPUTE_LIMIT {
            return values;
        }
        let buf = self.realize(&values, None);
        self.load_buffer(buf)
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

/// Where a scatter writes, before its indices are checked: its loop
/// ranges, the address in the written buffer of the dims not indexed by
/// data, each indexed dim with its index value, and the value written.
type Points = (Vec<Expr>, Expr, Vec<(usize, ScalarId)>, ScalarId);

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
            other => Err(unsupported(op, format!("reduce={other:?}"))),
        },
        other => Err(unsupported(op, format!("reduce={other}"))),
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
            other => return Err(unsupported(op, format!("reduce={other}"))),
        },
        _ => (None, true),
    })
}
