//! Kernels whose stages all run by rows ([`crate::jit::JitStage::rows`]):
//! instead of every stage once per outer point, each stage runs over
//! several consecutive points (rows) in one call before the next stage
//! starts. Outer tiles: a row is one point of the next-to-last outer
//! dimension, its lanes the last (which fits one tile). Inner tiles: a row
//! is one point of the last outer dimension, its lanes the stage's own
//! range. The JIT only allows this when no stage reads another's output
//! outside the row it wrote, so the order change is invisible.
//!
//! A call covers at most `ROW_BATCH_LANES` (2048) lanes, so the rows stay in L1
//! for the next stage; each address steps by a constant per row, and everything
//! invariant along the tile is recomputed per row. Stages left to the interpreter
//! (an embedding backward's int64 row ids) run row by row in between, if they
//! can (not scatters or accumulations).

use super::{advance, call_jit_rows, f32_output, run_stage_inner, run_stage_outer, unravel, Memory, Scratch};
use crate::jit::stage::Rows;
use crate::plan::{KernelPlan, StagePlan, TileMode};

/// Lanes one call covers at most: a stage's rows stay in L1 for the next
/// stage (all rows of a thread's share at once ran a two-stage softmax 12%
/// slower than one row at a time).
const ROW_BATCH_LANES: usize = 2048;

/// Whether the kernel runs by rows: every compiled stage compiled for it
/// (which `jit::row_steps` allows only for kernels of that shape), at least
/// one; the JIT leaves a stage interpreted in such a kernel only when the
/// executor may run it row by row in between.
pub(super) fn by_rows(kernel: &KernelPlan) -> bool {
    let compiled = || kernel.stages.iter().filter_map(|s| s.jit.as_ref());
    compiled().next().is_some() && compiled().all(|j| j.rows == Rows::Points)
}

/// A stage's lanes per row and the variable they walk.
fn row_lanes(kernel: &KernelPlan, stage: &StagePlan) -> (usize, usize) {
    let m = kernel.outer.len();
    match kernel.mode {
        TileMode::Outer => (kernel.outer[m - 1].max(0) as usize, m - 1),
        TileMode::Inner => {
            let red = stage.reduce.as_ref().map_or(&[][..], |(_, r)| &r[..]);
            let lanes = red.last().or(stage.inner.last()).copied().unwrap_or(1);
            (lanes.max(0) as usize, m + stage.inner.len() + red.len() - 1)
        }
    }
}

/// Run work items `items` (outer points, as the executor numbers them)
/// stage by stage, [`ROW_BATCH_LANES`] at a time.
pub(super) fn run_rows(kernel: &KernelPlan, mem: &Memory, sc: &mut Scratch, items: std::ops::Range<usize>) {
    let m = kernel.outer.len();
    // The odometer's dimensions; rows are points of its last one.
    let dims = match kernel.mode {
        TileMode::Outer => &kernel.outer[..m - 1],
        TileMode::Inner => &kernel.outer[..],
    };
    let row_var = dims.len() - 1;
    let rows_in_dim = dims[row_var] as usize;
    let widest = kernel.stages.iter().map(|s| row_lanes(kernel, s).0).max().unwrap_or(1);
    let per_call = (ROW_BATCH_LANES / widest.max(1)).max(1);
    unravel(items.start, dims, &mut sc.env, 0);
    let mut left = items.len();
    while left > 0 {
        let rows = left.min(rows_in_dim - sc.env[row_var] as usize).min(per_call);
        for (s, stage) in kernel.stages.iter().enumerate() {
            let Some(jit) = &stage.jit else {
                interpret_rows(kernel, stage, s, (row_var, rows), mem, sc);
                continue;
            };
            let (lanes, tile_var) = row_lanes(kernel, stage);
            sc.env[dims.len()..].iter_mut().for_each(|v| *v = 0);
            let out = f32_output(stage, mem, &sc.env);
            // SAFETY: `rows` rows of the stage's float32 output from this
            // point, in bounds by the plan (`jit::row_steps`).
            unsafe { call_jit_rows(jit, (stage, s, tile_var), (out, rows), row_var, lanes, mem, sc) };
        }
        left -= rows;
        sc.env[row_var] += rows as i64 - 1;
        advance(&mut sc.env, 0, dims);
    }
}

/// An interpreted stage of a kernel run by rows, one row (a tile) at a time
/// for `rows.1` rows of variable `rows.0` from the current point.
fn interpret_rows(
    kernel: &KernelPlan,
    stage: &StagePlan,
    s: usize,
    rows: (usize, usize),
    mem: &Memory,
    sc: &mut Scratch,
) {
    let m = kernel.outer.len();
    let (row_var, count) = rows;
    let first = sc.env[row_var];
    for r in 0..count {
        sc.env[row_var] = first + r as i64;
        match kernel.mode {
            TileMode::Outer => {
                sc.env[m - 1] = 0;
                run_stage_outer(stage, s, m, kernel.outer[m - 1].max(0) as usize, mem, sc);
            }
            TileMode::Inner => run_stage_inner(stage, s, m, kernel.tile, mem, sc),
        }
    }
    sc.env[row_var] = first;
}
