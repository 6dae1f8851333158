//! Running reductions along one dim (cumsum, cumprod, cummax, cummin,
//! logcumsumexp): rdyn's CPU scan kernel, over any strides and symbolic sizes.
//!
//! Each line along the scanned dim is one sequential pass over the input
//! through its strides, writing the outputs through theirs; lines run in
//! parallel in chunks. When the scan runs across memory (dim 0 of a row-major
//! matrix), up to `MAX_LANES` (64) adjacent lines go in one block, so each step
//! reads a run of neighbours. The values are float32, float64 or int64 (half
//! precision and narrower ints are converted around the step). Float sums and
//! products accumulate in float64 (as ATen's CPU kernels do for float32; half
//! precision, which ATen sums in float32, comes here as float32 and is summed
//! in float64 too), integer ones wrap in int64; cummax and cummin
//! take an element that ties the running extreme, or is NaN, so the index
//! is the last such element (a NaN, once one is seen, stays the value);
//! logcumsumexp adds each element by log-add-exp.
//!
//! Lowering builds scans on other devices as reductions over the prefix
//! (quadratic in the line's length, but parallel over every output).

use rdyn_ir::loops::{BufId, ScanOp};
use rdyn_ir::DType;

use crate::plan::BufPlan;
use crate::tile::Memory;
use crate::CodegenError;

/// Below this many elements a scan runs on the calling thread.
const PARALLEL_MIN_ELEMS: usize = 1 << 15;

/// Where a block of lines starts in each buffer, and how it steps: along
/// the scanned dim (`step`), and from one line to the next (`lane`).
#[derive(Clone, Copy)]
struct Line {
    /// Element offsets of the first line's first element: input, values,
    /// indices.
    start: [isize; 3],
    step: [isize; 3],
    n: usize,
    lanes: usize,
    lane: [isize; 3],
}

/// Lines of a block at most (their running values stay in one small array).
const MAX_LANES: usize = 64;

/// `outs = scan(x)` along `dim`: `outs[0]` the values (x's dtype, float32,
/// float64 or int64), `outs[1]` the int64 indices for max and min.
pub fn run_scan(op: ScanOp, dim: usize, x: BufId, outs: &[BufId], mem: &Memory) -> Result<(), CodegenError> {
    let px = &mem.bufs[x.0 as usize];
    let pv = &mem.bufs[outs.first().ok_or(CodegenError::Internal("a scan without outputs"))?.0 as usize];
    let extreme = matches!(op, ScanOp::Max | ScanOp::Min);
    let pi = match (extreme, outs.get(1)) {
        (true, Some(i)) => Some(&mem.bufs[i.0 as usize]),
        (false, None) => None,
        _ => return Err(CodegenError::Internal("a scan with the wrong number of outputs")),
    };
    if dim >= px.sizes.len() || pv.sizes != px.sizes || pi.is_some_and(|p| p.sizes != px.sizes) || pv.dtype != px.dtype
    {
        return Err(CodegenError::Internal("scan buffers of different shapes"));
    }
    let n = px.sizes[dim].max(0) as usize;
    let numel: usize = px.sizes.iter().map(|&s| s.max(0) as usize).product();
    if numel == 0 {
        return Ok(());
    }
    let base = |p: &BufPlan, buf: BufId| (mem.ptrs[buf.0 as usize], p.offset as isize);
    let (xa, va) = (base(px, x), base(pv, outs[0]));
    let ia = pi.map(|p| base(p, outs[1])).unwrap_or((0, 0));
    let plans = [px, pv, pi.unwrap_or(pv)];
    // The other dims, outermost first. When the scan does not run along
    // memory, lines next to each other along the innermost of them go in
    // one block, each step of the scan reading a run of adjacent elements
    // (a cumsum over dim 0 of a row-major matrix) rather than one element
    // of each line far apart.
    let mut others: Vec<usize> = (0..px.sizes.len()).filter(|&d| d != dim).collect();
    let inner = others.last().copied().filter(|&d| px.strides[dim].abs() != 1 && px.sizes[d] > 1);
    let width = inner.map_or(1, |d| px.sizes[d] as usize);
    let lanes = width.min(MAX_LANES);
    let groups = width.div_ceil(lanes);
    if inner.is_some() {
        others.pop();
    }
    let blocks = numel / n / width * groups;
    let block = |b: usize| -> Line {
        let (mut rest, group) = (b / groups, b % groups);
        let mut start = [xa.1, va.1, ia.1];
        for &d in others.iter().rev() {
            let size = px.sizes[d] as usize;
            let k = (rest % size) as isize;
            rest /= size;
            for (s, p) in start.iter_mut().zip(&plans) {
                *s += k * p.strides[d] as isize;
            }
        }
        let lane =
            inner.map_or([0; 3], |d| [px.strides[d] as isize, pv.strides[d] as isize, plans[2].strides[d] as isize]);
        let first = group * lanes;
        for (s, l) in start.iter_mut().zip(lane) {
            *s += first as isize * l;
        }
        let step = [px.strides[dim] as isize, pv.strides[dim] as isize, plans[2].strides[dim] as isize];
        Line { start, step, n, lanes: lanes.min(width - first), lane }
    };
    let run_block = |b: usize| {
        let ln = block(b);
        // SAFETY: the buffers are live and hold every element of their
        // planned layouts, which `block` walks; blocks write disjoint elements.
        unsafe {
            match (px.dtype, ln.lanes > 1) {
                (DType::F32, false) => float_line::<f32, false>(op, xa.0, va.0, ia.0, ln),
                (DType::F32, true) => float_line::<f32, true>(op, xa.0, va.0, ia.0, ln),
                (DType::F64, false) => float_line::<f64, false>(op, xa.0, va.0, ia.0, ln),
                (DType::F64, true) => float_line::<f64, true>(op, xa.0, va.0, ia.0, ln),
                (_, false) => int_line::<false>(op, xa.0, va.0, ia.0, ln),
                (_, true) => int_line::<true>(op, xa.0, va.0, ia.0, ln),
            }
        }
    };
    if !matches!(px.dtype, DType::F32 | DType::F64 | DType::I64) {
        return Err(CodegenError::Internal("a scan of a dtype other than float32, float64 or int64"));
    }
    crate::parallel::for_ranges(blocks, numel >= PARALLEL_MIN_ELEMS, &|r| r.for_each(run_block));
    Ok(())
}

/// A float element type of a scan.
trait Float: Copy {
    fn get(self) -> f64;
    fn put(v: f64) -> Self;
}

impl Float for f32 {
    fn get(self) -> f64 {
        self as f64
    }
    fn put(v: f64) -> f32 {
        v as f32
    }
}

impl Float for f64 {
    fn get(self) -> f64 {
        self
    }
    fn put(v: f64) -> f64 {
        v
    }
}

/// ATen's log-add-exp of a running value and an element: infinities of one
/// sign stay as they are, a NaN element makes the result NaN.
fn log_add_exp(acc: f64, x: f64) -> f64 {
    let (lo, hi) = if x.is_nan() { (x, x) } else { (acc.min(x), acc.max(x)) };
    let (lo, hi) = if acc.is_nan() { (acc, acc) } else { (lo, hi) };
    if lo != hi || lo.is_finite() {
        hi + (lo - hi).exp().ln_1p()
    } else {
        acc
    }
}

/// One line of a float scan.
///
/// # Safety
/// `ln` must address live elements of `T` (and int64 indices) in each buffer.
unsafe fn float_line<T: Float, const BLOCK: bool>(op: ScanOp, x: usize, v: usize, idx: usize, ln: Line) {
    let (x, v, idx) = (x as *const T, v as *mut T, idx as *mut i64);
    let init = match op {
        ScanOp::Sum => 0.0,
        ScanOp::Prod => 1.0,
        ScanOp::LogSumExp => f64::NEG_INFINITY,
        ScanOp::Max | ScanOp::Min => f64::NAN,
    };
    let mut acc = [init; MAX_LANES];
    let mut at = [0i64; MAX_LANES];
    // A single line (`!BLOCK`) compiles to a loop with one running value.
    let lanes = if BLOCK { ln.lanes } else { 1 };
    for j in 0..ln.n as isize {
        for g in 0..lanes {
            let o = |b: usize| ln.start[b] + j * ln.step[b] + g as isize * ln.lane[b];
            // SAFETY: the caller's lines lie inside the buffers.
            let e = unsafe { *x.offset(o(0)) }.get();
            let a = &mut acc[g];
            match op {
                ScanOp::Sum => *a += e,
                ScanOp::Prod => *a *= e,
                ScanOp::LogSumExp => *a = log_add_exp(*a, e),
                ScanOp::Max | ScanOp::Min => {
                    let better = if op == ScanOp::Max { e >= *a } else { e <= *a };
                    if j == 0 || e.is_nan() || (!a.is_nan() && better) {
                        *a = e;
                        at[g] = j as i64;
                    }
                    // SAFETY: as above, for the indices.
                    unsafe { *idx.offset(o(2)) = at[g] };
                }
            }
            // SAFETY: as above, for the values.
            unsafe { *v.offset(o(1)) = T::put(*a) };
        }
    }
}

/// One line of an int64 scan (sums and products wrap).
///
/// # Safety
/// `ln` must address live int64 elements in each buffer.
unsafe fn int_line<const BLOCK: bool>(op: ScanOp, x: usize, v: usize, idx: usize, ln: Line) {
    let (x, v, idx) = (x as *const i64, v as *mut i64, idx as *mut i64);
    let mut acc = [if op == ScanOp::Prod { 1i64 } else { 0 }; MAX_LANES];
    let mut at = [0i64; MAX_LANES];
    // A single line (`!BLOCK`) compiles to a loop with one running value.
    let lanes = if BLOCK { ln.lanes } else { 1 };
    for j in 0..ln.n as isize {
        for g in 0..lanes {
            let o = |b: usize| ln.start[b] + j * ln.step[b] + g as isize * ln.lane[b];
            // SAFETY: the caller's lines lie inside the buffers.
            let e = unsafe { *x.offset(o(0)) };
            let a = &mut acc[g];
            match op {
                ScanOp::Sum | ScanOp::LogSumExp => *a = a.wrapping_add(e),
                ScanOp::Prod => *a = a.wrapping_mul(e),
                ScanOp::Max | ScanOp::Min => {
                    if j == 0 || (if op == ScanOp::Max { e >= *a } else { e <= *a }) {
                        *a = e;
                        at[g] = j as i64;
                    }
                    // SAFETY: as above, for the indices.
                    unsafe { *idx.offset(o(2)) = at[g] };
                }
            }
            // SAFETY: as above, for the values.
            unsafe { *v.offset(o(1)) = *a };
        }
    }
}
