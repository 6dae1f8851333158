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

use super::common::{int_list, norm_dim};
use crate::error::{unsupported, LowerError};
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
    let dims = int_list(node.arg(1, "dims"), &node.target)?;
    let mut map = vec![Expr::zero(); n];
    for (k, d) in dims.iter().enumerate() {
        map[norm_dim(*d, n)] = Expr::v(k as u32);
    }
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
    let (x, sizes) = input(lw, node, ZeroDim::Eager)?;
    let n = x.ndim();
    let d = norm_dim(node.arg(1, "dimension").as_int().unwrap_or(0), n);
    let step = node.arg(3, "step").as_int().ok_or_else(|| unsupported(&node.target, "step"))?;
    let mut map = vars(n);
    map[d] = Expr::v(d as u32).scale(step).add(&Expr::v(n as u32));
    one(lw.view(&x, sizes, &map))
}

/// `diagonal(offset, dim1, dim2)`: the diagonal as a new last dim.
pub(super) fn diagonal(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (x, sizes) = input(lw, node, ZeroDim::Eager)?;
    let n = x.ndim();
    let offset = node.arg(1, "offset").as_int().unwrap_or(0);
    let d1 = norm_dim(node.arg(2, "dim1").as_int().unwrap_or(0), n);
    let d2 = norm_dim(node.arg(3, "dim2").as_int().unwrap_or(1), n);
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

/// `repeat`: the input tiled, read modulo its sizes.
pub(super) fn repeat(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (x, sizes) = input(lw, node, ZeroDim::Eager)?;
    let n = x.ndim();
    let shift = sizes.len() - n;
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

/// split_with_sizes: each output is a slice view.
pub(super) fn split(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let x = lw.tensor_arg(node, 0, "self")?;
    let n = x.ndim();
    if n == 0 {
        return Err(unsupported(&node.target, "0-dim input"));
    }
    let d = node.arg(2, "dim").as_int().unwrap_or(0);
    let d = if d < 0 { d + n as i64 } else { d } as usize;
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
        if hi >= lo && (offset + lo < 0 || offset + hi > own_hi) {
            return Err(outside());
        }
        // The copy starts where `x` does in eager's storage.
        Ok((self.realize(x, Some(layout)), Expr::c(offset)))
    }
}

/// The lowest and highest element offsets a view of `sizes` and `strides`
/// reaches from its start ((0, -1) when it is empty), if they are constants.
fn reach(sizes: &[Expr], strides: &[Expr]) -> Option<(i64, i64)> {
    let (mut lo, mut hi) = (0, 0);
    for (n, s) in sizes.iter().zip(strides) {
        let (n, s) = (n.as_const()?, s.as_const()?);
        if n == 0 {
            return Some((0, -1));
        }
        let span = (n - 1) * s;
        (lo, hi) = (lo + span.min(0), hi + span.max(0));
    }
    Some((lo, hi))
}
