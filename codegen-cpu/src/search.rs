//! searchsorted and bucketize on the CPU: ATen's binary search per value.
//!
//! Each value's search takes ATen's midpoints and comparisons
//! (`!(mid >= v)` moves right; `!(mid > v)` for the right side), so NaN in
//! the sequence or among the values lands where ATen's puts it. The
//! sequence is one line shared by every value, or one line per row of
//! values (a batched sequence: the same leading dims). `LANES` (16) searches run
//! in step, branch-free, so their loads overlap. Rows are split into
//! blocks that run in parallel.

use rdyn_ir::loops::BufId;
use rdyn_ir::DType;

use crate::tile::Memory;
use crate::CodegenError;

/// Values per block of work.
const BLOCK: usize = 4096;

/// `out[..., j] = position of values[..., j] in seq` (int64).
pub fn run_search(right: bool, seq: BufId, values: BufId, out: BufId, mem: &Memory) -> Result<(), CodegenError> {
    let (ps, pv, po) = (&mem.bufs[seq.0 as usize], &mem.bufs[values.0 as usize], &mem.bufs[out.0 as usize]);
    let (rs, rv) = (ps.sizes.len(), pv.sizes.len());
    let batched = rs > 1;
    let leading_match = !batched || (rs == rv && ps.sizes[..rs - 1] == pv.sizes[..rv - 1]);
    if rs == 0 || po.sizes != pv.sizes || po.dtype != DType::I64 || ps.dtype != pv.dtype || !leading_match {
        return Err(CodegenError::Internal("searchsorted buffers of different shapes or dtypes"));
    }
    let m = ps.sizes[rs - 1].max(0) as usize;
    let k = if rv == 0 { 1 } else { pv.sizes[rv - 1].max(0) as usize };
    let lines: usize = pv.sizes[..rv.saturating_sub(1)].iter().map(|&s| s.max(0) as usize).product();
    if lines == 0 || k == 0 {
        return Ok(());
    }
    let step = |p: &crate::plan::BufPlan| if p.sizes.is_empty() { 0 } else { p.strides[p.sizes.len() - 1] as isize };
    let steps = [step(ps), step(pv), step(po)];
    let bases = [seq, values, out].map(|b| mem.ptrs[b.0 as usize]);
    let line = |l: usize| -> [isize; 3] {
        let mut start = [ps.offset as isize, pv.offset as isize, po.offset as isize];
        let mut rest = l;
        for d in (0..rv.saturating_sub(1)).rev() {
            let size = pv.sizes[d] as usize;
            let at = (rest % size) as isize;
            rest /= size;
            start[1] += at * pv.strides[d] as isize;
            start[2] += at * po.strides[d] as isize;
            if batched {
                start[0] += at * ps.strides[d] as isize;
            }
        }
        start
    };
    let per_line = k.div_ceil(BLOCK);
    let run = |b: usize| {
        let (l, part) = (b / per_line, b % per_line);
        let js = part * BLOCK..((part + 1) * BLOCK).min(k);
        let start = line(l);
        // SAFETY: the buffers are live and hold every element of their
        // planned layouts, which `line` and the steps walk; blocks write
        // disjoint elements.
        unsafe {
            match ps.dtype {
                DType::F32 => search::<f32>(right, bases, start, steps, m, js),
                DType::F64 => search::<f64>(right, bases, start, steps, m, js),
                _ => search::<i64>(right, bases, start, steps, m, js),
            }
        }
    };
    if !matches!(ps.dtype, DType::F32 | DType::F64 | DType::I64) {
        return Err(CodegenError::Internal("a search of a dtype other than float32, float64 or int64"));
    }
    crate::parallel::for_ranges(lines * per_line, lines * k >= BLOCK, &|r| r.for_each(run));
    Ok(())
}

/// Search the values `js` of one row.
///
/// # Safety
/// `start` and `steps` must address live elements: `m` of `T` in the
/// sequence, and the values (`T`) and results (int64) at `js`.
unsafe fn search<T: Copy + PartialOrd>(
    right: bool,
    bases: [usize; 3],
    start: [isize; 3],
    steps: [isize; 3],
    m: usize,
    js: std::ops::Range<usize>,
) {
    let (seq, values, out) = (bases[0] as *const T, bases[1] as *const T, bases[2] as *mut i64);
    // SAFETY: the caller's rows lie inside the buffers.
    let at = |t: usize| unsafe { *seq.offset(start[0] + t as isize * steps[0]) };
    // Every search takes at most this many halvings.
    let rounds = usize::BITS - m.leading_zeros();
    let last = m.saturating_sub(1);
    let (first, end) = (js.start, js.end);
    let mut j = first;
    while j < end {
        let lanes = LANES.min(end - j);
        let mut v = [None::<T>; LANES];
        for (l, slot) in v.iter_mut().enumerate().take(lanes) {
            // SAFETY: as above, for the values.
            *slot = Some(unsafe { *values.offset(start[1] + (j + l) as isize * steps[1]) });
        }
        // ATen's search, for several values in step: the midpoint of
        // [lo, lo + n), then right past it or left of it. The searches are
        // independent, so their loads overlap, and branch-free (the
        // direction is data); a finished search (n = 0) stays put.
        let (mut lo, mut n) = ([0usize; LANES], [m; LANES]);
        for _ in 0..rounds {
            for l in 0..lanes {
                let half = n[l] / 2;
                let x = at((lo[l] + half).min(last));
                let stop = v[l].is_some_and(|v| if right { x > v } else { x >= v });
                let go = usize::from(n[l] > 0 && !stop);
                lo[l] += go * (half + 1);
                // Right: n - half - 1 (n > 0), as `half + (n - 2·half - 1)`
                // with wrapping arithmetic, so that no branch decides it.
                n[l] = half.wrapping_add(go.wrapping_mul(n[l].wrapping_sub(2 * half + 1)));
            }
        }
        for (l, &p) in lo.iter().enumerate().take(lanes) {
            // SAFETY: as above, for the results.
            unsafe { *out.offset(start[2] + (j + l) as isize * steps[2]) = p as i64 };
        }
        j += lanes;
    }
}

/// Values searched in step.
const LANES: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    fn positions(seq: &[f32], values: &[f32], right: bool) -> Vec<i64> {
        let mut out = vec![0i64; values.len()];
        let bases = [seq.as_ptr() as usize, values.as_ptr() as usize, out.as_mut_ptr() as usize];
        // SAFETY: the slices hold every element the steps reach.
        unsafe { search::<f32>(right, bases, [0; 3], [1; 3], seq.len(), 0..values.len()) };
        out
    }

    #[test]
    fn left_and_right_sides_and_nan_as_aten_places_them() {
        let seq = [1.0, 2.0, 2.0, 3.0, f32::NAN];
        let values = [0.0, 2.0, 2.5, 9.0, f32::NAN];
        // NaN in the sequence compares as "go right"; a NaN value runs off the end.
        assert_eq!(positions(&seq, &values, false), [0, 1, 5, 5, 5]);
        assert_eq!(positions(&seq, &values, true), [0, 5, 5, 5, 5]);
        assert_eq!(positions(&[], &values, false), [0; 5]);
    }
}
