//! One loop-IR kernel → one CPU kernel plan.
//!
//! - Tile mode: a kernel vectorises either across the last outer dimension
//!   (`TileMode::Outer`: pointwise kernels, reductions over strided dims) or along
//!   each stage's own last dimension (`TileMode::Inner`: row reductions). The tile
//!   runs along a row when the stages with a real tail (more than one element)
//!   mostly read along it; loads constant along the row do not vote. In an
//!   inner-tiled kernel, a reduction whose loads walk its last inner dim and not
//!   its reduction (a block's column partials in a row kernel run by blocks)
//!   tiles along that dim instead, each lane its own output
//!   (`StagePlan::vertical`).
//! - Tile width: up to `TILE` lanes; an outer-tiled kernel with too few rows to
//!   give each thread two tiles gets narrower tiles (down to 64 lanes), else a
//!   column mean of `[256, 1024]` would be one tile, on one thread.
//! - Columns: an outer-tiled kernel that reads a transposed layout (a load whose
//!   lanes are a cache line or more apart while its next row is close: NCHW
//!   written from a channels-last input) runs by columns: every row's tile at one
//!   column, then the next, the columns as wide as fits L1 with the strided reads
//!   of all rows. Row by row, each row walked the whole strided range and L1 had
//!   lost it when the next row came back to the same lines.
//! - Uniform instructions: those whose value is the same on every lane of the
//!   tile (broadcast loads, per-channel parameters and arithmetic on them) are
//!   computed on one lane and copied (`StagePlan::uniform`); an indirect load
//!   whose index registers hold one value across the tile (an embedding row
//!   chosen per row of output) is read as an affine load.
//! - Scatter kernels are serial (across the leading loops whose points write
//!   disjoint elements, in parallel: [`crate::disjoint`]). A serial kernel runs in tiles along its last loop
//!   (up to `TILE` points), not point by point, when it cannot see its own writes
//!   within a tile: a stage `out[a] = op(out[a], rest)` is planned as `rest` with
//!   `StagePlan::accumulate`, whose store combines lane by lane in index order
//!   (duplicates within a tile all count), and a plain scatter whose value does
//!   not read its own buffer stores its lanes in order (the last write wins); any
//!   other serial stage keeps one point per tile.

use std::collections::HashMap;

use rdyn_ir::loops::{BinaryOp, Kernel, Program, ReduceOp, ScalarId, ScalarOp, Stage};
use rdyn_ir::{Ctx, DType, Expr, Kind, Var};

use crate::plan::{operand_kind, IndexFn, Inst, InstOp, KernelPlan, Reg, StagePlan, TileMode};
use crate::split::{Split, Tile};
use crate::CodegenError;

fn concrete(e: &Expr, ctx: &Ctx) -> Result<i64, CodegenError> {
    e.simplify(ctx).as_const().ok_or_else(|| CodegenError::Symbolic(format!("range {e}")))
}

/// Every index expression a stage evaluates.
fn stage_exprs(program: &Program, stage: &Stage) -> Vec<Expr> {
    let mut roots = vec![stage.value];
    roots.extend(stage.store_indirect.iter().map(|(s, _)| *s));
    let mut out = vec![stage.store.clone()];
    for id in program.scalars.topo(&roots) {
        match &program.scalars.get(id).op {
            ScalarOp::Load { index, .. } => out.push(index.clone()),
            ScalarOp::Index(e) => out.push(e.clone()),
            _ => {}
        }
    }
    out
}

/// Groups of consecutive dims (variables `first..first + sizes.len()`) that
/// every expression walks as one: `coef(k) == coef(k+1) · size(k+1)`. A
/// dim of size 1 (its variable is always 0) joins the group at hand
/// whatever its coefficients, so `[1024, 1]` (a `keepdim` reduction's
/// points) is one dim of 1024 and its rows run consecutively. Each group
/// lists its variable-carrying dim last: the last dim of size other than
/// 1 (or of size 1 when they all are); the others vanish.
fn collapse_groups(sizes: &[i64], first: usize, exprs: &[Expr]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    // The current group's last dim of size other than 1.
    let mut carrier: Option<usize> = None;
    for (k, &size) in sizes.iter().enumerate() {
        let mergeable = !groups.is_empty()
            && (size == 1
                || carrier.is_none_or(|c| {
                    exprs.iter().all(|e| {
                        let (a, b) = (Var((first + c) as u32), Var((first + k) as u32));
                        if !e.mentions_var(a) && !e.mentions_var(b) {
                            return true;
                        }
                        matches!((e.linear_coef(a), e.linear_coef(b)), (Some(ca), Some(cb)) if ca == cb * size)
                    })
                }));
        match groups.last_mut() {
            Some(last) if mergeable => last.push(k),
            _ => {
                groups.push(vec![k]);
                carrier = None;
            }
        }
        if size != 1 {
            carrier = Some(k);
        }
    }
    for group in &mut groups {
        // Size-1 dims first, in order, then the carrier.
        if let Some(pos) = group.iter().rposition(|&d| sizes[d] != 1) {
            let c = group.remove(pos);
            group.push(c);
        }
    }
    groups
}

fn narrow_of(dtype: DType) -> Option<DType> {
    match dtype {
        DType::Bool | DType::U8 | DType::I8 | DType::I16 | DType::I32 => Some(dtype),
        _ => None,
    }
}

struct RegAlloc {
    kinds: Vec<Kind>,
    free: Vec<Reg>,
}

impl RegAlloc {
    /// A register no other value will ever use.
    fn fresh(&mut self, kind: Kind) -> Reg {
        self.kinds.push(kind);
        (self.kinds.len() - 1) as Reg
    }

    fn take(&mut self, kind: Kind) -> Reg {
        if let Some(pos) = self.free.iter().position(|r| self.kinds[*r as usize] == kind) {
            return self.free.swap_remove(pos);
        }
        self.kinds.push(kind);
        (self.kinds.len() - 1) as Reg
    }
}

/// Per stage: its inner and reduction sizes, and its index expressions.
type Shape = (Vec<i64>, Vec<i64>, Vec<Expr>);

pub(crate) fn kernel_plan(
    program: &Program,
    buffers: &[crate::plan::BufPlan],
    kernel: &Kernel,
    syms: &Ctx,
    name: String,
) -> Result<KernelPlan, CodegenError> {
    let outer: Vec<i64> = kernel.outer.iter().map(|e| concrete(e, syms)).collect::<Result<_, _>>()?;
    let m0 = outer.len();
    let mut shapes: Vec<Shape> = Vec::new();
    for stage in &kernel.stages {
        let ranges: Vec<i64> = stage.ranges.iter().map(|e| concrete(e, syms)).collect::<Result<_, _>>()?;
        let red: Vec<i64> = match &stage.reduce {
            Some(r) => r.ranges.iter().map(|e| concrete(e, syms)).collect::<Result<Vec<_>, _>>()?,
            None => Vec::new(),
        };
        let exprs = stage_exprs(program, stage).into_iter().map(|e| e.simplify(syms)).collect();
        shapes.push((ranges[m0..].to_vec(), red, exprs));
    }
    let serial = kernel.stages.iter().any(|s| !s.store_indirect.is_empty());
    let last_is_tile = shapes.iter().any(|(inner, red, _)| !inner.iter().chain(red).any(|&n| n > 1));
    // Float32 stages compile (`jit`), and compiled code runs narrow rows at
    // full speed; anything else is interpreted tile by tile.
    let compiled = kernel.stages.iter().all(|s| program.buffer(s.out).dtype == DType::F32);
    let tile = match (last_is_tile, compiled) {
        (false, _) => Tile::Own,
        (true, true) => Tile::Compiled,
        (true, false) => Tile::Interpreted,
    };
    let split = if serial {
        Split::find(&outer, &[], syms, Tile::Interpreted)
    } else {
        let exprs: Vec<Expr> = shapes.iter().flat_map(|(_, _, e)| e.iter().cloned()).collect();
        Split::find(&outer, &exprs, syms, tile)
    };
    // The expressions over the split outer variables.
    for (inner, red, exprs) in &mut shapes {
        let tail: Vec<i64> = inner.iter().chain(red.iter()).copied().collect();
        for e in exprs.iter_mut() {
            *e = split.apply(e, syms, &tail);
        }
    }
    let (inner_splits, red_splits) = own_splits(&mut shapes, kernel, &split, serial, compiled, syms);
    let all_exprs: Vec<Expr> = shapes.iter().flat_map(|(_, _, e)| e.iter().cloned()).collect();
    let outer = split.sizes.clone();
    let mut groups =
        if serial { (0..outer.len()).map(|k| vec![k]).collect() } else { collapse_groups(&outer, 0, &all_exprs) };
    let pointwise = shapes.iter().all(|(inner, red, _)| !inner.iter().chain(red).any(|&n| n > 1));
    if !serial && pointwise {
        widest_tile_last(&mut groups, &outer, &all_exprs, compiled);
    }
    let new_outer: Vec<i64> = groups.iter().map(|g| g.iter().map(|k| outer[*k]).product()).collect();
    let layout = Layout { split: &split, groups: &groups, m: outer.len(), new_outer: &new_outer, serial };
    let mut stages = Vec::new();
    for (((stage, shape), inner_split), red_split) in kernel.stages.iter().zip(shapes).zip(inner_splits).zip(red_splits)
    {
        let splits = (&inner_split, &red_split);
        stages.push(plan_stage(program, buffers, stage, shape, splits, &layout, syms)?);
    }
    let mut plan = finish_kernel(program, buffers, kernel, name, new_outer, stages, serial);
    // A serial kernel's outer dims are the loop IR's (no split, no merge).
    if serial && tiled_serial(program, kernel, &plan.stages) && plan.outer.len() == kernel.outer.len() {
        plan.disjoint = crate::disjoint::disjoint_prefix(program, kernel, &plan.outer, syms);
    }
    Ok(plan)
}

/// Then a pointwise stage's inner dimensions, as its own indices divide
/// them (an interleave's `i // 2` and `i % 2`: evaluated lane by lane,
/// such an index costs more than the rest of the stage), remainders in
/// front so the tile stays wide; then each stage's reduction dimensions.
/// A compiled stage's reduction whose points may be combined in any order
/// (not an arg-reduction, which keeps the first of equal values) splits
/// its last dimension for any divisor, the narrow remainder moved to the
/// front so the lanes walk the quotient: the gradient of a patch
/// convolution read back through `(w // 2, w % 2)` by a LayerNorm's weight
/// gradient was interpreted (5.6 ms; 0.2 ms compiled).
fn own_splits(
    shapes: &mut [Shape],
    kernel: &Kernel,
    split: &Split,
    serial: bool,
    compiled: bool,
    syms: &Ctx,
) -> (Vec<Split>, Vec<Split>) {
    let inner_splits: Vec<Split> = shapes
        .iter_mut()
        .zip(&kernel.stages)
        .map(|((inner, red, exprs), stage)| {
            let by: &[Expr] = if serial || stage.reduce.is_some() { &[] } else { exprs };
            let mut inner_split = Split::find_after(&split.sizes, inner, by, syms, Tile::Own);
            inner_split.widen_last(syms);
            exprs.iter_mut().for_each(|e| *e = inner_split.apply(e, syms, red));
            inner_split
        })
        .collect();
    let red_splits: Vec<Split> = shapes
        .iter_mut()
        .zip(&inner_splits)
        .zip(&kernel.stages)
        .map(|(((_, red, exprs), inner_split), stage)| {
            let inner = &inner_split.sizes;
            let prefix: Vec<i64> = split.sizes.iter().chain(inner.iter()).copied().collect();
            let by: &[Expr] = if serial { &[] } else { exprs };
            let any_order =
                compiled && stage.reduce.as_ref().is_some_and(|r| !matches!(r.op, ReduceOp::ArgMax | ReduceOp::ArgMin));
            let tile = if any_order { Tile::Compiled } else { Tile::Interpreted };
            let mut red_split = Split::find_after(&prefix, red, by, syms, tile);
            if any_order {
                red_split.widen_last(syms);
            }
            exprs.iter_mut().for_each(|e| *e = red_split.apply(e, syms, &[]));
            red_split
        })
        .collect();
    (inner_splits, red_splits)
}

/// The kernel's outer loops after splitting and collapsing: the split,
/// which split dims each collapsed dim joins, and the collapsed sizes.
struct Layout<'l> {
    split: &'l Split,
    groups: &'l [Vec<usize>],
    /// Split outer dims (before collapsing).
    m: usize,
    new_outer: &'l [i64],
    serial: bool,
}

/// One stage's plan over the kernel's collapsed loops: its own dims split
/// (`splits`: inner, reduction) and collapsed by its own indices.
fn plan_stage(
    program: &Program,
    buffers: &[crate::plan::BufPlan],
    stage: &Stage,
    (inner, red, own): Shape,
    (inner_split, red_split): (&Split, &Split),
    layout: &Layout,
    syms: &Ctx,
) -> Result<StagePlan, CodegenError> {
    let (m, serial, new_outer) = (layout.m, layout.serial, layout.new_outer);
    let m_new = new_outer.len();
    // The outer split reads the original ranges; the rest, the split ones.
    let tail: Vec<i64> = inner.iter().chain(red.iter()).copied().collect();
    let orig_red = red;
    let inner = inner_split.sizes.clone();
    let red = red_split.sizes.clone();
    let total_vars = m + inner.len() + red.len();
    // The stage's own dims collapse by its own indices.
    let single = |n: usize| (0..n).map(|k| vec![k]).collect::<Vec<_>>();
    let inner_groups = if serial { single(inner.len()) } else { collapse_groups(&inner, m, &own) };
    let red_groups = if serial { single(red.len()) } else { collapse_groups(&red, m + inner.len(), &own) };
    let product = |groups: &[Vec<usize>], sizes: &[i64]| -> Vec<i64> {
        groups.iter().map(|g| g.iter().map(|k| sizes[*k]).product()).collect()
    };
    let new_inner = product(&inner_groups, &inner);
    let new_red = product(&red_groups, &red);
    // Old variable → expression over the collapsed variables: the last
    // dim of a group becomes the group's variable, the others vanish
    // (their contribution is the same variable scaled, by construction).
    let mut remap = vec![Expr::zero(); total_vars];
    let segments = [
        (layout.groups, 0usize, 0usize),
        (&inner_groups[..], m, m_new),
        (&red_groups[..], m + inner.len(), m_new + new_inner.len()),
    ];
    for (seg_groups, old_first, new_first) in segments {
        for (g, group) in seg_groups.iter().enumerate() {
            if let Some(last) = group.last() {
                remap[old_first + *last] = Expr::v((new_first + g) as u32);
            }
        }
    }
    let inner = new_inner;
    let reduce = stage.reduce.as_ref().map(|r| (r.op, new_red.clone()));
    let mut extents = new_outer.to_vec();
    extents.extend(inner.iter().copied());
    if let Some((_, r)) = &reduce {
        extents.extend(r.iter().copied());
    }
    let mut ctx = Ctx::with_extents(&extents);
    ctx.sym_values = syms.sym_values.clone();
    let index = |e: &Expr| {
        let e = layout.split.apply(&e.simplify(syms), syms, &tail);
        let e = red_split.apply(&inner_split.apply(&e, syms, &orig_red), syms, &[]);
        IndexFn::new(&e.substitute_vars(&remap, &ctx))
    };
    let (stage, accumulate) = match scatter_combine(program, stage) {
        Some((op, rest)) => (Stage { value: rest, ..stage.clone() }, Some(op)),
        None => (stage.clone(), None),
    };
    let mut plan = compile_stage(program, buffers, &extents, &stage, inner, reduce, &index, syms)?;
    plan.accumulate = accumulate;
    Ok(plan)
}

/// Mode, columns, tile width, transposes and uniform instructions of the
/// kernel whose stages are planned.
fn finish_kernel(
    program: &Program,
    buffers: &[crate::plan::BufPlan],
    kernel: &Kernel,
    name: String,
    new_outer: Vec<i64>,
    stages: Vec<StagePlan>,
    serial: bool,
) -> KernelPlan {
    // Which reductions would walk their columns in an inner-tiled kernel:
    // they vote for the mode as such, and keep it only in one.
    let mut stages = stages;
    let m = new_outer.len();
    stages.iter_mut().for_each(|s| s.vertical = !serial && s.walks_inner(m));
    let mode = choose_mode(&new_outer, &stages);
    if mode != TileMode::Inner {
        stages.iter_mut().for_each(|s| s.vertical = false);
    }
    let columns = if serial { None } else { column_tile(&new_outer, mode, &stages) };
    // A serial kernel runs point by point, unless `tiled_serial`.
    let tile = match (serial, columns) {
        (true, _) if tiled_serial(program, kernel, &stages) => {
            crate::tile::TILE.min(new_outer.last().copied().unwrap_or(1).max(1) as usize)
        }
        (true, _) => 1,
        (false, Some(tile)) => tile,
        (false, None) => outer_tile(&new_outer, mode, &stages, crate::parallel::threads()),
    };
    let mut kernel = KernelPlan {
        name,
        outer: new_outer,
        mode,
        stages,
        serial,
        disjoint: 0,
        tile,
        columns: columns.is_some(),
        transpose: None,
    };
    kernel.transpose = crate::transpose::detect(&kernel, buffers);
    if !serial {
        for k in 0..kernel.stages.len() {
            if let Some(var) = crate::jit::tile_var(&kernel, &kernel.stages[k]) {
                let flags = kernel.stages[k].uniform_insts(Some(var));
                if flags.iter().any(|f| *f) {
                    kernel.stages[k].uniform = Some((var, flags));
                }
            }
        }
    }
    kernel
}

/// The fewest lanes an interpreted tile should have: the interpreter pays
/// per tile (as `split.rs`'s `MIN_TILE`).
const NARROW_TILE: i64 = 16;

/// The fewest points a call of a compiled stage over rows should cover: a
/// call's fixed cost (the call, each load's first address) and a row narrower
/// than a SIMD group (lanes of the one-lane tail) outweigh the work of fewer
/// points. ConvNeXt's 2x2 patches (4 points a call) took 16 ms, 3.7 ms as
/// 28-lane tiles; a rotary interleave's `[.., 32, 2]` (64 points a call) 3.0
/// ms, 0.9 ms as 32-lane tiles; channels-last maps with rows of 3 or 5
/// channels (390 and 630 points a call) stay as they are.
const ROW_CALL_MIN: i64 = 128;

/// An outer-tiled pointwise kernel tiles along its last outer dim, whatever
/// its length; compiled stages run many such rows per call (the next-to-last
/// dim's points). When a layout change leaves both narrow (ConvNeXt's 2x2
/// patches: `[n, h/2, w/2, c, 2, 2]`), or the last narrow for an interpreted
/// stage, move last the dim of at least [`NARROW_TILE`] points whose accesses
/// step least (the sum of its coefficients over every load and store, a
/// non-affine one counting as far apart): the lanes then walk memory nearly
/// contiguously. A wide last dim some access divides (`i // 2`, `i % 2` of
/// an interleave of odd length, which no split makes affine) moves too, for
/// a wide dim every access walks affinely: lanes along a divided dim compute
/// their indices one by one (interpreted: 290 ns a point for a rotary
/// backward), while along an affine one the divided parts are the same on
/// every lane and computed once per call. The outer points of a pointwise
/// kernel are independent, so any order is the same kernel.
fn widest_tile_last(groups: &mut [Vec<usize>], outer: &[i64], exprs: &[Expr], compiled: bool) {
    let size = |g: &[usize]| g.iter().map(|k| outer[*k]).product::<i64>();
    // Whether some access is not affine along the group (`i // 2`, `i % 2`
    // of an interleave whose odd length no split divides).
    let divided = |g: &[usize]| g.last().is_none_or(|&c| exprs.iter().any(|e| e.linear_coef(Var(c as u32)).is_none()));
    let Some(last) = groups.last() else { return };
    let rows = groups.len().checked_sub(2).map_or(1, |g| size(&groups[g]));
    let wide = size(last) >= NARROW_TILE || (compiled && size(last) * rows >= ROW_CALL_MIN);
    if wide && !divided(last) {
        return;
    }
    let cost = |g: &[usize]| -> i64 {
        let Some(&carrier) = g.last() else { return i64::MAX };
        exprs.iter().map(|e| e.linear_coef(Var(carrier as u32)).map_or(1 << 20, |c| c.abs())).sum()
    };
    // A wide last dim moves only for one every access walks affinely.
    let best = (0..groups.len())
        .filter(|&g| size(&groups[g]) >= NARROW_TILE && !(wide && divided(&groups[g])))
        .min_by_key(|&g| (cost(&groups[g]), -size(&groups[g])));
    if let Some(g) = best {
        groups[g..].rotate_left(1);
    }
}

/// The tile of a parallel kernel: [`crate::tile::TILE`] lanes, narrower
/// when an outer-tiled kernel has too few rows to give each thread two
/// tiles (a column reduction `[1, 1024]` over many rows would otherwise be
/// one tile, on one thread). Never below 64 lanes, a multiple of 16.
fn outer_tile(outer: &[i64], mode: TileMode, stages: &[StagePlan], threads: usize) -> usize {
    const NARROWEST: usize = 64;
    let full = crate::tile::TILE;
    let Some(&last) = outer.last().filter(|_| mode == TileMode::Outer) else {
        return full;
    };
    let last = last.max(1) as usize;
    let rows: usize = outer[..outer.len() - 1].iter().map(|&n| n.max(1) as usize).product();
    let per_point = stages.iter().map(StagePlan::points_per_outer).max().unwrap_or(1);
    let want = 2 * threads;
    let items = rows * last.div_ceil(full);
    if threads < 2 || items >= want || rows * last * per_point < crate::tile::PARALLEL_MIN_WORK {
        return full;
    }
    let per_row = want.div_ceil(rows);
    last.div_ceil(per_row).next_multiple_of(16).clamp(NARROWEST, full)
}

/// The tile of an outer-tiled kernel that reads a transposed layout, run
/// by columns; `None` for any other kernel.
///
/// A transposed read is a load whose lanes are each a cache line or more
/// apart and whose next row is close: `x[c, w]` read from a channels-last
/// `x` while writing a contiguous result. Row by row, every row walks the
/// whole strided range and L1 has lost it before the next row comes back
/// to the same lines. By columns, the rows of one column share the lines
/// the column's first row brought in; a column spans what fits L1 (wider
/// columns keep the contiguous reads and writes long enough for the
/// prefetcher). NHWC to NCHW of `[2, 32, 56, 56]`, 2 threads: 69 to 35 µs;
/// with a per-channel scale and an NCHW addend, 76 to 57 µs.
fn column_tile(outer: &[i64], mode: TileMode, stages: &[StagePlan]) -> Option<usize> {
    const LINE_ELEMS: i64 = 16;
    const L1_BYTES: i64 = 32 << 10;
    let m = outer.len();
    if mode != TileMode::Outer || m < 2 || outer[m - 2] < 4 {
        return None;
    }
    let (lane_var, row_var) = (m as u32 - 1, m as u32 - 2);
    let widest = stages
        .iter()
        .filter(|s| s.inner.is_empty() && s.reduce.is_none())
        .flat_map(|s| &s.insts)
        .filter_map(|inst| {
            let InstOp::Load { dtype, index, .. } = &inst.op else { return None };
            let (lane, row) = (index.step(lane_var)?.abs(), index.step(row_var)?.abs());
            (lane >= LINE_ELEMS && row < lane).then_some(lane * dtype.itemsize() as i64)
        })
        .max()?;
    if outer[m - 1] * widest <= L1_BYTES {
        return None;
    }
    let tile = ((L1_BYTES / widest) as usize / 16 * 16).clamp(32, crate::tile::TILE);
    // A column as wide as the rows is the rows themselves.
    (tile < outer[m - 1] as usize).then_some(tile)
}

fn choose_mode(outer: &[i64], stages: &[StagePlan]) -> TileMode {
    let Some(&last_outer) = outer.last() else {
        return TileMode::Inner;
    };
    // Stages whose extra ranges are all of size 1 run once per outer point
    // in either mode: they do not choose it.
    let with_tail: Vec<&StagePlan> = stages
        .iter()
        .filter(|s| s.inner.iter().chain(s.reduce.iter().flat_map(|(_, r)| r.iter())).any(|&n| n > 1))
        .collect();
    if with_tail.is_empty() {
        return TileMode::Outer;
    }
    let m = outer.len() as u32;
    let mut along_tail = 0;
    let mut along_outer = 0;
    let mut tail_len = i64::MAX;
    for stage in &with_tail {
        let tail_vars = stage.inner.len() + stage.reduce.as_ref().map_or(0, |(_, r)| r.len());
        // A reduction whose lanes would walk its last inner dim (column
        // partials of a blocked row kernel) tiles along that dim.
        let vertical = stage.vertical;
        let tail_var = if vertical { m + stage.inner.len() as u32 - 1 } else { m + tail_vars as u32 - 1 };
        let last = match &stage.reduce {
            Some((_, r)) if !vertical => r.last().copied(),
            _ => None,
        }
        .or(stage.inner.last().copied())
        .unwrap_or(1);
        tail_len = tail_len.min(last);
        for inst in &stage.insts {
            if let InstOp::Load { index, .. } = &inst.op {
                // Symmetrically, a load constant along the last outer dim
                // (a per-row statistic a column reduction reads: softmax's
                // sum under `amax(dim=0)`) costs nothing per lane in Outer
                // mode: it does not vote for Inner.
                if index.step(tail_var) == Some(1) && index.step(m - 1) != Some(0) {
                    along_tail += 1;
                }
                // A load constant along the tail (a per-channel parameter)
                // costs nothing per lane in Inner mode: it does not vote.
                if index.step(m - 1) == Some(1) && index.step(tail_var) != Some(0) {
                    along_outer += 1;
                }
            }
        }
    }
    // Short tails and short outer dims: the mode with more lanes (a 2x2
    // average pool over a 6x6 map had tiles of 2 lanes along its window,
    // 0.5 ms for 9,216 outputs; along the map's rows, 6).
    if tail_len >= 16 && along_tail >= along_outer {
        TileMode::Inner
    } else if last_outer >= 8 || last_outer > tail_len {
        TileMode::Outer
    } else {
        TileMode::Inner
    }
}

/// Whether an affine index stays inside `0..elems` for every variable value.
fn in_bounds(index: &IndexFn, extents: &[i64], elems: i64) -> bool {
    if !index.is_affine() {
        return false;
    }
    let (mut lo, mut hi) = (index.c0, index.c0);
    for (v, c) in &index.coefs {
        let Some(n) = extents.get(*v as usize) else {
            return false;
        };
        let span = c * (n - 1).max(0);
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    lo >= 0 && hi < elems
}

/// A scatter stage of the form `out[a] = op(out[a], rest)` (`op` a sum,
/// product, max or min; `rest` not reading `out`'s storage): `(op, rest)`.
fn scatter_combine(program: &Program, stage: &Stage) -> Option<(BinaryOp, ScalarId)> {
    let scalars = &program.scalars;
    let ScalarOp::Binary(op, old, rest) = scalars.get(stage.value).op else { return None };
    let combines = matches!(op, BinaryOp::Add | BinaryOp::Mul | BinaryOp::Max | BinaryOp::Min);
    let reads_target = matches!(&scalars.get(old).op, ScalarOp::Load { buf, index, indirect, mask: None }
        if *buf == stage.out && *index == stage.store && *indirect == stage.store_indirect);
    (combines
        && reads_target
        && !stage.store_indirect.is_empty()
        && scalars.dtype(rest) == scalars.dtype(stage.value)
        && !reads_storage_of(program, rest, stage.out))
    .then_some((op, rest))
}

/// Whether a serial kernel cannot see its own writes within a tile: one
/// stage, a scatter whose value does not read the buffer it writes (lanes
/// store in order, so the last write wins), or a scatter-reduce whose
/// combining runs lane by lane at the store.
fn tiled_serial(program: &Program, kernel: &Kernel, stages: &[StagePlan]) -> bool {
    kernel.stages.len() == 1
        && (stages[0].accumulate.is_some() || !reads_storage_of(program, kernel.stages[0].value, kernel.stages[0].out))
}

/// Whether `value` reads the storage of `buf`.
fn reads_storage_of(program: &Program, value: ScalarId, buf: rdyn_ir::loops::BufId) -> bool {
    let own = program.storage_of(buf);
    program.scalars.loaded_buffers(&[value]).iter().any(|b| program.storage_of(*b) == own)
}

/// The instruction of one scalar node, its operands in registers (`reg`),
/// its indices as `index` maps them.
#[allow(clippy::too_many_arguments)]
fn inst_op(
    program: &Program,
    buffers: &[crate::plan::BufPlan],
    extents: &[i64],
    op: &ScalarOp,
    dtype: DType,
    index: &dyn Fn(&Expr) -> IndexFn,
    syms: &Ctx,
    reg: &dyn Fn(&ScalarId) -> Result<Reg, CodegenError>,
) -> Result<InstOp, CodegenError> {
    let scalars = &program.scalars;
    Ok(match op {
        ScalarOp::Load { buf, index: idx, indirect, mask } => InstOp::Load {
            buf: *buf,
            dtype: program.buffer(*buf).dtype,
            index: index(idx),
            // A mask only guards reads that could leave the buffer.
            mask: if indirect.is_empty() && in_bounds(&index(idx), extents, buffers[buf.0 as usize].extent_elems()) {
                None
            } else {
                mask.map(|m| reg(&m)).transpose()?
            },
            indirect: indirect
                .iter()
                .map(|(s, stride)| {
                    let st = stride
                        .simplify(syms)
                        .as_const()
                        .ok_or_else(|| CodegenError::Symbolic(format!("stride {stride}")))?;
                    Ok((reg(s)?, st))
                })
                .collect::<Result<_, CodegenError>>()?,
        },
        ScalarOp::Const { bits } => {
            if dtype.is_float() {
                InstOp::ConstF(f64::from_bits(*bits))
            } else {
                InstOp::ConstI(*bits as i64)
            }
        }
        ScalarOp::Index(e) => InstOp::Index(index(e)),
        ScalarOp::Unary(op, x) => InstOp::Unary(*op, reg(x)?),
        ScalarOp::Binary(op, a, b) => InstOp::Binary(*op, reg(a)?, reg(b)?),
        ScalarOp::Where(c, a, b) => InstOp::Where(reg(c)?, reg(a)?, reg(b)?),
        ScalarOp::Cast(x) => InstOp::Cast { src: reg(x)?, from: scalars.dtype(*x).kind(), to: dtype },
        ScalarOp::Bounded(x, size, negatives) => InstOp::Bounded {
            src: reg(x)?,
            negatives: *negatives,
            size: size.simplify(syms).as_const().ok_or_else(|| CodegenError::Symbolic(format!("size {size}")))?,
        },
    })
}

#[allow(clippy::too_many_arguments)]
fn compile_stage(
    program: &Program,
    buffers: &[crate::plan::BufPlan],
    extents: &[i64],
    stage: &Stage,
    inner: Vec<i64>,
    reduce: Option<(rdyn_ir::loops::ReduceOp, Vec<i64>)>,
    index: &dyn Fn(&Expr) -> IndexFn,
    syms: &Ctx,
) -> Result<StagePlan, CodegenError> {
    let scalars = &program.scalars;
    let mut roots = vec![stage.value];
    roots.extend(stage.store_indirect.iter().map(|(s, _)| *s));
    let order = scalars.topo(&roots);
    let mut last_use: HashMap<ScalarId, usize> = HashMap::new();
    for (pos, id) in order.iter().enumerate() {
        for operand in scalars.operands(*id) {
            last_use.insert(operand, pos);
        }
    }
    for r in &roots {
        last_use.insert(*r, usize::MAX);
    }
    let mut alloc = RegAlloc { kinds: Vec::new(), free: Vec::new() };
    let mut reg_of: HashMap<ScalarId, Reg> = HashMap::new();
    let mut insts = Vec::new();
    let mut consts: Vec<(Reg, InstOp)> = Vec::new();
    for (pos, id) in order.iter().enumerate() {
        let node = scalars.get(*id);
        let kind = node.dtype.kind();
        // Constants live in their own registers, filled once per thread.
        if let ScalarOp::Const { bits } = &node.op {
            let dst = alloc.fresh(kind);
            let op = if node.dtype.is_float() {
                InstOp::ConstF(f64::from_bits(*bits))
            } else {
                InstOp::ConstI(*bits as i64)
            };
            consts.push((dst, op));
            reg_of.insert(*id, dst);
            continue;
        }
        let reg = |s: &ScalarId| reg_of.get(s).copied().ok_or(CodegenError::Internal("operand without register"));
        let op_kind = operand_kind(program, *id);
        let op = inst_op(program, buffers, extents, &node.op, node.dtype, index, syms, &reg)?;
        let operands = scalars.operands(*id);
        let cross_kind = op_kind != kind && matches!(op, InstOp::Unary(..) | InstOp::Binary(..));
        // Free operands whose last use is here before picking the result
        // register (an op may write over its own operand).
        // Constant registers are never released.
        let release: Vec<Reg> = operands
            .iter()
            .filter(|o| last_use.get(o) == Some(&pos))
            .filter(|o| !matches!(scalars.get(**o).op, ScalarOp::Const { .. }))
            .filter_map(|o| reg_of.get(o).copied())
            .collect();
        // The result never shares a register with its operands: the
        // executor reads operands while it writes the result.
        if cross_kind {
            // e.g. a comparison of floats: compute in the operands' kind,
            // then convert to bool.
            let tmp = alloc.take(op_kind);
            insts.push(Inst { dst: tmp, kind: op_kind, narrow: None, op });
            let dst = alloc.take(kind);
            insts.push(Inst { dst, kind, narrow: None, op: InstOp::Cast { src: tmp, from: op_kind, to: node.dtype } });
            alloc.free.push(tmp);
            reg_of.insert(*id, dst);
        } else {
            let dst = alloc.take(kind);
            let narrow =
                if matches!(op, InstOp::Cast { .. } | InstOp::Load { .. }) { None } else { narrow_of(node.dtype) };
            insts.push(Inst { dst, kind, narrow, op });
            reg_of.insert(*id, dst);
        }
        for r in release {
            if !alloc.free.contains(&r) {
                alloc.free.push(r);
            }
        }
    }
    let value = reg_of.get(&stage.value).copied().ok_or(CodegenError::Internal("stage value has no register"))?;
    let store_indirect = stage
        .store_indirect
        .iter()
        .map(|(s, stride)| {
            let r = reg_of.get(s).copied().ok_or(CodegenError::Internal("scatter index has no register"))?;
            let st =
                stride.simplify(syms).as_const().ok_or_else(|| CodegenError::Symbolic(format!("stride {stride}")))?;
            Ok((r, st))
        })
        .collect::<Result<_, CodegenError>>()?;
    Ok(StagePlan {
        out: stage.out,
        out_dtype: program.buffer(stage.out).dtype,
        inner,
        reduce,
        insts,
        value,
        value_kind: scalars.dtype(stage.value).kind(),
        store: index(&stage.store),
        store_indirect,
        regs: alloc.kinds,
        consts,
        jit: None,
        uniform: None,
        accumulate: None,
        vertical: false,
    })
}
