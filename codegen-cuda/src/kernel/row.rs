//! Row kernels (reductions, and stages with inner dims): a thread, a warp
//! or a block per row (`launch.rs`); a reduction folds a strided share per
//! thread, then warp shuffles and, across a block's warps, shared memory;
//! stages are separated by barriers. Short block rows are unrolled into
//! chunks whose elements stay in registers across stages (`cache.rs`).

use std::collections::HashMap;

use rdyn_ir::loops::{Kernel, ReduceOp, ScalarId, Stage};
use rdyn_ir::Kind;

use crate::cache::{canonical, max_chunks};
use crate::emitter::Emitter;
use crate::kernel::fold::{arg_better, combine, identity, warp_reduce};
use crate::kernel::launch::{
    concrete_all, grid_stride, lane_warp, longest_row, sreg, thread_per_row, Launch, RowShape, BLOCK, LONG_BLOCK,
    LONG_ROW, MAX_GRID, WARP_ROW,
};
use crate::kernel::loops::{chunked_loop, counted_loop, unravel, unrolled_loop};
use crate::kernel::stage::{pointwise_stage_at, store_stage, value};
use crate::ptx::func::{sel_ty, Class, Func};
use crate::types::PtxError;

fn reduce_stage(f: &mut Func, em: &mut Emitter<'_>, l: &Launch, stage: &Stage, m: usize) -> Result<(), PtxError> {
    let Some(reduce) = &stage.reduce else { return Err(PtxError::Internal("not a reduction")) };
    let inner = concrete_all(&stage.ranges[m..], em.syms)?;
    let red = concrete_all(&reduce.ranges, em.syms)?;
    let kind = em.program.scalars.dtype(stage.value).kind();
    let class = Class::of(kind);
    let arg = matches!(reduce.op, ReduceOp::ArgMax | ReduceOp::ArgMin);
    let inner_n: i64 = inner.iter().product();
    let red_n: i64 = red.iter().product();
    let point = |f: &mut Func, em: &mut Emitter<'_>, r: &str| {
        unravel(f, em, r, &red, m + inner.len());
        Ok(value(f, em, stage)?.0)
    };
    let fold = |acc: &str, acci: &str| {
        let (acc, acci) = (acc.to_string(), acci.to_string());
        move |f: &mut Func, _: &mut Emitter<'_>, r: &str, v: String| {
            if arg {
                let p = arg_better(f, reduce.op == ReduceOp::ArgMax, class, &acc, &acci, &v, r);
                f.ins(format!("@{p} mov.{} {acc}, {v}", sel_ty(class)));
                f.ins(format!("@{p} mov.b64 {acci}, {r}"));
                Ok(())
            } else {
                combine(f, reduce.op, class, &acc, &v)
            }
        }
    };
    let result = |f: &mut Func, acc: &str, acci: &str| {
        if arg {
            let i = f.reg(Class::S64);
            f.ins(format!("max.s64 {i}, {acci}, 0"));
            (i, Kind::I64)
        } else {
            (acc.to_string(), kind)
        }
    };
    if l.shape == RowShape::Thread {
        // The thread reduces its row's inner points one after another.
        return counted_loop(f, "0", inner_n, "1", |f, j| {
            unravel(f, em, j, &inner, m);
            let acc = f.mov(class, &identity(reduce.op, class));
            let acci = f.mov(Class::S64, "-1");
            let zero = f.mov(Class::S64, "0");
            unrolled_loop(f, em, &zero, red_n, 1, point, fold(&acc, &acci))?;
            let (v, v_kind) = result(f, &acc, &acci);
            store_stage(f, em, stage, &v, v_kind, &HashMap::new())
        });
    }
    let one = f.mov(Class::S64, "1");
    let zero = f.mov(Class::S64, "0");
    counted_loop(f, &zero, inner_n, &one, |f, ii| {
        unravel(f, em, ii, &inner, m);
        let acc = f.mov(class, &identity(reduce.op, class));
        let acci = f.mov(Class::S64, "-1");
        let fold = fold(&acc, &acci);
        if inner_n == 1 && red_n <= l.step * max_chunks(l.block) {
            let canon = canonical(m, inner.len(), red.len());
            chunked_loop(f, em, &l.start, red_n, l.step, canon, red.clone(), point, fold)?;
        } else {
            unrolled_loop(f, em, &l.start, red_n, l.step, point, fold)?;
        }
        warp_reduce(f, reduce.op, class, &acc, &acci, 32)?;
        if l.shape == RowShape::Warp {
            // Every lane holds the row's result; lane 0 stores it.
            let stored = f.label("stored");
            let not_lane0 = f.setp("ne", "s64", &l.lane, "0");
            f.ins(format!("@{not_lane0} bra {stored}"));
            let (v, v_kind) = result(f, &acc, &acci);
            store_stage(f, em, stage, &v, v_kind, &HashMap::new())?;
            f.place(&stored);
            f.ins("bar.warp.sync -1");
            return Ok(());
        }
        // Lane 0 of each warp parks its result in shared memory.
        let lane0 = f.setp("eq", "s64", &l.lane, "0");
        let slot = f.reg(Class::S64);
        f.ins(format!("mad.lo.s64 {slot}, {}, 16, {}", l.warp, l.smem));
        let mty = if class == Class::F32 { "f32" } else { sel_ty(class) };
        f.ins(format!("@{lane0} st.shared.{mty} [{slot}], {acc}"));
        f.ins(format!("@{lane0} st.shared.b64 [{slot}+8], {acci}"));
        f.ins("bar.sync 0");
        // Warp 0 folds the per-warp results; thread 0 stores.
        let (skip, stored) = (f.label("skip"), f.label("stored"));
        let not_w0 = f.setp("ne", "s64", &l.warp, "0");
        f.ins(format!("@{not_w0} bra {skip}"));
        let warps = l.block / 32;
        let have = f.setp("lt", "s64", &l.lane, &warps.to_string());
        let slot0 = f.reg(Class::S64);
        f.ins(format!("mad.lo.s64 {slot0}, {}, 16, {}", l.lane, l.smem));
        f.ins(format!("mov.{} {acc}, {}", sel_ty(class), identity(reduce.op, class)));
        f.ins(format!("mov.b64 {acci}, -1"));
        f.ins(format!("@{have} ld.shared.{mty} {acc}, [{slot0}]"));
        f.ins(format!("@{have} ld.shared.b64 {acci}, [{slot0}+8]"));
        warp_reduce(f, reduce.op, class, &acc, &acci, warps)?;
        let t0 = f.setp("ne", "s64", &l.tid, "0");
        f.ins(format!("@{t0} bra {stored}"));
        let (v, v_kind) = result(f, &acc, &acci);
        store_stage(f, em, stage, &v, v_kind, &HashMap::new())?;
        f.place(&stored);
        f.place(&skip);
        f.ins("bar.sync 0");
        Ok(())
    })
}

fn inner_pointwise_stage(
    f: &mut Func,
    em: &mut Emitter<'_>,
    l: &Launch,
    stage: &Stage,
    m: usize,
) -> Result<(), PtxError> {
    let inner = concrete_all(&stage.ranges[m..], em.syms)?;
    let n: i64 = inner.iter().product();
    if l.shape == RowShape::Thread {
        return counted_loop(f, "0", n, "1", |f, j| {
            unravel(f, em, j, &inner, m);
            pointwise_stage_at(f, em, stage)
        });
    }
    let kind = em.program.scalars.dtype(stage.value).kind();
    let point = |f: &mut Func, em: &mut Emitter<'_>, j: &str| {
        unravel(f, em, j, &inner, m);
        let (v, regs) = value(f, em, stage)?;
        Ok((v, regs, em.vars.clone()))
    };
    // Each point is stored at its own loop variables.
    let put = |f: &mut Func,
               em: &mut Emitter<'_>,
               _: &str,
               (v, regs, vars): (String, HashMap<ScalarId, String>, Vec<String>)| {
        em.vars = vars;
        store_stage(f, em, stage, &v, kind, &regs)
    };
    if n <= l.step * max_chunks(l.block) {
        let canon = canonical(m, 0, inner.len());
        return chunked_loop(f, em, &l.start, n, l.step, canon, inner.clone(), point, put);
    }
    unrolled_loop(f, em, &l.start, n, l.step, point, put)
}

/// A row kernel's stages at outer point `o` (a linear index over `outer`).
fn row_stages(
    f: &mut Func,
    em: &mut Emitter<'_>,
    l: &Launch,
    kernel: &Kernel,
    outer: &[i64],
    o: &str,
) -> Result<(), PtxError> {
    let m = outer.len();
    unravel(f, em, o, outer, 0);
    for stage in &kernel.stages {
        if stage.reduce.is_some() {
            reduce_stage(f, em, l, stage, m)?;
        } else {
            inner_pointwise_stage(f, em, l, stage, m)?;
            match l.shape {
                RowShape::Thread => {}
                RowShape::Warp => f.ins("bar.warp.sync -1"),
                RowShape::Block => f.ins("bar.sync 0"),
            }
        }
    }
    Ok(())
}

/// A row kernel (see the module comment): who runs a row, by its length
/// and layout, then each row's stages. Returns the grid, the threads per
/// block and whether the kernel uses shared memory.
pub(crate) fn rows(
    f: &mut Func,
    em: &mut Emitter<'_>,
    kernel: &Kernel,
    outer: &[i64],
    name: &str,
) -> Result<(i64, u32, bool), PtxError> {
    let (program, syms) = (em.program, em.syms);
    let m = outer.len();
    let outer_n: i64 = outer.iter().product();
    let longest = longest_row(kernel, m, syms)?;
    let (grid, shared);
    let mut block = BLOCK;
    if thread_per_row(program, kernel, m, outer_n, longest, syms) {
        // A thread per outer point runs its stages in order.
        grid = ((outer_n.max(1) + BLOCK as i64 - 1) / BLOCK as i64).min(MAX_GRID);
        shared = false;
        let (start, step, tid) = grid_stride(f, grid);
        let none = String::new;
        let l = Launch {
            shape: RowShape::Thread,
            block,
            start: none(),
            step: 1,
            tid,
            lane: none(),
            warp: none(),
            smem: none(),
        };
        counted_loop(f, &start, outer_n, &step, |f, o| row_stages(f, em, &l, kernel, outer, o))?;
    } else if longest <= WARP_ROW {
        // A warp per row: row ctaid·warps + warp, then every grid's worth.
        let warps = i64::from(BLOCK / 32);
        grid = ((outer_n.max(1) + warps - 1) / warps).min(MAX_GRID);
        shared = false;
        let cta = sreg(f, "%ctaid.x");
        let tid = sreg(f, "%tid.x");
        let (lane, warp) = lane_warp(f, &tid);
        let first = f.reg(Class::S64);
        f.ins(format!("mad.lo.s64 {first}, {cta}, {warps}, {warp}"));
        let l = Launch {
            shape: RowShape::Warp,
            block,
            start: lane.clone(),
            step: 32,
            tid,
            lane,
            warp,
            smem: String::new(),
        };
        let step = (grid * warps).to_string();
        counted_loop(f, &first, outer_n, &step, |f, o| row_stages(f, em, &l, kernel, outer, o))?;
    } else {
        grid = outer_n.clamp(1, MAX_GRID);
        shared = true;
        let cta = sreg(f, "%ctaid.x");
        let tid = sreg(f, "%tid.x");
        let (lane, warp) = lane_warp(f, &tid);
        let smem = f.reg(Class::S64);
        f.ins(format!("mov.u64 {smem}, {name}_smem"));
        if longest >= LONG_ROW {
            block = LONG_BLOCK;
        }
        let l =
            Launch { shape: RowShape::Block, block, start: tid.clone(), step: i64::from(block), tid, lane, warp, smem };
        let step = grid.to_string();
        counted_loop(f, &cta, outer_n, &step, |f, o| row_stages(f, em, &l, kernel, outer, o))?;
    }
    Ok((grid, block, shared))
}
