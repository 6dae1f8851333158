//! One inline instruction of a compiled stage for one group of lanes
//! (four in SIMD registers, or the one-lane tail): float32 arithmetic,
//! masks, integer lanes ([`super::int`]), loads and casts. Whole-stage
//! structure (phases, loops, int64 lanes, gathers) is `lower.rs`'s.

use cranelift_codegen::ir::{types, InstBuilder, Value};
use rdyn_ir::loops::BinaryOp;
use rdyn_ir::{DType, Kind};

use super::analysis::{int_cc, int_const, Analysis, Class, Def};
use super::emit::{binary, unary, Em, UNIFORM_MASK_MAX_STEP};
use super::int;
use super::memory::{load, masked_load, uniform_masked_load};
use crate::plan::{InstOp, Reg, StagePlan};

/// Emit inline instruction `k` for one group.
pub(super) fn inst_value(
    em: &mut Em,
    stage: &StagePlan,
    a: &Analysis,
    k: usize,
    ops: &[Value],
    addr: Option<Value>,
    group: i64,
) -> Result<Value, String> {
    let inst = &stage.insts[k];
    let arithmetic = matches!(inst.op, InstOp::Binary(..) | InstOp::Unary(..) | InstOp::Where(..));
    if a.class[k] == Class::Int && arithmetic && !matches!(inst.op, InstOp::Binary(BinaryOp::HashMix, ..)) {
        return int::emit(em, stage, &inst.op, ops);
    }
    Ok(match &inst.op {
        InstOp::Binary(BinaryOp::HashMix, ..) => em.hash_mix(ops[0], ops[1]),
        InstOp::Load { dtype, mask: Some(_), .. } if *dtype == DType::F32 => {
            let addr = addr.ok_or("load without address")?;
            let mask = *ops.first().ok_or("masked load without its mask")?;
            // A mask the same on every lane of the tile (which source of an
            // interleave or a `cat` a row reads) picks the whole group: one
            // vector load, or the zero block.
            let uniform = a.operands[k].first().is_some_and(|d| match d {
                Def::Inst(j) => a.invariant[*j],
                Def::Const(_) => true,
            });
            if uniform && (0..=UNIFORM_MASK_MAX_STEP).contains(&a.step[k]) {
                uniform_masked_load(em, addr, group, a.step[k], mask)
            } else {
                masked_load(em, addr, group, a.step[k], mask)
            }
        }
        InstOp::Load { dtype, .. } => {
            let addr = addr.ok_or("load without address")?;
            load(em, addr, group, a.step[k], *dtype)
        }
        InstOp::Index(_) => {
            // The index at the iteration's first lane, plus this group's
            // lanes: base + (4·group + l)·step.
            let at = addr.ok_or("index without a base")?;
            let step = a.step[k];
            let first = em.b.ins().iadd_imm_s(at, 4 * group * step);
            let x = em.b.ins().ireduce(types::I32, first);
            if !em.wide {
                return Ok(x);
            }
            // One add of the lane offsets (a constant vector) to the splat.
            let offsets: Vec<u8> = (0..4i64).flat_map(|l| ((l * step) as i32).to_le_bytes()).collect();
            let offsets = em.b.func.dfg.constants.insert(offsets.into());
            let offsets = em.b.ins().vconst(types::I32X4, offsets);
            let v = em.b.ins().splat(types::I32X4, x);
            em.b.ins().iadd(v, offsets)
        }
        InstOp::Binary(op, x, y) if a.class[k] == Class::Mask && int_cc(*op).is_some() => {
            let cc = int_cc(*op).ok_or("no integer comparison")?;
            // Constant operands as integers (their mask form is 0 or -1).
            let mut side = |r: &Reg, v: Value| -> Value {
                match int_const(stage, *r) {
                    Some(c) => {
                        let c = em.b.ins().iconst(types::I32, i64::from(c));
                        em.widen(c)
                    }
                    None => v,
                }
            };
            let (xv, yv) = (side(x, ops[0]), side(y, ops[1]));
            let c = em.b.ins().icmp(cc, xv, yv);
            if em.wide {
                c
            } else {
                em.b.ins().bmask(types::I32, c)
            }
        }
        InstOp::ConstF(x) => em.fc(*x as f32),
        InstOp::ConstI(x) => em.ic(if *x != 0 { -1 } else { 0 }),
        InstOp::Unary(_, _) if a.class[k] == Class::Mask => em.b.ins().bnot(ops[0]),
        InstOp::Unary(op, _) => unary(em, *op, ops[0]),
        InstOp::Binary(op, _, _) if a.class[k] == Class::Mask => match op {
            BinaryOp::And | BinaryOp::Mul => em.b.ins().band(ops[0], ops[1]),
            BinaryOp::Or => em.b.ins().bor(ops[0], ops[1]),
            _ => em.b.ins().bxor(ops[0], ops[1]),
        },
        InstOp::Binary(op, _, _) => binary(em, *op, ops[0], ops[1]),
        InstOp::Where(..) => em.sel(ops[0], ops[1], ops[2]),
        InstOp::Cast { from: Kind::F32, to: DType::I64, .. } => {
            let ty = em.ity();
            em.b.ins().fcvt_to_sint_sat(ty, ops[0])
        }
        InstOp::Cast { from: Kind::I64, to: DType::F32, .. } if a.class[k] == Class::Float && is_int(a, k) => {
            let ty = em.fty();
            em.b.ins().fcvt_from_sint(ty, ops[0])
        }
        InstOp::Cast { from: Kind::I64, to: DType::F32, .. } => em.one_if(ops[0]),
        InstOp::Cast { from: Kind::F32, to: DType::Bool, .. } => em.truthy(ops[0]),
        InstOp::Cast { from: Kind::F32, to: DType::BF16, .. } => em.round_bf16(ops[0]),
        // A mask (all ones or zero) as the integer 1 or 0.
        InstOp::Cast { from: Kind::I64, to: DType::I64, .. } if a.class[k] == Class::Int => em.mask_bits(ops[0]),
        InstOp::Cast { .. } => ops[0],
        _ => return Err("unsupported instruction".into()),
    })
}

/// Whether instruction `k`'s operand is an integer lane value (not a mask).
fn is_int(a: &Analysis, k: usize) -> bool {
    matches!(a.operands[k].first(), Some(Def::Inst(i)) if a.class[*i] == Class::Int)
}
