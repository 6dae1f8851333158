//! Running kernel plans: outer work items in parallel on the pool of
//! [`crate::parallel`] (ATen's OpenMP team or rayon), register programs over
//! tiles of lanes.
//!
//! Each instruction is one tight loop over slices, so dispatch costs one `match`
//! per tile, not per element. Work items run in parallel unless the kernel is
//! small (`PARALLEL_MIN_WORK` elements, an interpreted stage's element counting
//! as many elements as it has instructions, a compiled one's as one); scatter
//! kernels run serially, or split at the points of their disjoint dims. A run of consecutive work items unravels its outer point
//! once and then steps it. Outer-tiled kernels marked `columns` run column by
//! column (`run_columns`).
//!
//! Safety: buffers are raw addresses (`usize`) supplied by the runtime, valid
//! for the whole call. Index expressions come from the loop IR of this very
//! specialization, whose sizes and strides were checked against the real
//! tensors by the guards; data-dependent indices go through `Bounded`, which
//! clamps and reports instead of reading out of bounds. Different work items
//! write disjoint elements (a stage stores each output element from exactly
//! one outer point), so parallel writes never race; scatter kernels run
//! serially, except across dims whose points write disjoint elements
//! ([`crate::disjoint`]).

use std::sync::atomic::{AtomicBool, Ordering};

use rdyn_ir::loops::{Negatives, ReduceOp};
use rdyn_ir::DType;

mod calls;
mod convert;
mod indirect;
mod reduce;
mod regs;
mod rows;
mod spare;

use calls::{call_jit, call_jit_rows, run_jit};
use convert::{accumulate_tile, cast, fill_f, fill_i, load, select, select_f32, wrap, write_f64, write_i64};
use reduce::{combine_lanes, fold_lanes, fold_tile, init_acc};
use regs::{Scratch, Tile};

use crate::jit::stage::{JitStage, Output, Rows};
use crate::ops;
use crate::plan::{IndexFn, Inst, InstOp, KernelPlan, StagePlan, TileMode};
use crate::tile::Memory;
use crate::tile::{FOLD_LANES, PARALLEL_MIN_WORK};

/// The widest tile `kernel` evaluates.
fn lanes(kernel: &KernelPlan) -> usize {
    let widest = match kernel.mode {
        TileMode::Outer => kernel.outer.last().map_or(1, |&n| n.max(1) as usize),
        TileMode::Inner => kernel
            .stages
            .iter()
            .map(|s| {
                let last = match &s.reduce {
                    Some(_) if s.vertical => s.inner.last().copied(),
                    Some((_, red)) if !red.is_empty() => red.last().copied(),
                    Some(_) => Some(1),
                    None => s.inner.last().copied(),
                };
                last.unwrap_or(1).max(1) as usize
            })
            .max()
            .unwrap_or(1),
    };
    widest.min(kernel.tile).max(1)
}

/// Run `kernel`. Returns false if a data-dependent index was out of range or
/// an integer division by zero happened.
pub fn run_kernel(kernel: &KernelPlan, mem: &Memory) -> bool {
    if let Some(copies) = &kernel.transpose {
        crate::transpose::run(copies, mem);
        return true;
    }
    let m = kernel.outer.len();
    let vars = kernel
        .stages
        .iter()
        .map(|s| m + s.inner.len() + s.reduce.as_ref().map_or(0, |(_, r)| r.len()))
        .max()
        .unwrap_or(m);
    let outer_numel: usize = kernel.outer.iter().map(|&n| n.max(0) as usize).product();
    if outer_numel == 0 {
        return true;
    }
    let per_item_work: usize = kernel.stages.iter().map(|s| s.points_per_outer() * interpreted_weight(s)).sum();
    let (items, lanes_per_item) = match kernel.mode {
        TileMode::Outer => {
            let last = *kernel.outer.last().unwrap_or(&1) as usize;
            let chunks = last.div_ceil(kernel.tile);
            (outer_numel / last.max(1) * chunks, kernel.tile.min(last))
        }
        TileMode::Inner => (outer_numel, 1),
    };
    let total_work = items * lanes_per_item * per_item_work;
    let failed = AtomicBool::new(false);
    let run = |scratch: &mut Scratch, items: std::ops::Range<usize>| {
        run_items(kernel, mem, scratch, items);
        if scratch.error {
            failed.store(true, Ordering::Relaxed);
            scratch.error = false;
        }
    };
    let width = lanes(kernel);
    // Items split between threads in whole groups: one item each, or for a
    // scatter, every item of one point of its disjoint dims.
    let group = match kernel.serial {
        false => Some(1),
        true => disjoint_group(kernel, items),
    };
    match group {
        Some(group) if total_work >= PARALLEL_MIN_WORK && items / group > 1 => {
            let units = items / group;
            // A few chunks per thread, one scratch each (rayon's per-split
            // init would build scratch far more often than once per thread).
            let chunks = units.min(crate::parallel::threads() * 4);
            let per_chunk = units.div_ceil(chunks);
            crate::parallel::for_each(chunks, &|chunk| {
                let mut scratch = Scratch::new(kernel, vars, width);
                let units = chunk * per_chunk..((chunk + 1) * per_chunk).min(units);
                run(&mut scratch, units.start * group..units.end * group);
            });
        }
        _ => {
            let mut scratch = Scratch::new(kernel, vars, width);
            run(&mut scratch, 0..items);
        }
    }
    !failed.load(Ordering::Relaxed)
}

/// Of a scatter kernel's `items`, how many consecutive ones belong to one
/// point of its disjoint dims ([`KernelPlan::disjoint`]); None where it
/// has none (it runs on one thread) or runs by rows.
fn disjoint_group(kernel: &KernelPlan, items: usize) -> Option<usize> {
    let m = kernel.outer.len();
    if kernel.disjoint == 0 || rows::by_rows(kernel) || kernel.columns {
        return None;
    }
    // Outer tiles number their items over the dims before the last and the
    // last one's chunks: all of the dims make each item its own group.
    let items_dims = match kernel.mode {
        TileMode::Outer => m - 1,
        TileMode::Inner => m,
    };
    if kernel.disjoint > items_dims {
        return Some(1);
    }
    let units: usize = kernel.outer[..kernel.disjoint].iter().map(|&n| n.max(1) as usize).product();
    Some(items / units.max(1))
}

/// How many compiled-element equivalents one element of `stage` costs when
/// deciding whether to split the kernel across threads: 1 when compiled
/// (mostly memory-bound), else its instruction count (the interpreter pays
/// a pass over the tile per instruction).
fn interpreted_weight(stage: &StagePlan) -> usize {
    if stage.jit.is_some() {
        1
    } else {
        stage.insts.len().max(1)
    }
}

/// Set `env[first..]` to the multi-index of `flat` over `sizes`.
fn unravel(mut flat: usize, sizes: &[i64], env: &mut [i64], first: usize) {
    for k in (0..sizes.len()).rev() {
        let n = sizes[k].max(1) as usize;
        env[first + k] = (flat % n) as i64;
        flat /= n;
    }
}

/// Run consecutive work items: the outer point is unravelled once, then
/// stepped (no divisions per item).
fn run_items(kernel: &KernelPlan, mem: &Memory, scratch: &mut Scratch, items: std::ops::Range<usize>) {
    let m = kernel.outer.len();
    if items.is_empty() {
        return;
    }
    match kernel.mode {
        _ if rows::by_rows(kernel) => rows::run_rows(kernel, mem, scratch, items),
        TileMode::Outer if kernel.columns => run_columns(kernel, mem, scratch, items),
        TileMode::Outer => {
            let last = kernel.outer[m - 1] as usize;
            let chunks = last.div_ceil(kernel.tile);
            let prefix = &kernel.outer[..m - 1];
            unravel(items.start / chunks, prefix, &mut scratch.env, 0);
            let mut chunk = items.start % chunks;
            for _ in items {
                run_outer_tile(kernel, chunk * kernel.tile, mem, scratch);
                chunk += 1;
                if chunk == chunks {
                    chunk = 0;
                    advance(&mut scratch.env, 0, prefix);
                }
            }
        }
        TileMode::Inner => {
            unravel(items.start, &kernel.outer, &mut scratch.env, 0);
            for _ in items {
                for (s, stage) in kernel.stages.iter().enumerate() {
                    run_stage_inner(stage, s, m, kernel.tile, mem, scratch);
                }
                advance(&mut scratch.env, 0, &kernel.outer);
            }
        }
    }
}

/// Outer tiles column by column ([`KernelPlan::columns`]): item `k` is row
/// `k % rows` (of the next-to-last dimension) at column `k / rows % columns`
/// (of the last) at point `k / (rows * columns)` of the dimensions before.
fn run_columns(kernel: &KernelPlan, mem: &Memory, scratch: &mut Scratch, items: std::ops::Range<usize>) {
    let m = kernel.outer.len();
    let last = kernel.outer[m - 1] as usize;
    let columns = last.div_ceil(kernel.tile);
    let rows = kernel.outer[m - 2].max(1) as usize;
    let head = &kernel.outer[..m - 2];
    unravel(items.start / (rows * columns), head, &mut scratch.env, 0);
    let mut column = items.start / rows % columns;
    let mut row = items.start % rows;
    for _ in items {
        scratch.env[m - 2] = row as i64;
        run_outer_tile(kernel, column * kernel.tile, mem, scratch);
        row += 1;
        if row == rows {
            row = 0;
            column += 1;
            if column == columns {
                column = 0;
                advance(&mut scratch.env, 0, head);
            }
        }
    }
}

/// Every stage of an outer-tiled kernel over its tile from `start` along
/// the last outer dimension, at the outer point in `scratch.env`.
fn run_outer_tile(kernel: &KernelPlan, start: usize, mem: &Memory, scratch: &mut Scratch) {
    let m = kernel.outer.len();
    let len = kernel.tile.min(kernel.outer[m - 1] as usize - start);
    for (s, stage) in kernel.stages.iter().enumerate() {
        scratch.env[m - 1] = start as i64;
        run_stage_outer(stage, s, m, len, mem, scratch);
    }
}

/// Odometer over `sizes` starting at `env[first]`; returns false when done.
fn advance(env: &mut [i64], first: usize, sizes: &[i64]) -> bool {
    for k in (0..sizes.len()).rev() {
        env[first + k] += 1;
        if env[first + k] < sizes[k] {
            return true;
        }
        env[first + k] = 0;
    }
    false
}

fn red_linear(env: &[i64], first: usize, sizes: &[i64]) -> i64 {
    sizes.iter().enumerate().fold(0, |acc, (k, n)| acc * n + env[first + k])
}

/// Lanes across the last outer dimension (`tile_var = m - 1`).
fn run_stage_outer(stage: &StagePlan, s: usize, m: usize, len: usize, mem: &Memory, sc: &mut Scratch) {
    let tile_var = m - 1;
    let ni = stage.inner.len();
    if stage.inner.contains(&0) {
        return;
    }
    sc.env[m..m + ni].iter_mut().for_each(|v| *v = 0);
    loop {
        match &stage.reduce {
            None => {
                eval_store(stage, s, tile_var, len, mem, sc);
            }
            Some((op, red)) => reduce_lanes(stage, s, (tile_var, len), (*op, red, m + ni), mem, sc),
        }
        if !advance(&mut sc.env, m, &stage.inner) {
            break;
        }
    }
}

/// A reduction whose `len` lanes along `tile_var` are each an output point:
/// every lane accumulates over the reduction (variables from `r0`), points
/// in order, then the lanes are stored.
fn reduce_lanes(
    stage: &StagePlan,
    s: usize,
    (tile_var, len): (usize, usize),
    (op, red, r0): (ReduceOp, &[i64], usize),
    mem: &Memory,
    sc: &mut Scratch,
) {
    init_acc(&mut sc.acc, &mut sc.acc_index, stage.value_kind, op, len);
    let empty = red.contains(&0);
    sc.env[r0..r0 + red.len()].iter_mut().for_each(|v| *v = 0);
    let mut more = !empty;
    // A compiled stage may run the last reduction dimension in one call,
    // once per point of the others.
    let (whole, others) = red.split_last().map_or((0, red), |(n, rest)| (*n as usize, rest));
    let by_rows = whole > 1 && stage.jit.as_ref().is_some_and(|j| j.rows == Rows::Reduction);
    while more {
        if by_rows && jit_accumulate(stage, s, tile_var, len, whole, mem, sc) {
            more = advance(&mut sc.env, r0, others);
            continue;
        }
        if !jit_accumulate(stage, s, tile_var, len, 1, mem, sc) {
            eval(stage, s, tile_var, len, mem, sc);
            let ri = red_linear(&sc.env, r0, red);
            let Scratch { regs, acc, acc_index, .. } = sc;
            combine_lanes(op, acc, acc_index, &regs[s][stage.value as usize], len, |_| ri);
        }
        more = advance(&mut sc.env, r0, red);
    }
    store_acc(stage, s, tile_var, len, op, mem, sc);
}

/// An inner-tiled reduction whose lanes walk its last inner dim
/// ([`StagePlan::vertical`]): tiles of that dim, each reduced lane by lane.
fn run_vertical(stage: &StagePlan, s: usize, m: usize, tile: usize, mem: &Memory, sc: &mut Scratch) {
    let Some((op, red)) = &stage.reduce else { return };
    let r0 = m + stage.inner.len();
    inner_tiles(stage, m, tile, sc, |sc, tile_var, len| {
        reduce_lanes(stage, s, (tile_var, len), (*op, red, r0), mem, sc)
    });
}

/// `each(tile_var, len)` at every tile of the stage's inner dims (lanes
/// along the last, at most `tile`), the others advanced in order.
fn inner_tiles(
    stage: &StagePlan,
    m: usize,
    tile: usize,
    sc: &mut Scratch,
    mut each: impl FnMut(&mut Scratch, usize, usize),
) {
    let ni = stage.inner.len();
    let tile_var = m + ni - 1;
    let last = stage.inner[ni - 1] as usize;
    let prefix = &stage.inner[..ni - 1];
    loop {
        let mut start = 0;
        while start < last {
            let len = tile.min(last - start);
            sc.env[tile_var] = start as i64;
            each(sc, tile_var, len);
            start += len;
        }
        sc.env[tile_var] = 0;
        if !advance(&mut sc.env, m, prefix) {
            break;
        }
    }
}

/// Lanes along the stage's own last inner (pointwise) or reduction dim.
fn run_stage_inner(stage: &StagePlan, s: usize, m: usize, tile: usize, mem: &Memory, sc: &mut Scratch) {
    let ni = stage.inner.len();
    if stage.inner.contains(&0) {
        return;
    }
    sc.env[m..m + ni].iter_mut().for_each(|v| *v = 0);
    if stage.vertical {
        return run_vertical(stage, s, m, tile, mem, sc);
    }
    match &stage.reduce {
        None => {
            if ni == 0 {
                let dummy = sc.env.len() - 1;
                sc.env[dummy] = 0;
                eval_store(stage, s, dummy, 1, mem, sc);
                return;
            }
            inner_tiles(stage, m, tile, sc, |sc, tile_var, len| eval_store(stage, s, tile_var, len, mem, sc));
        }
        Some((op, red)) => {
            let r0 = m + ni;
            let nr = red.len();
            let (tile_var, last) =
                if nr == 0 { (sc.env.len() - 1, 1usize) } else { (r0 + nr - 1, red[nr - 1] as usize) };
            let red_prefix = if nr == 0 { &red[..] } else { &red[..nr - 1] };
            let empty = red.contains(&0);
            if let Some(jit) = stage.jit.as_ref().filter(|j| matches!(j.output, Output::FoldStore(_))) {
                // The compiled function reduces, folds and stores each point.
                sc.env[tile_var] = 0;
                if jit.rows == Rows::Inner {
                    // Every point of the one inner dim in one call.
                    let out = f32_output(stage, mem, &sc.env);
                    // SAFETY: as below, for `inner[0]` points whose output
                    // elements the plan's store steps reach (`jit::row_steps`).
                    let rows = (out, stage.inner[0] as usize);
                    unsafe { call_jit_rows(jit, (stage, s, tile_var), rows, m, last, mem, sc) };
                    return;
                }
                loop {
                    let out = f32_output(stage, mem, &sc.env);
                    // SAFETY: the reduction is one tile (`jit::one_call`) and
                    // `out` is this point's float32 output element.
                    unsafe { call_jit(jit, (stage, s, tile_var), (out, 1), last, mem, sc) };
                    if !advance(&mut sc.env, m, &stage.inner) {
                        return;
                    }
                }
            }
            loop {
                // Arg reductions keep a partial per tile lane; the others
                // fold a tile's lanes into FOLD_LANES partials.
                let arg = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
                let width = if arg { tile.min(last.max(1)) } else { FOLD_LANES };
                init_acc(&mut sc.acc, &mut sc.acc_index, stage.value_kind, *op, width);
                sc.env[r0..r0 + nr].iter_mut().for_each(|v| *v = 0);
                let mut used = 0;
                let mut more = !empty;
                while more {
                    let mut start = 0;
                    while start < last {
                        let len = tile.min(last - start);
                        sc.env[tile_var] = start as i64;
                        if !jit_accumulate(stage, s, tile_var, len, 1, mem, sc) {
                            eval(stage, s, tile_var, len, mem, sc);
                            let value = &sc.regs[s][stage.value as usize];
                            if arg {
                                let base = if nr == 0 { 0 } else { red_linear(&sc.env, r0, red) };
                                combine_lanes(*op, &mut sc.acc, &mut sc.acc_index, value, len, |l| base + l as i64);
                            } else {
                                fold_tile(*op, &mut sc.acc, value, len);
                            }
                        }
                        used = used.max(len);
                        start += len;
                    }
                    if nr > 0 {
                        sc.env[tile_var] = 0;
                    }
                    more = nr > 0 && advance(&mut sc.env, r0, red_prefix);
                }
                // Non-arg partials a short reduction left untouched hold
                // the identity: folding all of them is exact, and is the
                // tree compiled stages fold (`jit` `FoldStore`).
                let folded = if arg { used.min(width).max(1) } else { width };
                fold_lanes(&mut sc.acc, &mut sc.acc_index, *op, folded);
                store_acc(stage, s, tile_var, 1, *op, mem, sc);
                if !advance(&mut sc.env, m, &stage.inner) {
                    break;
                }
            }
        }
    }
}

fn store_acc(stage: &StagePlan, s: usize, tile_var: usize, len: usize, op: ReduceOp, mem: &Memory, sc: &mut Scratch) {
    if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) {
        let idx = Tile::I64(sc.acc_index[..len].iter().map(|&i| i.max(0)).collect());
        store_tile(stage, s, tile_var, len, &idx, mem, sc);
    } else {
        let acc = std::mem::replace(&mut sc.acc, Tile::F32(Vec::new()));
        store_tile(stage, s, tile_var, len, &acc, mem, sc);
        sc.acc = acc;
    }
}

fn store(stage: &StagePlan, s: usize, tile_var: usize, len: usize, reg: u16, mem: &Memory, sc: &mut Scratch) {
    let tile = std::mem::replace(&mut sc.regs[s][reg as usize], Tile::F32(Vec::new()));
    store_tile(stage, s, tile_var, len, &tile, mem, sc);
    sc.regs[s][reg as usize] = tile;
}

/// Per-lane storage indices of `index` (plus indirect parts) into
/// `sc.lane_index`; returns (base, step) when that is all it takes.
fn lane_indices(
    index: &IndexFn,
    indirect: &[(u16, i64)],
    s: usize,
    tile_var: usize,
    len: usize,
    sc: &mut Scratch,
) -> Option<(i64, i64)> {
    let start = sc.env[tile_var];
    let base = index.eval(&sc.env);
    let affine_step = index.step(tile_var as u32);
    if let Some(step) = affine_step {
        // An indirect part that is the same on every lane (an embedding row
        // picked once per tile) keeps the index affine.
        let mut uniform = Some(base);
        for (reg, stride) in indirect {
            uniform = match (&sc.regs[s][*reg as usize], uniform) {
                (Tile::I64(v), Some(acc)) if len > 0 && v[..len].iter().all(|x| *x == v[0]) => {
                    Some(acc + v[0] * stride)
                }
                _ => None,
            };
        }
        if let Some(base) = uniform {
            return Some((base, step));
        }
    }
    match affine_step {
        Some(step) => {
            for (l, slot) in sc.lane_index[..len].iter_mut().enumerate() {
                *slot = base + step * l as i64;
            }
        }
        None => {
            for l in 0..len {
                sc.env[tile_var] = start + l as i64;
                sc.lane_index[l] = index.eval(&sc.env);
            }
            sc.env[tile_var] = start;
        }
    }
    for (reg, stride) in indirect {
        if let Tile::I64(v) = &sc.regs[s][*reg as usize] {
            for (slot, x) in sc.lane_index[..len].iter_mut().zip(&v[..len]) {
                *slot += x * stride;
            }
        }
    }
    None
}

fn store_tile(stage: &StagePlan, s: usize, tile_var: usize, len: usize, tile: &Tile, mem: &Memory, sc: &mut Scratch) {
    let ptr = mem.ptrs[stage.out.0 as usize];
    let dtype = mem.bufs[stage.out.0 as usize].dtype;
    let affine = lane_indices(&stage.store, &stage.store_indirect, s, tile_var, len, sc);
    let at = |l: usize| match affine {
        Some((base, step)) => base + step * l as i64,
        None => sc.lane_index[l],
    };
    if let Some(op) = stage.accumulate {
        // SAFETY: as below.
        unsafe { accumulate_tile(op, ptr, dtype, len, &at, tile) };
        return;
    }
    // SAFETY: see the module comment; every index is inside the buffer.
    unsafe {
        match tile {
            Tile::F32(v) => {
                if dtype == DType::F32 && affine.is_some_and(|(_, st)| st == 1) {
                    let base = affine.map_or(0, |(b, _)| b);
                    let dst = std::slice::from_raw_parts_mut((ptr as *mut f32).offset(base as isize), len);
                    dst.copy_from_slice(&v[..len]);
                } else {
                    for (l, &x) in v[..len].iter().enumerate() {
                        write_f64(ptr, dtype, at(l), x as f64, x);
                    }
                }
            }
            Tile::F64(v) => {
                for (l, &x) in v[..len].iter().enumerate() {
                    write_f64(ptr, dtype, at(l), x, x as f32);
                }
            }
            Tile::I64(v) => {
                for (l, &x) in v[..len].iter().enumerate() {
                    write_i64(ptr, dtype, at(l), x);
                }
            }
        }
    }
}

/// Evaluate a stage's register program for `len` lanes.
fn eval(stage: &StagePlan, s: usize, tile_var: usize, len: usize, mem: &Memory, sc: &mut Scratch) {
    if let Some(jit) = &stage.jit {
        if matches!(jit.output, Output::Value | Output::ValueLong) && jit.walks(tile_var) {
            run_jit(jit, (stage, s, tile_var), len, mem, sc);
            return;
        }
    }
    match &stage.uniform {
        Some((var, flags)) if *var == tile_var && len > 1 => {
            for (inst, &uniform) in stage.insts.iter().zip(flags) {
                if uniform {
                    exec_inst(inst, s, tile_var, 1, mem, sc);
                    sc.regs[s][inst.dst as usize].splat(len);
                } else {
                    exec_inst(inst, s, tile_var, len, mem, sc);
                }
            }
        }
        _ => {
            for inst in &stage.insts {
                exec_inst(inst, s, tile_var, len, mem, sc);
            }
        }
    }
}

/// A pointwise stage's tile: evaluated and stored.
fn eval_store(stage: &StagePlan, s: usize, tile_var: usize, len: usize, mem: &Memory, sc: &mut Scratch) {
    let stores = |j: &&JitStage| {
        matches!(j.output, Output::Store(_) | Output::StoreMask(_) | Output::StoreLong(_)) && j.walks(tile_var)
    };
    if let Some(jit) = stage.jit.as_ref().filter(stores) {
        let out = f32_output(stage, mem, &sc.env);
        // SAFETY: the output lanes are this tile's elements of the stage's
        // float32 (or, for a mask, bool) output, in bounds by the plan.
        unsafe { call_jit(jit, (stage, s, tile_var), (out, 1), len, mem, sc) };
        return;
    }
    eval(stage, s, tile_var, len, mem, sc);
    let scatter = |j: &&JitStage| {
        matches!(j.output, Output::Value | Output::ValueLong) && j.walks(tile_var) && !stage.store_indirect.is_empty()
    };
    if let Some(jit) = stage.jit.as_ref().filter(scatter) {
        if jit.scatter_rows.is_empty() {
            indirect::row_scatter(stage, s, tile_var, len, mem, sc);
            return;
        }
        // Row ids that differ from lane to lane: read and checked over the
        // tile, then the interpreter's store, lane by lane.
        for &k in &jit.scatter_rows {
            exec_inst(&stage.insts[k], s, tile_var, len, mem, sc);
        }
        // Row ids the executor computed before the call (the same on every
        // lane, `Class::Pre`) hold lane 0 only: the store reads every lane
        // (a nearest upsampling's backward: the row invariant, the column
        // not; unsplatted, stale lanes sent the add out of bounds).
        for (reg, _) in &stage.store_indirect {
            if !jit.scatter_rows.iter().any(|&k| stage.insts[k].dst == *reg) {
                sc.regs[s][*reg as usize].splat(len);
            }
        }
    }
    store(stage, s, tile_var, len, stage.value, mem, sc);
}

/// The address of a compiled stage's output (float32, or bool for a
/// mask) at the point `env`, as the compiled function takes it.
fn f32_output(stage: &StagePlan, mem: &Memory, env: &[i64]) -> *mut f32 {
    let size = mem.bufs[stage.out.0 as usize].dtype.itemsize() as i64;
    (mem.ptrs[stage.out.0 as usize] as i64 + stage.store.eval(env) * size) as *mut f32
}

/// Combine `len` lanes of a compiled reduction stage into the accumulator,
/// for `steps` consecutive reduction steps from the current one (more than
/// one only for a stage compiled for its whole reduction); false when the
/// stage has no such code (the caller evaluates and combines).
fn jit_accumulate(
    stage: &StagePlan,
    s: usize,
    tile_var: usize,
    len: usize,
    steps: usize,
    mem: &Memory,
    sc: &mut Scratch,
) -> bool {
    let Some(jit) = stage.jit.as_ref().filter(|j| j.walks(tile_var) && (steps == 1 || j.rows == Rows::Reduction))
    else {
        return false;
    };
    // The lanes the function writes: one per tile lane, or FOLD_LANES.
    let written = match jit.output {
        Output::Fold(_) => FOLD_LANES,
        Output::Accumulate(_) => len,
        Output::Value
        | Output::ValueLong
        | Output::Store(_)
        | Output::StoreMask(_)
        | Output::StoreLong(_)
        | Output::FoldStore(_) => return false,
    };
    let out = match &mut sc.acc {
        Tile::F32(acc) if acc.len() >= written => acc.as_mut_ptr(),
        _ => return false,
    };
    // SAFETY: the accumulator holds the lanes the function writes (every
    // step writes the same ones).
    unsafe { call_jit(jit, (stage, s, tile_var), (out, steps), len, mem, sc) };
    true
}

fn exec_inst(inst: &Inst, s: usize, tile_var: usize, len: usize, mem: &Memory, sc: &mut Scratch) {
    let dst_index = inst.dst as usize;
    let mut dst = std::mem::replace(&mut sc.regs[s][dst_index], Tile::F32(Vec::new()));
    match &inst.op {
        InstOp::Load { buf, dtype, index, indirect, mask } => {
            let affine = lane_indices(index, indirect, s, tile_var, len, sc);
            let mask_lanes = mask.and_then(|m| match &sc.regs[s][m as usize] {
                Tile::I64(v) => Some(&v[..len]),
                _ => None,
            });
            let ptr = mem.ptrs[buf.0 as usize];
            load(&mut dst, ptr, *dtype, affine, &sc.lane_index, mask_lanes, len);
        }
        InstOp::ConstF(x) => fill_f(&mut dst, *x, len),
        InstOp::ConstI(x) => fill_i(&mut dst, *x, len),
        InstOp::Index(index) => {
            let affine = lane_indices(index, &[], s, tile_var, len, sc);
            if let Tile::I64(d) = &mut dst {
                match affine {
                    Some((base, step)) => {
                        d[..len].iter_mut().enumerate().for_each(|(l, x)| *x = base + step * l as i64)
                    }
                    None => d[..len].copy_from_slice(&sc.lane_index[..len]),
                }
            }
        }
        InstOp::Unary(op, x) => match (&mut dst, &sc.regs[s][*x as usize]) {
            (Tile::F32(d), Tile::F32(a)) => ops::unary_f32(*op, &a[..len], &mut d[..len]),
            (Tile::F64(d), Tile::F64(a)) => ops::unary_f64(*op, &a[..len], &mut d[..len]),
            (Tile::I64(d), Tile::I64(a)) => ops::unary_i64(*op, &a[..len], &mut d[..len]),
            _ => {}
        },
        InstOp::Binary(op, a, b) => match (&mut dst, &sc.regs[s][*a as usize], &sc.regs[s][*b as usize]) {
            (Tile::F32(d), Tile::F32(x), Tile::F32(y)) => ops::binary_f32(*op, &x[..len], &y[..len], &mut d[..len]),
            (Tile::F64(d), Tile::F64(x), Tile::F64(y)) => ops::binary_f64(*op, &x[..len], &y[..len], &mut d[..len]),
            (Tile::I64(d), Tile::I64(x), Tile::I64(y)) => {
                ops::binary_i64(*op, &x[..len], &y[..len], &mut d[..len], &mut sc.error)
            }
            _ => {}
        },
        InstOp::Where(c, a, b) => {
            if let Tile::I64(c) = &sc.regs[s][*c as usize] {
                match (&mut dst, &sc.regs[s][*a as usize], &sc.regs[s][*b as usize]) {
                    (Tile::F32(d), Tile::F32(x), Tile::F32(y)) => {
                        select_f32(&c[..len], &x[..len], &y[..len], &mut d[..len])
                    }
                    (Tile::F64(d), Tile::F64(x), Tile::F64(y)) => {
                        select(&c[..len], &x[..len], &y[..len], &mut d[..len])
                    }
                    (Tile::I64(d), Tile::I64(x), Tile::I64(y)) => {
                        select(&c[..len], &x[..len], &y[..len], &mut d[..len])
                    }
                    _ => {}
                }
            }
        }
        InstOp::Cast { src, to, .. } => cast(&mut dst, &sc.regs[s][*src as usize], *to, len),
        InstOp::Bounded { src, size, negatives } => {
            if let (Tile::I64(d), Tile::I64(a)) = (&mut dst, &sc.regs[s][*src as usize]) {
                for (o, &v) in d[..len].iter_mut().zip(&a[..len]) {
                    *o = bounded(v, *size, *negatives, &mut sc.error);
                }
            }
        }
    }
    if let Some(narrow) = inst.narrow {
        if let Tile::I64(d) = &mut dst {
            wrap(&mut d[..len], narrow);
        }
    }
    sc.regs[s][dst_index] = dst;
}

/// Index `v` into `0..size`, a negative one counted from the end where
/// `negatives` wrap; out of range sets `error` and gives 0 (a safe element).
pub(super) fn bounded(v: i64, size: i64, negatives: Negatives, error: &mut bool) -> i64 {
    let w = if v < 0 && negatives == Negatives::Wrap { v + size } else { v };
    if w < 0 || w >= size {
        *error = true;
        0
    } else {
        w
    }
}
