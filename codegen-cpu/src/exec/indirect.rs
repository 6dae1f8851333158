//! The executor's side of compiled stages that pick rows: the integer
//! instructions it runs on one lane (a row's id, its bounds check) before
//! a gather's compiled call, and a compiled scatter's store (an
//! `index_add`, an embedding's gradient), one row per tile.

use rdyn_ir::loops::BinaryOp;
use rdyn_ir::DType;

use super::{convert, exec_inst, store, Memory, Scratch, Tile};
use crate::plan::{Inst, InstOp, StagePlan};

/// Store a compiled scatter's value: its row (the indirect parts, which
/// the executor computed on lane 0: the same on every lane, see
/// `jit::analysis::supported`) gives one base, the lanes follow the
/// store's step. A float32 scatter-add along a contiguous row is one
/// slice add.
pub(super) fn row_scatter(stage: &StagePlan, s: usize, tile_var: usize, len: usize, mem: &Memory, sc: &mut Scratch) {
    if sc.error {
        // A row out of range: reported, nothing written.
        return;
    }
    let mut base = stage.store.eval(&sc.env);
    for (reg, stride) in &stage.store_indirect {
        if let Tile::I64(v) = &sc.regs[s][*reg as usize] {
            base += v[0] * stride;
        }
    }
    let Some(step) = stage.store.step(tile_var as u32) else {
        // Not affine along the tile: every lane as the interpreter does.
        for (reg, _) in &stage.store_indirect {
            sc.regs[s][*reg as usize].splat(len);
        }
        store(stage, s, tile_var, len, stage.value, mem, sc);
        return;
    };
    let ptr = mem.ptrs[stage.out.0 as usize];
    let dtype = mem.bufs[stage.out.0 as usize].dtype;
    let Tile::F32(v) = &sc.regs[s][stage.value as usize] else { return };
    match stage.accumulate {
        Some(BinaryOp::Add) if dtype == DType::F32 && step == 1 => {
            // SAFETY: the row's `len` elements from `base` are in the
            // output buffer (the plan's indices, the row bounds-checked).
            let out = unsafe { std::slice::from_raw_parts_mut((ptr as *mut f32).offset(base as isize), len) };
            for (o, x) in out.iter_mut().zip(&v[..len]) {
                *o += x;
            }
        }
        Some(op) => {
            let tile = std::mem::replace(&mut sc.regs[s][stage.value as usize], Tile::F32(Vec::new()));
            // SAFETY: as above, lane l at `base + step · l`.
            unsafe { convert::accumulate_tile(op, ptr, dtype, len, &|l| base + step * l as i64, &tile) };
            sc.regs[s][stage.value as usize] = tile;
        }
        None => {
            for (reg, _) in &stage.store_indirect {
                sc.regs[s][*reg as usize].splat(len);
            }
            store(stage, s, tile_var, len, stage.value, mem, sc);
        }
    }
}

/// One lane of an instruction the executor runs for a compiled stage: an
/// integer load at an affine index (a row's id) and a bounds check
/// directly, anything else through [`exec_inst`].
pub(super) fn exec_pre(inst: &Inst, s: usize, tile_var: usize, mem: &Memory, sc: &mut Scratch) {
    let value = match &inst.op {
        InstOp::Load { buf, dtype, index, indirect, mask: None } if indirect.is_empty() && dtype.is_int() => {
            // SAFETY: the plan indexes the buffer in bounds (as `load`).
            unsafe { convert::read_i64(mem.ptrs[buf.0 as usize], *dtype, index.eval(&sc.env)) }
        }
        InstOp::Bounded { src, size } => match &sc.regs[s][*src as usize] {
            Tile::I64(a) => {
                let w = if a[0] < 0 { a[0] + size } else { a[0] };
                if w < 0 || w >= *size {
                    sc.error = true;
                    0
                } else {
                    w
                }
            }
            _ => return exec_inst(inst, s, tile_var, 1, mem, sc),
        },
        _ => return exec_inst(inst, s, tile_var, 1, mem, sc),
    };
    match &mut sc.regs[s][inst.dst as usize] {
        Tile::I64(v) if !v.is_empty() => v[0] = value,
        _ => exec_inst(inst, s, tile_var, 1, mem, sc),
    }
}
