//! The bottom floor of the CPU code generator: the executor's tile width
//! and thresholds, which planning, execution and the JIT all size things
//! by, and the memory a kernel runs over.

use rdyn_memplan::BufPlan;

/// Lanes per tile (the default for parallel kernels).
pub const TILE: usize = 1024;
/// Below this many elements a kernel runs on the calling thread.
pub(crate) const PARALLEL_MIN_WORK: usize = 1 << 15;

/// Partials of a reduction along the tile (all but arg reductions): tile
/// lane l combines into partial l % FOLD_LANES, in lane order.
pub const FOLD_LANES: usize = 32;

/// Addresses and layouts of the buffers, by buffer id.
pub struct Memory<'a> {
    pub ptrs: &'a [usize],
    pub bufs: &'a [BufPlan],
}
