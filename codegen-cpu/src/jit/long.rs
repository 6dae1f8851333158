//! int64 lanes ([`Class::Long`]): loaded from memory and compared, into the
//! lane masks every other instruction uses. Four lanes are two `I64X2`
//! halves (x86's SSE has no 4-wide int64 register); a comparison compares
//! each half and keeps the low 32 bits of each 64-bit result lane, which
//! for all-ones or zero is the 32-bit mask.
//!
//! This is what attention masks built from position ids need (GPT-2's
//! `cumsum`-derived ids compared with each other): the interpreter spent
//! ~5 ns per element there.
//!
//! int64 arithmetic runs on the same halves (add, subtract, multiply, min,
//! max, negate, select by a mask widened to 64-bit lanes), exact as the
//! interpreter's wrapping int64, when a stage does not compile otherwise
//! (`analysis.rs`'s `Try::LongArith`): a position id's difference compared
//! with 1, a step counter's increment. Such a value may be the stage's
//! int64 output.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Value};

use rdyn_ir::loops::{BinaryOp, UnaryOp};

use super::analysis::{int_const, Analysis, Class, Def};
use super::emit::Em;
use crate::plan::{InstOp, Reg, StagePlan};

/// One int64 value at the builder's width: a scalar `I64`, or four lanes
/// as two `I64X2` halves.
#[derive(Clone, Copy)]
pub(super) struct Long {
    pub lo: Value,
    pub hi: Option<Value>,
}

/// Load group `group`'s int64 lanes, `step` elements apart; `p` is the
/// load at the iteration's first lane.
pub(super) fn load_long(em: &mut Em, p: Value, group: i64, step: i64) -> Long {
    let base = 4 * group * step * 8;
    let trusted = MemFlagsData::trusted();
    let one = |em: &mut Em, at: i64| em.b.ins().load(types::I64, trusted, p, at as i32);
    if !em.wide {
        return Long { lo: one(em, base), hi: None };
    }
    if step == 0 {
        let x = one(em, base);
        return splat_long(em, x);
    }
    if step == 1 {
        let flags = MemFlagsData::new().with_notrap();
        let lo = em.b.ins().load(types::I64X2, flags, p, base as i32);
        let hi = em.b.ins().load(types::I64X2, flags, p, (base + 16) as i32);
        return Long { lo, hi: Some(hi) };
    }
    let half = |em: &mut Em, first: i64| {
        let a = one(em, base + 8 * step * first);
        let b = one(em, base + 8 * step * (first + 1));
        let v = em.b.ins().scalar_to_vector(types::I64X2, a);
        em.b.ins().insertlane(v, b, 1)
    };
    let lo = half(em, 0);
    let hi = half(em, 2);
    Long { lo, hi: Some(hi) }
}

/// A scalar int64 invariant (loaded once before the loops) at 4 lanes.
pub(super) fn splat_long(em: &mut Em, x: Value) -> Long {
    let v = em.b.ins().splat(types::I64X2, x);
    Long { lo: v, hi: Some(v) }
}

/// An operand of a comparison with an int64 side, as int64: a loaded
/// value as it is, a 32-bit index sign-extended, a constant as its value.
pub(super) fn long_operand(
    em: &mut Em,
    stage: &StagePlan,
    a: &Analysis,
    reg: Reg,
    def: Def,
    value: Value,
    long: Option<Long>,
) -> Result<Long, String> {
    if let Def::Inst(i) = def {
        if a.class[i] == Class::Long {
            return long.ok_or_else(|| "int64 operand undefined".to_string());
        }
        return Ok(sign_extend(em, value));
    }
    let c = int_const(stage, reg).ok_or("comparison with a constant beyond 32 bits")?;
    let c = em.b.ins().iconst(types::I64, i64::from(c));
    Ok(if em.wide { splat_long(em, c) } else { Long { lo: c, hi: None } })
}

/// 32-bit integer lanes (an index, [`Class::Int`]) as int64 lanes.
pub(super) fn sign_extend(em: &mut Em, value: Value) -> Long {
    if !em.wide {
        return Long { lo: em.b.ins().sextend(types::I64, value), hi: None };
    }
    let lo = em.b.ins().swiden_low(value);
    let hi = em.b.ins().swiden_high(value);
    Long { lo, hi: Some(hi) }
}

/// `x cc y` as a lane mask (`I32X4` or `I32`, all ones or zero).
pub(super) fn compare_long(em: &mut Em, cc: IntCC, x: Long, y: Long) -> Result<Value, String> {
    let lo = em.b.ins().icmp(cc, x.lo, y.lo);
    let (Some(xh), Some(yh)) = (x.hi, y.hi) else {
        return Ok(em.b.ins().bmask(types::I32, lo));
    };
    let hi = em.b.ins().icmp(cc, xh, yh);
    // 32-bit lanes 0 and 2 of each half: bytes 0-3 and 8-11 of `lo`, then
    // of `hi` (16 on in the shuffle's second operand).
    let le = MemFlagsData::new().with_endianness(Endianness::Little);
    let (lo, hi) = (em.b.ins().bitcast(types::I8X16, le, lo), em.b.ins().bitcast(types::I8X16, le, hi));
    let order: Vec<u8> = [0u8, 8, 16, 24].iter().flat_map(|&s| s..s + 4).collect();
    let order = em.b.func.dfg.immediates.push(order.as_slice().into());
    let bytes = em.b.ins().shuffle(lo, hi, order);
    Ok(em.b.ins().bitcast(types::I32X4, le, bytes))
}

/// An operand of int64 arithmetic: a lane mask (a select's condition) or an
/// int64 value.
pub(super) enum Side {
    Mask(Value),
    Long(Long),
}

/// int64 instruction `op` over `sides` (in operand order).
pub(super) fn arith(em: &mut Em, op: &InstOp, sides: &[Side]) -> Result<Long, String> {
    let long = |k: usize| match sides.get(k) {
        Some(Side::Long(l)) => Ok(*l),
        _ => Err("int64 operand missing".to_string()),
    };
    let halves = |em: &mut Em, x: Long, f: &dyn Fn(&mut Em, Value) -> Value| Long {
        lo: f(em, x.lo),
        hi: x.hi.map(|h| f(em, h)),
    };
    match op {
        InstOp::Binary(op, ..) => {
            let (x, y) = (long(0)?, long(1)?);
            let f = |em: &mut Em, p: Value, q: Value| -> Result<Value, String> {
                Ok(match op {
                    BinaryOp::Add => em.b.ins().iadd(p, q),
                    BinaryOp::Sub => em.b.ins().isub(p, q),
                    BinaryOp::Mul => em.b.ins().imul(p, q),
                    BinaryOp::Max => em.b.ins().smax(p, q),
                    BinaryOp::Min => em.b.ins().smin(p, q),
                    _ => return Err("int64 op without a lane form".into()),
                })
            };
            let lo = f(em, x.lo, y.lo)?;
            let hi = match (x.hi, y.hi) {
                (Some(p), Some(q)) => Some(f(em, p, q)?),
                _ => None,
            };
            Ok(Long { lo, hi })
        }
        InstOp::Unary(UnaryOp::Neg, _) => Ok(halves(em, long(0)?, &|em, v| em.b.ins().ineg(v))),
        InstOp::Where(..) => {
            let Some(Side::Mask(m)) = sides.first() else { return Err("select without its mask".into()) };
            let (x, y) = (long(1)?, long(2)?);
            if let (Some(xh), Some(yh)) = (x.hi, y.hi) {
                let (ml, mh) = (em.b.ins().swiden_low(*m), em.b.ins().swiden_high(*m));
                let lo = em.b.ins().bitselect(ml, x.lo, y.lo);
                let hi = em.b.ins().bitselect(mh, xh, yh);
                return Ok(Long { lo, hi: Some(hi) });
            }
            let m = em.b.ins().sextend(types::I64, *m);
            let t = em.b.ins().band(x.lo, m);
            let f = em.b.ins().band_not(y.lo, m);
            Ok(Long { lo: em.b.ins().bor(t, f), hi: None })
        }
        _ => Err("not an int64 instruction".into()),
    }
}

/// Store one group's int64 lanes, `step` elements apart; `p` is the output
/// at the iteration's first lane, `off` the group's byte offset from it.
pub(super) fn store_long(em: &mut Em, p: Value, off: i64, step: i64, v: Long) {
    let flags = MemFlagsData::new().with_notrap();
    let Some(hi) = v.hi else {
        em.b.ins().store(flags, v.lo, p, off as i32);
        return;
    };
    if step == 1 {
        em.b.ins().store(flags, v.lo, p, off as i32);
        em.b.ins().store(flags, hi, p, (off + 16) as i32);
        return;
    }
    for (l, (half, lane)) in [(v.lo, 0u8), (v.lo, 1), (hi, 0), (hi, 1)].into_iter().enumerate() {
        let x = em.b.ins().extractlane(half, lane);
        em.b.ins().store(flags, x, p, (off + 8 * step * l as i64) as i32);
    }
}

/// Float lanes truncated to int64 as Rust's `as i64` (and the interpreter)
/// does: saturating, NaN to 0; lane by lane (SSE has no such conversion).
pub(super) fn from_float(em: &mut Em, x: Value) -> Long {
    if !em.wide {
        return Long { lo: em.b.ins().fcvt_to_sint_sat(types::I64, x), hi: None };
    }
    let half = |em: &mut Em, first: u8| {
        let a = em.b.ins().extractlane(x, first);
        let b = em.b.ins().extractlane(x, first + 1);
        let (a, b) = (em.b.ins().fcvt_to_sint_sat(types::I64, a), em.b.ins().fcvt_to_sint_sat(types::I64, b));
        let v = em.b.ins().scalar_to_vector(types::I64X2, a);
        em.b.ins().insertlane(v, b, 1)
    };
    let lo = half(em, 0);
    let hi = half(em, 2);
    Long { lo, hi: Some(hi) }
}

/// int64 lanes converted to float32, rounded to nearest as Rust's `as
/// f32` (and the interpreter) does; lane by lane (SSE has no such
/// conversion).
pub(super) fn to_float(em: &mut Em, x: Long) -> Value {
    let Some(hi) = x.hi else {
        return em.b.ins().fcvt_from_sint(types::F32, x.lo);
    };
    let lane = |em: &mut Em, half: Value, l: u8| {
        let n = em.b.ins().extractlane(half, l);
        em.b.ins().fcvt_from_sint(types::F32, n)
    };
    let first = lane(em, x.lo, 0);
    let mut v = em.b.ins().scalar_to_vector(types::F32X4, first);
    for (l, (half, at)) in [(x.lo, 1u8), (hi, 0), (hi, 1)].into_iter().enumerate() {
        let f = lane(em, half, at);
        v = em.b.ins().insertlane(v, f, l as u8 + 1);
    }
    v
}
