//! Reduction arithmetic: identities, combining, arg-reduction order, and
//! folds across a warp's lanes by butterfly shuffles.

use rdyn_ir::loops::ReduceOp;

use crate::ptx::func::{imm, sel_ty, Class, Func};
use crate::types::PtxError;

pub(crate) fn identity(op: ReduceOp, class: Class) -> String {
    let float = class != Class::S64;
    match op {
        ReduceOp::Sum | ReduceOp::Any => imm(class, 0.0),
        ReduceOp::Prod | ReduceOp::All => imm(class, 1.0),
        ReduceOp::Max | ReduceOp::ArgMax if float => imm(class, f64::NEG_INFINITY),
        ReduceOp::Min | ReduceOp::ArgMin if float => imm(class, f64::INFINITY),
        ReduceOp::Max | ReduceOp::ArgMax => "0x8000000000000000".to_string(),
        ReduceOp::Min | ReduceOp::ArgMin => i64::MAX.to_string(),
    }
}

/// `acc = acc ⊕ v` in place.
pub(crate) fn combine(f: &mut Func, op: ReduceOp, class: Class, acc: &str, v: &str) -> Result<(), PtxError> {
    let ty = class.ty();
    let float = class != Class::S64;
    match op {
        ReduceOp::Sum if float => f.ins(format!("add.rn.{ty} {acc}, {acc}, {v}")),
        ReduceOp::Sum => f.ins(format!("add.s64 {acc}, {acc}, {v}")),
        ReduceOp::Prod if float => f.ins(format!("mul.rn.{ty} {acc}, {acc}, {v}")),
        ReduceOp::Prod => f.ins(format!("mul.lo.s64 {acc}, {acc}, {v}")),
        ReduceOp::Max | ReduceOp::Min => {
            let m = if op == ReduceOp::Max { "max" } else { "min" };
            if class == Class::F32 {
                f.ins(format!("{m}.NaN.f32 {acc}, {acc}, {v}"));
            } else if class == Class::F64 {
                // max.f64 has no .NaN form: a NaN on either side stays.
                let nan = f.setp("nan", "f64", acc, v);
                f.ins(format!("{m}.f64 {acc}, {acc}, {v}"));
                f.ins(format!("@{nan} add.rn.f64 {acc}, {acc}, {v}"));
            } else {
                f.ins(format!("{m}.s64 {acc}, {acc}, {v}"));
            }
        }
        ReduceOp::Any | ReduceOp::All if !float => {
            let pa = f.setp("ne", "s64", acc, "0");
            let pv = f.setp("ne", "s64", v, "0");
            let p = f.pred(if op == ReduceOp::Any { "or" } else { "and" }, &pa, &pv);
            f.ins(format!("selp.b64 {acc}, 1, 0, {p}"));
        }
        other => return Err(PtxError::Unsupported(format!("{other} reduction of floats"))),
    }
    Ok(())
}

/// Whether candidate `(v, vi)` beats `(acc, acci)` for an arg-reduction:
/// NaN first, then the extreme, ties to the lower index; index −1 is empty.
pub(crate) fn arg_better(f: &mut Func, is_max: bool, class: Class, acc: &str, acci: &str, v: &str, vi: &str) -> String {
    let ty = class.ty();
    let float = class != Class::S64;
    let cmp = if is_max { "gt" } else { "lt" };
    let strictly = f.setp(cmp, ty, v, acc);
    let equal = f.setp("eq", ty, v, acc);
    let lower = f.setp("lt", "s64", vi, acci);
    let tie = f.pred("and", &equal, &lower);
    let mut better = f.pred("or", &strictly, &tie);
    if float {
        // NaN beats numbers; between NaNs the lower index wins: with a NaN
        // on either side, the NaN rule decides instead.
        let an = f.setp("nan", ty, acc, acc);
        let vn = f.setp("nan", ty, v, v);
        let any_nan = f.pred("or", &an, &vn);
        let first = f.pred("or", &format!("!{an}"), &lower);
        let nan_rule = f.pred("and", &vn, &first);
        let by_nan = f.pred("and", &any_nan, &nan_rule);
        let by_value = f.pred("and", &format!("!{any_nan}"), &better);
        better = f.pred("or", &by_nan, &by_value);
    }
    let empty_v = f.setp("lt", "s64", vi, "0");
    let empty_acc = f.setp("lt", "s64", acci, "0");
    let r = f.pred("or", &better, &empty_acc);
    f.ins(format!("and.pred {r}, {r}, !{empty_v}"));
    r
}

/// Exchange a register with the lane `offset` away (butterfly), any class.
fn shuffle(f: &mut Func, class: Class, x: &str, offset: u32) -> String {
    let out = f.reg(class);
    if class == Class::F32 {
        f.ins(format!("shfl.sync.bfly.b32 {out}, {x}, {offset}, 31, -1"));
        return out;
    }
    let (lo, hi) = (f.reg(Class::B32), f.reg(Class::B32));
    f.ins(format!("mov.b64 {{{lo}, {hi}}}, {x}"));
    f.ins(format!("shfl.sync.bfly.b32 {lo}, {lo}, {offset}, 31, -1"));
    f.ins(format!("shfl.sync.bfly.b32 {hi}, {hi}, {offset}, 31, -1"));
    f.ins(format!("mov.b64 {out}, {{{lo}, {hi}}}"));
    out
}

/// Fold `(acc, acci)` across the lanes of each warp (`lanes` = 32 or fewer).
pub(crate) fn warp_reduce(
    f: &mut Func,
    op: ReduceOp,
    class: Class,
    acc: &str,
    acci: &str,
    lanes: u32,
) -> Result<(), PtxError> {
    let arg = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
    let mut offset = lanes / 2;
    while offset > 0 {
        let other = shuffle(f, class, acc, offset);
        if arg {
            let other_i = shuffle(f, Class::S64, acci, offset);
            let p = arg_better(f, op == ReduceOp::ArgMax, class, acc, acci, &other, &other_i);
            f.ins(format!("@{p} mov.{} {acc}, {other}", sel_ty(class)));
            f.ins(format!("@{p} mov.b64 {acci}, {other_i}"));
        } else {
            combine(f, op, class, acc, &other)?;
        }
        offset /= 2;
    }
    Ok(())
}
