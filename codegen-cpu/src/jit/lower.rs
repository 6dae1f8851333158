//! One stage's register program → one Cranelift function, over the
//! definitions [`super::analysis`] resolved. Definitions that do not change
//! along the tile are emitted once before the loops, which `lanes.rs`
//! emits.
//!
//! Maximum and minimum, elementwise or accumulated, are written so that
//! Cranelift's x86 rules pick one `maxps`/`minps` (the strictly better operand,
//! else the second) and a blend for a NaN operand: three instructions per four
//! lanes where the spelled-out comparisons took seven (ReLU) or eleven (a max
//! reduction's combine). An accumulated max or min carries, beside that chain, a
//! mask of the lanes that saw a NaN (one unordered compare per two groups), put
//! back after the loop; the final fold of the 32 partials is the same tree of one
//! `maxps` per step and a single NaN check.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, AbiParam, FuncRef, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind, Value};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Linkage, Module};
use rdyn_ir::loops::ReduceOp;
use rdyn_ir::DType;

use super::analysis::{Analysis, Class, Def, Supported};
use super::emit::{best, combine, tracks_nan, Em, Pool, ZERO_BLOCK};
use super::lanes::{call_tile, emit_insts, emit_phase, identity, nan_lanes, offset_by, Env, Frame, FOLD_GROUPS};
use super::long::splat_long;
use super::phases::Phases;
use super::stage::Output;
use crate::plan::{InstOp, StagePlan};
use crate::tile::{FOLD_LANES, TILE};

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
    let (addrs, out, len, table, row_count) = (params[0], params[1], params[2], params[3], params[4]);
    let mut constants = Pool::load(&mut b, table, constant_bits(stage, output));
    if a.gathers_rows() {
        let ss = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 4, 2));
        let error = b.ins().stack_addr(types::I64, ss, 0);
        let no = b.ins().iconst(types::I32, 0);
        b.ins().store(MemFlagsData::trusted(), no, error, 0);
        constants.error = Some(error);
    }
    let unary_tile = if a.call.iter().any(Option::is_some) {
        let mut sig = module.make_signature();
        sig.params.extend([types::I32, ptr, ptr, types::I64].map(AbiParam::new));
        let callee = module.declare_function(super::UNARY_TILE, Linkage::Import, &sig).map_err(|e| e.to_string())?;
        Some(module.declare_func_in_func(callee, b.func))
    } else {
        None
    };
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
        let zero = b.ins().iconst(types::I64, 0);
        b.ins().jump(block, &[zero.into()]);
        b.switch_to_block(block);
        (block, b.block_params(block)[0], steps)
    });
    let base = Base { stage, a, pool: &constants, output, addrs, out, len, unary_tile };
    let fr = frame(&mut b, base, (phases, spill_slot), row.map(|(_, r, steps)| (r, steps)))?;
    for phase in 0..=fr.phases.calls.len() {
        emit_phase(&mut b, &fr, phase)?;
    }
    match (fr.fold, output) {
        (Some((op, slot)), Output::FoldStore(_)) => fold_store(&mut b, fr.pool, op, slot, fr.out),
        (Some((op, slot)), _) => {
            let mut em = Em { b: &mut b, wide: true, pool: fr.pool };
            for g in 0..FOLD_GROUPS as i32 {
                let acc = em.b.ins().load(types::F32X4, MemFlagsData::new().with_notrap(), fr.out, 16 * g);
                let part = em.b.ins().load(types::F32X4, MemFlagsData::trusted(), slot, 16 * g);
                let r = combine(&mut em, op, acc, part);
                em.b.ins().store(MemFlagsData::new().with_notrap(), r, fr.out, 16 * g);
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
    let error = match constants.error {
        Some(at) => b.ins().load(types::I32, MemFlagsData::trusted(), at, 0),
        None => b.ins().iconst(types::I32, 0),
    };
    b.ins().return_(&[error]);
    b.finalize(module.target_config());
    let id = define(module, &mut ctx, name)?;
    // The table the function reads: the constants, then the zero block.
    let mut table = constants.bits.clone();
    table.resize(table.len() + ZERO_BLOCK, 0);
    Ok((id, table))
}

/// Declares and compiles the finished function (`RDYN_JIT_DISASM=1`
/// prints its machine code).
fn define(module: &mut JITModule, ctx: &mut cranelift_codegen::Context, name: &str) -> Result<FuncId, String> {
    let id = module.declare_function(name, Linkage::Local, &ctx.func.signature).map_err(|e| e.to_string())?;
    let disasm = std::env::var_os("RDYN_JIT_DISASM").is_some();
    ctx.set_disasm(disasm);
    module.define_function(id, ctx).map_err(|e| e.to_string())?;
    if let Some(code) = ctx.compiled_code().and_then(|c| c.vcode.as_ref()).filter(|_| disasm) {
        eprintln!("[{name}]\n{code}");
    }
    module.clear_context(ctx);
    Ok(id)
}

/// The entry block's part of a [`Frame`].
struct Base<'p> {
    stage: &'p StagePlan,
    a: &'p Analysis,
    pool: &'p Pool,
    output: Output,
    addrs: Value,
    out: Value,
    len: Value,
    unary_tile: Option<FuncRef>,
}

/// Load addresses (at row `row` when the executor hands over several
/// rows), tiles in place, the invariants and a fold's slot, given the
/// phases and their tiles.
fn frame<'p>(
    b: &mut FunctionBuilder,
    base: Base<'p>,
    tiles: (Phases, Vec<Option<Value>>),
    row: Option<(Value, &RowSteps)>,
) -> Result<Frame<'p>, String> {
    let Base { stage, a, pool, output, addrs, mut out, len, unary_tile } = base;
    let (phases, mut spill_slot) = tiles;
    let load_addr = load_addresses(b, stage, a, addrs, row);
    if let Some((r, steps)) = row {
        out = offset_by(b, out, r, steps.out);
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
    let (scalar, wide) = invariants(b, stage, a, pool, unary_tile, &load_addr)?;
    let fold = match output {
        Output::Fold(op) | Output::FoldStore(op) => {
            let bytes = 4 * FOLD_LANES as u32;
            let ss = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, bytes, 4));
            Some((op, b.ins().stack_addr(types::I64, ss, 0)))
        }
        _ => None,
    };
    Ok(Frame {
        stage,
        a,
        pool,
        phases,
        output,
        out,
        len,
        spill_slot,
        in_place,
        load_addr,
        scalar,
        wide,
        direct_out,
        fold,
        unary_tile,
    })
}

/// The address of every compiled load, in load order, from the address
/// table (row `r`'s own part of it when the executor picks the rows).
fn load_addresses(
    b: &mut FunctionBuilder,
    stage: &StagePlan,
    a: &Analysis,
    addrs: Value,
    row: Option<(Value, &RowSteps)>,
) -> Vec<Option<Value>> {
    let mut load_addr = vec![None; stage.insts.len()];
    let compiled_load =
        |i: usize| matches!(stage.insts[i].op, InstOp::Load { .. } | InstOp::Index(_)) && a.class[i] != Class::Pre;
    let loads: Vec<usize> = (0..stage.insts.len()).filter(|&i| compiled_load(i)).collect();
    let table = match row {
        Some((r, steps)) if steps.table => Some(offset_by(b, addrs, r, 8 * loads.len() as i64)),
        _ => None,
    };
    for (slot, &i) in loads.iter().enumerate() {
        let mut addr = b.ins().load(types::I64, MemFlagsData::trusted(), table.unwrap_or(addrs), 8 * slot as i32);
        if let (Some((r, steps)), None) = (row, table) {
            addr = offset_by(b, addr, r, steps.loads[slot]);
        }
        load_addr[i] = Some(addr);
    }
    load_addr
}

/// Invariants: once, as scalars, then splatted for the 4-lane loops.
fn invariants(
    b: &mut FunctionBuilder,
    stage: &StagePlan,
    a: &Analysis,
    pool: &Pool,
    unary_tile: Option<FuncRef>,
    load_addr: &[Option<Value>],
) -> Result<(Env, Env), String> {
    let n = stage.insts.len();
    let mut scalar = Env { consts: vec![None; stage.regs.len()], insts: vec![None; n], longs: vec![None; n] };
    let mut wide = scalar.clone();
    {
        let mut em = Em { b: &mut *b, wide: false, pool };
        for (reg, op) in &stage.consts {
            let v = match op {
                InstOp::ConstF(x) => em.fc(*x as f32),
                InstOp::ConstI(x) => em.ic(if *x != 0 { -1 } else { 0 }),
                _ => continue,
            };
            scalar.consts[*reg as usize] = Some(v);
        }
    }
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
            call_tile(b, unary_tile, code, src, dst, one)?;
            envs[0].insts[k] = Some(b.ins().load(types::F32, MemFlagsData::trusted(), dst, 0));
        } else {
            emit_insts(b, pool, stage, a, &[k], &mut envs, false, load_addr)?;
        }
    }
    let scalar = envs.pop().ok_or("no environment")?;
    let mut em = Em { b, wide: true, pool };
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
    Ok((scalar, wide))
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
