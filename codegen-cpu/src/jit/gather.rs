//! Gathers whose row differs from lane to lane: a float32 (or bfloat16)
//! load with an indirect part read, per lane, from an int64 (or int32)
//! buffer and bounds-checked (`Bounded`), as a relative-position bias
//! table indexed by a precomputed index tensor (Swin, T5), `index_select`
//! over a varying index, or `gather` along the last dim.
//!
//! The row loads and their checks ([`Class::Row`]) emit nothing of their
//! own: each lane of the gathered load reads its row ids, checks them as
//! the interpreter's `bounded` does (a negative one counted from the end
//! once where it wraps; out of range gives row 0, a safe element, and sets
//! the function's error flag, which the executor turns into the kernel's
//! error), and loads its element with one scalar load. Four lanes are four
//! such loads put into one vector: x86 has gathers, but Cranelift does not
//! expose them, and an element's address needs its own bounds check anyway.
//! An interpreted stage spent ~5 ns per element on each such load (one
//! dispatch per op over tiles through L1); a compiled lane costs about ten
//! instructions.
//!
//! A masked gather (a `cat` of an embedding lookup beside other values)
//! reads its masked-off lanes, and their row ids, from the constant table's
//! zero block: row 0, element 0.0, as the interpreter gives them.
//!
//! [`Class::Row`]: super::analysis::Class::Row

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use rdyn_ir::loops::Negatives;
use rdyn_ir::DType;

use super::analysis::Analysis;
use super::emit::Em;
use super::long::Long;
use crate::plan::{InstOp, Reg, StagePlan};

/// One lane-varying indirect part of a gathered load: `stride ·
/// bounded(row)`.
#[derive(Clone, Debug)]
pub(super) struct GatherPart {
    /// The register the load's indirect part names (the bounds check's).
    pub reg: Reg,
    pub stride: i64,
    pub row: RowSource,
    pub size: i64,
    pub negatives: Negatives,
}

/// Where a gather part's row id comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RowSource {
    /// Read per lane by instruction `k`, an integer load of
    /// [`super::analysis::Class::Row`] (an index tensor).
    Load(usize),
    /// Computed by instruction `k`, a compiled integer value
    /// ([`super::analysis::Class::Int`] or `Long`: T5's buckets, a
    /// `clamp` of a loaded id), whose lanes the gather reads.
    Value(usize),
}

impl GatherPart {
    /// The row load, if the row id is read from memory.
    pub fn load(&self) -> Option<usize> {
        match self.row {
            RowSource::Load(k) => Some(k),
            RowSource::Value(_) => None,
        }
    }
}

/// A computed row id's lanes at the builder's width: 32-bit integer lanes,
/// or int64 ones.
#[derive(Clone, Copy)]
pub(super) enum RowValue {
    Int(Value),
    Long(Long),
}

/// The bounds check of instruction `k`, if it checks a row load of
/// `stage`: (the load's instruction, the size, how negatives count).
pub(super) fn bounded_row(stage: &StagePlan, k: usize, load: usize) -> Option<(i64, Negatives)> {
    match (&stage.insts[k].op, &stage.insts[load].op) {
        (InstOp::Bounded { size, negatives, .. }, InstOp::Load { .. }) => Some((*size, *negatives)),
        _ => None,
    }
}

/// Whether a load of `dtype` may be a row id ([`super::analysis::Class::Row`]).
pub(super) fn row_dtype(dtype: DType) -> bool {
    matches!(dtype, DType::I64 | DType::I32)
}

/// Group `group`'s lanes of gathered load `k` (float32 or bfloat16):
/// `addr` is the load's affine address at the iteration's first lane with
/// the masks of the load and of each of its parts' row loads (`None`:
/// unmasked), `rows[j]` each row load's address, `computed[p]` part `p`'s
/// computed row id ([`RowSource::Value`]). Lanes out of range OR one
/// into the function's error flag ([`super::emit::Pool::error`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn load(
    em: &mut Em,
    stage: &StagePlan,
    a: &Analysis,
    k: usize,
    (addr, masks): (Value, &[Option<Value>]),
    rows: &[Option<Value>],
    computed: &[Option<RowValue>],
    group: i64,
) -> Result<Value, String> {
    let InstOp::Load { dtype, .. } = &stage.insts[k].op else { return Err("gather of a non-load".into()) };
    let size = dtype.itemsize() as i64;
    let error = em.pool.error.ok_or("gather without an error flag")?;
    let lanes: i64 = if em.wide { 4 } else { 1 };
    let mut bad = em.b.ins().iconst(types::I32, 0);
    let mut values = Vec::with_capacity(lanes as usize);
    for l in 0..lanes {
        let lane = 4 * group + l;
        let mut offset = em.b.ins().iconst(types::I64, lane * a.step[k] * size);
        for (j, part) in a.gathers[k].iter().enumerate() {
            let row = match part.row {
                RowSource::Load(load) => {
                    let p = rows[load].ok_or("row load without an address")?;
                    let mask = lane_mask(em, masks.get(j + 1).copied().flatten(), l);
                    read_row(em, stage, a, load, (p, mask), lane)?
                }
                RowSource::Value(_) => {
                    let v = computed.get(j).copied().flatten().ok_or("computed row id undefined")?;
                    value_lane(em, v, l)
                }
            };
            let (row, out) = check_row(em, part, row);
            bad = em.b.ins().bor(bad, out);
            let bytes = em.b.ins().imul_imm_s(row, part.stride * size);
            offset = em.b.ins().iadd(offset, bytes);
        }
        let mut at = em.b.ins().iadd(addr, offset);
        if let Some(m) = lane_mask(em, masks.first().copied().flatten(), l) {
            at = em.b.ins().select(m, at, em.pool.zero_block);
        }
        values.push(element(em, at, *dtype));
    }
    let old = em.b.ins().load(types::I32, MemFlagsData::trusted(), error, 0);
    let now = em.b.ins().bor(old, bad);
    em.b.ins().store(MemFlagsData::trusted(), now, error, 0);
    if !em.wide {
        return Ok(values[0]);
    }
    let mut v = em.b.ins().scalar_to_vector(types::F32X4, values[0]);
    for (l, x) in values.iter().enumerate().skip(1) {
        v = em.b.ins().insertlane(v, *x, l as u8);
    }
    Ok(v)
}

/// Lane `l` (of four, or the only one) of a mask, if any.
fn lane_mask(em: &mut Em, mask: Option<Value>, l: i64) -> Option<Value> {
    mask.map(|m| if em.wide { em.b.ins().extractlane(m, l as u8) } else { m })
}

/// Lane `lane`'s row id read by row load `load` (at `p` for the
/// iteration's first lane, under this lane's mask if any: masked off, it
/// reads the zero block), as an `I64`.
fn read_row(
    em: &mut Em,
    stage: &StagePlan,
    a: &Analysis,
    load: usize,
    (p, mask): (Value, Option<Value>),
    lane: i64,
) -> Result<Value, String> {
    let InstOp::Load { dtype, .. } = &stage.insts[load].op else { return Err("row id is not a load".into()) };
    let mut at = em.b.ins().iadd_imm_s(p, lane * a.step[load] * dtype.itemsize() as i64);
    if let Some(m) = mask {
        at = em.b.ins().select(m, at, em.pool.zero_block);
    }
    let flags = MemFlagsData::trusted();
    Ok(match dtype {
        DType::I32 => em.b.ins().sload32(flags, at, 0),
        _ => em.b.ins().load(types::I64, flags, at, 0),
    })
}

/// Lane `l` (of four, or the only one) of a computed row id, as an `I64`.
fn value_lane(em: &mut Em, v: RowValue, l: i64) -> Value {
    match v {
        RowValue::Int(x) => {
            let x = if em.wide { em.b.ins().extractlane(x, l as u8) } else { x };
            em.b.ins().sextend(types::I64, x)
        }
        RowValue::Long(Long { lo, hi: None }) => lo,
        RowValue::Long(Long { lo, hi: Some(hi) }) => {
            let half = if l < 2 { lo } else { hi };
            em.b.ins().extractlane(half, (l % 2) as u8)
        }
    }
}

/// A row id checked as the interpreter's `bounded` does: (the row, or 0
/// out of range; 1 if out of range else 0, as an `I32`).
fn check_row(em: &mut Em, part: &GatherPart, mut row: Value) -> (Value, Value) {
    if part.negatives == Negatives::Wrap {
        let negative = em.b.ins().icmp_imm_s(IntCC::SignedLessThan, row, 0);
        let wrapped = em.b.ins().iadd_imm_s(row, part.size);
        row = em.b.ins().select(negative, wrapped, row);
    }
    // Unsigned: a negative row is out of range too.
    let inside = em.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, row, part.size);
    let zero = em.b.ins().iconst(types::I64, 0);
    let row = em.b.ins().select(inside, row, zero);
    let inside = em.b.ins().uextend(types::I32, inside);
    (row, em.b.ins().bxor_imm_u(inside, 1))
}

/// One element at `at`: a float32, or a bfloat16 widened exactly (the
/// upper half of the float32 it becomes).
fn element(em: &mut Em, at: Value, dtype: DType) -> Value {
    let flags = MemFlagsData::trusted();
    if dtype == DType::BF16 {
        let half = em.b.ins().uload16(types::I32, flags, at, 0);
        let bits = em.b.ins().ishl_imm_u(half, 16);
        em.b.ins().bitcast(types::F32, MemFlagsData::new(), bits)
    } else {
        em.b.ins().load(types::F32, flags, at, 0)
    }
}
