//! Integer arithmetic on compiled index lanes ([`Class::Int`]).
//!
//! Pooling windows and their indices are integer arithmetic on positions:
//! an average pool's backward divides by `(min(2·i + 2, 24) - 2·i) · …`, a
//! max pool's forward keeps the flat index of the window's best element
//! (`where(x > best, 96·i + 2·j + 49, …)`, clamped with `max(0, -(2·i - 1))`).
//! The interpreter runs them in int64; here they run on the 32-bit lanes that
//! hold compiled indices, which gives the same values only while no value
//! leaves 32 bits. So every integer definition carries the interval of its
//! values over the kernel's ranges (an index's from its coefficients and the
//! extents, a constant's exactly, arithmetic's by interval arithmetic), and an
//! instruction whose interval leaves `i32` does not compile (its stage stays
//! interpreted). Floor division and floor modulo compile only by a positive
//! power of two (an arithmetic shift and a mask are floor division and
//! modulo for every sign); other divisors keep the interpreter, as does
//! anything read from a float (a hash's key has no interval).
//!
//! A stage whose value is such an integer stores it to its int64 output
//! (`Output::StoreLong`), each lane sign-extended (`long::store_long`).

use cranelift_codegen::ir::{types, InstBuilder, Value};
use rdyn_ir::loops::{BinaryOp, UnaryOp};
use rdyn_ir::Ctx;

use super::analysis::{int_const, Analysis, Class, Def};
use super::emit::Em;
use crate::plan::{IndexFn, InstOp, Reg, StagePlan};

/// Inclusive bounds of an integer definition's values.
pub(super) type Range = (i64, i64);

/// Whether every value of `r` fits a 32-bit lane.
fn fits(r: Range) -> bool {
    r.0 >= i64::from(i32::MIN) && r.1 <= i64::from(i32::MAX)
}

/// The values an index takes over `extents`, when they fit 32 bits.
pub(super) fn index_range(index: &IndexFn, extents: &[i64]) -> Option<Range> {
    let (mut lo, mut hi) = match &index.rest {
        Some(rest) => rest.bounds(&Ctx::with_extents(extents))?,
        None => (0, 0),
    };
    lo = lo.checked_add(index.c0)?;
    hi = hi.checked_add(index.c0)?;
    for (v, c) in &index.coefs {
        let n = *extents.get(*v as usize)?;
        let far = c.checked_mul(n.checked_sub(1)?.max(0))?;
        lo = lo.checked_add(far.min(0))?;
        hi = hi.checked_add(far.max(0))?;
    }
    Some((lo, hi)).filter(|r| fits(*r))
}

/// The interval of operand `d`: a compiled integer's, or an integer
/// constant's value.
pub(super) fn operand_range(stage: &StagePlan, a: &Analysis, d: Def) -> Option<Range> {
    match d {
        Def::Inst(i) if a.class.get(i) == Some(&Class::Int) => a.range.get(i).copied().flatten(),
        Def::Inst(_) => None,
        Def::Const(r) => int_const(stage, r).map(|c| (i64::from(c), i64::from(c))),
    }
}

/// The divisor `2^s` of a floor division or modulo, as `s`: a positive
/// power-of-two constant.
fn shift(stage: &StagePlan, y: Reg) -> Option<u32> {
    let k = int_const(stage, y)?;
    (k > 0 && (k as u32).is_power_of_two()).then(|| (k as u32).trailing_zeros())
}

/// The interval of integer instruction `op`'s result from its operands'
/// (in `ops`' order), when it compiles on 32-bit lanes; `None` otherwise.
pub(super) fn result_range(stage: &StagePlan, op: &InstOp, ops: &[Option<Range>]) -> Option<Range> {
    let corners = |f: &dyn Fn(i64, i64) -> Option<i64>, x: Range, y: Range| -> Option<Range> {
        let v = [f(x.0, y.0)?, f(x.0, y.1)?, f(x.1, y.0)?, f(x.1, y.1)?];
        Some((*v.iter().min()?, *v.iter().max()?))
    };
    let r = match (op, ops) {
        (InstOp::Binary(op, _, y), [Some(x), Some(yr)]) => match op {
            BinaryOp::Add => (x.0.checked_add(yr.0)?, x.1.checked_add(yr.1)?),
            BinaryOp::Sub => (x.0.checked_sub(yr.1)?, x.1.checked_sub(yr.0)?),
            BinaryOp::Mul => corners(&|p, q| p.checked_mul(q), *x, *yr)?,
            BinaryOp::Max => (x.0.max(yr.0), x.1.max(yr.1)),
            BinaryOp::Min => (x.0.min(yr.0), x.1.min(yr.1)),
            BinaryOp::FloorDiv => {
                let s = shift(stage, *y)?;
                (x.0 >> s, x.1 >> s)
            }
            BinaryOp::Rem => {
                let s = shift(stage, *y)?;
                (0, (1i64 << s) - 1)
            }
            _ => return None,
        },
        (InstOp::Unary(UnaryOp::Neg, _), [Some(x)]) => (x.1.checked_neg()?, x.0.checked_neg()?),
        (InstOp::Unary(UnaryOp::Abs, _), [Some(x)]) => {
            let far = x.0.checked_abs()?.max(x.1.checked_abs()?);
            (if x.0 <= 0 && x.1 >= 0 { 0 } else { x.0.abs().min(x.1.abs()) }, far)
        }
        (InstOp::Where(..), [None, Some(x), Some(y)]) => (x.0.min(y.0), x.1.max(y.1)),
        _ => return None,
    };
    Some(r).filter(|r| fits(*r))
}

/// Operand `k` of instruction `inst` as lanes: a constant as its integer
/// value (its mask form elsewhere), anything else as computed.
fn lanes(em: &mut Em, stage: &StagePlan, reg: Reg, value: Value) -> Value {
    match int_const(stage, reg) {
        Some(c) => {
            let c = em.b.ins().iconst(types::I32, i64::from(c));
            em.widen(c)
        }
        None => value,
    }
}

/// Emit integer instruction `inst` ([`result_range`] accepted it) over
/// operand values `ops`.
pub(super) fn emit(em: &mut Em, stage: &StagePlan, inst: &InstOp, ops: &[Value]) -> Result<Value, String> {
    let missing = || "integer operand missing".to_string();
    Ok(match inst {
        InstOp::Binary(op, x, y) => {
            let xv = lanes(em, stage, *x, *ops.first().ok_or_else(missing)?);
            match op {
                BinaryOp::FloorDiv => {
                    let s = shift(stage, *y).ok_or("floor division by a non-power of two")?;
                    em.b.ins().sshr_imm_s(xv, i64::from(s))
                }
                BinaryOp::Rem => {
                    let s = shift(stage, *y).ok_or("modulo by a non-power of two")?;
                    let low = em.b.ins().iconst(types::I32, (1i64 << s) - 1);
                    let low = em.widen(low);
                    em.b.ins().band(xv, low)
                }
                _ => {
                    let yv = lanes(em, stage, *y, *ops.get(1).ok_or_else(missing)?);
                    match op {
                        BinaryOp::Add => em.b.ins().iadd(xv, yv),
                        BinaryOp::Sub => em.b.ins().isub(xv, yv),
                        BinaryOp::Mul => em.b.ins().imul(xv, yv),
                        BinaryOp::Max => em.b.ins().smax(xv, yv),
                        BinaryOp::Min => em.b.ins().smin(xv, yv),
                        _ => return Err("integer op without a lane form".into()),
                    }
                }
            }
        }
        InstOp::Unary(op, x) => {
            let xv = lanes(em, stage, *x, *ops.first().ok_or_else(missing)?);
            match op {
                UnaryOp::Neg => em.b.ins().ineg(xv),
                _ => em.b.ins().iabs(xv),
            }
        }
        InstOp::Where(_, x, y) => {
            let mask = *ops.first().ok_or_else(missing)?;
            let xv = lanes(em, stage, *x, *ops.get(1).ok_or_else(missing)?);
            let yv = lanes(em, stage, *y, *ops.get(2).ok_or_else(missing)?);
            if em.wide {
                em.b.ins().bitselect(mask, xv, yv)
            } else {
                let t = em.b.ins().band(xv, mask);
                let f = em.b.ins().band_not(yv, mask);
                em.b.ins().bor(t, f)
            }
        }
        _ => return Err("not an integer instruction".into()),
    })
}
