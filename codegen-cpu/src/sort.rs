//! Sorting along one dim (sort, topk, kthvalue, median, nanmedian): rdyn's
//! CPU sort kernel.
//!
//! Each line along the sorted dim becomes a vector of integer keys that
//! order as the values do (NaN above every number, -0.0 equal to 0.0; all
//! bits inverted for a descending sort), each with the element's position
//! below it. An unstable sort of the keys then orders ties by position: the
//! result of a stable sort, at the speed of sorting integers, whatever `stable`
//! says. ATen's default CPU sort is not stable, so with ties the indices can
//! differ from eager's (both meet the contract; `tests/test_sort.py` checks
//! against eager's stable sort). A selection
//! (topk, kthvalue, a median) partitions the keys around its position
//! instead of sorting the whole line; a topk of a few from a long line keeps
//! candidates below the k-th best seen so far in one pass, and one of at most
//! `FEW_SORTED` (8) keeps them sorted as they come (MoE routing's top 2 of 64
//! experts). Values are read back from the input at
//! the chosen positions, so NaN payloads and signed zeros come out as they
//! went in. Lines run in parallel in chunks.

use rdyn_ir::loops::{BufId, SortSelect, SortSpec};
use rdyn_ir::DType;

use crate::tile::Memory;
use crate::CodegenError;

/// Up to this many leading elements (a small topk) are kept sorted as they
/// come rather than partitioned out.
const FEW_SORTED: usize = 8;

/// Below this many elements a sort runs on the calling thread.
const PARALLEL_MIN_ELEMS: usize = 1 << 14;

/// An element type of a sort (its input is float32, float64 or int64) and
/// its order-preserving key.
trait Elem: Copy {
    /// The key: smaller for smaller values, NaN the largest.
    fn key(self) -> u64;
    fn is_nan(self) -> bool;
}

impl Elem for f32 {
    fn key(self) -> u64 {
        if self.is_nan() {
            return u64::from(u32::MAX);
        }
        // `+ 0.0` turns -0.0 into 0.0: they tie.
        let bits = (self + 0.0).to_bits();
        u64::from(if bits >> 31 == 1 { !bits } else { bits | 1 << 31 })
    }
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
}

impl Elem for f64 {
    fn key(self) -> u64 {
        if self.is_nan() {
            return u64::MAX;
        }
        let bits = (self + 0.0).to_bits();
        if bits >> 63 == 1 {
            !bits
        } else {
            bits | 1 << 63
        }
    }
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
}

impl Elem for i64 {
    fn key(self) -> u64 {
        (self as u64) ^ (1 << 63)
    }
    fn is_nan(self) -> bool {
        false
    }
}

/// A key with its element's position below it; ordering these orders by
/// key, then by position.
trait Packed: Copy + Ord {
    fn pack(key: u64, pos: usize) -> Self;
    fn pos(self) -> usize;
}

/// A 32-bit key (float32) and a position below 2^32.
impl Packed for u64 {
    fn pack(key: u64, pos: usize) -> u64 {
        key << 32 | pos as u64
    }
    fn pos(self) -> usize {
        (self & 0xffff_ffff) as usize
    }
}

/// A 64-bit key and a 64-bit position.
impl Packed for u128 {
    fn pack(key: u64, pos: usize) -> u128 {
        u128::from(key) << 64 | pos as u128
    }
    fn pos(self) -> usize {
        self as u64 as usize
    }
}

/// Where one line starts in the input, values and indices, and how each
/// steps along the sorted dim.
#[derive(Clone, Copy)]
struct Line {
    start: [isize; 3],
    step: [isize; 3],
}

/// `outs = sort(x)` along `spec.dim`: `outs[0]` the kept values (x's
/// dtype: float32, float64 or int64), `outs[1]` their int64 positions.
pub fn run_sort(spec: SortSpec, x: BufId, outs: &[BufId], mem: &Memory) -> Result<(), CodegenError> {
    let [v, i] = outs else { return Err(CodegenError::Internal("a sort without two outputs")) };
    let (px, pv, pi) = (&mem.bufs[x.0 as usize], &mem.bufs[v.0 as usize], &mem.bufs[i.0 as usize]);
    let d = spec.dim;
    let rank = px.sizes.len();
    let n = px.sizes.get(d).map_or(0, |&s| s.max(0) as usize);
    let m = spec.out_len(n as i64).max(0) as usize;
    let same_others = (0..rank).all(|k| k == d || (pv.sizes[k] == px.sizes[k] && pi.sizes[k] == px.sizes[k]));
    if d >= rank || pv.sizes.len() != rank || pi.sizes.len() != rank || !same_others {
        return Err(CodegenError::Internal("sort buffers of different shapes"));
    }
    if pv.sizes[d] as usize != m || pi.sizes[d] as usize != m || m > n || pv.dtype != px.dtype || pi.dtype != DType::I64
    {
        return Err(CodegenError::Internal("sort outputs of the wrong length or dtype"));
    }
    let lines: usize = (0..rank).filter(|&k| k != d).map(|k| px.sizes[k].max(0) as usize).product();
    if lines == 0 || m == 0 {
        return Ok(());
    }
    let plans = [px, pv, pi];
    let bases = [x, *v, *i].map(|b| mem.ptrs[b.0 as usize]);
    let others: Vec<usize> = (0..rank).filter(|&k| k != d).collect();
    let line = |l: usize| -> Line {
        let mut rest = l;
        let mut start = plans.map(|p| p.offset as isize);
        for &k in others.iter().rev() {
            let size = px.sizes[k] as usize;
            let at = (rest % size) as isize;
            rest /= size;
            for (s, p) in start.iter_mut().zip(&plans) {
                *s += at * p.strides[k] as isize;
            }
        }
        Line { start, step: plans.map(|p| p.strides[d] as isize) }
    };
    let failed = std::sync::atomic::AtomicBool::new(false);
    let run = |range: std::ops::Range<usize>| {
        // SAFETY: the buffers are live and hold every element of their
        // planned layouts, which `line` walks; lines write disjoint elements.
        let sorted = unsafe {
            match px.dtype {
                DType::F32 if n <= u32::MAX as usize => sort_lines::<f32, u64>(spec, n, m, bases, range, &line),
                DType::F32 => sort_lines::<f32, u128>(spec, n, m, bases, range, &line),
                DType::F64 => sort_lines::<f64, u128>(spec, n, m, bases, range, &line),
                _ => sort_lines::<i64, u128>(spec, n, m, bases, range, &line),
            }
        };
        if !sorted {
            failed.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    };
    if !matches!(px.dtype, DType::F32 | DType::F64 | DType::I64) {
        return Err(CodegenError::Internal("a sort of a dtype other than float32, float64 or int64"));
    }
    crate::parallel::for_ranges(lines, lines * n >= PARALLEL_MIN_ELEMS, &run);
    if failed.load(std::sync::atomic::Ordering::Relaxed) {
        // One packed key (8 or 16 bytes) per element of a line.
        let key_bytes = if px.dtype == DType::F32 && n <= u32::MAX as usize { 8 } else { 16 };
        return Err(CodegenError::OutOfMemory(n.saturating_mul(key_bytes)));
    }
    Ok(())
}

/// Sort the lines `range`, keeping `m` of each line's `n` elements.
/// Returns false, sorting nothing, when the keys' memory cannot be had.
///
/// # Safety
/// `line` must address live elements of `T` (input and values) and int64
/// (indices) in the buffers at `bases`, `n` along the input's dim and `m`
/// along the outputs'.
unsafe fn sort_lines<T: Elem, K: Packed>(
    spec: SortSpec,
    n: usize,
    m: usize,
    bases: [usize; 3],
    range: std::ops::Range<usize>,
    line: &dyn Fn(usize) -> Line,
) -> bool {
    let (x, v, idx) = (bases[0] as *const T, bases[1] as *mut T, bases[2] as *mut i64);
    let flip = if spec.descending { u64::MAX } else { 0 };
    // A 32-bit key is inverted within its 32 bits (descending float32).
    let flip = if std::mem::size_of::<K>() == 8 { flip & 0xffff_ffff } else { flip };
    // A few leading elements of a long line are picked in one pass.
    let few = matches!(spec.select, SortSelect::Leading(k)
        if (k as usize) * 16 <= n || (k as usize <= FEW_SORTED && (k as usize) * 4 <= n));
    let mut keys: Vec<K> = Vec::new();
    if keys.try_reserve_exact(if few { 2 * m.max(64) } else { n }).is_err() {
        return false;
    }
    for l in range {
        let ln = line(l);
        // SAFETY: the caller's lines lie inside the buffers.
        let at = |j: usize| unsafe { *x.offset(ln.start[0] + j as isize * ln.step[0]) };
        keys.clear();
        if few {
            leading(&mut keys, m, n, |j| K::pack(at(j).key() ^ flip, j));
        } else {
            keys.extend((0..n).map(|j| K::pack(at(j).key() ^ flip, j)));
        }
        let nans = || (0..n).filter(|&j| at(j).is_nan()).count();
        let first = match spec.select {
            SortSelect::All => {
                keys.sort_unstable();
                0
            }
            SortSelect::Leading(_) => {
                if m < keys.len() {
                    keys.select_nth_unstable(m);
                }
                keys[..m].sort_unstable();
                0
            }
            // A median of a line with NaN is its first NaN: NaN keys are
            // the largest and tie, so by position, after the numbers.
            SortSelect::Median => match nans() {
                0 => select(&mut keys, (n - 1) / 2),
                nans => select(&mut keys, n - nans),
            },
            SortSelect::NanMedian => select(&mut keys, (n - nans()).saturating_sub(1) / 2),
            SortSelect::Kth(k) => select(&mut keys, k as usize),
        };
        for (o, key) in keys[first..first + m].iter().enumerate() {
            let p = key.pos();
            // SAFETY: as above, for the values and indices.
            unsafe {
                *v.offset(ln.start[1] + o as isize * ln.step[1]) = *x.offset(ln.start[0] + p as isize * ln.step[0]);
                *idx.offset(ln.start[2] + o as isize * ln.step[2]) = p as i64;
            }
        }
    }
    true
}

/// The `m` smallest of `n` keys (`key(j)` for position `j`), unordered,
/// in `keys`: one pass that keeps a buffer of candidates below the m-th
/// smallest key seen so far, cut back to `m` whenever it fills.
fn leading<K: Packed>(keys: &mut Vec<K>, m: usize, n: usize, key: impl Fn(usize) -> K) {
    if m <= FEW_SORTED {
        // A handful: kept sorted, a new key placed by a short scan (most
        // keys of a long line lose to the last one kept at once).
        for j in 0..n {
            let k = key(j);
            if keys.len() == m {
                if k >= keys[m - 1] {
                    continue;
                }
                keys.pop();
            }
            let at = keys.iter().rposition(|&kept| kept < k).map_or(0, |p| p + 1);
            keys.insert(at, k);
        }
        return;
    }
    let cap = keys.capacity().max(2 * m);
    let mut bound: Option<K> = None;
    for j in 0..n {
        let k = key(j);
        // Keys are distinct (positions differ), so one not below the bound
        // cannot be among the m smallest.
        if bound.is_some_and(|b| k >= b) {
            continue;
        }
        keys.push(k);
        if keys.len() == cap {
            keys.select_nth_unstable(m - 1);
            keys.truncate(m);
            bound = Some(keys[m - 1]);
        }
    }
}

/// Put the key at sorted position `at` in place; returns `at`.
fn select<K: Packed>(keys: &mut [K], at: usize) -> usize {
    keys.select_nth_unstable(at);
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_as_aten_orders_values() {
        let ordered = [f32::NEG_INFINITY, -2.5, -1e-30, 0.0, 1e-30, 3.0, f32::INFINITY, f32::NAN];
        for w in ordered.windows(2) {
            assert!(w[0].key() < w[1].key(), "{} !< {}", w[0], w[1]);
            assert!((w[0] as f64).key() < (w[1] as f64).key(), "{} !< {} (f64)", w[0], w[1]);
        }
        assert_eq!((-0.0f32).key(), 0.0f32.key());
        assert_eq!((-0.0f64).key(), 0.0f64.key());
        assert_eq!(f32::NAN.key(), (-f32::NAN).key());
        let ints = [i64::MIN, -7, -1, 0, 1, i64::MAX];
        assert!(ints.windows(2).all(|w| w[0].key() < w[1].key()));
    }

    #[test]
    fn packed_keys_break_ties_by_position() {
        assert!(u64::pack(5, 1) < u64::pack(5, 2) && u64::pack(5, 9) < u64::pack(6, 0));
        assert!(u128::pack(5, 1) < u128::pack(5, 2) && u128::pack(5, 9) < u128::pack(6, 0));
        assert_eq!(u64::pack(1234, 77).pos(), 77);
        assert_eq!(u128::pack(u64::MAX, usize::MAX >> 1).pos(), usize::MAX >> 1);
    }

    #[test]
    fn leading_keeps_the_smallest_keys() {
        // A pseudo-random line with many ties, long enough for several cuts.
        let values: Vec<u64> = (0..5000u64).map(|j| (j * 7919 + 13) % 101).collect();
        for m in [1, 3, 8, 9, 64, 200] {
            let mut keys: Vec<u64> = Vec::with_capacity(2 * m.max(64));
            leading(&mut keys, m, values.len(), |j| u64::pack(values[j], j));
            if m < keys.len() {
                keys.select_nth_unstable(m);
            }
            keys.truncate(m);
            keys.sort_unstable();
            let mut all: Vec<u64> = (0..values.len()).map(|j| u64::pack(values[j], j)).collect();
            all.sort_unstable();
            assert_eq!(keys, all[..m], "m = {m}");
        }
    }
}
