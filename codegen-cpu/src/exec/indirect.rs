//! The executor's side of compiled stages that pick rows: the integer
//! instructions it runs on one lane (a row's id, its bounds check) before
//! a gather's compiled call, and a compiled scatter's store (an
//! `index_add`, an embedding's gradient), one row per tile.
//!
//! A scatter stage whose row index is the same across the tile (an `index_add`
//! along dim 0, an embedding's gradient) has its value compiled by the JIT; the
//! executor computes the row (and its bounds check) once per tile, read directly
//! rather than through the interpreter's instruction dispatch, and stores: a
//! float32 scatter-add along a contiguous row is one slice add. The tiles run
//! along the last loop only, so the executor's work per row still dominates such
//! kernels. An embedding's gradient is rdyn's own decomposition
//! (`python/rdyn/_decomp_index.py`): PyTorch's multiplies every gradient row by
//! `index != padding_idx`, a mask the JIT cannot take from the executor, so the
//! padding rows go to one extra row instead, cut off after.

use rdyn_ir::loops::BinaryOp;
use rdyn_ir::DType;

use super::{bounded, convert, exec_inst, store, Memory, Scratch, Tile};
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
    let ptr = mem.ptrs[stage.out.0 as usize];
    let dtype = mem.bufs[stage.out.0 as usize].dtype;
    match (stage.store.step(tile_var as u32), stage.accumulate, &sc.regs[s][stage.value as usize]) {
        (Some(1), Some(BinaryOp::Add), Tile::F32(v)) if dtype == DType::F32 => {
            // SAFETY: the row's `len` elements from `base` are in the
            // output buffer (the plan's indices, the row bounds-checked).
            let out = unsafe { std::slice::from_raw_parts_mut((ptr as *mut f32).offset(base as isize), len) };
            for (o, x) in out.iter_mut().zip(&v[..len]) {
                *o += x;
            }
        }
        (Some(step), Some(op), _) => {
            let tile = std::mem::replace(&mut sc.regs[s][stage.value as usize], Tile::F32(Vec::new()));
            // SAFETY: as above, lane l at `base + step · l`.
            unsafe { convert::accumulate_tile(op, ptr, dtype, len, &|l| base + step * l as i64, &tile) };
            sc.regs[s][stage.value as usize] = tile;
        }
        // A plain scatter (the last write wins), or an index not affine
        // along the tile: every lane as the interpreter stores it.
        _ => {
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
        InstOp::Bounded { src, size, negatives } => match &sc.regs[s][*src as usize] {
            Tile::I64(a) => bounded(a[0], *size, *negatives, &mut sc.error),
            _ => return exec_inst(inst, s, tile_var, 1, mem, sc),
        },
        _ => return exec_inst(inst, s, tile_var, 1, mem, sc),
    };
    match &mut sc.regs[s][inst.dst as usize] {
        Tile::I64(v) if !v.is_empty() => v[0] = value,
        _ => exec_inst(inst, s, tile_var, 1, mem, sc),
    }
}
