//! Tiles kept per thread between kernels.
//!
//! Every work chunk of every kernel needs registers, an accumulator and index
//! lanes: kilobytes that, zeroed afresh each time, cost a small kernel more
//! than its work (a 32K-element ReLU spent a third of its time in `memset`).
//! Tiles go back to their thread's spare list when the chunk ends and come
//! out again as they were: nothing reads a lane before writing it (constants
//! are filled, loads write every lane including masked ones, accumulators
//! start at the identity), so no zeroing is needed.

use std::cell::RefCell;

use rdyn_ir::Kind;

use super::regs::Tile;

/// Spare tiles kept per kind and thread; beyond this they are freed.
const KEEP: usize = 256;

#[derive(Default)]
struct Spare {
    f32: Vec<Vec<f32>>,
    f64: Vec<Vec<f64>>,
    i64: Vec<Vec<i64>>,
}

thread_local! {
    static SPARE: RefCell<Spare> = RefCell::default();
}

/// `v` with exactly `len` lanes: kept lanes as they were, new ones zero.
fn sized<T: Copy + Default>(mut v: Vec<T>, len: usize) -> Vec<T> {
    if v.len() > len {
        v.truncate(len);
    } else {
        v.resize(len, T::default());
    }
    v
}

/// A tile of `len` lanes (contents unspecified).
pub(super) fn take(kind: Kind, len: usize) -> Tile {
    SPARE.with(|spare| {
        let mut spare = spare.borrow_mut();
        match kind {
            Kind::F32 => Tile::F32(sized(spare.f32.pop().unwrap_or_default(), len)),
            Kind::F64 => Tile::F64(sized(spare.f64.pop().unwrap_or_default(), len)),
            Kind::I64 => Tile::I64(sized(spare.i64.pop().unwrap_or_default(), len)),
        }
    })
}

/// Index lanes (contents unspecified).
pub(super) fn take_i64(len: usize) -> Vec<i64> {
    match take(Kind::I64, len) {
        Tile::I64(v) => v,
        _ => vec![0; len],
    }
}

/// Keep `tile` for a later [`take`] on this thread.
pub(super) fn give(tile: Tile) {
    // During thread teardown the list may be gone: then the tile is freed.
    let _ = SPARE.try_with(|spare| {
        let mut spare = spare.borrow_mut();
        match tile {
            Tile::F32(v) if v.capacity() > 0 && spare.f32.len() < KEEP => spare.f32.push(v),
            Tile::F64(v) if v.capacity() > 0 && spare.f64.len() < KEEP => spare.f64.push(v),
            Tile::I64(v) if v.capacity() > 0 && spare.i64.len() < KEEP => spare.i64.push(v),
            _ => {}
        }
    });
}
