//! What a compiled stage is, as planning and execution see it: its
//! function, what it does with its value, which rows one call covers, and
//! the addresses of its loads. The compiler that makes them is `jit/mod.rs`.

use std::sync::{Arc, Mutex};

use cranelift_jit::JITModule;
use rdyn_ir::loops::{BufId, ReduceOp};

use crate::index::{IndexFn, Reg};

/// A load the compiled function reads from an address the executor
/// computes: buffer (`None`: an integer index, whose value is passed),
/// index, element size, and indirect parts (registers of [`Class::Pre`]
/// instructions, lane 0, times their strides). Registers are reused, so
/// the address is taken after the first `pre_before` of the stage's `Pre`
/// instructions ran, and before the rest.
#[derive(Clone)]
pub(crate) struct JitLoad {
    pub buf: Option<BufId>,
    pub index: IndexFn,
    pub size: i64,
    pub indirect: Vec<(Reg, i64)>,
    pub pre_before: usize,
}

/// `fn(load addresses, output, lanes, constants, rows)`: `addrs[k]` is the
/// byte address of lane 0 of the stage's k-th load; the output is lane 0 of
/// what [`Output`] names; the constants are [`JitStage::constants`]. A
/// stage compiled for rows ([`JitStage::rows`]) repeats for `rows` rows,
/// each a fixed step after the previous one; any other takes `rows = 1`.
/// A compiled stage: (load addresses, output, lanes, constants, rows) → nonzero
/// when a gathered row was out of range.
pub(crate) type StageFn = unsafe extern "C" fn(*const i64, *mut f32, i64, *const u32, i64) -> i32;

/// What a compiled stage does with its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    /// Writes the value register.
    Value,
    /// Writes the value register as int64 lanes: a mask as 0 or 1, an
    /// integer sign-extended. The executor reduces them (a bool `any` or
    /// `all`, an integer sum or max) or stores them as it does the
    /// interpreter's.
    ValueLong,
    /// Stores into the stage's float32 output, `step` elements apart (a
    /// pointwise stage whose store walks the tile with a constant step).
    Store(i64),
    /// Stores a mask into the stage's bool output (bytes 0 or 1), `step`
    /// elements apart: a comparison kept for later (a dropout's mask).
    StoreMask(i64),
    /// Stores integer lanes into the stage's int64 output, `step` elements
    /// apart, each sign-extended (a pool's argmax index; `super::int`).
    StoreLong(i64),
    /// Combines lane by lane into the reduction's accumulator (lanes are
    /// output points: a reduction over an outer tile).
    Accumulate(ReduceOp),
    /// Combines the tile into the reduction's 32 accumulator lanes, lane l
    /// into l % 32 (lanes run along the reduction).
    Fold(ReduceOp),
    /// The whole reduction in one call (one tile of at least 16 lanes): the
    /// 32 partials as for `Fold`, then folded in the executor's pairwise
    /// order and stored to the stage's float32 output, so no accumulator,
    /// fold or store is left to the executor.
    FoldStore(ReduceOp),
}

impl Output {
    /// Output elements between lanes: a store's step, else 1.
    pub(crate) fn step(self) -> i64 {
        match self {
            Output::Store(step) | Output::StoreMask(step) | Output::StoreLong(step) => step,
            Output::Value | Output::ValueLong | Output::Accumulate(_) | Output::Fold(_) | Output::FoldStore(_) => 1,
        }
    }

    /// Bytes per output element: a mask is stored as bytes, int64 lanes as
    /// 8, float32 as 4.
    pub(crate) fn elem_bytes(self) -> i64 {
        match self {
            Output::StoreMask(_) => 1,
            Output::StoreLong(_) | Output::ValueLong => 8,
            _ => 4,
        }
    }
}

/// What one call of a compiled stage may cover beyond one tile at one
/// point; every address steps by a constant per row (see `row_steps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rows {
    /// One tile, at the executor's current point.
    One,
    /// Consecutive points of the next-to-last outer dimension (outer tiles)
    /// or of the last (inner tiles); a kernel runs so when all its stages
    /// can (`exec/rows.rs`).
    Points,
    /// An [`Output::Accumulate`] stage's whole reduction: one reduction
    /// step per row, the accumulator the same.
    Reduction,
    /// An [`Output::FoldStore`] stage's points along its one inner dim (a
    /// row statistic for each row of a block of rows), one per row.
    Inner,
}

/// A compiled stage.
#[derive(Clone)]
pub struct JitStage {
    pub(crate) func: StageFn,
    /// The variable the lanes walk (`None`: the stage has one lane).
    pub(crate) tile_var: Option<usize>,
    /// Per compiled load, in instruction order, what its address is.
    pub(crate) loads: Vec<JitLoad>,
    /// Instructions the executor runs on one lane before each call (their
    /// registers feed the loads' indirect parts).
    pub(crate) pre: Vec<usize>,
    /// Instructions the executor runs over the whole tile after each call:
    /// a scatter's row ids that differ from lane to lane (their loads and
    /// bounds checks), which its per-lane store reads.
    pub(crate) scatter_rows: Vec<usize>,
    pub(crate) output: Output,
    /// What one call may cover beyond one tile.
    pub(crate) rows: Rows,
    /// The function's constants (bit patterns), read on entry.
    pub(crate) constants: Arc<[u32]>,
    pub(crate) _code: Arc<Code>,
}

impl JitStage {
    /// Whether a call for several rows reads each row's load addresses
    /// from a table the executor fills (rows picked by [`Self::pre`], a
    /// gather's row ids; see `row_steps`) rather than stepping them itself.
    pub(crate) fn table(&self) -> bool {
        !self.pre.is_empty()
    }

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
pub(crate) struct Code(pub(crate) Mutex<Option<JITModule>>);

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
