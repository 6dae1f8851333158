//! Machine code for float32 stages, compiled with Cranelift.
//!
//! The tile interpreter runs a stage as one pass over a tile per register
//! op; short rows pay a dispatch per op and every op reads and writes its
//! tiles through L1. For a stage whose registers are all float32 (plus
//! boolean masks), this module compiles the whole register program into
//! one loop over the tile's lanes: four lanes per step in SIMD registers
//! (`F32X4`, four such groups interleaved per iteration), then a one-lane tail.
//! Values that do not change along the tile (`StagePlan::uniform_insts`, the
//! interpreter's own: constants, broadcast loads, arithmetic on them, a
//! transcendental of them on one lane) are computed once before the loops.
//! Two things make Cranelift keep them out of the loops: constants are loaded
//! from a per-stage table passed to the function (immediates are
//! rematerialised at each use, and whatever depends on them with them), and
//! every loop is rotated (the body is its own header, after one guard), the
//! only shape its LICM hoists out of.
//!
//! The compiled function replaces [`crate::exec`]'s per-op evaluation of
//! the stage. A pointwise stage also stores its output (when the store walks
//! the tile with a constant step and the stage does not read its own output); a
//! sum/prod/max/min stage combines into the reduction's accumulator exactly as
//! `exec/reduce.rs` does (lane by lane along an outer tile; into 32 partials
//! along the reduction). When a reduction is one tile, the function also folds
//! the partials (in the executor's order) and stores the result
//! (`Output::FoldStore`); otherwise addresses per tile and the final fold stay
//! with the executor, and other reduction stages fill their value register
//! (a bool `any`/`all` or an integer reduction as int64 lanes,
//! `Output::ValueLong`, which the executor reduces). Pointwise stages (one
//! lane a row included: a batch norm's running statistics) and one-tile
//! reductions may run by rows (`exec/rows.rs`), and stages whose rows the
//! executor picks by a table (`exec/calls.rs`).
//!
//! What compiles besides float32 arithmetic, comparisons and selects:
//! integer indices (affine along the tile, any `i // k`, `i % k` parts the
//! same on every lane; bounded within 32 bits over the kernel's ranges; four
//! lanes are one add of a constant lane-offset vector) as 32-bit lanes,
//! compared into masks (causal masks from `i - j <= 0` stay in the loop),
//! hashed into random bits (`hash_mix`, with a key read as a float32 and
//! converted) or computed with (below); int64 loads as pairs of `I64X2`
//! halves, compared into masks ([`long`]) or computed with; bool stages,
//! which store their mask as bytes;
//! bfloat16 loads (widened exactly) and roundings to bfloat16 (as
//! `half::bf16`), the executor storing a bfloat16 output; masked float32 loads
//! (padding, `cat`), read lane by lane, masked-off lanes from the constant
//! table's 0.0, or, when the mask is the same on every lane, as whole groups
//! from the buffer or from the table's zero block, so no memory outside the
//! mask is touched; a gather
//! whose row is the same on every lane (an embedding's token id, or a row
//! computed from positions: integer arithmetic, selects and checks on loads and
//! indices) as an affine load, its row computed by the executor (`analysis.rs`'s
//! `Class::Pre`); a gather whose row differs from lane to lane (a bias table
//! indexed by an index tensor, or by ids the function computes: T5's clamped
//! buckets) lane by lane, each row id read or computed and bounds-checked in
//! the function ([`gather`]; a row out of range is the function's nonzero
//! return); and a scatter's value, its row the same on every lane (the
//! executor computes the row, then stores) or not (the executor reads and
//! checks the rows over the tile after the call, then adds lane by lane: a max
//! pool's backward). Integer arithmetic on index lanes (add, subtract,
//! multiply, min, max, negate, abs, selects, floor division and modulo by a
//! power of two: pooling windows and argmax indices) runs in 32 bits while the
//! interval of every value stays there ([`int`]); int64 arithmetic on loaded
//! values, and floats truncated to int64 (or int64 converted to float32), on
//! 64-bit lanes ([`long`]); either may be an int64 stage's stored value.
//! Anything else keeps the interpreter: float64, integer division by other
//! divisors, float16.
//!
//! Transcendentals (exp, erf, tanh, ...) are not inline: at four lanes they lose
//! to the interpreter's AVX-512/AVX2 tile routines. A stage that has them is cut
//! into phases at each one ([`phases`]): one loop per phase, and between two
//! loops a call (`rdyn_unary_tile`) that runs the interpreter's routine over the
//! whole tile. Max and min, elementwise or accumulated, are written so that
//! Cranelift's x86 rules pick one `maxps`/`minps` and a blend for a NaN operand
//! (`lower.rs`).
//!
//! Results are bit-identical to the interpreter's (up to the sign and payload of
//! a NaN): only exactly rounded operations, in the same order, no fused
//! multiply-add, and the interpreter's own transcendental routines (`tests.rs`
//! checks NaN, ±0, ±inf, ties, and every accumulated reduction along rows and
//! columns). One `JITModule` per program, freed with the last plan that uses it.
//!
//! `RDYN_JIT=0` turns compilation off (every stage interpreted);
//! `RDYN_JIT_DISASM=1` prints each compiled stage's machine code to stderr
//! (and why Cranelift refused a stage it was given).

mod analysis;
mod emit;
mod gather;
mod inst;
mod int;
mod lanes;
mod long;
mod lower;
mod memory;
mod phases;
pub(crate) mod stage;
pub(crate) mod target;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_arith;
#[cfg(test)]
mod tests_gather;
#[cfg(test)]
mod tests_int;
#[cfg(test)]
mod tests_reduce;
#[cfg(test)]
mod tests_rows;

use std::sync::{Arc, Mutex};

use cranelift_jit::{JITBuilder, JITModule};
use rdyn_ir::loops::{BufId, ReduceOp, UnaryOp};
use rdyn_ir::ops::Jit;
use rdyn_ir::DType;

use analysis::Supported;
use lower::RowSteps;
use stage::{Code, JitLoad, JitStage, Output, Rows, StageFn};

pub use target::enabled;
pub(crate) use target::isa;

use crate::plan::{storage_root, BufPlan, CpuStep, IndexFn, InstOp, KernelPlan, StagePlan, TileMode};
use crate::tile::TILE;

/// The routine compiled stages call for a transcendental over a tile.
pub(crate) const UNARY_TILE: &str = "rdyn_unary_tile";

/// The code compiled stages pass to [`unary_tile`] for `op`, if `rdyn_ir::ops`
/// says compiled stages call it (`Jit::Call`): its position in `UnaryOp::ALL`.
pub(crate) fn call_code(op: UnaryOp) -> Option<u32> {
    if op.info().jit != Jit::Call {
        return None;
    }
    UnaryOp::ALL.iter().position(|o| *o == op).map(|k| k as u32)
}

/// `out[..len] = op(x[..len])` with the interpreter's float32 routine.
extern "C" fn unary_tile(code: u32, x: *const f32, out: *mut f32, len: i64) {
    let Some(op) = UnaryOp::ALL.get(code as usize) else { return };
    let len = (len.max(0) as usize).min(TILE);
    // Compiled stages pass spill tiles of `TILE` lanes on their stack, or
    // the tile's lanes in an input or the output (`len <= TILE`, the
    // executor's tile width). An input that overlaps the output is read
    // from a copy.
    let overlap = (x as usize) < out as usize + 4 * len && (out as usize) < x as usize + 4 * len;
    if overlap {
        let mut copy = [0f32; TILE];
        // SAFETY: `x` and `out` each hold `len` lanes (above); the copy is
        // ours, so the slices below do not alias.
        let out = unsafe {
            std::ptr::copy_nonoverlapping(x, copy.as_mut_ptr(), len);
            std::slice::from_raw_parts_mut(out, len)
        };
        crate::ops::unary_f32(*op, &copy[..len], out);
        return;
    }
    // SAFETY: as above, and the two ranges do not overlap.
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
            Some(_) if stage.vertical => Some(m + ni - 1),
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
        // A serial kernel run point by point gains nothing from compiled
        // lanes (a tiled one, a scatter along its last dim, does); a
        // blocked transpose needs no compiled stage.
        if (kernel.serial && kernel.tile <= 1) || kernel.transpose.is_some() {
            continue;
        }
        for (s, stage) in kernel.stages.iter().enumerate() {
            let tv = tile_var(kernel, stage);
            let mut extents = kernel.outer.clone();
            extents.extend(&stage.inner);
            extents.extend(stage.reduce.iter().flat_map(|(_, r)| r.iter().copied()));
            let Some(supported) = analysis::supported(stage, tv, &extents) else { continue };
            let a = &supported.analysis;
            let output = match output(kernel, stage, tv, bufs) {
                // A mask or integer value the executor reduces (or stores
                // through an index) goes to its int64 value register.
                Output::Value | Output::Accumulate(_) | Output::Fold(_) | Output::FoldStore(_)
                    if a.value_is_mask() || a.value_is_int() =>
                {
                    Output::ValueLong
                }
                o => o,
            };
            let fits = match output {
                Output::StoreMask(_) => a.value_is_mask(),
                Output::StoreLong(_) => a.value_is_int(),
                Output::ValueLong => true,
                _ => !a.value_is_mask() && !a.value_is_int(),
            };
            if !fits {
                continue;
            }
            let rows = row_steps(kernel, stage, &supported, output);
            let name = format!("{}_s{s}", kernel.name);
            let compiled = lower::compile_stage(&mut module, stage, &supported, output, rows.as_ref(), &name);
            if let (Err(e), Some(_)) = (&compiled, std::env::var_os("RDYN_JIT_DISASM")) {
                eprintln!("[{name}] not compiled: {e}");
            }
            if let Ok((id, constants)) = compiled {
                let pre = supported.analysis.pre();
                let rows = match (rows, output) {
                    (None, _) => Rows::One,
                    (Some(_), Output::Accumulate(_)) => Rows::Reduction,
                    (Some(_), Output::FoldStore(_)) if inner_rows(kernel, stage) => Rows::Inner,
                    (Some(_), _) => Rows::Points,
                };
                let (tile_var, loads, scatter_rows) = (tv, supported.loads, supported.scatter_rows);
                pending.push(Pending {
                    kernel: k,
                    stage: s,
                    id,
                    tile_var,
                    output,
                    rows,
                    constants,
                    loads,
                    pre,
                    scatter_rows,
                });
            }
        }
    }
    // A kernel runs stage by stage over several rows only when every
    // compiled stage can, the others are ones the executor runs row by row
    // in between (not scatters or accumulations: an embedding backward's
    // int64 row ids, saved by BERT's forward beside its embedding + layer
    // norm), and no stage reads what another writes at another point.
    for (k, step) in steps.iter().enumerate() {
        let CpuStep::Kernel(kernel) = step else { continue };
        let mine: Vec<_> = pending.iter_mut().filter(|p| p.kernel == k).collect();
        let interpreted = (0..kernel.stages.len()).filter(|s| !mine.iter().any(|p| p.stage == *s));
        let all_rows = !mine.is_empty()
            && mine.iter().all(|p| p.rows == Rows::Points)
            && interpreted.map(|s| &kernel.stages[s]).all(|st| st.store_indirect.is_empty() && st.accumulate.is_none());
        if !all_rows || !same_point_reads(kernel, bufs) {
            mine.into_iter().filter(|p| p.rows == Rows::Points).for_each(|p| p.rows = Rows::One);
        }
    }
    if pending.is_empty() || module.finalize_definitions().is_err() {
        return;
    }
    let funcs: Vec<StageFn> = pending
        .iter()
        .map(|p| {
            let ptr = module.get_finalized_function(p.id);
            // SAFETY: the function was built with `StageFn`'s signature in
            // `lower::compile_stage`.
            unsafe { std::mem::transmute::<*const u8, StageFn>(ptr) }
        })
        .collect();
    let code = Arc::new(Code(Mutex::new(Some(module))));
    for (p, func) in pending.into_iter().zip(funcs) {
        if let CpuStep::Kernel(kernel) = &mut steps[p.kernel] {
            kernel.stages[p.stage].jit = Some(JitStage {
                func,
                tile_var: p.tile_var,
                loads: p.loads,
                pre: p.pre,
                scatter_rows: p.scatter_rows,
                output: p.output,
                rows: p.rows,
                constants: p.constants.into(),
                _code: code.clone(),
            });
        }
    }
}

/// A compiled stage waiting for its module to be finalized.
struct Pending {
    kernel: usize,
    stage: usize,
    id: cranelift_module::FuncId,
    tile_var: Option<usize>,
    output: Output,
    rows: Rows,
    constants: Vec<u32>,
    loads: Vec<JitLoad>,
    pre: Vec<usize>,
    scatter_rows: Vec<usize>,
}

/// The row steps of a stage one call may run for several rows (see
/// [`Rows`]), or `None`; a stage with executor-run instructions (gathers
/// of whole rows) reads every row's addresses from a table instead
/// ([`RowSteps::table`]). Outer tiles: a pointwise stage, rows
/// along the next-to-last outer dimension. Inner tiles: rows along the last
/// outer dimension, for a pointwise stage over one inner dimension that
/// fits a tile or over none (one lane a row), or a reduction that is one
/// call ([`Output::FoldStore`]).
/// Either: an outer-tiled reduction's last dimension, one step per row
/// ([`Rows::Reduction`]; the executor calls it once per point of the
/// others).
fn row_steps(kernel: &KernelPlan, stage: &StagePlan, supported: &Supported, output: Output) -> Option<RowSteps> {
    let m = kernel.outer.len();
    // Rows picked by the executor's instructions (a gather's row ids): every
    // row's addresses come from the table it fills; not for a scatter, whose
    // store the executor makes after the call, one row at a time.
    let table = !supported.analysis.pre().is_empty();
    if table && (!stage.store_indirect.is_empty() || matches!(output, Output::Accumulate(_))) {
        return None;
    }
    let row = match (kernel.mode, output) {
        (TileMode::Outer, Output::Store(_) | Output::StoreLong(_))
            if m >= 2 && stage.inner.is_empty() && kernel.outer[m - 1] as usize <= kernel.tile =>
        {
            m - 2
        }
        // A point stage (`inner []`: a batch norm's running statistics,
        // beside the per-channel reductions) is one lane per row.
        (TileMode::Inner, Output::Store(_) | Output::StoreLong(_))
            if m >= 1
                && (stage.inner.is_empty() || matches!(stage.inner[..], [n] if n as usize <= kernel.tile))
                && stage.reduce.is_none() =>
        {
            m - 1
        }
        (TileMode::Inner, Output::FoldStore(_)) if m >= 1 && stage.inner.iter().all(|&n| n == 1) => m - 1,
        (TileMode::Inner, Output::FoldStore(_)) if inner_rows(kernel, stage) => m,
        (TileMode::Outer, Output::Accumulate(_)) if stage.inner.is_empty() => {
            m + stage.reduce.as_ref().map_or(0, |(_, red)| red.len()).checked_sub(1)?
        }
        // Lanes along the last inner dim, at the executor's point of the
        // others: the whole last reduction dim per call likewise.
        (TileMode::Inner, Output::Accumulate(_)) if stage.vertical => {
            m + stage.inner.len() + stage.reduce.as_ref().map_or(0, |(_, red)| red.len()).checked_sub(1)?
        }
        _ => return None,
    } as u32;
    let loads = if table {
        Vec::new()
    } else {
        supported.loads.iter().map(|l| Some(l.index.step(row)? * l.size)).collect::<Option<Vec<_>>>()?
    };
    let out = match output {
        Output::Accumulate(_) => 0,
        Output::StoreLong(_) => stage.store.step(row)? * DType::I64.itemsize() as i64,
        _ => stage.store.step(row)? * DType::F32.itemsize() as i64,
    };
    Some(RowSteps { loads, out, table })
}

/// Whether an inner reduction stored per point of its one inner dim runs
/// those points as rows of one call ([`Rows::Inner`]): the rows of a block
/// in a row kernel run by blocks (`lowering`'s `host_partials`), each
/// reduced along its columns.
fn inner_rows(kernel: &KernelPlan, stage: &StagePlan) -> bool {
    kernel.mode == TileMode::Inner && matches!(stage.inner[..], [n] if n > 1)
}

/// Whether every load of a buffer the kernel's stages write reads it within
/// the row being computed (the part of the writer's index that depends on
/// the outer variables is the same, the rest stays inside what the writer
/// covers), so a stage may run over several rows before the next starts.
fn same_point_reads(kernel: &KernelPlan, bufs: &[BufPlan]) -> bool {
    let m = kernel.outer.len();
    let written: Vec<(BufId, usize, Option<RowSpan>)> =
        kernel.stages.iter().map(|s| (s.out, storage_root(bufs, s.out), row_span(&s.store, s, m))).collect();
    kernel.stages.iter().all(|stage| {
        stage.insts.iter().all(|inst| match &inst.op {
            InstOp::Load { buf, index, indirect, .. } => {
                let root = storage_root(bufs, *buf);
                let read = row_span(index, stage, m);
                written.iter().filter(|w| w.1 == root).all(|(out, _, wrote)| {
                    let inside = match (&read, wrote) {
                        (Some(r), Some(w)) => r.row == w.row && r.reach <= w.reach,
                        _ => false,
                    };
                    out == buf && indirect.is_empty() && inside
                })
            }
            _ => true,
        })
    })
}

/// An affine index as the row it addresses (constant and outer-variable
/// terms) and how far past the row's start its other variables reach.
struct RowSpan {
    row: (i64, Vec<(u32, i64)>),
    reach: i64,
}

fn row_span(index: &IndexFn, stage: &StagePlan, m: usize) -> Option<RowSpan> {
    if !index.is_affine() {
        return None;
    }
    let extents: Vec<i64> =
        stage.inner.iter().chain(stage.reduce.iter().flat_map(|(_, r)| r.iter())).copied().collect();
    let mut outer: Vec<(u32, i64)> = index.coefs.iter().filter(|(v, _)| (*v as usize) < m).copied().collect();
    outer.sort_unstable();
    let mut reach = 0;
    for (v, c) in index.coefs.iter().filter(|(v, _)| *v as usize >= m) {
        let n = *extents.get(*v as usize - m)?;
        if *c < 0 {
            return None;
        }
        reach += c * (n - 1).max(0);
    }
    Some(RowSpan { row: (index.c0, outer), reach })
}

/// What a compiled stage does with its value.
fn output(kernel: &KernelPlan, stage: &StagePlan, tile_var: Option<usize>, bufs: &[BufPlan]) -> Output {
    match &stage.reduce {
        Some((op @ (ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Max | ReduceOp::Min), red)) => match kernel.mode {
            TileMode::Outer => Output::Accumulate(*op),
            TileMode::Inner if stage.vertical => Output::Accumulate(*op),
            TileMode::Inner if one_call(kernel, red) && stores_f32(stage, bufs) => Output::FoldStore(*op),
            TileMode::Inner => Output::Fold(*op),
        },
        Some(_) => Output::Value,
        None if stores_bool(stage, bufs) => {
            store_step_of(stage, tile_var, bufs).map_or(Output::Value, Output::StoreMask)
        }
        None if stores(stage, bufs, DType::I64) => {
            store_step_of(stage, tile_var, bufs).map_or(Output::Value, Output::StoreLong)
        }
        None => store_step(stage, tile_var, bufs).map_or(Output::Value, Output::Store),
    }
}

/// Whether the stage writes one bool element per point, directly.
fn stores_bool(stage: &StagePlan, bufs: &[BufPlan]) -> bool {
    stores(stage, bufs, DType::Bool)
}

/// Whether the stage writes one `dtype` element per point, directly.
fn stores(stage: &StagePlan, bufs: &[BufPlan], dtype: DType) -> bool {
    bufs[stage.out.0 as usize].dtype == dtype && stage.store_indirect.is_empty()
}

/// The shortest reduction [`Output::FoldStore`] takes: below it the
/// interpreter's few lanes cost less than a call.
const ONE_CALL_MIN: i64 = 16;

/// Whether the executor runs an inner reduction over `red` as one call of
/// at least [`ONE_CALL_MIN`] lanes (see [`Output::FoldStore`]).
pub(crate) fn one_call(kernel: &KernelPlan, red: &[i64]) -> bool {
    matches!(red, [n] if *n >= ONE_CALL_MIN && *n <= kernel.tile as i64)
}

/// Whether the stage writes one float32 element per point, directly.
fn stores_f32(stage: &StagePlan, bufs: &[BufPlan]) -> bool {
    bufs[stage.out.0 as usize].dtype == DType::F32 && stage.store_indirect.is_empty()
}

/// The output step along the tile when a pointwise stage can store itself.
fn store_step(stage: &StagePlan, tile_var: Option<usize>, bufs: &[BufPlan]) -> Option<i64> {
    if !stores_f32(stage, bufs) {
        return None;
    }
    store_step_of(stage, tile_var, bufs)
}

/// The output step along the tile, when the stage does not read its own
/// output's storage and the step fits the immediates.
fn store_step_of(stage: &StagePlan, tile_var: Option<usize>, bufs: &[BufPlan]) -> Option<i64> {
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
    // Lane offsets within an iteration (16 lanes of up to 8 bytes) are
    // 32-bit immediates.
    (step.abs() < i64::from(i32::MAX) / 128).then_some(step)
}
