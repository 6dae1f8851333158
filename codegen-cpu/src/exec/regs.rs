//! The executor's registers: tiles of one kind, and the per-thread scratch
//! that holds a kernel's registers, accumulators and indices.

use rdyn_ir::Kind;

use super::convert::{fill_f, fill_i};
use super::spare;
use crate::plan::{InstOp, KernelPlan};

#[derive(Clone, Debug)]
pub(super) enum Tile {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I64(Vec<i64>),
}

impl Tile {
    /// Copy lane 0 to lanes `1..len`.
    pub(super) fn splat(&mut self, len: usize) {
        match self {
            Tile::F32(v) => splat_lane(v, len),
            Tile::F64(v) => splat_lane(v, len),
            Tile::I64(v) => splat_lane(v, len),
        }
    }

    pub(super) fn new(kind: Kind, len: usize) -> Tile {
        spare::take(kind, len)
    }
}

/// Per-thread registers and scratch.
pub(super) struct Scratch {
    pub(super) regs: Vec<Vec<Tile>>,
    pub(super) env: Vec<i64>,
    pub(super) lane_index: Vec<i64>,
    pub(super) acc: Tile,
    pub(super) acc_index: Vec<i64>,
    pub(super) error: bool,
    /// Load addresses for a compiled stage.
    pub(super) addrs: Vec<i64>,
}

impl Scratch {
    /// Registers of `lanes` elements: as wide as the kernel's tiles get,
    /// not the maximum tile (short rows would otherwise pay for the maximum).
    pub(super) fn new(kernel: &KernelPlan, vars: usize, lanes: usize) -> Scratch {
        Scratch {
            regs: kernel
                .stages
                .iter()
                .map(|s| {
                    let mut regs: Vec<Tile> = s.regs.iter().map(|k| Tile::new(*k, lanes)).collect();
                    for (reg, op) in &s.consts {
                        let tile = &mut regs[*reg as usize];
                        match op {
                            InstOp::ConstF(x) => fill_f(tile, *x, lanes),
                            InstOp::ConstI(x) => fill_i(tile, *x, lanes),
                            _ => {}
                        }
                    }
                    regs
                })
                .collect(),
            env: vec![0; vars + 1],
            lane_index: spare::take_i64(lanes),
            acc: Tile::new(Kind::F64, lanes),
            acc_index: spare::take_i64(lanes),
            error: false,
            addrs: Vec::new(),
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for tile in self.regs.drain(..).flatten() {
            spare::give(tile);
        }
        spare::give(std::mem::replace(&mut self.acc, Tile::F32(Vec::new())));
        spare::give(Tile::I64(std::mem::take(&mut self.lane_index)));
        spare::give(Tile::I64(std::mem::take(&mut self.acc_index)));
    }
}

fn splat_lane<T: Copy>(v: &mut [T], len: usize) {
    let len = len.min(v.len());
    if let Some((first, rest)) = v[..len].split_first_mut() {
        rest.fill(*first);
    }
}
