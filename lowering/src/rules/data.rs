//! Data movement and creation: `cat`, `constant_pad_nd`, `roll`, `tril`/`triu`,
//! writes into a slice, an index or a diagonal (`slice_scatter`,
//! `select_scatter`, `diagonal_scatter`), and the creation ops (`arange`,
//! `full`, `zeros`, ...). Each is one expression over the output index.
//!
//! `cat` is masked loads under selects; a piece whose body costs more than
//! `CAT_PIECE_LIMIT` is stored first. On the CPU `passes/piecewise.rs` later
//! splits such a stage by range.

use rdyn_ir::graph::{Arg, Node};
use rdyn_ir::loops::BinaryOp;
use rdyn_ir::op::Op;
use rdyn_ir::{DType, Expr};

use super::common::{checked_dim, disagree, int_arg, int_list, native};
use crate::error::{agree, invalid, shape, unsupported, LowerError};
use crate::lazy::vars;
use crate::lazy::Lazy;
use crate::lowerer::{Lowerer, Res, CAT_PIECE_LIMIT};

/// `cat`: each piece a masked load where the index is in its range;
/// legacy empty pieces skipped, pieces past `CAT_PIECE_LIMIT` stored first.
pub(super) fn cat(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let op = node.target.as_str();
    let list = node.arg(0, "tensors").as_list().ok_or_else(|| unsupported(op, "tensors"))?.to_vec();
    let n = sizes.len();
    if n == 0 {
        return Err(invalid(
            op,
            "the output is 0-dim; expected a rank of 1 or more (0-dim tensors do not concatenate)",
        ));
    }
    let d = checked_dim(int_arg(node.arg(1, "dim"), 0, "dim", op)?, n, "dim", op)?;
    let mut parts = Vec::new();
    for (k, item) in list.iter().enumerate() {
        let Arg::Tensor(v) = item else {
            return Err(unsupported(op, "non-tensor in cat"));
        };
        let lazy = lw.value(*v, op)?;
        if lazy.ndim() == 1 && lazy.sizes[0].is_const(0) && n != 1 {
            continue; // legacy empty tensors are skipped
        }
        let mut expected = sizes.clone();
        expected[d] = lazy.sizes.get(d).cloned().unwrap_or_else(Expr::zero);
        if !agree(&lazy.sizes, &expected) {
            let (given, output) = (shape(&lazy.sizes), shape(&sizes));
            return Err(invalid(
                op,
                format!("tensor {k} has sizes {given}; the output's {output} need {}", shape(&expected)),
            ));
        }
        let lazy = if lw.body_size(&lazy) > CAT_PIECE_LIMIT {
            let buf = lw.realize(&lazy, None);
            lw.load_buffer(buf)
        } else {
            lazy
        };
        parts.push(lazy);
    }
    check_cat_length(op, &sizes, d, &parts)?;
    let mut start = Expr::zero();
    let var = Expr::v(d as u32);
    let mut pieces = Vec::new();
    for part in &parts {
        let mut map = vars(n);
        map[d] = var.sub(&start);
        let ctx = lw.ctx_for(&sizes);
        let v = lw.prog.scalars.substitute(part.value, &map, &ctx);
        let v = lw.prog.scalars.cast(v, out);
        let end = start.add(&part.sizes[d]);
        pieces.push((v, start.clone(), end.clone()));
        start = end;
    }
    // Every piece reads only where the index is in its range, so no
    // lane ever loads outside its source.
    let mut acc = lw.prog.scalars.constant(0.0, out);
    for (v, lo, hi) in pieces {
        let s = &mut lw.prog.scalars;
        let idx = s.index(var.clone());
        let lo_c = s.index(lo);
        let hi_c = s.index(hi);
        let ge = s.binary(BinaryOp::Ge, idx, lo_c, DType::Bool);
        let lt = s.binary(BinaryOp::Lt, idx, hi_c, DType::Bool);
        let inside = s.binary(BinaryOp::And, ge, lt, DType::Bool);
        let masked = s.add_mask(v, inside);
        acc = s.select(inside, masked, acc, out);
    }
    native(sizes, acc, out)
}

/// The pieces of a `cat` along `d` add up to the output's length there,
/// where all are known.
fn check_cat_length(op: &str, sizes: &[Expr], d: usize, parts: &[Lazy]) -> Result<(), LowerError> {
    let known: Option<Vec<i64>> = parts.iter().map(|p| p.sizes[d].as_const()).collect();
    let (Some(known), Some(length)) = (known, sizes[d].as_const()) else { return Ok(()) };
    match known.iter().try_fold(0i64, |total, n| total.checked_add(*n)) == Some(length) {
        true => Ok(()),
        false => Err(invalid(
            op,
            format!("the pieces' lengths {known:?} along dim {d} do not add up to the output's {length}"),
        )),
    }
}

/// `constant_pad_nd`: a masked load, `value` outside.
pub(super) fn constant_pad(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let op = node.target.as_str();
    let x = lw.tensor_arg(node, 0, "self")?;
    // Only the leading pads move elements; the trailing ones
    // are in the output sizes already, so either may be a size
    // expression (a pooling window's ceil-mode pad).
    let pad = node.arg(1, "pad").as_list().ok_or_else(|| unsupported(op, "pad is not a list"))?;
    let fill = node.arg(2, "value").as_float().unwrap_or(0.0);
    let n = x.ndim();
    if pad.len() % 2 != 0 || pad.len() > 2 * n {
        return Err(invalid(
            op,
            format!("{} pads for a rank-{n} input; expected two per dim, for up to {n} dims", pad.len()),
        ));
    }
    // (left, right) per dim, from the last dim back.
    let pairs: Vec<(Expr, Expr)> = pad
        .chunks(2)
        .map(|pair| match (pair[0].as_expr(), pair[1].as_expr()) {
            (Some(left), Some(right)) => Ok((left, right)),
            _ => Err(unsupported(op, "pad")),
        })
        .collect::<Result<_, _>>()?;
    let mut expected = x.sizes.clone();
    for (k, (left, right)) in pairs.iter().enumerate() {
        let d = n - 1 - k;
        expected[d] = padded(&x.sizes[d], left, right).unwrap_or_else(|| sizes.get(d).cloned().unwrap_or_default());
    }
    if !agree(&sizes, &expected) {
        let pads: Vec<String> = pad.iter().map(Arg::to_string).collect();
        let why = format!("pads [{}] of an input of sizes {}", pads.join(", "), shape(&x.sizes));
        return Err(disagree(op, &sizes, why, &expected));
    }
    let mut map = vars(n);
    let mut conds = Vec::new();
    for (k, (left, _)) in pairs.iter().enumerate() {
        let d = n - 1 - k;
        map[d] = Expr::v(d as u32).sub(left);
        conds.push((map[d].clone(), x.sizes[d].clone()));
    }
    let ctx = lw.ctx_for(&sizes);
    let v = lw.prog.scalars.substitute(x.value, &map, &ctx);
    let s = &mut lw.prog.scalars;
    let value = match s.in_range(&conds) {
        None => v,
        Some(mask) => {
            let masked = s.add_mask(v, mask);
            let fill = s.constant(fill, out);
            let masked = s.cast(masked, out);
            s.select(mask, masked, fill, out)
        }
    };
    native(sizes, value, out)
}

/// A dim of `size` padded by `left` and `right`, where all three are
/// known: -1 (no size) where a negative pad removes more than the dim has
/// (eager refuses it) or the sum overflows.
fn padded(size: &Expr, left: &Expr, right: &Expr) -> Option<Expr> {
    let (size, left, right) = (size.as_const()?, left.as_const()?, right.as_const()?);
    let fits = left >= -size && right >= -size;
    let total = size.checked_add(left).and_then(|n| n.checked_add(right)).filter(|_| fits);
    Some(Expr::c(total.unwrap_or(-1)))
}

/// `iota` and `arange`: `start + i·step`, computed in float64 or int64.
pub(super) fn arange(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let (start, step) = if node.op == Op::Iota {
        (node.arg(1, "start").as_float().unwrap_or(0.0), node.arg(2, "step").as_float().unwrap_or(1.0))
    } else {
        let overload = node.overload();
        let start = if overload == "default" { 0.0 } else { node.arg(0, "start").as_float().unwrap_or(0.0) };
        let step = if overload == "start_step" { node.arg(2, "step").as_float().unwrap_or(1.0) } else { 1.0 };
        (start, step)
    };
    let compute = if out.is_float() { DType::F64 } else { DType::I64 };
    let s = &mut lw.prog.scalars;
    let i = s.index(Expr::v(0));
    let i = s.cast(i, compute);
    let st = s.constant(step, compute);
    let b = s.constant(start, compute);
    let m = s.binary(BinaryOp::Mul, i, st, compute);
    let v = s.binary(BinaryOp::Add, m, b, compute);
    let value = s.cast(v, out);
    native(sizes, value, out)
}

/// `slice_scatter` and `select_scatter`: `src` inside the slice (or at
/// the selected index), `self` elsewhere.
pub(super) fn slice_scatter(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let op = node.target.as_str();
    // out = src inside the slice (or at the selected index), self elsewhere.
    let x = lw.tensor_arg(node, 0, "self")?;
    let src = lw.tensor_arg(node, 1, "src")?;
    let n = sizes.len();
    if n == 0 {
        return Err(unsupported(op, "0-dim input"));
    }
    let d = checked_dim(int_arg(node.arg(2, "dim"), 0, "dim", op)?, n, "dim", op)?;
    let src_rank = if node.op == Op::SelectScatter { n - 1 } else { n };
    if x.ndim() != n || src.ndim() != src_rank {
        let ranks = format!("self has rank {} and src rank {}", x.ndim(), src.ndim());
        return Err(invalid(op, format!("{ranks}; expected {n} and {src_rank} for an output of rank {n}")));
    }
    if !agree(&sizes, &x.sizes) {
        return Err(disagree(op, &sizes, "self's sizes".to_string(), &x.sizes));
    }
    let size = x.sizes[d].as_const().ok_or_else(|| unsupported(op, "symbolic size"))?;
    let norm = |v: i64| if v < 0 { (v + size).max(0) } else { v.min(size) };
    let (start, end, step) = if node.op == Op::SelectScatter {
        let i = node.arg(3, "index").as_int().ok_or_else(|| unsupported(op, "index"))?;
        if !(-size..size).contains(&i) {
            return Err(invalid(op, format!("index {i} is out of range for dim {d} of size {size}")));
        }
        let i = if i < 0 { i + size } else { i };
        (i, i + 1, 1)
    } else {
        let start = node.arg(3, "start").as_int().map_or(0, norm);
        let end = node.arg(4, "end").as_int().map_or(size, norm);
        (start, end, node.arg(5, "step").as_int().unwrap_or(1))
    };
    if step <= 0 {
        return Err(unsupported(op, "non-positive step"));
    }
    let var = Expr::v(d as u32);
    let offset = var.add_c(-start);
    let ctx = lw.ctx_for(&sizes);
    let mut map: Vec<Expr> = vars(n);
    if node.op == Op::SelectScatter {
        map.remove(d);
        for (k, e) in map.iter_mut().enumerate().skip(d) {
            *e = Expr::v(k as u32 + 1);
        }
    } else {
        map[d] = offset.floordiv(&Expr::c(step), &ctx);
    }
    let src_v = lw.prog.scalars.substitute(src.value, &map, &ctx);
    let s = &mut lw.prog.scalars;
    let idx = s.index(var);
    let lo = s.int_constant(start, DType::I64);
    let hi = s.int_constant(end, DType::I64);
    let ge = s.binary(BinaryOp::Ge, idx, lo, DType::Bool);
    let lt = s.binary(BinaryOp::Lt, idx, hi, DType::Bool);
    let mut inside = s.binary(BinaryOp::And, ge, lt, DType::Bool);
    if step != 1 {
        let rem = s.index(offset.modulo(&Expr::c(step), &ctx));
        let zero = s.int_constant(0, DType::I64);
        let on_step = s.binary(BinaryOp::Eq, rem, zero, DType::Bool);
        inside = s.binary(BinaryOp::And, inside, on_step, DType::Bool);
    }
    let masked = s.add_mask(src_v, inside);
    let masked = s.cast(masked, out);
    let xv = s.cast(x.value, out);
    let value = s.select(inside, masked, xv, out);
    native(sizes, value, out)
}

/// `tril` and `triu`: zero on one side of a diagonal.
pub(super) fn tril(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let op = node.target.as_str();
    let x = lw.tensor_arg(node, 0, "self")?;
    let diagonal = node.arg(1, "diagonal").as_int().unwrap_or(0);
    let n = x.ndim();
    if n < 2 {
        return Err(unsupported(op, "needs 2 dims"));
    }
    let s = &mut lw.prog.scalars;
    let d = s.index(Expr::v(n as u32 - 1).sub(&Expr::v(n as u32 - 2)));
    let k = s.int_constant(diagonal, DType::I64);
    let keep = if node.op == Op::Tril { BinaryOp::Le } else { BinaryOp::Ge };
    let cond = s.binary(keep, d, k, DType::Bool);
    let zero = s.constant(0.0, out);
    let value = s.select(cond, x.value, zero, out);
    native(sizes, value, out)
}

/// `roll`: each rolled dim read modulo its size.
pub(super) fn roll(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let op = node.target.as_str();
    let x = lw.tensor_arg(node, 0, "self")?;
    let shifts = int_list(node.arg(1, "shifts"), op)?;
    let dims = int_list(node.arg(2, "dims"), op).unwrap_or_default();
    if dims.is_empty() || dims.len() != shifts.len() {
        return Err(unsupported(op, "roll without dims"));
    }
    let n = x.ndim();
    if n == 0 {
        return Err(unsupported(op, "a roll of a 0-dim tensor"));
    }
    let ctx = lw.ctx_for(&sizes);
    let mut map = vars(n);
    for (shift, d) in shifts.iter().zip(dims) {
        let d = checked_dim(d, n, "dim", op)?;
        // Read modulo a known size, a shift is its remainder (the same
        // index); only a shift along a symbolic or empty dim is kept whole.
        let shift = match x.sizes[d].as_const() {
            Some(size) if size > 0 => shift.rem_euclid(size),
            _ if shift.unsigned_abs() > i32::MAX as u64 => {
                return Err(unsupported(op, format!("shift {shift} along a dim of symbolic or no size")));
            }
            _ => *shift,
        };
        map[d] =
            Expr::v(d as u32).sub(&Expr::c(shift)).add(&x.sizes[d].scale(shift.abs() + 1)).modulo(&x.sizes[d], &ctx);
    }
    let value = lw.view(&x, sizes.clone(), &map).value;
    native(sizes, value, out)
}

/// `full`, `full_like`, `fill`: a number, a symbolic size
/// (`scalar_tensor(s0)` in dynamic upsampling) or a tensor.
pub(super) fn full(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let value = lw.operand(node.arg(1, "fill_value"), &sizes, out, &node.target)?;
    native(sizes, value, out)
}

pub(super) fn scalar_tensor(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let value = lw.operand(node.arg(0, "s"), &sizes, out, &node.target)?;
    native(sizes, value, out)
}

/// `zeros` and the `empty` family (whose contents are undefined: zeros).
pub(super) fn zeros(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let value = lw.prog.scalars.constant(0.0, out);
    native(sizes, value, out)
}

pub(super) fn ones(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let value = lw.prog.scalars.constant(1.0, out);
    native(sizes, value, out)
}

/// Element `i` is `src[other dims…, position on the diagonal]` where
/// `i[dim2] − i[dim1] == offset`, else `input[i]`.
pub(super) fn diagonal_scatter(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let op = node.target.as_str();
    let (sizes, out) = lw.out_meta(node)?;
    let x = lw.tensor_arg(node, 0, "self")?;
    let src = lw.tensor_arg(node, 1, "src")?;
    let n = x.ndim();
    let offset = node.arg(2, "offset").as_int().unwrap_or(0);
    let norm = |d: i64| if d < 0 { d + n as i64 } else { d };
    let dim1 = norm(node.arg(3, "dim1").as_int().unwrap_or(0));
    let dim2 = norm(node.arg(4, "dim2").as_int().unwrap_or(1));
    if n < 2 || !(0..n as i64).contains(&dim1) || !(0..n as i64).contains(&dim2) || dim1 == dim2 {
        return Err(invalid(op, format!("bad dims {dim1}, {dim2} for {n} dims")));
    }
    let (d1, d2) = (dim1 as usize, dim2 as usize);
    if src.ndim() != n - 1 {
        return Err(invalid(op, "src must have one dim fewer than the input"));
    }
    // src is indexed by the other dims in order, then the diagonal position.
    let mut map: Vec<Expr> = (0..n).filter(|d| *d != d1 && *d != d2).map(|d| Expr::v(d as u32)).collect();
    map.push(Expr::v(if offset >= 0 { d1 } else { d2 } as u32));
    let ctx = lw.ctx_for(&sizes);
    let src_v = lw.prog.scalars.substitute(src.value, &map, &ctx);
    let s = &mut lw.prog.scalars;
    let diff = s.index(Expr::v(d2 as u32).sub(&Expr::v(d1 as u32)));
    let k = s.int_constant(offset, DType::I64);
    let on = s.binary(BinaryOp::Eq, diff, k, DType::Bool);
    let masked = s.add_mask(src_v, on);
    let masked = s.cast(masked, out);
    let xv = s.cast(x.value, out);
    let v = s.select(on, masked, xv, out);
    native(sizes, v, out)
}
