//! The loops of one compiled stage: per phase, the 16-, 4- and 1-lane
//! loops over the tile, each group's instructions, the spills and calls
//! between phases, and the last phase's stores or fold (see
//! [`emit_phase`]). `lower.rs` builds the [`Frame`] they read.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, FuncRef, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;
use rdyn_ir::loops::ReduceOp;

use super::analysis::{int_cc, Analysis, Class, Def};
use super::emit::{best, combine, tracks_nan, Em, Pool};
use super::gather::{self, RowSource, RowValue};
use super::inst::inst_value;
use super::long::{arith, compare_long, from_float, load_long, long_operand, store_long, to_float, Long, Side};
use super::memory::store_value;
use super::phases::Phases;
use super::stage::Output;
use crate::plan::{InstOp, Reg, StagePlan};
use crate::tile::FOLD_LANES;

/// Values of definitions at one width.
#[derive(Clone)]
pub(super) struct Env {
    pub(super) consts: Vec<Option<Value>>,
    pub(super) insts: Vec<Option<Value>>,
    /// [`Class::Long`] definitions, whole (`insts` has their first half).
    pub(super) longs: Vec<Option<Long>>,
}

impl Env {
    pub(super) fn get(&self, d: Def) -> Option<Value> {
        match d {
            Def::Const(r) => self.consts[r as usize],
            Def::Inst(i) => self.insts[i],
        }
    }
}

/// What every part of one stage's function reads once the entry block is
/// built: the stage, its analysis and phases, and the values that hold
/// addresses, tiles and the invariants.
pub(super) struct Frame<'p> {
    pub(super) stage: &'p StagePlan,
    pub(super) a: &'p Analysis,
    pub(super) pool: &'p Pool,
    pub(super) phases: Phases,
    pub(super) output: Output,
    pub(super) out: Value,
    pub(super) len: Value,
    /// Each spilled value's or call result's tile (or its memory, in place).
    pub(super) spill_slot: Vec<Option<Value>>,
    pub(super) in_place: Vec<bool>,
    pub(super) load_addr: Vec<Option<Value>>,
    pub(super) scalar: Env,
    pub(super) wide: Env,
    /// The last call writes the output itself (no loops in the last phase).
    pub(super) direct_out: bool,
    /// A fold's op and its 32-lane stack slot.
    pub(super) fold: Option<(ReduceOp, Value)>,
    pub(super) unary_tile: Option<FuncRef>,
}

/// One phase, for every lane:
/// for (i = 0; i + 16 <= len; i += 16) { four 4-lane groups, interleaved }
/// for (; i + 4 <= len; i += 4) { one group }
/// for (; i < len; i += 1) { one lane }
/// Interleaving gives the core independent chains to overlap. A phase
/// ends at a call: the transcendental runs over the whole tile (the
/// interpreter's own vector routine), then the next phase reads its
/// result. The last phase produces the stage's output.
/// Fold: the first loop takes 32 lanes (eight groups) and carries eight
/// accumulator vectors (tile lane l goes to accumulator lane l % 32),
/// so eight independent chains hide the combine's latency; max and min
/// carry one more, the lanes that saw a NaN (below). The 4- and
/// 1-lane loops combine into their spill slot, which is finally
/// combined into `out[0..32]`.
pub(super) fn emit_phase(b: &mut FunctionBuilder, fr: &Frame, phase: usize) -> Result<(), String> {
    let is_last = phase == fr.phases.calls.len();
    let writes: Vec<usize> = fr.phases.writes[phase].iter().copied().filter(|&d| !fr.in_place[d]).collect();
    // A phase that spills nothing and stores nothing has no loops.
    let idle = if is_last { fr.direct_out } else { writes.is_empty() };
    let mut carried = match fr.fold {
        Some((op, _)) if is_last => {
            let mut em = Em { b: &mut *b, wide: true, pool: fr.pool };
            let mut accs = vec![em.fc(identity(op)); FOLD_GROUPS];
            if tracks_nan(op) {
                accs.push(em.ic(0));
            }
            accs
        }
        _ => Vec::new(),
    };
    let mut i = b.ins().iconst(types::I64, 0);
    let first = if carried.is_empty() { 4 } else { FOLD_GROUPS as i64 };
    let widths: &[(i64, bool)] = if idle { &[] } else { &[(first, true), (1, true), (1, false)] };
    for &(groups, wide_loop) in widths {
        let lanes = Lanes { phase, is_last, groups, wide_loop, writes: &writes };
        let params = lane_loop(b, fr, &lanes, i, &carried)?;
        i = params[0];
        if let Some((op, slot)) = fr.fold.filter(|_| !carried.is_empty()) {
            let mut em = Em { b: &mut *b, wide: true, pool: fr.pool };
            let nan = tracks_nan(op).then(|| em.fc(f32::NAN));
            for g in 0..FOLD_GROUPS {
                let mut v = params[1 + g];
                if let Some(nan) = nan {
                    // A lane that saw a NaN: every partial it feeds.
                    v = em.sel(params[1 + FOLD_GROUPS], nan, v);
                }
                em.b.ins().store(MemFlagsData::trusted(), v, slot, 16 * g as i32);
            }
            carried.clear();
        }
    }
    // The call that ends this phase: the whole tile at once.
    if let Some(&c) = fr.phases.calls.get(phase) {
        let src = match fr.a.operands[c].first() {
            Some(Def::Inst(d)) => fr.spill_slot[*d].ok_or("call operand not spilled")?,
            _ => return Err("call operand is not a varying value".into()),
        };
        let dst = fr.spill_slot[c].ok_or("call result has no slot")?;
        call_tile(b, fr.unary_tile, fr.a.call[c].ok_or("not a call")?, src, dst, fr.len)?;
    }
    Ok(())
}

/// One loop of a phase: `groups` groups of 4 lanes (`wide_loop`) or one
/// lane per iteration.
struct Lanes<'w> {
    phase: usize,
    is_last: bool,
    groups: i64,
    wide_loop: bool,
    writes: &'w [usize],
}

/// A rotated loop (the body is its own header, entered after one guard):
/// Cranelift hoists loop-invariant values only out of such loops. Returns
/// the parameters of the block after it: the lane reached, then the
/// carried accumulators.
fn lane_loop(
    b: &mut FunctionBuilder,
    fr: &Frame,
    l: &Lanes,
    i: Value,
    carried: &[Value],
) -> Result<Vec<Value>, String> {
    let (a, stage) = (fr.a, fr.stage);
    let step = if l.wide_loop { 4 * l.groups } else { 1 };
    let body = b.create_block();
    let after = b.create_block();
    for block in [body, after] {
        b.append_block_param(block, types::I64);
        for v in carried {
            let ty = b.func.dfg.value_type(*v);
            b.append_block_param(block, ty);
        }
    }
    let first = b.ins().iadd_imm_s(i, step);
    let fits = b.ins().icmp(IntCC::SignedLessThanOrEqual, first, fr.len);
    let args: Vec<_> = std::iter::once(i).chain(carried.iter().copied()).map(Into::into).collect();
    b.ins().brif(fits, body, &args, after, &args);
    b.switch_to_block(body);
    let params = b.block_params(body).to_vec();
    let (at, accs) = (params[0], &params[1..]);
    let base = if l.wide_loop { &fr.wide } else { &fr.scalar };
    let mut envs = vec![base.clone(); l.groups as usize];
    // Addresses at lane `at`, once per iteration; groups are immediate
    // offsets from them.
    let row: Vec<Option<Value>> = fr
        .load_addr
        .iter()
        .enumerate()
        .map(|(k, addr)| addr.map(|addr| offset_by(b, addr, at, a.step[k] * stage_size(stage, k))))
        .collect();
    for &d in &fr.phases.reads[l.phase] {
        let p = offset_by(b, fr.spill_slot[d].ok_or("no spill slot")?, at, 4);
        let em = Em { b: &mut *b, wide: l.wide_loop, pool: fr.pool };
        let ty = if a.class[d] == Class::Float { em.fty() } else { em.ity() };
        // A value read in place is in a tensor: not known aligned.
        let flags = if fr.in_place[d] { MemFlagsData::new().with_notrap() } else { MemFlagsData::trusted() };
        for (g, env) in envs.iter_mut().enumerate() {
            env.insts[d] = Some(em.b.ins().load(ty, flags, p, 16 * g as i32));
        }
    }
    emit_insts(b, fr.pool, stage, a, &fr.phases.insts[l.phase], &mut envs, l.wide_loop, &row)?;
    for &d in l.writes {
        let p = offset_by(b, fr.spill_slot[d].ok_or("no spill slot")?, at, 4);
        for (g, env) in envs.iter().enumerate() {
            let v = env.insts[d].ok_or("spilled value undefined")?;
            b.ins().store(MemFlagsData::trusted(), v, p, 16 * g as i32);
        }
    }
    let next_accs = if l.is_last { produce(b, fr, l.wide_loop, &envs, at, accs)? } else { accs.to_vec() };
    let next = b.ins().iadd_imm_s(at, step);
    let following = b.ins().iadd_imm_s(at, 2 * step);
    let more = b.ins().icmp(IntCC::SignedLessThanOrEqual, following, fr.len);
    let args: Vec<_> = std::iter::once(next).chain(next_accs).map(Into::into).collect();
    b.ins().brif(more, body, &args, after, &args);
    b.seal_block(body);
    b.switch_to_block(after);
    b.seal_block(after);
    Ok(b.block_params(after).to_vec())
}

/// The last phase's output at lane `at`: each group's value stored, or
/// combined into the fold (the carried accumulators `accs`, or the slot
/// in the 4- and 1-lane loops). Returns the next accumulators.
fn produce(
    b: &mut FunctionBuilder,
    fr: &Frame,
    wide_loop: bool,
    envs: &[Env],
    at: Value,
    accs: &[Value],
) -> Result<Vec<Value>, String> {
    let (a, output) = (fr.a, fr.output);
    let mut next_accs = accs.to_vec();
    let (out_step, out_size) = (output.step(), output.elem_bytes());
    let out_row = offset_by(b, fr.out, at, out_size * out_step);
    for (g, env) in envs.iter().enumerate() {
        let v = env.get(a.value).ok_or("stage value undefined")?;
        let mut em = Em { b: &mut *b, wide: wide_loop, pool: fr.pool };
        match fr.fold {
            // One maxps/minps per step (NaN-blind, keeps the
            // accumulator on ties); NaNs are tracked below.
            Some((op, _)) if tracks_nan(op) && !accs.is_empty() => next_accs[g] = best(&mut em, op, accs[g], v),
            Some((op, _)) if !accs.is_empty() => next_accs[g] = combine(&mut em, op, accs[g], v),
            Some((op, slot)) => {
                let k = em.b.ins().band_imm_u(at, FOLD_LANES as i64 - 1);
                let off = em.b.ins().imul_imm_s(k, 4);
                let p = em.b.ins().iadd(slot, off);
                let ty = em.fty();
                let old = em.b.ins().load(ty, MemFlagsData::trusted(), p, 0);
                let r = combine(&mut em, op, old, v);
                em.b.ins().store(MemFlagsData::trusted(), r, p, 0);
            }
            _ => {
                let (off, step) = (4 * out_size * g as i64 * out_step, out_step);
                match a.value {
                    Def::Inst(d) if a.class[d] == Class::Long => {
                        let long = env.longs[d].ok_or("int64 value undefined")?;
                        store_long(&mut em, out_row, off, step, long)
                    }
                    // A mask's lanes as the integers 0 or 1.
                    Def::Inst(d) if a.class[d] == Class::Mask && output == Output::ValueLong => {
                        let v = em.mask_bits(v);
                        store_value(&mut em, output, out_row, off, step, v)
                    }
                    _ => store_value(&mut em, output, out_row, off, step, v),
                }
            }
        }
    }
    if fr.fold.is_some_and(|(op, _)| tracks_nan(op) && !accs.is_empty()) {
        // Apart from the accumulators' chains: which lanes saw a
        // NaN, one unordered compare per two groups.
        let vs: Vec<Value> =
            envs.iter().map(|env| env.get(a.value).ok_or("stage value undefined")).collect::<Result<_, _>>()?;
        let seen = nan_lanes(b, &vs);
        next_accs[FOLD_GROUPS] = b.ins().bor(accs[FOLD_GROUPS], seen);
    }
    Ok(next_accs)
}

/// The lanes (a mask) in which any of `values` is NaN: one unordered
/// compare per two vectors (a last odd one with itself), or-ed pairwise.
pub(super) fn nan_lanes(b: &mut FunctionBuilder, values: &[Value]) -> Value {
    let mut masks: Vec<Value> =
        values.chunks(2).map(|p| b.ins().fcmp(FloatCC::Unordered, p[0], p[p.len() - 1])).collect();
    while masks.len() > 1 {
        masks = masks.chunks(2).map(|p| if p.len() == 2 { b.ins().bor(p[0], p[1]) } else { p[0] }).collect();
    }
    masks[0]
}

/// `rdyn_unary_tile(code, src, dst, lanes)`: a transcendental over `lanes`
/// lanes of a stack tile.
pub(super) fn call_tile(
    b: &mut FunctionBuilder,
    unary_tile: Option<FuncRef>,
    code: u32,
    src: Value,
    dst: Value,
    lanes: Value,
) -> Result<(), String> {
    let f = unary_tile.ok_or("no tile routine declared")?;
    let code = b.ins().iconst(types::I32, i64::from(code));
    b.ins().call(f, &[code, src, dst, lanes]);
    Ok(())
}

/// `addr + at * bytes` (just `addr` when the step is zero).
pub(super) fn offset_by(b: &mut FunctionBuilder, addr: Value, at: Value, bytes: i64) -> Value {
    if bytes == 0 {
        return addr;
    }
    let off = b.ins().imul_imm_s(at, bytes);
    b.ins().iadd(addr, off)
}

/// Element size of load `k` (1 for anything else).
fn stage_size(stage: &StagePlan, k: usize) -> i64 {
    match &stage.insts[k].op {
        InstOp::Load { dtype, .. } => dtype.itemsize() as i64,
        _ => 1,
    }
}

pub(super) fn identity(op: ReduceOp) -> f32 {
    <f32 as crate::ops::Reducible>::identity(op)
}

/// Emit instructions `which` for every group (one environment and lane
/// offset per group), instruction by instruction across the groups.
#[allow(clippy::too_many_arguments)]
pub(super) fn emit_insts(
    b: &mut FunctionBuilder,
    pool: &Pool,
    stage: &StagePlan,
    a: &Analysis,
    which: &[usize],
    envs: &mut [Env],
    wide: bool,
    row: &[Option<Value>],
) -> Result<(), String> {
    for &k in which {
        if a.class[k] == Class::Row {
            // Read and checked by the gathered loads themselves.
            continue;
        }
        if !a.gathers[k].is_empty() {
            let mut em = Em { b, wide, pool };
            let addr = row[k].ok_or("load without address")?;
            for (g, env) in envs.iter_mut().enumerate() {
                // The masks of the load and of its row loads, if any.
                let mask_of = |i: usize| match stage.insts[i].op {
                    InstOp::Load { mask: Some(_), .. } => a.operands[i].first().and_then(|d| env.get(*d)),
                    _ => None,
                };
                let masks: Vec<Option<Value>> = std::iter::once(Some(k))
                    .chain(a.gathers[k].iter().map(|p| p.load()))
                    .map(|i| i.and_then(mask_of))
                    .collect();
                // Computed row ids, as this group's lanes.
                let values: Vec<Option<RowValue>> = a.gathers[k]
                    .iter()
                    .map(|p| match p.row {
                        RowSource::Value(d) if a.class[d] == Class::Long => env.longs[d].map(RowValue::Long),
                        RowSource::Value(d) => env.insts[d].map(RowValue::Int),
                        RowSource::Load(_) => None,
                    })
                    .collect();
                let at = (addr, &masks[..]);
                env.insts[k] = Some(gather::load(&mut em, stage, a, k, at, row, &values, g as i64)?);
            }
            continue;
        }
        if emit_long(b, pool, stage, a, k, envs, wide, row[k])? {
            continue;
        }
        let args: Vec<Vec<Value>> = envs
            .iter()
            .map(|env| a.operands[k].iter().map(|d| env.get(*d)).collect::<Option<Vec<_>>>())
            .collect::<Option<Vec<_>>>()
            .ok_or("operand undefined")?;
        let mut em = Em { b, wide, pool };
        let results: Vec<Value> = args
            .iter()
            .enumerate()
            .map(|(g, ops)| inst_value(&mut em, stage, a, k, ops, row[k], g as i64))
            .collect::<Result<_, _>>()?;
        for (env, v) in envs.iter_mut().zip(results) {
            env.insts[k] = Some(v);
        }
    }
    Ok(())
}

/// Emit instruction `k` for every group if it is an int64 load or a
/// comparison with an int64 side ([`super::long`]); whether it was.
#[allow(clippy::too_many_arguments)]
fn emit_long(
    b: &mut FunctionBuilder,
    pool: &Pool,
    stage: &StagePlan,
    a: &Analysis,
    k: usize,
    envs: &mut [Env],
    wide: bool,
    addr: Option<Value>,
) -> Result<bool, String> {
    let mut em = Em { b, wide, pool };
    if a.class[k] == Class::Long && matches!(stage.insts[k].op, InstOp::Load { .. }) {
        let addr = addr.ok_or("load without address")?;
        for (g, env) in envs.iter_mut().enumerate() {
            let long = load_long(&mut em, addr, g as i64, a.step[k]);
            env.insts[k] = Some(long.lo);
            env.longs[k] = Some(long);
        }
        return Ok(true);
    }
    if a.class[k] == Class::Long && matches!(stage.insts[k].op, InstOp::Cast { .. }) {
        for env in envs.iter_mut() {
            let x = a.operands[k].first().and_then(|d| env.get(*d)).ok_or("operand undefined")?;
            let long = from_float(&mut em, x);
            env.insts[k] = Some(long.lo);
            env.longs[k] = Some(long);
        }
        return Ok(true);
    }
    // An int64 converted to float32.
    if let (Class::Float, InstOp::Cast { .. }, Some(Def::Inst(i))) =
        (a.class[k], &stage.insts[k].op, a.operands[k].first())
    {
        if a.class[*i] == Class::Long {
            for env in envs.iter_mut() {
                let x = env.longs[*i].ok_or("int64 operand undefined")?;
                env.insts[k] = Some(to_float(&mut em, x));
            }
            return Ok(true);
        }
    }
    if a.class[k] == Class::Long {
        // int64 arithmetic (`long::arith`).
        for env in envs.iter_mut() {
            let mut sides = Vec::new();
            for (reg, d) in super::analysis::operand_regs(&stage.insts[k].op).into_iter().zip(&a.operands[k]) {
                let value = env.get(*d).ok_or("operand undefined")?;
                let long = match d {
                    Def::Inst(i) => env.longs[*i],
                    Def::Const(_) => None,
                };
                let is_mask = matches!(d, Def::Inst(i) if a.class[*i] == Class::Mask);
                sides.push(if is_mask {
                    Side::Mask(value)
                } else {
                    Side::Long(long_operand(&mut em, stage, a, reg, *d, value, long)?)
                });
            }
            let long = arith(&mut em, &stage.insts[k].op, &sides)?;
            env.insts[k] = Some(long.lo);
            env.longs[k] = Some(long);
        }
        return Ok(true);
    }
    let InstOp::Binary(op, x, y) = &stage.insts[k].op else { return Ok(false) };
    let long_side = |d: &Def| matches!(d, Def::Inst(i) if a.class[*i] == Class::Long);
    let Some(cc) = int_cc(*op).filter(|_| a.operands[k].iter().any(long_side)) else { return Ok(false) };
    for env in envs.iter_mut() {
        let mut side = |reg: Reg, d: Def| -> Result<Long, String> {
            let value = env.get(d).ok_or("operand undefined")?;
            let long = match d {
                Def::Inst(i) => env.longs[i],
                Def::Const(_) => None,
            };
            long_operand(&mut em, stage, a, reg, d, value, long)
        };
        let (xl, yl) = (side(*x, a.operands[k][0])?, side(*y, a.operands[k][1])?);
        env.insts[k] = Some(compare_long(&mut em, cc, xl, yl)?);
    }
    Ok(true)
}

/// Accumulator vectors of a fold's first loop (4 lanes each).
pub(super) const FOLD_GROUPS: usize = FOLD_LANES / 4;
