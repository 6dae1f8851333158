//! Machine code for float32 stages, compiled with Cranelift.
//!
//! The tile interpreter runs a stage as one pass over a tile per register
//! op; short rows pay a dispatch per op and every op reads and writes its
//! tiles through L1. For a stage whose registers are all float32 (plus
//! boolean masks), this module compiles the whole register program into
//! one loop over the tile's lanes: four lanes per step in SIMD registers
//! (four such groups interleaved per iteration), then a one-lane tail.
//! Values that do not change along the tile (constants, broadcast loads,
//! arithmetic on them) are computed once before the loops; constants are
//! loaded from a per-stage table rather than written as immediates, and the
//! loops are rotated, because Cranelift hoists invariants only that way.
//!
//! The compiled function replaces [`crate::exec`]'s per-op evaluation of
//! the stage. A pointwise stage also stores its output; a sum/prod/max/min
//! stage combines into the reduction's accumulator (lane by lane along an
//! outer tile; into 16 partials along the reduction). Addresses per tile
//! and the final fold of the partials stay with the executor.
//! Transcendentals (exp, erf, tanh, ...) are not inline: at four lanes they
//! lose to the interpreter's 16-lane routines. A stage that has them is cut
//! into phases at each one ([`phases`]): one loop per phase, and between
//! two loops a call that runs the interpreter's routine over the whole
//! tile, values crossing a call going through tiles on the stack. Integer
//! indices (affine, within 32 bits) compile as 32-bit lanes, only to be
//! compared into masks. Anything else keeps the interpreter: float64,
//! integer arithmetic, half-precision, gathers and masked loads. Results are bit-identical to the interpreter's: only exactly
//! rounded operations, in the same order, no fused multiply-add, and the
//! interpreter's own transcendental routines.
//!
//! `RDYN_JIT=0` turns compilation off (every stage interpreted);
//! `RDYN_JIT_DISASM=1` prints each compiled stage's machine code to stderr.

mod analysis;
mod emit;
mod lower;
mod phases;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex, OnceLock};

use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_jit::{JITBuilder, JITModule};
use rdyn_ir::loops::{BufId, ReduceOp, UnaryOp};
use rdyn_ir::DType;

use crate::plan::{storage_root, BufPlan, CpuStep, IndexFn, InstOp, KernelPlan, StagePlan, TileMode};

/// `fn(load addresses, output, lanes, constants)`: `addrs[k]` is the byte
/// address of lane 0 of the stage's k-th load; the output is lane 0 of what
/// [`Output`] names; the constants are [`JitStage::constants`].
pub(crate) type StageFn = unsafe extern "C" fn(*const i64, *mut f32, i64, *const u32);

/// What a compiled stage does with its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    /// Writes the value register.
    Value,
    /// Stores into the stage's float32 output, `step` elements apart (a
    /// pointwise stage whose store walks the tile with a constant step).
    Store(i64),
    /// Combines lane by lane into the reduction's accumulator (lanes are
    /// output points: a reduction over an outer tile).
    Accumulate(ReduceOp),
    /// Combines the tile into the reduction's 16 accumulator lanes, lane l
    /// into l % 16 (lanes run along the reduction).
    Fold(ReduceOp),
}

/// A compiled stage.
#[derive(Clone)]
pub struct JitStage {
    pub(crate) func: StageFn,
    /// The variable the lanes walk (`None`: the stage has one lane).
    pub(crate) tile_var: Option<usize>,
    /// Per load, in instruction order: buffer, index, element size.
    /// `None`: an integer index, whose value itself is passed.
    pub(crate) loads: Vec<(Option<BufId>, IndexFn, i64)>,
    pub(crate) output: Output,
    /// The function's constants (bit patterns), read on entry.
    pub(crate) constants: Arc<[u32]>,
    _code: Arc<Code>,
}

impl JitStage {
    /// Whether the compiled lanes walk `tile_var`, the executor's tile.
    pub(crate) fn walks(&self, tile_var: usize) -> bool {
        self.tile_var.is_none_or(|v| v == tile_var)
    }
}

impl std::fmt::Debug for JitStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JitStage({} loads)", self.loads.len())
    }
}

/// The executable memory of one program's stages, freed with the last plan
/// that points into it.
struct Code(Mutex<Option<JITModule>>);

// SAFETY: after `finalize_definitions` the module is only read through the
// function pointers (immutable code) and touched again only by `Drop`.
unsafe impl Send for Code {}
// SAFETY: as above; the mutex serialises the one mutation (`Drop`).
unsafe impl Sync for Code {}

impl Drop for Code {
    fn drop(&mut self) {
        if let Ok(mut m) = self.0.lock() {
            if let Some(module) = m.take() {
                // SAFETY: the last `JitStage` holding this code is being
                // dropped, so no function pointer into it survives.
                unsafe { module.free_memory() };
            }
        }
    }
}

/// Whether stages are compiled (`RDYN_JIT=0` turns it off).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("RDYN_JIT").map_or(true, |v| v != "0") && isa().is_some())
}

fn isa() -> Option<&'static OwnedTargetIsa> {
    static ISA: OnceLock<Option<OwnedTargetIsa>> = OnceLock::new();
    ISA.get_or_init(|| {
        let mut flags = settings::builder();
        flags.set("opt_level", "speed").ok()?;
        let builder = cranelift_native::builder().ok()?;
        // The 4-lane loops need SSE4.1 (round, blend) on x86-64.
        #[cfg(target_arch = "x86_64")]
        if !std::arch::is_x86_feature_detected!("sse4.1") {
            return None;
        }
        builder.finish(settings::Flags::new(flags)).ok()
    })
    .as_ref()
}

/// The routine compiled stages call for a transcendental over a tile.
pub(crate) const UNARY_TILE: &str = "rdyn_unary_tile";

/// The float32 unary ops compiled stages run through [`unary_tile`]; an
/// op's code is its position here.
const TILE_OPS: [UnaryOp; 25] = [
    UnaryOp::Exp,
    UnaryOp::Exp2,
    UnaryOp::Expm1,
    UnaryOp::Log,
    UnaryOp::Log2,
    UnaryOp::Log10,
    UnaryOp::Log1p,
    UnaryOp::Sin,
    UnaryOp::Cos,
    UnaryOp::Tan,
    UnaryOp::Asin,
    UnaryOp::Acos,
    UnaryOp::Atan,
    UnaryOp::Sinh,
    UnaryOp::Cosh,
    UnaryOp::Tanh,
    UnaryOp::Asinh,
    UnaryOp::Acosh,
    UnaryOp::Atanh,
    UnaryOp::Sigmoid,
    UnaryOp::Erf,
    UnaryOp::Erfc,
    UnaryOp::Erfinv,
    UnaryOp::Lgamma,
    UnaryOp::Digamma,
];

/// The code compiled stages pass to [`unary_tile`] for `op`, if it has one.
pub(crate) fn call_code(op: UnaryOp) -> Option<u32> {
    TILE_OPS.iter().position(|o| *o == op).map(|k| k as u32)
}

/// `out[..len] = op(x[..len])` with the interpreter's float32 routine.
extern "C" fn unary_tile(code: u32, x: *const f32, out: *mut f32, len: i64) {
    let Some(op) = TILE_OPS.get(code as usize) else { return };
    let len = len.max(0) as usize;
    // SAFETY: compiled stages pass two distinct spill tiles of `TILE` lanes
    // on their stack, and `len <= TILE` (the executor's tile width).
    let (x, out) = unsafe { (std::slice::from_raw_parts(x, len), std::slice::from_raw_parts_mut(out, len)) };
    crate::ops::unary_f32(*op, x, out);
}

/// The variable a stage's lanes walk, as the executor chooses it.
pub(crate) fn tile_var(kernel: &KernelPlan, stage: &StagePlan) -> Option<usize> {
    let m = kernel.outer.len();
    let ni = stage.inner.len();
    match kernel.mode {
        TileMode::Outer => m.checked_sub(1),
        TileMode::Inner => match &stage.reduce {
            Some((_, red)) if !red.is_empty() => Some(m + ni + red.len() - 1),
            Some(_) => None,
            None if ni > 0 => Some(m + ni - 1),
            None => None,
        },
    }
}

/// Compile every stage that has a float32 lane program; the rest keep the
/// interpreter. A Cranelift error on one stage leaves that stage
/// interpreted (it is a compiler bug, but never a wrong result).
pub fn compile_program(steps: &mut [CpuStep], bufs: &[BufPlan]) {
    if !enabled() {
        return;
    }
    let Some(isa) = isa() else { return };
    let mut builder = JITBuilder::with_isa(isa.clone(), cranelift_module::default_libcall_names());
    builder.symbol(UNARY_TILE, unary_tile as *const u8);
    let mut module = JITModule::new(builder);
    let mut pending = Vec::new();
    for (k, step) in steps.iter().enumerate() {
        let CpuStep::Kernel(kernel) = step else { continue };
        if kernel.serial {
            continue;
        }
        for (s, stage) in kernel.stages.iter().enumerate() {
            let tv = tile_var(kernel, stage);
            let mut extents = kernel.outer.clone();
            extents.extend(&stage.inner);
            extents.extend(stage.reduce.iter().flat_map(|(_, r)| r.iter().copied()));
            let Some(supported) = analysis::supported(stage, tv, &extents) else { continue };
            let output = output(kernel.mode, stage, tv, bufs);
            let name = format!("{}_s{s}", kernel.name);
            if let Ok((id, constants)) = lower::compile_stage(&mut module, stage, &supported, output, &name) {
                pending.push((k, s, id, (tv, output, constants.into()), supported.loads));
            }
        }
    }
    if pending.is_empty() || module.finalize_definitions().is_err() {
        return;
    }
    let funcs: Vec<StageFn> = pending
        .iter()
        .map(|(_, _, id, _, _)| {
            let ptr = module.get_finalized_function(*id);
            // SAFETY: the function was built with `StageFn`'s signature in
            // `lower::compile_stage`.
            unsafe { std::mem::transmute::<*const u8, StageFn>(ptr) }
        })
        .collect();
    let code = Arc::new(Code(Mutex::new(Some(module))));
    for ((k, s, _, (tile_var, output, constants), loads), func) in pending.into_iter().zip(funcs) {
        if let CpuStep::Kernel(kernel) = &mut steps[k] {
            let jit = JitStage { func, tile_var, loads, output, constants, _code: code.clone() };
            kernel.stages[s].jit = Some(jit);
        }
    }
}

/// What a compiled stage does with its value.
fn output(mode: TileMode, stage: &StagePlan, tile_var: Option<usize>, bufs: &[BufPlan]) -> Output {
    match &stage.reduce {
        Some((op @ (ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Max | ReduceOp::Min), _)) => match mode {
            TileMode::Outer => Output::Accumulate(*op),
            TileMode::Inner => Output::Fold(*op),
        },
        Some(_) => Output::Value,
        None => store_step(stage, tile_var, bufs).map_or(Output::Value, Output::Store),
    }
}

/// The output step along the tile when a pointwise stage can store itself.
fn store_step(stage: &StagePlan, tile_var: Option<usize>, bufs: &[BufPlan]) -> Option<i64> {
    if bufs[stage.out.0 as usize].dtype != DType::F32 {
        return None;
    }
    // The interpreter reads a whole tile before it stores; a stage that
    // reads its own output's storage keeps that order.
    let out = storage_root(bufs, stage.out);
    if stage.insts.iter().any(|i| matches!(&i.op, InstOp::Load { buf, .. } if storage_root(bufs, *buf) == out)) {
        return None;
    }
    let step = match tile_var {
        Some(v) => stage.store.step(v as u32)?,
        None => 0,
    };
    // Lane offsets within an iteration are 32-bit immediates.
    (step.abs() < i64::from(i32::MAX) / 64).then_some(step)
}
