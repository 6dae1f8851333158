//! Column partials hosted by the row kernel before them.
//!
//! A LayerNorm's backward computes per row the input's gradient (a row
//! kernel: sums over the row, then pointwise stages) and per column the
//! weight's and bias's: sums over every row of values that row kernel
//! computes or reads (`dy·x̂`, `dy`). Split into blocks of rows alone
//! (`split_reduce.rs`), those sums are a second pass over the activations
//! once the row kernel is done with them, from L3 or memory: four
//! LayerNorm backwards on `[2048, 256]` spent 0.9 ms there, where eager's
//! whole backward took 2.4 ms.
//!
//! When a row kernel before the column reduction covers the same rows, it
//! runs by blocks of rows instead (outer `[B]`, its stages over
//! `[B, RB, ...]`), and each block's column partials are stages at its end
//! that read the block's rows while they are still in cache: `[B, C]`
//! points, each reducing its block's `RB` rows (on the CPU an inner-tiled
//! reduction whose lanes walk the columns, `StagePlan::vertical`). The
//! combining kernel stays where the column reduction was; later column
//! reductions over the same rows join the same blocks.
//!
//! The column reduction moves up past the steps between the two, so none
//! of them may write what it reads, and what it reads of the row kernel's
//! own outputs must lie in the row being reduced (the same row coefficient,
//! within what the writer stores per row). Without such a kernel before it,
//! it may move down into the first later row kernel that reads what it
//! reads (the backward of a LayerNorm whose gradient arrives from a GEMM:
//! its column sums come first), past steps that neither write what it
//! reads nor touch what it writes; the combine then runs after that kernel. In every index of both
//! kernels, the rows must collapse to one row index
//! (`coef(d) = coef(d + 1)·size(d + 1)`), so the block and the row within
//! it are affine.

use std::collections::HashSet;

use rdyn_ir::loops::{BufId, Kernel, Program, ScalarOp, Stage, Step};
use rdyn_ir::{Ctx, Expr, Var};

use super::split_reduce::Columns;

/// Elements of a block's rows a stage covers, at most (unless that is
/// fewer than [`MIN_BLOCK_ROWS`] rows): 16K float32 (64 KB) keep the 6-11
/// buffers of a LayerNorm backward's block within a 1 MB L2 from one stage
/// to the next. Blocks of 4K elements ran slower than the separate kernels
/// (each block's fixed costs: a call per stage and row statistic).
const BLOCK_ELEMS: i64 = 16384;

/// The fewest rows per block: fewer make the `[B, C]` partials a sizeable
/// fraction of the data they summarise.
const MIN_BLOCK_ROWS: i64 = 8;

/// The fewest blocks: the blocks are the parallel work.
const MIN_BLOCKS: i64 = 4;

/// What the pass knows of a step (`split_reduce::run` keeps one per step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mark {
    /// As scheduled.
    Open,
    /// A row kernel run by blocks, hosting partials.
    Host(Blocks),
    /// Made by the pass (partials or a combine): left as it is.
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Blocks {
    blocks: i64,
    rows: i64,
}

/// A column reduction that may be hosted: the storages it reads and its
/// row count.
pub(crate) struct Hostable {
    reads: HashSet<BufId>,
    rows: i64,
}

/// `cols` as a hostable reduction: its rows one index in every index
/// (`coef(d) = coef(d + 1)·size(d + 1)`).
pub(crate) fn hostable(program: &Program, cols: &Columns) -> Option<Hostable> {
    let exprs: Vec<Expr> = cols.reductions.iter().flat_map(|s| stage_exprs(program, s)).collect();
    if !collapses(&exprs, cols.k + 1, &cols.sizes) {
        return None;
    }
    let reads = cols.reductions.iter().flat_map(|s| loads_of(program, s)).collect();
    Some(Hostable { reads, rows: cols.sizes.iter().product() })
}

/// Whether a step may host, and how: `None` for a step the pass made (a
/// partial or combine kernel), else the blocks it already runs by, if any.
fn host_state(mark: Mark) -> Option<Option<Blocks>> {
    match mark {
        Mark::Open => Some(None),
        Mark::Host(b) => Some(Some(b)),
        Mark::Done => None,
    }
}

/// Host the column reduction `cols`'s partials in a row kernel among
/// `steps` (the program's steps before it, `marks` theirs): returns the
/// kernel combining the partials, to run where the column kernel was.
pub(crate) fn host_behind(
    program: &mut Program,
    (steps, marks): (&mut [Step], &mut [Mark]),
    cols: &Columns,
    h: &Hostable,
) -> Option<Kernel> {
    for at in (0..steps.len()).rev() {
        let writes_reads = writes(program, &steps[at]).iter().any(|b| h.reads.contains(b));
        if let (Step::Kernel(row_kernel), Some(blocked)) = (&steps[at], host_state(marks[at])) {
            // Something in common, or hosting saves no memory traffic.
            let useful = writes_reads || shares_reads(program, row_kernel, &h.reads);
            if let Some(blocks) = fits(program, row_kernel, blocked, cols, h.rows).filter(|_| useful) {
                if same_rows(program, row_kernel, blocked, cols, h) {
                    let (hosted, parts) = fuse(program, row_kernel, blocked, blocks, cols)?;
                    steps[at] = Step::Kernel(hosted);
                    marks[at] = Mark::Host(blocks);
                    return Some(cols.combine(program, &parts, blocks.blocks));
                }
            }
        }
        if writes_reads {
            return None;
        }
    }
    None
}

/// Host the column reduction `cols`'s partials in a row kernel among
/// `steps` (the program's steps after it) that reads what it reads: the
/// column kernel moves down to it, so no step before it may write what the
/// column kernel reads, nor read or write what it writes. Returns where the
/// host is (the combine runs right after it) and the combining kernel.
pub(crate) fn host_ahead(
    program: &mut Program,
    (steps, marks): (&mut [Step], &mut [Mark]),
    cols: &Columns,
    h: &Hostable,
) -> Option<(usize, Kernel)> {
    // The combine's pointwise stages move too.
    let mut reads = h.reads.clone();
    reads.extend(cols.after.iter().flat_map(|s| loads_of(program, s)));
    let outs: HashSet<BufId> = cols.reductions.iter().chain(&cols.after).map(|s| program.storage_of(s.out)).collect();
    for at in 0..steps.len() {
        let written = writes(program, &steps[at]);
        if written.iter().any(|b| reads.contains(b) || outs.contains(b))
            || step_reads(program, &steps[at]).iter().any(|b| outs.contains(b))
        {
            return None;
        }
        let (Step::Kernel(row_kernel), Some(blocked)) = (&steps[at], host_state(marks[at])) else { continue };
        let Some(blocks) = fits(program, row_kernel, blocked, cols, h.rows) else { continue };
        if !shares_reads(program, row_kernel, &reads) {
            continue;
        }
        let (hosted, parts) = fuse(program, row_kernel, blocked, blocks, cols)?;
        steps[at] = Step::Kernel(hosted);
        marks[at] = Mark::Host(blocks);
        return Some((at, cols.combine(program, &parts, blocks.blocks)));
    }
    None
}

/// The storages a stage loads.
fn loads_of(program: &Program, stage: &Stage) -> Vec<BufId> {
    program
        .scalars
        .topo(&[stage.value])
        .into_iter()
        .filter_map(|id| match &program.scalars.get(id).op {
            ScalarOp::Load { buf, .. } => Some(program.storage_of(*buf)),
            _ => None,
        })
        .collect()
}

/// The storages a step reads.
fn step_reads(program: &Program, step: &Step) -> Vec<BufId> {
    match step {
        Step::Kernel(k) => k.stages.iter().flat_map(|s| loads_of(program, s)).collect(),
        Step::Extern(e) => e.inputs.iter().map(|b| program.storage_of(*b)).collect(),
    }
}

/// The storages a step writes.
fn writes(program: &Program, step: &Step) -> Vec<BufId> {
    match step {
        Step::Kernel(k) => k.stages.iter().map(|s| program.storage_of(s.out)).collect(),
        Step::Extern(e) => e.outputs.iter().map(|b| program.storage_of(*b)).collect(),
    }
}

/// Every index a stage evaluates: its store, then its loads' and index
/// values' (each load's affine part; a gather's data part is not an index).
fn stage_exprs(program: &Program, stage: &Stage) -> Vec<Expr> {
    let mut out = vec![stage.store.clone()];
    for id in program.scalars.topo(&[stage.value]) {
        match &program.scalars.get(id).op {
            ScalarOp::Load { index, .. } => out.push(index.clone()),
            ScalarOp::Index(e) => out.push(e.clone()),
            _ => {}
        }
    }
    out
}

/// Whether every expression walks the dims `first..first + sizes.len()`
/// as one flat index: affine in each, `coef(d) = coef(d + 1)·size(d + 1)`.
fn collapses(exprs: &[Expr], first: usize, sizes: &[i64]) -> bool {
    exprs.iter().all(|e| {
        let coefs: Option<Vec<i64>> = (0..sizes.len()).map(|j| e.linear_coef(Var((first + j) as u32))).collect();
        let Some(coefs) = coefs else { return false };
        let Some(&last) = coefs.last() else { return true };
        let mut stride = 1i64;
        for j in (0..sizes.len()).rev() {
            if Some(coefs[j]) != last.checked_mul(stride) {
                return false;
            }
            stride = stride.saturating_mul(sizes[j]);
        }
        true
    })
}

/// The variables replacing dims `first..first + n` by one flat index
/// `flat` (the last dim's variable carries it, the others vanish), the
/// variables before `first` by `before` and those after shifted to
/// `after_first`.
fn collapse_vars(
    total: usize,
    (first, n): (usize, usize),
    before: &[Expr],
    flat: &Expr,
    after_first: u32,
) -> Vec<Expr> {
    (0..total)
        .map(|v| {
            if v < first {
                before.get(v).cloned().unwrap_or_else(Expr::zero)
            } else if v < first + n - 1 {
                Expr::zero()
            } else if v == first + n - 1 {
                flat.clone()
            } else {
                Expr::v(after_first + (v - first - n) as u32)
            }
        })
        .collect()
}

/// The blocks `row_kernel` would run (or runs) by when it can host the
/// partials of `rows` rows: a plain parallel kernel whose outer dims are
/// the rows, collapsing in every index.
fn fits(program: &Program, row_kernel: &Kernel, blocked: Option<Blocks>, cols: &Columns, rows: i64) -> Option<Blocks> {
    if let Some(b) = blocked {
        return (b.blocks * b.rows == rows).then_some(b);
    }
    let n = row_dims(row_kernel, rows)?;
    let sizes: Vec<i64> = row_kernel.outer[..n].iter().map(Expr::as_const).collect::<Option<_>>()?;
    let plain = row_kernel.stages.iter().all(|s| {
        let m = row_kernel.outer.len();
        s.store_indirect.is_empty() && s.ranges.len() >= m && s.ranges[..m] == row_kernel.outer[..]
    });
    let exprs: Vec<Expr> = row_kernel.stages.iter().flat_map(|s| stage_exprs(program, s)).collect();
    if !plain || !collapses(&exprs, 0, &sizes) {
        return None;
    }
    // The largest divisor of the rows within the block's elements.
    let most = (BLOCK_ELEMS / cols.columns).max(MIN_BLOCK_ROWS);
    let per_block = (MIN_BLOCK_ROWS..=most.min(rows / MIN_BLOCKS)).rev().find(|d| rows % d == 0)?;
    Some(Blocks { blocks: rows / per_block, rows: per_block })
}

/// How many of `row_kernel`'s leading outer dims are the `rows` rows (all
/// of a row kernel's; all but the columns of a pointwise kernel over
/// `[rows, columns]`, which is the same as a row kernel over `[rows]`).
fn row_dims(row_kernel: &Kernel, rows: i64) -> Option<usize> {
    let mut product = 1i64;
    for (n, e) in row_kernel.outer.iter().enumerate() {
        product = product.checked_mul(e.as_const()?)?;
        if product == rows {
            return Some(n + 1);
        }
    }
    None
}

/// Whether each load of a buffer the row kernel writes reads, at row `r`,
/// what the row kernel wrote at row `r`: the same buffer written by one
/// stage, the same row coefficient, inside what that stage stores per row.
fn same_rows(program: &Program, row_kernel: &Kernel, blocked: Option<Blocks>, cols: &Columns, h: &Hostable) -> bool {
    let written: Vec<BufId> = row_kernel.stages.iter().map(|s| program.storage_of(s.out)).collect();
    // The row kernel's row dims (blocked: block and row within it).
    let row_dims: Vec<i64> = match blocked {
        Some(b) => vec![b.blocks, b.rows],
        None => {
            let n = row_dims(row_kernel, h.rows).unwrap_or(0);
            row_kernel.outer[..n].iter().filter_map(Expr::as_const).collect()
        }
    };
    let nr = cols.sizes.len();
    let mut col_ext = vec![1; cols.k];
    col_ext.push(cols.columns);
    let col_ctx = Ctx::with_extents(&col_ext);
    for stage in &cols.reductions {
        for id in program.scalars.topo(&[stage.value]) {
            let ScalarOp::Load { buf, index, .. } = &program.scalars.get(id).op else { continue };
            let storage = program.storage_of(*buf);
            if !written.contains(&storage) {
                continue;
            }
            let writers: Vec<&Stage> =
                row_kernel.stages.iter().filter(|s| program.storage_of(s.out) == storage).collect();
            let [writer] = writers[..] else { return false };
            if writer.out != *buf {
                return false;
            }
            let Some(row_coef) = index.linear_coef(Var((cols.k + nr) as u32)) else { return false };
            // The load within the row: the column kept, every other variable 0.
            let keep: Vec<Expr> =
                (0..cols.k + 1 + nr).map(|v| if v == cols.k { Expr::v(v as u32) } else { Expr::zero() }).collect();
            let in_row = index.substitute_vars(&keep, &col_ctx);
            if !writes_row(writer, &row_dims, row_coef, in_row.bounds(&col_ctx)) {
                return false;
            }
        }
    }
    true
}

/// Whether the row kernel loads some storage in `reads` (the column
/// reduction reads its inputs too: the rows are in cache once).
fn shares_reads(program: &Program, row_kernel: &Kernel, reads: &HashSet<BufId>) -> bool {
    row_kernel.stages.iter().any(|s| loads_of(program, s).iter().any(|b| reads.contains(b)))
}

/// Whether `writer` (over row dims `row_dims`, then its own) stores each
/// row densely at `row_coef`·row + [lo, hi], covering `range`.
fn writes_row(writer: &Stage, row_dims: &[i64], row_coef: i64, range: Option<(i64, i64)>) -> bool {
    let n = row_dims.len();
    let own: Option<Vec<i64>> = writer.ranges[n..].iter().map(Expr::as_const).collect();
    let (Some(own), Some((lo, hi))) = (own, range) else { return false };
    let Some(store_coef) = writer.store.linear_coef(Var(n as u32 - 1)) else { return false };
    let mut ext = vec![1; n];
    ext.extend(&own);
    let ctx = Ctx::with_extents(&ext);
    let zero_rows: Vec<Expr> =
        (0..ext.len() as u32).map(|v| if (v as usize) < n { Expr::zero() } else { Expr::v(v) }).collect();
    let per_row = writer.store.substitute_vars(&zero_rows, &ctx);
    let Some((wlo, whi)) = per_row.bounds(&ctx) else { return false };
    let points: i64 = own.iter().product();
    store_coef == row_coef && whi - wlo + 1 == points && wlo <= lo && hi <= whi
}

/// The row kernel run by `blocks` (unless it already is), with the
/// column partials as its last stages; and the partial buffers.
fn fuse(
    program: &mut Program,
    row_kernel: &Kernel,
    blocked: Option<Blocks>,
    blocks: Blocks,
    cols: &Columns,
) -> Option<(Kernel, Vec<BufId>)> {
    let Blocks { blocks: b, rows: rb } = blocks;
    let mut stages = match blocked {
        Some(_) => row_kernel.stages.clone(),
        None => block_stages(program, row_kernel, blocks),
    };
    // Partial stages: variables (block, column, row within the block).
    let nr = cols.sizes.len();
    let mut before = vec![Expr::zero(); cols.k];
    before.push(Expr::v(1));
    let flat = Expr::v(0).scale(rb).add(&Expr::v(2));
    let vars = collapse_vars(cols.k + 1 + nr, (cols.k + 1, nr), &before, &flat, 3);
    let extents = [b, cols.columns, rb];
    let mut parts = Vec::new();
    for stage in &cols.reductions {
        let part = cols.partial_buffer(program, stage, b);
        stages.push(cols.partial_stage(program, stage, (part, b), &[rb], (&vars, &extents))?);
        parts.push(part);
    }
    Some((Kernel { outer: vec![Expr::c(b)], stages }, parts))
}

/// `row_kernel`'s stages over `[blocks, rows per block, own ranges...]`.
fn block_stages(program: &mut Program, row_kernel: &Kernel, blocks: Blocks) -> Vec<Stage> {
    let n = row_dims(row_kernel, blocks.blocks * blocks.rows).unwrap_or(row_kernel.outer.len());
    let flat = Expr::v(0).scale(blocks.rows).add(&Expr::v(1));
    row_kernel
        .stages
        .iter()
        .map(|stage| {
            let own: Vec<Expr> = stage.ranges[n..].to_vec();
            let red: Vec<Expr> = stage.reduce.iter().flat_map(|r| r.ranges.clone()).collect();
            let total = n + own.len() + red.len();
            let vars = collapse_vars(total, (0, n), &[], &flat, 2);
            let mut extents = vec![blocks.blocks, blocks.rows];
            extents.extend(own.iter().chain(&red).map(|e| e.as_const().unwrap_or(i64::MAX / 4)));
            let ctx = Ctx::with_extents(&extents);
            let mut ranges = vec![Expr::c(blocks.blocks), Expr::c(blocks.rows)];
            ranges.extend(own);
            Stage {
                out: stage.out,
                ranges,
                reduce: stage.reduce.clone(),
                value: program.scalars.substitute(stage.value, &vars, &ctx),
                store: stage.store.substitute_vars(&vars, &ctx),
                store_indirect: Vec::new(),
            }
        })
        .collect()
}
