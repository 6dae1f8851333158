//! Reduction accumulators: partial results per lane, combined tile by
//! tile, then folded into lane 0 by a pairwise tree. Along an outer tile
//! each lane is its own output; along a reduction (`TileMode::Inner`), arg
//! reductions keep one partial per tile lane and the others fold each tile into
//! FOLD_LANES (32) partials: tile lane l into partial l % 32, each partial
//! reducing its lanes of the tile from the identity before joining the
//! accumulator, so a partial's sequential chain grows by one per tile. All 32
//! partials (those a short row left at the identity change nothing) are folded
//! by the pairwise tree at the end. 32 and not 16 so that the compiled fold
//! (`jit`) has eight independent accumulator chains: a row sum runs at the
//! loads' rate rather than the add's latency.
//!
//! The reduction op is matched once per call, outside the lane loops
//! (`by_op!`), so each loop is one operation the compiler can vectorise.

use rdyn_ir::loops::ReduceOp;
use rdyn_ir::Kind;

use super::regs::Tile;
use crate::ops::{self, Reducible};
use crate::tile::FOLD_LANES;

/// `$body` with `$c` bound to `$op` as a constant, once per op.
macro_rules! by_op {
    ($op:expr, $c:ident => $body:expr) => {
        by_op!(@arms $op, $c, $body, Sum, Prod, Max, Min, ArgMax, ArgMin, Any, All)
    };
    (@arms $op:expr, $c:ident, $body:expr, $($v:ident),*) => {
        match $op {
            $(ReduceOp::$v => {
                const $c: ReduceOp = ReduceOp::$v;
                $body
            })*
        }
    };
}

/// Combine a tile of `len` values into the FOLD_LANES partials: each
/// partial first reduces its lanes of this tile (from the identity), then
/// joins the accumulator, so a partial's sequential chain grows by one per
/// tile. The compiled `Fold` output computes exactly this.
pub(super) fn fold_tile(op: ReduceOp, acc: &mut Tile, value: &Tile, len: usize) {
    #[inline(always)]
    fn go<T: Reducible>(op: ReduceOp, acc: &mut [T], v: &[T], len: usize) {
        let mut part = [T::identity(op); FOLD_LANES];
        for chunk in v[..len].chunks(FOLD_LANES) {
            for (p, &x) in part.iter_mut().zip(chunk) {
                *p = T::combine(op, *p, x);
            }
        }
        for (a, p) in acc[..FOLD_LANES].iter_mut().zip(part) {
            *a = T::combine(op, *a, p);
        }
    }
    match (acc, value) {
        (Tile::F32(a), Tile::F32(v)) => by_op!(op, OP => go(OP, a, v, len)),
        (Tile::F64(a), Tile::F64(v)) => by_op!(op, OP => go(OP, a, v, len)),
        (Tile::I64(a), Tile::I64(v)) => by_op!(op, OP => go(OP, a, v, len)),
        _ => {}
    }
}

/// Set the first `len` lanes to the op's identity (and, for arg
/// reductions, the indices to "none yet").
pub(super) fn init_acc(acc: &mut Tile, acc_index: &mut [i64], kind: Kind, op: ReduceOp, len: usize) {
    fn go<T: Reducible>(v: &mut Vec<T>, op: ReduceOp, len: usize) {
        let id = T::identity(op);
        if v.len() < len {
            v.resize(len, id);
        }
        v[..len].iter_mut().for_each(|x| *x = id);
    }
    let len = len.max(1);
    if !matches!((kind, &*acc), (Kind::F32, Tile::F32(_)) | (Kind::F64, Tile::F64(_)) | (Kind::I64, Tile::I64(_))) {
        *acc = Tile::new(kind, len);
    }
    match acc {
        Tile::F32(v) => go(v, op, len),
        Tile::F64(v) => go(v, op, len),
        Tile::I64(v) => go(v, op, len),
    }
    if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) {
        acc_index.iter_mut().for_each(|v| *v = -1);
    }
}

/// `acc[l] ⊕= value[l]` for the first `len` lanes; arg reductions also keep
/// the winning index (`index(l)` is lane `l`'s position in the reduction).
pub(super) fn combine_lanes(
    op: ReduceOp,
    acc: &mut Tile,
    acc_index: &mut [i64],
    value: &Tile,
    len: usize,
    index: impl Fn(usize) -> i64,
) {
    #[inline(always)]
    fn go<T: Reducible>(
        op: ReduceOp,
        acc: &mut [T],
        ai: &mut [i64],
        v: &[T],
        len: usize,
        index: impl Fn(usize) -> i64,
    ) {
        if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) {
            for l in 0..len {
                let i = index(l);
                if ops::arg_better(op, acc[l], ai[l], v[l], i) {
                    acc[l] = v[l];
                    ai[l] = i;
                }
            }
        } else {
            for (a, &x) in acc[..len].iter_mut().zip(&v[..len]) {
                *a = T::combine(op, *a, x);
            }
        }
    }
    match (acc, value) {
        (Tile::F32(a), Tile::F32(v)) => by_op!(op, OP => go(OP, a, acc_index, v, len, &index)),
        (Tile::F64(a), Tile::F64(v)) => by_op!(op, OP => go(OP, a, acc_index, v, len, &index)),
        (Tile::I64(a), Tile::I64(v)) => by_op!(op, OP => go(OP, a, acc_index, v, len, &index)),
        _ => {}
    }
}

/// Reduce the first `len` lanes of the accumulator into lane 0.
pub(super) fn fold_lanes(acc: &mut Tile, acc_index: &mut [i64], op: ReduceOp, len: usize) {
    #[inline(always)]
    fn go<T: Reducible>(op: ReduceOp, acc: &mut [T], ai: &mut [i64], len: usize) {
        if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) {
            for l in 1..len {
                if ai[l] >= 0 && ops::arg_better(op, acc[0], ai[0], acc[l], ai[l]) {
                    acc[0] = acc[l];
                    ai[0] = ai[l];
                }
            }
        } else {
            // Pairwise tree over the lanes keeps float sums accurate.
            let mut width = len;
            while width > 1 {
                let half = width.div_ceil(2);
                let (lo, hi) = acc[..width].split_at_mut(half);
                for (a, &x) in lo.iter_mut().zip(hi.iter()) {
                    *a = T::combine(op, *a, x);
                }
                width = half;
            }
        }
    }
    match acc {
        Tile::F32(a) => by_op!(op, OP => go(OP, a, acc_index, len)),
        Tile::F64(a) => by_op!(op, OP => go(OP, a, acc_index, len)),
        Tile::I64(a) => by_op!(op, OP => go(OP, a, acc_index, len)),
    }
}
