//! Views: index rewrites of their input, no copies. Every view reads its
//! input through a new index map (`Lowerer::view`), so a chain of views stays
//! one affine read of the stored value underneath.
//!
//! - `view(dtype)` to another dtype reinterprets bits, which no scalar op
//!   expresses: it is `Unsupported` and runs as ATen's (counted).
//! - `as_strided` (which `unfold` decomposes to) takes its sizes and strides with
//!   the specialization's symbols substituted and addresses storage as eager lays
//!   its input out (`strided_storage`): a view of a buffer reads that buffer; a
//!   computed value is first stored with its metadata's strides (stored row-major,
//!   a value eager holds transposed would be read in the wrong order); a view
//!   reaching outside that value's own elements, or with symbolic sizes, runs as
//!   ATen's.

use rdyn_ir::graph::{Arg, Node};
use rdyn_ir::loops::{BufId, BufRole, Buffer};
use rdyn_ir::op::Op;
use rdyn_ir::Expr;

use super::common::{check_dtype, checked_dim, disagree, expr_list, int_arg, int_list, norm_dim};
use crate::error::{agree, invalid, shape, unsupported, LowerError};
use crate::lazy::{vars, Lazy};
use crate::lowerer::{Handled, Lowerer, Res};

/// Whether a view of a 0-dim tensor is lowered (an identity, or a reshape)
/// or left to eager (a dim argument there is an identity or an error).
#[derive(Copy, Clone, PartialEq, Eq)]
enum ZeroDim {
    Lowered,
    Eager,
}

/// A view node's input and output sizes, once the checks every view makes
/// pass.
fn input(lw: &Lowerer<'_>, node: &Node, zero_dim: ZeroDim) -> Result<(Lazy, Vec<Expr>), LowerError> {
    let x = lw.tensor_arg(node, 0, "self")?;
    let (sizes, dtype) = lw.out_meta(node)?;
    let op = &node.target;
    // `view(dtype)` reinterprets the bits, which no scalar op here
    // does (a cast would convert the values): ATen's.
    if dtype != x.dtype {
        return Err(unsupported(op, format!("a view of {} as {dtype} reinterprets its bits", x.dtype)));
    }
    // Dim-taking views of 0-dim tensors are identities or errors in
    // eager; leave them to ATen.
    if x.ndim() == 0 && zero_dim == ZeroDim::Eager {
        return Err(unsupported(op, "dim argument on a 0-dim tensor"));
    }
    Ok((x, sizes))
}

/// [`input`], for a view that keeps its input's dtype: an output of
/// another is an error, not a reinterpretation.
fn same_dtype_input(lw: &Lowerer<'_>, node: &Node, zero_dim: ZeroDim) -> Result<(Lazy, Vec<Expr>), LowerError> {
    let x = lw.tensor_arg(node, 0, "self")?;
    check_dtype(&node.target, "the output", lw.out_meta(node)?.1, "the input", x.dtype)?;
    input(lw, node, zero_dim)
}

fn one(out: Lazy) -> Res {
    Ok(Handled::Native(vec![out]))
}

/// `view`, `_unsafe_view`, `reshape`: the same elements in row-major order.
pub(super) fn reshape(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (x, sizes) = input(lw, node, ZeroDim::Lowered)?;
    one(lw.reshape(&x, sizes))
}

pub(super) fn permute(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (x, sizes) = input(lw, node, ZeroDim::Lowered)?;
    let n = x.ndim();
    let op = &node.target;
    let dims = int_list(node.arg(1, "dims"), op)?;
    // A 0-dim tensor is its own permutation.
    if n == 0 && dims.len() <= 1 {
        return one(lw.view(&x, sizes, &[]));
    }
    if dims.len() != n {
        return Err(invalid(op, format!("{} dims for a rank-{n} input; expected {n}", dims.len())));
    }
    let mut map = vec![None; n];
    for (k, d) in dims.iter().enumerate() {
        let d = checked_dim(*d, n, "dim", op)?;
        if map[d].replace(Expr::v(k as u32)).is_some() {
            return Err(invalid(op, format!("dim {d} appears twice in {dims:?}; expected a permutation")));
        }
    }
    let map: Vec<Expr> = map.into_iter().flatten().collect();
    one(lw.view(&x, sizes, &map))
}

/// `t` and `transpose`: two dims swapped.
pub(super) fn transpose(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (x, sizes) = input(lw, node, ZeroDim::Eager)?;
    let n = x.ndim();
    let op = &node.target;
    let (a, b) = if node.op == Op::T {
        (0, 1.min(n.saturating_sub(1)))
    } else {
        let a = node.arg(1, "dim0").as_int().ok_or_else(|| unsupported(op, "dim0"))?;
        let b = node.arg(2, "dim1").as_int().ok_or_else(|| unsupported(op, "dim1"))?;
        (norm_dim(a, n), norm_dim(b, n))
    };
    let mut map = vars(n);
    map.swap(a, b);
    one(lw.view(&x, sizes, &map))
}

pub(super) fn expand(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (x, sizes) = input(lw, node, ZeroDim::Lowered)?;
    // Each dim of `x` is the output's (aligned right: new dims lead), or
    // 1, stretched.
    let fits = sizes.len().checked_sub(x.ndim()).is_some_and(|shift| {
        let same = |k: usize, s: &Expr| agree(std::slice::from_ref(&sizes[shift + k]), std::slice::from_ref(s));
        x.sizes.iter().enumerate().all(|(k, s)| s.is_const(1) || same(k, s))
    });
    if !fits {
        let why = format!("an input of sizes {} expanded", shape(&x.sizes));
        return Err(invalid(&node.target, format!("output has sizes {}; {why} cannot give them", shape(&sizes))));
    }
    one(lw.broadcast_to(&x, &sizes))
}

pub(super) fn unsqueeze(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (x, sizes) = input(lw, node, ZeroDim::Lowered)?;
    let n = x.ndim();
    let at = norm_dim(node.arg(1, "dim").as_int().unwrap_or(0), n + 1);
    let map: Vec<Expr> = (0..n).map(|d| Expr::v(if d < at { d } else { d + 1 } as u32)).collect();
    one(lw.view(&x, sizes, &map))
}

/// `squeeze`: size-1 dims dropped (those of `dim` only, when given).
pub(super) fn squeeze(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (x, sizes) = input(lw, node, ZeroDim::Lowered)?;
    let n = x.ndim();
    let only: Option<Vec<usize>> = match node.arg(1, "dim") {
        Arg::None => None,
        arg => Some(int_list(arg, &node.target)?.into_iter().map(|d| norm_dim(d, n)).collect()),
    };
    let mut map = Vec::with_capacity(n);
    let mut k = 0u32;
    for d in 0..n {
        let removed = x.sizes[d].is_const(1) && only.as_ref().is_none_or(|o| o.contains(&d));
        if removed {
            map.push(Expr::zero());
        } else {
            map.push(Expr::v(k));
            k += 1;
        }
    }
    one(lw.view(&x, sizes, &map))
}

/// `slice(dim, start, end, step)`: `end` is in the output's sizes already.
pub(super) fn slice(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (x, sizes) = input(lw, node, ZeroDim::Eager)?;
    let n = x.ndim();
    let op = &node.target;
    let d = norm_dim(node.arg(1, "dim").as_int().unwrap_or(0), n);
    let size = x.sizes[d].clone();
    let step = node.arg(4, "step").as_int().unwrap_or(1);
    if step < 1 {
        return Err(invalid(op, format!("step {step}; expected 1 or more")));
    }
    let start = match node.arg(2, "start") {
        Arg::None => Expr::zero(),
        a => {
            let e = a.as_expr().ok_or_else(|| unsupported(op, "start"))?;
            match (e.as_const(), size.as_const()) {
                (Some(s), Some(len)) => Expr::c(if s < 0 { (s + len).max(0) } else { s.min(len) }),
                (Some(s), None) if s >= 0 => e,
                (None, _) => e,
                _ => return Err(unsupported(op, "negative start with symbolic size")),
            }
        }
    };
    // The last element read lies inside the input.
    let len = sizes.get(d).filter(|_| sizes.len() == n).ok_or_else(|| {
        invalid(op, format!("output has sizes {}; expected the rank-{n} input's rank", shape(&sizes)))
    })?;
    if let (Some(first), Some(len), Some(size)) = (start.as_const(), len.as_const(), size.as_const()) {
        let last = (len - 1).checked_mul(step).and_then(|span| span.checked_add(first));
        if len > 0 && last.is_none_or(|last| last >= size) {
            let why = format!("{len} elements from {first} by step {step}");
            return Err(invalid(op, format!("output has {why} along dim {d}; expected them inside its size {size}")));
        }
    }
    let mut map = vars(n);
    map[d] = start.add(&Expr::v(d as u32).scale(step));
    one(lw.view(&x, sizes, &map))
}

pub(super) fn select(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (x, sizes) = input(lw, node, ZeroDim::Eager)?;
    let n = x.ndim();
    let d = norm_dim(node.arg(1, "dim").as_int().unwrap_or(0), n);
    let index = node.arg(2, "index").as_expr().ok_or_else(|| unsupported(&node.target, "index"))?;
    let index = match (index.as_const(), x.sizes[d].as_const()) {
        (Some(i), Some(len)) if i < 0 => Expr::c(i + len),
        _ => index,
    };
    let mut map: Vec<Expr> = (0..n).map(|k| Expr::v(if k > d { k as u32 - 1 } else { k as u32 })).collect();
    map[d] = index;
    one(lw.view(&x, sizes, &map))
}

/// `unfold(dim, size, step)`: windows along `dim` as a new last dim.
pub(super) fn unfold(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let op = node.target.as_str();
    let (x, sizes) = input(lw, node, ZeroDim::Eager)?;
    let n = x.ndim();
    let d = checked_dim(int_arg(node.arg(1, "dimension"), 0, "dimension", op)?, n, "dimension", op)?;
    let size = node.arg(2, "size").as_expr().ok_or_else(|| unsupported(op, "size"))?;
    let step = node.arg(3, "step").as_int().ok_or_else(|| unsupported(op, "step"))?;
    if step < 1 {
        return Err(invalid(op, format!("step {step}; expected 1 or more")));
    }
    // A step past 2^31, times a stride, could overflow the index
    // arithmetic here: eager's.
    if step > i64::from(i32::MAX) {
        return Err(unsupported(op, format!("step {step} past 2^31")));
    }
    // `(length - size) / step + 1` windows of `size` along `d`.
    let mut expected = x.sizes.clone();
    expected[d] = match (x.sizes[d].as_const(), size.as_const()) {
        (Some(length), Some(size)) if (0..=length).contains(&size) => Expr::c((length - size) / step + 1),
        (Some(_), Some(_)) => Expr::c(-1),
        _ => sizes.get(d).cloned().unwrap_or_default(),
    };
    expected.push(size.clone());
    if !agree(&sizes, &expected) {
        let why = format!("windows of {size} by step {step} along dim {d} of an input of sizes {}", shape(&x.sizes));
        return Err(disagree(op, &sizes, why, &expected));
    }
    let mut map = vars(n);
    map[d] = Expr::v(d as u32).scale(step).add(&Expr::v(n as u32));
    one(lw.view(&x, sizes, &map))
}

/// `diagonal(offset, dim1, dim2)`: the diagonal as a new last dim,
/// elements `(i, i + offset)` of `dim1` and `dim2`, as many as fit in both.
pub(super) fn diagonal(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let op = node.target.as_str();
    let (x, sizes) = same_dtype_input(lw, node, ZeroDim::Eager)?;
    let n = x.ndim();
    let offset = int_arg(node.arg(1, "offset"), 0, "offset", op)?;
    let d1 = checked_dim(int_arg(node.arg(2, "dim1"), 0, "dim1", op)?, n, "dim1", op)?;
    let d2 = checked_dim(int_arg(node.arg(3, "dim2"), 1, "dim2", op)?, n, "dim2", op)?;
    if d1 == d2 {
        return Err(invalid(op, format!("dim1 and dim2 are both dim {d1}; expected two different dims")));
    }
    if sizes.len() + 1 != n {
        return Err(invalid(
            op,
            format!("output has rank {}; the diagonal of a rank-{n} input has {}", sizes.len(), n - 1),
        ));
    }
    // An offset past either dim leaves the diagonal empty: clamped there
    // (which reads the same nothing), the index arithmetic cannot overflow.
    let given = offset;
    let offset = match (x.sizes[d1].as_const(), x.sizes[d2].as_const()) {
        (Some(s1), Some(s2)) => offset.max(-s1).min(s2),
        _ if offset.unsigned_abs() > i32::MAX as u64 => {
            return Err(unsupported(op, format!("offset {offset} along dims of symbolic size")));
        }
        _ => offset,
    };
    let mut expected: Vec<Expr> = (0..n).filter(|d| *d != d1 && *d != d2).map(|d| x.sizes[d].clone()).collect();
    expected.push(match (x.sizes[d1].as_const(), x.sizes[d2].as_const()) {
        (Some(s1), Some(s2)) => Expr::c((s1 - (-offset).max(0)).min(s2 - offset.max(0)).max(0)),
        _ => sizes[n - 2].clone(),
    });
    if !agree(&sizes, &expected) {
        let why = format!("offset {given} of dims {d1} and {d2} of an input of sizes {}", shape(&x.sizes));
        return Err(disagree(op, &sizes, why, &expected));
    }
    let diag = Expr::v(sizes.len() as u32 - 1);
    let mut map = Vec::with_capacity(n);
    let mut k = 0u32;
    for d in 0..n {
        if d == d1 {
            map.push(diag.add_c((-offset).max(0)));
        } else if d == d2 {
            map.push(diag.add_c(offset.max(0)));
        } else {
            map.push(Expr::v(k));
            k += 1;
        }
    }
    one(lw.view(&x, sizes, &map))
}

/// `flip`: a view here, though not in eager (no negative strides there).
pub(super) fn flip(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (x, sizes) = input(lw, node, ZeroDim::Eager)?;
    let n = x.ndim();
    let dims = int_list(node.arg(1, "dims"), &node.target)?;
    let mut map = vars(n);
    for d in dims {
        let d = norm_dim(d, n);
        map[d] = x.sizes[d].add_c(-1).sub(&Expr::v(d as u32));
    }
    one(lw.view(&x, sizes, &map))
}

/// `repeat`: the input tiled, read modulo its sizes. Output dim `j` is
/// `repeats[j]` copies of the input's dim aligned with it (the input's dims
/// are the last ones), or `repeats[j]` long where it is a new leading dim.
pub(super) fn repeat(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let op = node.target.as_str();
    let (x, sizes) = same_dtype_input(lw, node, ZeroDim::Eager)?;
    let n = x.ndim();
    let repeats = expr_list(node.arg(1, "repeats"), "repeats", op)?;
    let k = repeats.len();
    if k < n {
        return Err(invalid(op, format!("{k} repeat counts for a rank-{n} input; expected at least {n}")));
    }
    if let Some(r) = repeats.iter().filter_map(Expr::as_const).find(|r| *r < 0) {
        return Err(invalid(op, format!("repeat count {r}; expected counts of 0 or more")));
    }
    if sizes.len() != k {
        return Err(invalid(op, format!("output has rank {}; {k} repeat counts give rank {k}", sizes.len())));
    }
    let shift = k - n;
    // Known where the counts and sizes are; an overflowing product is no size.
    let expected: Vec<Expr> = (0..k)
        .map(|j| match (j.checked_sub(shift).map(|d| x.sizes[d].as_const()), repeats[j].as_const()) {
            (None, _) => repeats[j].clone(),
            (Some(Some(size)), Some(r)) => Expr::c(size.checked_mul(r).unwrap_or(-1)),
            _ => sizes[j].clone(),
        })
        .collect();
    if !agree(&sizes, &expected) {
        let why = format!("repeat counts {} of an input of sizes {}", shape(&repeats), shape(&x.sizes));
        return Err(disagree(op, &sizes, why, &expected));
    }
    let ctx = lw.ctx_for(&sizes);
    let map: Vec<Expr> = (0..n).map(|d| Expr::v((d + shift) as u32).modulo(&x.sizes[d], &ctx)).collect();
    one(lw.view(&x, sizes, &map))
}

/// `as_strided(size, stride, storage_offset)`: a view buffer over the
/// storage eager's strides address (`strided_storage`).
pub(super) fn as_strided(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (x, _) = input(lw, node, ZeroDim::Lowered)?;
    let op = &node.target;
    let size = node.arg(1, "size").as_list().ok_or_else(|| unsupported(op, "size"))?;
    let stride = node.arg(2, "stride").as_list().ok_or_else(|| unsupported(op, "stride"))?;
    // In the call's sizes where a specialization fixes them.
    let known = |a: &Arg| a.as_expr().unwrap_or_else(Expr::zero).simplify(&lw.syms);
    let strides: Vec<Expr> = stride.iter().map(known).collect();
    let sizes_e: Vec<Expr> = size.iter().map(known).collect();
    check_strided(lw, node, &sizes_e, &strides)?;
    let asked = match node.arg(3, "storage_offset") {
        Arg::None => None,
        a => Some(a.as_expr().ok_or_else(|| unsupported(op, "storage_offset"))?),
    };
    let (buf, offset) = lw.strided_storage(node, &x, asked.as_ref(), &sizes_e, &strides)?;
    let base = lw.prog.storage_of(buf);
    let view =
        lw.prog.add_buffer(Buffer { dtype: x.dtype, sizes: sizes_e, strides, offset, role: BufRole::View(base) });
    one(lw.load_buffer(view))
}

/// `as_strided`'s sizes and strides: one stride per size, none negative
/// (eager has no negative strides), the sizes the output's metadata has.
fn check_strided(lw: &Lowerer<'_>, node: &Node, sizes: &[Expr], strides: &[Expr]) -> Result<(), LowerError> {
    let op = node.target.as_str();
    if sizes.len() != strides.len() {
        return Err(invalid(
            op,
            format!("{} sizes and {} strides; expected one stride per size", sizes.len(), strides.len()),
        ));
    }
    if let Some(v) = sizes.iter().chain(strides).filter_map(Expr::as_const).find(|v| *v < 0) {
        return Err(invalid(op, format!("size or stride {v}; expected sizes and strides of 0 or more")));
    }
    let (given, _) = lw.out_meta(node)?;
    match agree(&given, sizes) {
        true => Ok(()),
        false => Err(disagree(op, &given, "its size argument's".to_string(), sizes)),
    }
}

/// `split_with_sizes(self, split_sizes, dim)`: output `k` is the slice
/// view `split_sizes[k]` long along `dim`, each starting where the one
/// before ends.
pub(super) fn split(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let op = node.target.as_str();
    let x = lw.tensor_arg(node, 0, "self")?;
    let n = x.ndim();
    if n == 0 {
        return Err(unsupported(op, "0-dim input"));
    }
    let d = checked_dim(int_arg(node.arg(2, "dim"), 0, "dim", op)?, n, "dim", op)?;
    let split = expr_list(node.arg(1, "split_sizes"), "split_sizes", op)?;
    check_split(lw, node, &x, d, &split)?;
    let mut start = Expr::zero();
    let mut outs = Vec::new();
    for v in &node.outputs {
        let sizes = lw.meta_sizes(*v);
        let mut map: Vec<Expr> = (0..n as u32).map(Expr::v).collect();
        map[d] = Expr::v(d as u32).add(&start);
        start = start.add(&sizes[d]);
        outs.push(lw.view(&x, sizes, &map));
    }
    Ok(Handled::Native(outs))
}

/// A split's sizes: one per output, none negative, adding up to the size
/// of dim `d` of `x`; and each output's metadata that slice of `x`.
fn check_split(lw: &Lowerer<'_>, node: &Node, x: &Lazy, d: usize, split: &[Expr]) -> Result<(), LowerError> {
    let op = node.target.as_str();
    let outputs = node.outputs.len();
    if split.len() != outputs {
        return Err(invalid(op, format!("{} split sizes for {outputs} outputs; expected one per output", split.len())));
    }
    if let Some(s) = split.iter().filter_map(Expr::as_const).find(|s| *s < 0) {
        return Err(invalid(op, format!("split size {s}; expected sizes of 0 or more")));
    }
    let known: Option<Vec<i64>> = split.iter().map(Expr::as_const).collect();
    if let (Some(known), Some(size)) = (known, x.sizes[d].as_const()) {
        if known.iter().try_fold(0i64, |total, s| total.checked_add(*s)) != Some(size) {
            let sizes = shape(split);
            return Err(invalid(op, format!("split sizes {sizes} do not add up to {size}, the size of dim {d}")));
        }
    }
    for (k, (v, s)) in node.outputs.iter().zip(split).enumerate() {
        let mut expected = x.sizes.clone();
        expected[d] = s.clone();
        let given = lw.meta_sizes(*v);
        if !agree(&given, &expected) {
            let (given, expected, input) = (shape(&given), shape(&expected), shape(&x.sizes));
            let why = format!("split size {s} along dim {d} of an input of sizes {input} gives {expected}");
            return Err(invalid(op, format!("output {k} has sizes {given}; {why}")));
        }
        check_dtype(op, &format!("output {k}"), lw.graph.meta(*v).dtype, "the input", x.dtype)?;
    }
    Ok(())
}

impl Lowerer<'_> {
    /// The storage `as_strided` addresses, and the view's offset in it
    /// (`asked`, given in eager's storage, or `x`'s own).
    ///
    /// Its strides and offset count elements of the storage as PyTorch lays
    /// `x` out: a view reads the viewed storage itself; a computed value is
    /// stored laid out as its metadata says (a row-major copy of a value
    /// eager holds transposed would be read in the wrong order). Such a copy
    /// is all of its storage, so a view that reaches before or past it (it
    /// could in eager, where `x` may be a slice of something larger) runs
    /// as ATen's.
    fn strided_storage(
        &mut self,
        node: &Node,
        x: &Lazy,
        asked: Option<&Expr>,
        sizes: &[Expr],
        strides: &[Expr],
    ) -> Result<(BufId, Expr), LowerError> {
        let Arg::Tensor(src) = node.arg(0, "self") else {
            return Err(unsupported(&node.target, "self is not a tensor"));
        };
        let layout = self.meta_strides(*src);
        if let Some(view) = self.as_view_with_strides(x, &layout) {
            let offset = asked.cloned().unwrap_or_else(|| self.prog.buffer(view).offset.clone());
            return Ok((view, offset));
        }
        let outside = || unsupported(&node.target, "a view reaching outside a computed value's own elements");
        let own = self.graph.meta(*src).offset.simplify(&self.syms);
        let offset = asked.map_or(Expr::zero(), |o| o.sub(&own).simplify(&self.syms)).as_const().ok_or_else(outside)?;
        let (lo, hi) = reach(sizes, strides).ok_or_else(outside)?;
        let (_, own_hi) = reach(&x.sizes, &layout).ok_or_else(outside)?;
        let inside = offset.checked_add(lo).is_some_and(|first| first >= 0)
            && offset.checked_add(hi).is_some_and(|last| last <= own_hi);
        if hi >= lo && !inside {
            return Err(outside());
        }
        // The copy starts where `x` does in eager's storage.
        Ok((self.realize(x, Some(layout)), Expr::c(offset)))
    }
}

/// The lowest and highest element offsets a view of `sizes` and `strides`
/// reaches from its start ((0, -1) when it is empty), if they are constants
/// (and int64s).
fn reach(sizes: &[Expr], strides: &[Expr]) -> Option<(i64, i64)> {
    let (mut lo, mut hi) = (0i64, 0i64);
    for (n, s) in sizes.iter().zip(strides) {
        let (n, s) = (n.as_const()?, s.as_const()?);
        if n == 0 {
            return Some((0, -1));
        }
        let span = n.checked_sub(1)?.checked_mul(s)?;
        (lo, hi) = (lo.checked_add(span.min(0))?, hi.checked_add(span.max(0))?);
    }
    Some((lo, hi))
}
