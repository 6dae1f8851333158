//! One stage's register program → one Cranelift function, over the
//! definitions [`super::analysis`] resolved. Definitions that do not change
//! along the tile are emitted once before the loops.
//!
//! Maximum and minimum, elementwise or accumulated, are written so that
//! Cranelift's x86 rules pick one `maxps`/`minps` (the strictly better operand,
//! else the second) and a blend for a NaN operand: three instructions per four
//! lanes where the spelled-out comparisons took seven (ReLU) or eleven (a max
//! reduction's combine). An accumulated max or min carries, beside that chain, a
//! mask of the lanes that saw a NaN (one unordered compare per two groups), put
//! back after the loop; the final fold of the 32 partials is the same tree of one
//! `maxps` per step and a single NaN check.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Linkage, Module};
use rdyn_ir::loops::ReduceOp;
use rdyn_ir::DType;

use super::analysis::{int_cc, Analysis, Class, Def, Supported};
use super::emit::{best, combine, tracks_nan, Em, Pool, ZERO_BLOCK};
use super::gather::{self, RowSource, RowValue};
use super::inst::inst_value;
use super::long::{
    arith, compare_long, from_float, load_long, long_operand, splat_long, store_long, to_float, Long, Side,
};
use super::memory::store_value;
use super::phases::Phases;
use super::stage::Output;
use crate::plan::{InstOp, Reg, StagePlan};
use crate::tile::{FOLD_LANES, TILE};

/// Values of definitions at one width.
#[derive(Clone)]
struct Env {
    consts: Vec<Option<Value>>,
    insts: Vec<Option<Value>>,
    /// [`Class::Long`] definitions, whole (`insts` has their first half).
    longs: Vec<Option<Long>>,
}

impl Env {
    fn get(&self, d: Def) -> Option<Value> {
        match d {
            Def::Const(r) => self.consts[r as usize],
            Def::Inst(i) => self.insts[i],
        }
    }
}

/// How a compiled pointwise stage steps from one row to the next when the
/// executor hands it several rows in one call: per compiled load (in load
/// order) and for the output, the bytes between rows. A stage whose rows
/// are picked by the executor (a gather's row id, [`Class::Pre`]) reads
/// every row's load addresses from the table instead (`table`: row `r`'s
/// at `addrs[r · loads + k]`, which the executor fills row by row).
pub(super) struct RowSteps {
    pub loads: Vec<i64>,
    pub out: i64,
    pub table: bool,
}

pub(super) fn compile_stage(
    module: &mut JITModule,
    stage: &StagePlan,
    supported: &Supported,
    output: Output,
    rows: Option<&RowSteps>,
    name: &str,
) -> Result<(FuncId, Vec<u32>), String> {
    let out_step = match output {
        Output::Store(step) | Output::StoreMask(step) | Output::StoreLong(step) => step,
        Output::Value | Output::ValueLong | Output::Accumulate(_) | Output::Fold(_) | Output::FoldStore(_) => 1,
    };
    // Bytes per output element: a mask is stored as bytes.
    let out_size = match output {
        Output::StoreMask(_) => 1,
        Output::StoreLong(_) | Output::ValueLong => 8,
        _ => 4,
    };
    let a = &supported.analysis;
    let ptr = types::I64;
    let mut ctx = module.make_context();
    ctx.func.signature.params.extend([ptr, ptr, types::I64, ptr, types::I64].map(AbiParam::new));
    // Nonzero: a gathered row was out of range.
    ctx.func.signature.returns.push(AbiParam::new(types::I32));
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);

    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let params = b.block_params(entry).to_vec();
    let (addrs, mut out, len, table, row_count) = (params[0], params[1], params[2], params[3], params[4]);
    let mut constants = Pool::load(&mut b, table, constant_bits(stage, output));
    if a.gathers_rows() {
        let ss = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 4, 2));
        let error = b.ins().stack_addr(types::I64, ss, 0);
        let no = b.ins().iconst(types::I32, 0);
        b.ins().store(MemFlagsData::trusted(), no, error, 0);
        constants.error = Some(error);
    }
    let pool = &constants;
    let zero = b.ins().iconst(types::I64, 0);
    // Spilled values and call results live in tiles on the stack.
    let phases = Phases::new(stage, a);
    if phases.spilled.iter().any(|&d| a.class[d] == Class::Long) {
        return Err("an int64 value would cross a call (no tile holds it)".into());
    }
    let mut spill_slot = vec![None; stage.insts.len()];
    for &d in phases.spilled.iter().chain(&phases.calls) {
        let ss = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 4 * TILE as u32, 4));
        spill_slot[d] = Some(b.ins().stack_addr(types::I64, ss, 0));
    }
    // Rows: everything below runs once per row, row `r` at its addresses
    // plus `r` row steps (invariants of the tile may vary between rows).
    let row = rows.map(|steps| {
        let block = b.create_block();
        b.append_block_param(block, types::I64);
        b.ins().jump(block, &[zero.into()]);
        b.switch_to_block(block);
        (block, b.block_params(block)[0], steps)
    });
    // Load addresses, in load order.
    let mut load_addr = vec![None; stage.insts.len()];
    let compiled_load =
        |i: usize| matches!(stage.insts[i].op, InstOp::Load { .. } | InstOp::Index(_)) && a.class[i] != Class::Pre;
    let loads: Vec<usize> = (0..stage.insts.len()).filter(|&i| compiled_load(i)).collect();
    let table = match row {
        Some((_, r, steps)) if steps.table => Some(offset_by(&mut b, addrs, r, 8 * loads.len() as i64)),
        _ => None,
    };
    for (slot, &i) in loads.iter().enumerate() {
        let mut addr = b.ins().load(ptr, MemFlagsData::trusted(), table.unwrap_or(addrs), 8 * slot as i32);
        if let (Some((_, r, steps)), None) = (row, table) {
            addr = offset_by(&mut b, addr, r, steps.loads[slot]);
        }
        load_addr[i] = Some(addr);
    }
    if let Some((_, r, steps)) = row {
        out = offset_by(&mut b, out, r, steps.out);
    }
    // Tiles in place: a float32 load that walks memory lane by lane needs
    // no spill tile (calls and later phases read it where it is), and a
    // stage whose value is its last call's result has that call write the
    // output (a lone `exp(x)` is then one call over the tile, no loops).
    let mut in_place = vec![false; stage.insts.len()];
    for &d in &phases.spilled {
        if let (Some(addr), true) = (load_addr[d], walks_memory(stage, a, d)) {
            spill_slot[d] = Some(addr);
            in_place[d] = true;
        }
    }
    let last = phases.calls.len();
    let direct_out = matches!(output, Output::Store(1) | Output::Value)
        && phases.insts[last].is_empty()
        && phases.calls.last().is_some_and(|&c| matches!(a.value, Def::Inst(v) if v == c));
    if direct_out {
        spill_slot[phases.calls[last - 1]] = Some(out);
    }
    // Invariants: once, as scalars, then splatted for the 4-lane loops.
    let n = stage.insts.len();
    let mut scalar = Env { consts: vec![None; stage.regs.len()], insts: vec![None; n], longs: vec![None; n] };
    let mut wide = scalar.clone();
    {
        let mut em = Em { b: &mut b, wide: false, pool };
        for (reg, op) in &stage.consts {
            let v = match op {
                InstOp::ConstF(x) => em.fc(*x as f32),
                InstOp::ConstI(x) => em.ic(if *x != 0 { -1 } else { 0 }),
                _ => continue,
            };
            scalar.consts[*reg as usize] = Some(v);
        }
    }
    let unary_tile = if a.call.iter().any(Option::is_some) {
        let mut sig = module.make_signature();
        sig.params.extend([types::I32, ptr, ptr, types::I64].map(AbiParam::new));
        let callee = module.declare_function(super::UNARY_TILE, Linkage::Import, &sig).map_err(|e| e.to_string())?;
        Some(module.declare_func_in_func(callee, b.func))
    } else {
        None
    };
    let mut envs = vec![scalar];
    // (The executor computes the `Pre` ones.)
    for k in (0..stage.insts.len()).filter(|&i| a.invariant[i] && a.class[i] != Class::Pre) {
        if let Some(code) = a.call[k] {
            // A transcendental of an invariant: once, on one lane.
            let x = match a.operands[k].first() {
                Some(d) => envs[0].get(*d).ok_or("call operand undefined")?,
                None => return Err("call without operand".into()),
            };
            let ss = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 8, 2));
            let (src, dst) = (b.ins().stack_addr(types::I64, ss, 0), b.ins().stack_addr(types::I64, ss, 4));
            b.ins().store(MemFlagsData::trusted(), x, src, 0);
            let one = b.ins().iconst(types::I64, 1);
            call_tile(&mut b, unary_tile, code, src, dst, one)?;
            envs[0].insts[k] = Some(b.ins().load(types::F32, MemFlagsData::trusted(), dst, 0));
        } else {
            emit_insts(&mut b, pool, stage, a, &[k], &mut envs, false, &load_addr)?;
        }
    }
    let scalar = envs.pop().ok_or("no environment")?;
    {
        let mut em = Em { b: &mut b, wide: true, pool };
        for (k, v) in scalar.consts.iter().enumerate() {
            wide.consts[k] = v.map(|v| em.widen(v));
        }
        for (k, v) in scalar.insts.iter().enumerate() {
            if a.class[k] == Class::Long {
                let long = v.map(|v| splat_long(&mut em, v));
                wide.insts[k] = long.map(|l| l.lo);
                wide.longs[k] = long;
            } else {
                wide.insts[k] = v.map(|v| em.widen(v));
            }
        }
    }
    // Per phase, for every lane:
    // for (i = 0; i + 16 <= len; i += 16) { four 4-lane groups, interleaved }
    // for (; i + 4 <= len; i += 4) { one group }
    // for (; i < len; i += 1) { one lane }
    // Interleaving gives the core independent chains to overlap. A phase
    // ends at a call: the transcendental runs over the whole tile (the
    // interpreter's own vector routine), then the next phase reads its
    // result. The last phase produces the stage's output.
    // Fold: the first loop takes 32 lanes (eight groups) and carries eight
    // accumulator vectors (tile lane l goes to accumulator lane l % 32),
    // so eight independent chains hide the combine's latency; max and min
    // carry one more, the lanes that saw a NaN (below). The 4- and
    // 1-lane loops combine into their spill slot, which is finally
    // combined into `out[0..32]`. `fold`: the op and the slot's address.
    let fold = match output {
        Output::Fold(op) | Output::FoldStore(op) => {
            let bytes = 4 * FOLD_LANES as u32;
            let ss = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, bytes, 4));
            Some((op, b.ins().stack_addr(types::I64, ss, 0)))
        }
        _ => None,
    };
    for phase in 0..=last {
        let is_last = phase == last;
        let writes: Vec<usize> = phases.writes[phase].iter().copied().filter(|&d| !in_place[d]).collect();
        // A phase that spills nothing and stores nothing has no loops.
        let idle = if is_last { direct_out } else { writes.is_empty() };
        let mut carried = match fold {
            Some((op, _)) if is_last => {
                let mut em = Em { b: &mut b, wide: true, pool };
                let mut accs = vec![em.fc(identity(op)); FOLD_GROUPS];
                if tracks_nan(op) {
                    accs.push(em.ic(0));
                }
                accs
            }
            _ => Vec::new(),
        };
        let mut i = zero;
        let first = if carried.is_empty() { 4 } else { FOLD_GROUPS as i64 };
        let widths: &[(i64, bool)] = if idle { &[] } else { &[(first, true), (1, true), (1, false)] };
        for &(groups, wide_loop) in widths {
            let step = if wide_loop { 4 * groups } else { 1 };
            // A rotated loop (the body is its own header, entered after one
            // guard): Cranelift hoists loop-invariant values only out of such
            // loops.
            let body = b.create_block();
            let after = b.create_block();
            for block in [body, after] {
                b.append_block_param(block, types::I64);
                for v in &carried {
                    let ty = b.func.dfg.value_type(*v);
                    b.append_block_param(block, ty);
                }
            }
            let first = b.ins().iadd_imm_s(i, step);
            let fits = b.ins().icmp(IntCC::SignedLessThanOrEqual, first, len);
            let args: Vec<_> = std::iter::once(i).chain(carried.iter().copied()).map(Into::into).collect();
            b.ins().brif(fits, body, &args, after, &args);
            b.switch_to_block(body);
            let params = b.block_params(body).to_vec();
            let (at, accs) = (params[0], &params[1..]);
            let base = if wide_loop { &wide } else { &scalar };
            let mut envs = vec![base.clone(); groups as usize];
            // Addresses at lane `at`, once per iteration; groups are immediate
            // offsets from them.
            let row: Vec<Option<Value>> = load_addr
                .iter()
                .enumerate()
                .map(|(k, addr)| addr.map(|addr| offset_by(&mut b, addr, at, a.step[k] * stage_size(stage, k))))
                .collect();
            let lane_bytes = |b: &mut FunctionBuilder, slot: Value| offset_by(b, slot, at, 4);
            for &d in &phases.reads[phase] {
                let p = lane_bytes(&mut b, spill_slot[d].ok_or("no spill slot")?);
                let em = Em { b: &mut b, wide: wide_loop, pool };
                let ty = if a.class[d] == Class::Float { em.fty() } else { em.ity() };
                // A value read in place is in a tensor: not known aligned.
                let flags = if in_place[d] { MemFlagsData::new().with_notrap() } else { MemFlagsData::trusted() };
                for (g, env) in envs.iter_mut().enumerate() {
                    env.insts[d] = Some(em.b.ins().load(ty, flags, p, 16 * g as i32));
                }
            }
            emit_insts(&mut b, pool, stage, a, &phases.insts[phase], &mut envs, wide_loop, &row)?;
            for &d in &writes {
                let p = lane_bytes(&mut b, spill_slot[d].ok_or("no spill slot")?);
                for (g, env) in envs.iter().enumerate() {
                    let v = env.insts[d].ok_or("spilled value undefined")?;
                    b.ins().store(MemFlagsData::trusted(), v, p, 16 * g as i32);
                }
            }
            let mut next_accs = accs.to_vec();
            if is_last {
                let out_row = offset_by(&mut b, out, at, out_size * out_step);
                for (g, env) in envs.iter().enumerate() {
                    let v = env.get(a.value).ok_or("stage value undefined")?;
                    let mut em = Em { b: &mut b, wide: wide_loop, pool };
                    match fold {
                        // One maxps/minps per step (NaN-blind, keeps the
                        // accumulator on ties); NaNs are tracked below.
                        Some((op, _)) if tracks_nan(op) && !accs.is_empty() => {
                            next_accs[g] = best(&mut em, op, accs[g], v)
                        }
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
                            let off = 4 * out_size * g as i64 * out_step;
                            match a.value {
                                Def::Inst(d) if a.class[d] == Class::Long => {
                                    let long = env.longs[d].ok_or("int64 value undefined")?;
                                    store_long(&mut em, out_row, off, out_step, long)
                                }
                                // A mask's lanes as the integers 0 or 1.
                                Def::Inst(d) if a.class[d] == Class::Mask && output == Output::ValueLong => {
                                    let v = em.mask_bits(v);
                                    store_value(&mut em, output, out_row, off, out_step, v)
                                }
                                _ => store_value(&mut em, output, out_row, off, out_step, v),
                            }
                        }
                    }
                }
            }
            if fold.is_some_and(|(op, _)| is_last && tracks_nan(op) && !accs.is_empty()) {
                // Apart from the accumulators' chains: which lanes saw a
                // NaN, one unordered compare per two groups.
                let vs: Vec<Value> =
                    envs.iter().map(|env| env.get(a.value).ok_or("stage value undefined")).collect::<Result<_, _>>()?;
                let seen = nan_lanes(&mut b, &vs);
                next_accs[FOLD_GROUPS] = b.ins().bor(accs[FOLD_GROUPS], seen);
            }
            let next = b.ins().iadd_imm_s(at, step);
            let following = b.ins().iadd_imm_s(at, 2 * step);
            let more = b.ins().icmp(IntCC::SignedLessThanOrEqual, following, len);
            let args: Vec<_> = std::iter::once(next).chain(next_accs).map(Into::into).collect();
            b.ins().brif(more, body, &args, after, &args);
            b.seal_block(body);
            b.switch_to_block(after);
            b.seal_block(after);
            let params = b.block_params(after).to_vec();
            i = params[0];
            if let Some((op, slot)) = fold.filter(|_| !carried.is_empty()) {
                let mut em = Em { b: &mut b, wide: true, pool };
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
        if let Some(&c) = phases.calls.get(phase) {
            let src = match a.operands[c].first() {
                Some(Def::Inst(d)) => spill_slot[*d].ok_or("call operand not spilled")?,
                _ => return Err("call operand is not a varying value".into()),
            };
            let dst = spill_slot[c].ok_or("call result has no slot")?;
            call_tile(&mut b, unary_tile, a.call[c].ok_or("not a call")?, src, dst, len)?;
        }
    }
    match (fold, output) {
        (Some((op, slot)), Output::FoldStore(_)) => fold_store(&mut b, pool, op, slot, out),
        (Some((op, slot)), _) => {
            let mut em = Em { b: &mut b, wide: true, pool };
            for g in 0..FOLD_GROUPS as i32 {
                let acc = em.b.ins().load(types::F32X4, MemFlagsData::new().with_notrap(), out, 16 * g);
                let part = em.b.ins().load(types::F32X4, MemFlagsData::trusted(), slot, 16 * g);
                let r = combine(&mut em, op, acc, part);
                em.b.ins().store(MemFlagsData::new().with_notrap(), r, out, 16 * g);
            }
        }
        _ => {}
    }
    if let Some((block, r, _)) = row {
        let next = b.ins().iadd_imm_s(r, 1);
        let more = b.ins().icmp(IntCC::SignedLessThan, next, row_count);
        let done = b.create_block();
        b.ins().brif(more, block, &[next.into()], done, &[]);
        b.seal_block(block);
        b.switch_to_block(done);
        b.seal_block(done);
    }
    let error = match pool.error {
        Some(at) => b.ins().load(types::I32, MemFlagsData::trusted(), at, 0),
        None => b.ins().iconst(types::I32, 0),
    };
    b.ins().return_(&[error]);
    b.finalize(module.target_config());

    let id = module.declare_function(name, Linkage::Local, &ctx.func.signature).map_err(|e| e.to_string())?;
    let disasm = std::env::var_os("RDYN_JIT_DISASM").is_some();
    ctx.set_disasm(disasm);
    module.define_function(id, &mut ctx).map_err(|e| e.to_string())?;
    if let Some(code) = ctx.compiled_code().and_then(|c| c.vcode.as_ref()).filter(|_| disasm) {
        eprintln!("[{name}]\n{code}");
    }
    module.clear_context(&mut ctx);
    // The table the function reads: the constants, then the zero block.
    let mut table = constants.bits.clone();
    table.resize(table.len() + ZERO_BLOCK, 0);
    Ok((id, table))
}

/// [`Output::FoldStore`]'s end: the 32 partials in `slot` (partial
/// `4g + l` in lane `l` of vector `g`) join the identity, as they would the
/// executor's fresh accumulator, then fold pairwise exactly as
/// `exec::reduce::fold_lanes` does over 32 lanes (`p[i] ⊕= p[i + h]` for
/// h = 16, 8, 4, 2, 1), and the result is stored at `out`.
fn fold_store(b: &mut FunctionBuilder, pool: &Pool, op: ReduceOp, slot: Value, out: Value) {
    let mut em = Em { b, wide: true, pool };
    let parts: Vec<Value> =
        (0..FOLD_GROUPS as i32).map(|k| em.b.ins().load(types::F32X4, MemFlagsData::trusted(), slot, 16 * k)).collect();
    if tracks_nan(op) {
        // The identity changes no partial. The same tree with one
        // maxps/minps per step (each keeps its first operand on ties, as
        // the combine does), and the result NaN if any partial is.
        let nan = nan_lanes(em.b, &parts);
        let g: Vec<Value> = (0..4).map(|k| best(&mut em, op, parts[k], parts[k + 4])).collect();
        let (lo, hi) = (best(&mut em, op, g[0], g[2]), best(&mut em, op, g[1], g[3]));
        let w = best(&mut em, op, lo, hi);
        // Lanes (0 ⊕ 2, 1 ⊕ 3), then their pair, in vector registers.
        let halves = em.pick_lanes(w, w, [2, 3, 0, 1]);
        let x = best(&mut em, op, w, halves);
        let pair = em.pick_lanes(x, x, [1, 0, 3, 2]);
        let r = best(&mut em, op, x, pair);
        let r = em.b.ins().extractlane(r, 0);
        let any_nan = em.b.ins().vany_true(nan);
        let quiet = em.b.ins().f32const(f32::NAN);
        let r = em.b.ins().select(any_nan, quiet, r);
        em.b.ins().store(MemFlagsData::new().with_notrap(), r, out, 0);
        return;
    }
    let id = em.fc(identity(op));
    let p: Vec<Value> = parts.iter().map(|&part| combine(&mut em, op, id, part)).collect();
    let g: Vec<Value> = (0..4).map(|k| combine(&mut em, op, p[k], p[k + 4])).collect();
    let (lo, hi) = (combine(&mut em, op, g[0], g[2]), combine(&mut em, op, g[1], g[3]));
    let w = combine(&mut em, op, lo, hi);
    let lane: Vec<Value> = (0..4u8).map(|l| em.b.ins().extractlane(w, l)).collect();
    let mut em = Em { b: em.b, wide: false, pool };
    let (x0, x1) = (combine(&mut em, op, lane[0], lane[2]), combine(&mut em, op, lane[1], lane[3]));
    let r = combine(&mut em, op, x0, x1);
    em.b.ins().store(MemFlagsData::new().with_notrap(), r, out, 0);
}

/// The lanes (a mask) in which any of `values` is NaN: one unordered
/// compare per two vectors (a last odd one with itself), or-ed pairwise.
fn nan_lanes(b: &mut FunctionBuilder, values: &[Value]) -> Value {
    let mut masks: Vec<Value> =
        values.chunks(2).map(|p| b.ins().fcmp(FloatCC::Unordered, p[0], p[p.len() - 1])).collect();
    while masks.len() > 1 {
        masks = masks.chunks(2).map(|p| if p.len() == 2 { b.ins().bor(p[0], p[1]) } else { p[0] }).collect();
    }
    masks[0]
}

/// `rdyn_unary_tile(code, src, dst, lanes)`: a transcendental over `lanes`
/// lanes of a stack tile.
fn call_tile(
    b: &mut FunctionBuilder,
    unary_tile: Option<cranelift_codegen::ir::FuncRef>,
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

/// Bit patterns of every constant the function may use: the stage's, and
/// those the lowering of its ops and output needs.
fn constant_bits(stage: &StagePlan, output: Output) -> Vec<u32> {
    let f = |x: f32| x.to_bits();
    let mut bits = vec![f(0.0), f(1.0)];
    let ops = stage.consts.iter().map(|(_, op)| op).chain(stage.insts.iter().map(|i| &i.op));
    for op in ops {
        match op {
            InstOp::ConstF(x) => bits.push(f(*x as f32)),
            InstOp::ConstI(x) => bits.push(if *x != 0 { u32::MAX } else { 0 }),
            _ => {}
        }
    }
    if let Output::Fold(op) | Output::FoldStore(op) | Output::Accumulate(op) = output {
        bits.push(f(identity(op)));
    }
    bits
}

/// Whether instruction `d` is a float32 load whose lanes are consecutive
/// elements of memory (so memory can stand in for its spill tile).
fn walks_memory(stage: &StagePlan, a: &Analysis, d: usize) -> bool {
    let plain = matches!(&stage.insts[d].op, InstOp::Load { dtype: DType::F32, mask: None, .. });
    plain && a.step[d] == 1 && !a.invariant[d] && a.class[d] == Class::Float && a.gathers[d].is_empty()
}

/// `addr + at * bytes` (just `addr` when the step is zero).
fn offset_by(b: &mut FunctionBuilder, addr: Value, at: Value, bytes: i64) -> Value {
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

fn identity(op: ReduceOp) -> f32 {
    <f32 as crate::ops::Reducible>::identity(op)
}

/// Emit instructions `which` for every group (one environment and lane
/// offset per group), instruction by instruction across the groups.
#[allow(clippy::too_many_arguments)]
fn emit_insts(
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
const FOLD_GROUPS: usize = FOLD_LANES / 4;
