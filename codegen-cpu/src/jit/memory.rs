//! Loads and stores of the JIT's lanes: float32 values, bfloat16 values
//! (widened to float32 exactly: the upper half of its bits) and boolean
//! masks (bytes in memory, all-ones or zero lanes in registers).
//!
//! A bool stage stores its mask as bytes, narrowed four lanes at a time into one
//! 32-bit store when contiguous. A contiguous bool load reads four bytes at once
//! and widens them (`pmovzxbw`, `pmovzxwd`, `pcmpgtd`), where a byte per lane had
//! taken five instructions. A masked float32 load (padding, `cat`) reads lane by
//! lane, masked-off lanes from the constant table's 0.0, so no buffer memory
//! outside the mask is touched.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Value};
use rdyn_ir::DType;

use super::emit::combine;
use super::emit::Em;
use super::stage::Output;

/// Load group `group`'s lanes; `p` is the load at the iteration's first lane.
pub(super) fn load(em: &mut Em, p: Value, group: i64, step: i64, dtype: DType) -> Value {
    let size = dtype.itemsize() as i64;
    let base = (4 * group * step * size) as i32;
    let flags = MemFlagsData::trusted();
    let one = |em: &mut Em, at: i32| -> Value {
        if dtype == DType::Bool {
            let byte = em.b.ins().uload8(types::I32, flags, p, at);
            let c = em.b.ins().icmp_imm_s(IntCC::NotEqual, byte, 0);
            em.b.ins().bmask(types::I32, c)
        } else if dtype == DType::BF16 {
            // A bfloat16 is the upper half of the float32 it widens to.
            let half = em.b.ins().uload16(types::I32, flags, p, at);
            let bits = em.b.ins().ishl_imm_u(half, 16);
            em.b.ins().bitcast(types::F32, MemFlagsData::new(), bits)
        } else {
            em.b.ins().load(types::F32, flags, p, at)
        }
    };
    if !em.wide || step == 0 {
        let v = one(em, base);
        return em.widen(v);
    }
    if dtype == DType::F32 && step == 1 {
        // Tiles start anywhere in a row: an unaligned 16-byte load.
        return em.b.ins().load(types::F32X4, MemFlagsData::new().with_notrap(), p, base);
    }
    if dtype == DType::F32 && step == 2 {
        // Every other element (a deinterleave, `x[..., ::2]`): elements 0-3
        // and 3-6 in two unaligned loads and one shuffle of lanes 0, 2 of
        // the first and 1, 3 of the second, where four scalar loads and
        // three inserts were. Nothing past the last lane's element is read.
        let flags = MemFlagsData::new().with_notrap();
        let a = em.b.ins().load(types::F32X4, flags, p, base);
        let b = em.b.ins().load(types::F32X4, flags, p, base + 12);
        return em.pick_lanes(a, b, [0, 2, 5, 7]);
    }
    if dtype == DType::BF16 && step == 1 {
        // Four bfloat16s in one 8-byte load, zero-extended to 32-bit lanes
        // and shifted into the upper halves.
        let word = em.b.ins().load(types::I64, MemFlagsData::new().with_notrap(), p, base);
        let v = em.b.ins().scalar_to_vector(types::I64X2, word);
        let little = MemFlagsData::new().with_endianness(Endianness::Little);
        let halves = em.b.ins().bitcast(types::I16X8, little, v);
        let lanes = em.b.ins().uwiden_low(halves);
        return em.widen_bf16(lanes);
    }
    if dtype == DType::Bool && step == 1 {
        // Four bytes in one load, zero-extended to 32-bit lanes (pmovzx),
        // then `> 0` (one pcmpgtd; the lanes are 0..=255): a byte at a time
        // took five instructions per lane (a causal mask's softmax spent a
        // third of its time there).
        let word = em.b.ins().load(types::I32, MemFlagsData::new().with_notrap(), p, base);
        let v = em.b.ins().scalar_to_vector(types::I32X4, word);
        let little = MemFlagsData::new().with_endianness(Endianness::Little);
        let bytes = em.b.ins().bitcast(types::I8X16, little, v);
        let half = em.b.ins().uwiden_low(bytes);
        let lanes = em.b.ins().uwiden_low(half);
        let zero = em.b.ins().iconst(types::I32, 0);
        let zero = em.b.ins().splat(types::I32X4, zero);
        return em.b.ins().icmp(IntCC::SignedGreaterThan, lanes, zero);
    }
    let ty = if dtype == DType::Bool { types::I32X4 } else { types::F32X4 };
    let first = one(em, base);
    let mut v = em.b.ins().scalar_to_vector(ty, first);
    for l in 1..4u8 {
        let x = one(em, base + (step * size * i64::from(l)) as i32);
        v = em.b.ins().insertlane(v, x, l);
    }
    v
}

/// A float32 load whose mask is the same on every lane of the group: the
/// group's lanes from `p` when it is set, else zeros from the constant
/// table's zero block (as the interpreter's masked-off lanes); no memory of
/// the buffer is touched when it is off.
pub(super) fn uniform_masked_load(em: &mut Em, p: Value, group: i64, step: i64, mask: Value) -> Value {
    let m = if em.wide { em.b.ins().extractlane(mask, 0) } else { mask };
    let from = em.b.ins().select(m, p, em.pool.zero_block);
    load(em, from, group, step, DType::F32)
}

/// A float32 load of the lanes whose mask is set; the others read the
/// constant table's 0.0, as the interpreter gives them, and touch no
/// memory of the buffer. One scalar load per lane.
pub(super) fn masked_load(em: &mut Em, p: Value, group: i64, step: i64, mask: Value) -> Value {
    let bytes = 4 * step;
    let lane = |em: &mut Em, l: u8| {
        let m = if em.wide { em.b.ins().extractlane(mask, l) } else { mask };
        let at = em.b.ins().iadd_imm_s(p, 4 * group * bytes + bytes * i64::from(l));
        let from = em.b.ins().select(m, at, em.pool.zero_addr);
        em.b.ins().load(types::F32, MemFlagsData::trusted(), from, 0)
    };
    let first = lane(em, 0);
    if !em.wide {
        return first;
    }
    let mut v = em.b.ins().scalar_to_vector(types::F32X4, first);
    for l in 1..4u8 {
        let x = lane(em, l);
        v = em.b.ins().insertlane(v, x, l);
    }
    v
}

/// Write one group's value: to the value register or the stage's output
/// (`out_step` apart), or combined into the lane accumulator.
/// `p` is the output at the iteration's first lane, `off` the group's
/// byte offset from it.
pub(super) fn store_value(em: &mut Em, output: Output, p: Value, off: i64, out_step: i64, mut v: Value) {
    if let Output::StoreMask(_) = output {
        store_mask(em, p, off, out_step, v);
        return;
    }
    if let Output::StoreLong(_) | Output::ValueLong = output {
        let long = super::long::sign_extend(em, v);
        super::long::store_long(em, p, off, out_step, long);
        return;
    }
    if let Output::Accumulate(op) = output {
        let ty = em.fty();
        let acc = em.b.ins().load(ty, MemFlagsData::new().with_notrap(), p, off as i32);
        v = combine(em, op, acc, v);
    }
    if !em.wide || out_step == 1 {
        em.b.ins().store(MemFlagsData::new().with_notrap(), v, p, off as i32);
    } else {
        for l in 0..4u8 {
            let x = em.b.ins().extractlane(v, l);
            em.b.ins().store(MemFlagsData::trusted(), x, p, (off + 4 * out_step * i64::from(l)) as i32);
        }
    }
}

/// Store mask lanes (all ones or zero) as bool bytes (1 or 0), `step`
/// bytes apart: four lanes narrowed to four bytes in one 32-bit store when
/// they are adjacent.
fn store_mask(em: &mut Em, p: Value, off: i64, step: i64, mask: Value) {
    let bytes = em.mask_bits(mask);
    let flags = MemFlagsData::new().with_notrap();
    if !em.wide {
        em.b.ins().istore8(flags, bytes, p, off as i32);
    } else if step == 1 {
        let half = em.b.ins().snarrow(bytes, bytes);
        let quarter = em.b.ins().unarrow(half, half);
        let little = MemFlagsData::new().with_endianness(Endianness::Little);
        let words = em.b.ins().bitcast(types::I32X4, little, quarter);
        let word = em.b.ins().extractlane(words, 0);
        em.b.ins().store(flags, word, p, off as i32);
    } else {
        for l in 0..4u8 {
            let x = em.b.ins().extractlane(bytes, l);
            em.b.ins().istore8(flags, x, p, (off + step * i64::from(l)) as i32);
        }
    }
}
