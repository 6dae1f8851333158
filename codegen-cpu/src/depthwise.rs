//! Depthwise 2-D convolution: one filter per channel, so each output plane
//! is a weighted sum of `kh·kw` shifted windows of one input plane.
//!
//! Each plane is first copied into a zero-bordered scratch plane, so the
//! window loops need no bounds tests; then four output rows at a time are
//! computed in blocks of eight elements per row, whose sums stay in vector
//! registers while every tap is added (row-major order, as the definition
//! sums), in an AVX2 build chosen at run time. Planes run in parallel in
//! chunks, each with its own scratch.

use rdyn_ir::loops::BufId;
use rdyn_ir::DType;

use crate::plan::{BufPlan, Geometry};
use crate::tile::Memory;
use crate::CodegenError;

/// Below this many multiply-adds a convolution runs on the calling thread.
const PARALLEL_MIN_MACS: i64 = 1 << 15;

/// The sizes of one plane's work, in elements.
#[derive(Clone, Copy)]
pub(crate) struct Plane {
    pub h: usize,
    pub w: usize,
    pub kh: usize,
    pub kw: usize,
    pub oh: usize,
    pub ow: usize,
    /// The scratch plane's width (`w` plus both paddings).
    pub wp: usize,
    pub stride: [usize; 2],
    pub pad: [usize; 2],
    pub dil: [usize; 2],
}

impl Plane {
    /// The batch, the channels and one plane's sizes of a convolution of
    /// an input `x` `[n, c, h, w]` by a weight `w` `[c, 1, kh, kw]` into
    /// `o` `[n, c, oh, ow]`; an error where they disagree, or where a window
    /// would reach past the padded plane (checked once here, not per load).
    pub(crate) fn of(x: &[i64], w: &[i64], o: &[i64], g: &Geometry) -> Result<(usize, usize, Plane), CodegenError> {
        if x.len() != 4 || w.len() != 4 || o.len() != 4 {
            return Err(CodegenError::Internal("depthwise convolution operands of unexpected rank"));
        }
        let as_usize = |v: i64| usize::try_from(v).map_err(|_| CodegenError::Internal("negative convolution size"));
        let plane = Plane {
            h: as_usize(x[2])?,
            w: as_usize(x[3])?,
            kh: as_usize(w[2])?,
            kw: as_usize(w[3])?,
            oh: as_usize(o[2])?,
            ow: as_usize(o[3])?,
            wp: as_usize(x[3] + 2 * g.padding[1])?,
            stride: [as_usize(g.stride[0])?, as_usize(g.stride[1])?],
            pad: [as_usize(g.padding[0])?, as_usize(g.padding[1])?],
            dil: [as_usize(g.dilation[0])?, as_usize(g.dilation[1])?],
        };
        let hp = plane.h + 2 * plane.pad[0];
        let reach = |o: usize, s: usize, k: usize, d: usize| o.saturating_sub(1) * s + (k - 1) * d;
        if plane.kh == 0
            || plane.kw == 0
            || (plane.oh > 0 && reach(plane.oh, plane.stride[0], plane.kh, plane.dil[0]) >= hp)
            || (plane.ow > 0 && reach(plane.ow, plane.stride[1], plane.kw, plane.dil[1]) >= plane.wp)
            || w[0] != x[1]
            || o[..2] != x[..2]
        {
            return Err(CodegenError::Internal("depthwise convolution sizes do not agree"));
        }
        Ok((as_usize(x[0])?, as_usize(x[1])?, plane))
    }

    /// The zero-bordered scratch plane's height.
    pub(crate) fn hp(&self) -> usize {
        self.h + 2 * self.pad[0]
    }
}

pub(crate) trait Elem:
    Copy + Default + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> + Send + Sync
{
}
impl Elem for f32 {}
impl Elem for f64 {}

/// `out = depthwise_conv2d(x, w)` over buffers `[n, c, h, w]`, `[c, 1, kh,
/// kw]` and `[n, c, oh, ow]` of any strides.
pub fn run_depthwise(x: BufId, w: BufId, out: BufId, g: &Geometry, mem: &Memory) -> Result<(), CodegenError> {
    let (px, pw, po) = (&mem.bufs[x.0 as usize], &mem.bufs[w.0 as usize], &mem.bufs[out.0 as usize]);
    let (n, c, plane) = Plane::of(&px.sizes, &pw.sizes, &po.sizes, g)?;
    let macs = (n * c * plane.oh * plane.ow * plane.kh * plane.kw) as i64;
    let ptr = |b: BufId, p: &BufPlan, size: usize| mem.ptrs[b.0 as usize] + p.offset as usize * size;
    macro_rules! go {
        ($t:ty) => {{
            let size = std::mem::size_of::<$t>();
            let job = Job::<$t> {
                x: ptr(x, px, size),
                w: ptr(w, pw, size),
                out: ptr(out, po, size),
                sx: [px.strides[0], px.strides[1], px.strides[2], px.strides[3]],
                sw: [pw.strides[0], pw.strides[2], pw.strides[3]],
                so: [po.strides[0], po.strides[1], po.strides[2], po.strides[3]],
                channels: c,
                plane,
                avx2: avx2(),
                _t: std::marker::PhantomData,
            };
            job.run(n * c, macs)?
        }};
    }
    match po.dtype {
        DType::F32 if px.dtype == DType::F32 && pw.dtype == DType::F32 => go!(f32),
        DType::F64 if px.dtype == DType::F64 && pw.dtype == DType::F64 => go!(f64),
        _ => return Err(CodegenError::Internal("depthwise convolution dtype")),
    }
    Ok(())
}

/// One convolution's addresses (of element 0) and element strides.
struct Job<T> {
    x: usize,
    w: usize,
    out: usize,
    /// Input strides (n, c, h, w).
    sx: [i64; 4],
    /// Weight strides (c, kh, kw).
    sw: [i64; 3],
    /// Output strides (n, c, oh, ow).
    so: [i64; 4],
    channels: usize,
    plane: Plane,
    /// Whether the rows run in the AVX2 build (detected once per call).
    avx2: bool,
    _t: std::marker::PhantomData<T>,
}

/// `len` zeros, or None where the allocation fails (a plane of a huge
/// image near the process's memory limit must not abort it).
pub(crate) fn zeros<T: Elem>(len: usize) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).ok()?;
    v.resize(len, T::default());
    Some(v)
}

/// Runs `chunk(k)` for `k` in `0..chunks` (in parallel when more than one);
/// `Err(OutOfMemory)` with the bytes a chunk asked for where one could not
/// allocate its scratch (it then did nothing).
pub(crate) fn run_chunks(
    chunks: usize,
    chunk: &(dyn Fn(usize) -> Result<(), usize> + Sync),
) -> Result<(), CodegenError> {
    let failed = std::sync::atomic::AtomicUsize::new(0);
    let each = |k: usize| {
        if let Err(bytes) = chunk(k) {
            failed.store(bytes.max(1), std::sync::atomic::Ordering::Relaxed);
        }
    };
    if chunks > 1 {
        crate::parallel::for_each(chunks, &each);
    } else {
        each(0);
    }
    match failed.into_inner() {
        0 => Ok(()),
        bytes => Err(CodegenError::OutOfMemory(bytes)),
    }
}

impl<T: Elem> Job<T> {
    fn run(&self, planes: usize, macs: i64) -> Result<(), CodegenError> {
        let threads = crate::parallel::threads();
        let chunks = if macs < PARALLEL_MIN_MACS || threads < 2 { 1 } else { (threads * 4).min(planes) };
        let per = planes.div_ceil(chunks.max(1));
        let p = self.plane;
        let chunk = |k: usize| {
            let len = p.hp() * p.wp + slack(&p);
            let bytes = (len + p.kh * p.kw + ROWS * p.ow) * std::mem::size_of::<T>();
            let (Some(mut scratch), Some(mut taps), Some(mut rows)) =
                (zeros(len), zeros(p.kh * p.kw), zeros(ROWS * p.ow))
            else {
                return Err(bytes);
            };
            for plane in k * per..((k + 1) * per).min(planes) {
                self.plane(plane, &mut scratch, &mut taps, &mut rows);
            }
            Ok(())
        };
        run_chunks(chunks, &chunk)
    }

    /// Convolve plane `index` (batch-major, then channel).
    fn plane(&self, index: usize, scratch: &mut [T], taps: &mut [T], rows_buf: &mut [T]) {
        let p = self.plane;
        let (ni, ci) = ((index / self.channels) as i64, (index % self.channels) as i64);
        let at = |base: usize, offset: i64| (base as i64 + offset * std::mem::size_of::<T>() as i64) as *const T;
        let x = at(self.x, ni * self.sx[0] + ci * self.sx[1]);
        let w = at(self.w, ci * self.sw[0]);
        // SAFETY (all reads and writes below): the addresses and strides
        // describe live buffers of this call whose sizes the plan checked
        // (`run_depthwise`); each plane of the output is written by one
        // thread only.
        for (i, row) in taps.chunks_mut(p.kw).enumerate() {
            for (j, t) in row.iter_mut().enumerate() {
                *t = unsafe { *w.offset((i as i64 * self.sw[1] + j as i64 * self.sw[2]) as isize) };
            }
        }
        unsafe { fill_scratch(x, [self.sx[2], self.sx[3]], &p, scratch) };
        let out = at(self.out, ni * self.so[0] + ci * self.so[1]) as *mut T;
        // Rows go straight to the output when its rows are dense (element
        // stride 1, rows not overlapping); else through `rows_buf`.
        let direct = self.so[3] == 1 && self.so[2] >= p.ow as i64;
        let mut r = 0;
        while r < p.oh {
            let rows = if p.oh - r >= ROWS { ROWS } else { 1 };
            let o = unsafe { out.offset((r as i64 * self.so[2]) as isize) };
            if direct {
                let pitch = self.so[2] as usize;
                let block = unsafe { std::slice::from_raw_parts_mut(o, (rows - 1) * pitch + p.ow) };
                convolve_rows(self.avx2, scratch, taps, &p, r, block, pitch);
            } else {
                convolve_rows(self.avx2, scratch, taps, &p, r, &mut rows_buf[..rows * p.ow], p.ow);
                for (k, row) in rows_buf[..rows * p.ow].chunks(p.ow.max(1)).enumerate() {
                    let o = unsafe { o.offset((k as i64 * self.so[2]) as isize) };
                    for (q, v) in row.iter().enumerate() {
                        unsafe { *o.offset((q as i64 * self.so[3]) as isize) = *v };
                    }
                }
            }
            r += rows;
        }
    }
}

/// Copy the plane at `x` (row and element strides `s`) into the interior
/// of its zero-bordered scratch copy (whose border stays zero).
///
/// # Safety
/// `x` and `s` must address `p.h` rows of `p.w` readable elements.
pub(crate) unsafe fn fill_scratch<T: Elem>(x: *const T, s: [i64; 2], p: &Plane, scratch: &mut [T]) {
    for r in 0..p.h {
        let dst = &mut scratch[(r + p.pad[0]) * p.wp + p.pad[1]..][..p.w];
        for (q, d) in dst.iter_mut().enumerate() {
            // SAFETY: the caller's.
            *d = unsafe { *x.offset((r as i64 * s[0] + q as i64 * s[1]) as isize) };
        }
    }
}

/// Output elements of a row computed together, their sums kept in
/// registers.
const LANES: usize = 8;

/// Output rows computed together: independent sums, so that the additions
/// of one tap to several rows overlap instead of waiting on each other.
const ROWS: usize = 4;

/// Elements a plane's scratch holds past its last row, so that the last
/// block of [`LANES`] outputs of a row may read whole windows.
fn slack(p: &Plane) -> usize {
    LANES * p.stride[1] + LANES
}

/// Output rows `r..` (1 or [`ROWS`] of them, as `dst` holds) of a plane
/// from its zero-bordered scratch copy, into `dst`, rows `pitch` apart; in
/// the AVX2 build when `avx2` (from [`avx2`]).
fn convolve_rows<T: Elem>(avx2: bool, scratch: &[T], taps: &[T], p: &Plane, r: usize, dst: &mut [T], pitch: usize) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` says the CPU supports AVX2.
        unsafe { convolve_rows_avx2(scratch, taps, p, r, dst, pitch) };
        return;
    }
    let _ = avx2;
    convolve_rows_body(scratch, taps, p, r, dst, pitch);
}

/// Whether this CPU runs the AVX2 build of the row loops.
pub(crate) fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    return is_x86_feature_detected!("avx2");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn convolve_rows_avx2<T: Elem>(scratch: &[T], taps: &[T], p: &Plane, r: usize, dst: &mut [T], pitch: usize) {
    convolve_rows_body(scratch, taps, p, r, dst, pitch);
}

/// Strides 1 and 2 compiled as constants (contiguous or fixed-step loads);
/// any other read from the plane.
#[inline(always)]
fn convolve_rows_body<T: Elem>(scratch: &[T], taps: &[T], p: &Plane, r: usize, dst: &mut [T], pitch: usize) {
    let one = dst.len() <= p.ow;
    match (p.stride[1], one) {
        (1, false) => blocks::<T, 1, ROWS>(scratch, taps, p, r, dst, pitch),
        (2, false) => blocks::<T, 2, ROWS>(scratch, taps, p, r, dst, pitch),
        (_, false) => blocks::<T, 0, ROWS>(scratch, taps, p, r, dst, pitch),
        (1, true) => blocks::<T, 1, 1>(scratch, taps, p, r, dst, pitch),
        (2, true) => blocks::<T, 2, 1>(scratch, taps, p, r, dst, pitch),
        (_, true) => blocks::<T, 0, 1>(scratch, taps, p, r, dst, pitch),
    }
}

/// `out[k][q] = Σ taps[i][j] · window(r + k, i, j)[q]` for `R` rows, the
/// taps in row-major order (as the definition sums), [`LANES`] outputs of
/// each row at a time: the `R` sums stay in registers across all taps, and
/// only the last block's extra lanes are dropped. `S` is the row stride
/// (0: read it from the plane).
#[inline(always)]
fn blocks<T: Elem, const S: usize, const R: usize>(
    scratch: &[T],
    taps: &[T],
    p: &Plane,
    r: usize,
    dst: &mut [T],
    pitch: usize,
) {
    let s = if S == 0 { p.stride[1] } else { S };
    let span = (LANES - 1) * s + 1;
    for block in 0..p.ow.div_ceil(LANES) {
        let mut acc = [[T::default(); LANES]; R];
        for i in 0..p.kh {
            for j in 0..p.kw {
                let t = taps[i * p.kw + j];
                for (k, a) in acc.iter_mut().enumerate() {
                    let at = ((r + k) * p.stride[0] + i * p.dil[0]) * p.wp + block * LANES * s + j * p.dil[1];
                    let window = &scratch[at..][..span];
                    for (l, a) in a.iter_mut().enumerate() {
                        *a = *a + t * window[l * s];
                    }
                }
            }
        }
        let q = block * LANES;
        for (k, a) in acc.iter().enumerate() {
            let row = &mut dst[k * pitch + q..];
            // A whole block is one vector store; the row's last, partial
            // block is written lane by lane.
            match row.get_mut(..LANES).and_then(|w| <&mut [T; LANES]>::try_from(w).ok()) {
                Some(whole) if q + LANES <= p.ow => *whole = *a,
                _ => row.iter_mut().zip(&a[..p.ow - q]).for_each(|(o, v)| *o = *v),
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A contiguous float64 buffer of `sizes` (for the kernels' tests).
    pub(crate) fn buf(sizes: Vec<usize>) -> BufPlan {
        let strides = (0..sizes.len()).map(|d| sizes[d + 1..].iter().product::<usize>() as i64).collect();
        BufPlan {
            dtype: DType::F64,
            strides,
            sizes: sizes.into_iter().map(|v| v as i64).collect(),
            offset: 0,
            storage: rdyn_memplan::Storage::Arena(0),
        }
    }

    /// The convolution by its definition, bounds checked per tap.
    fn reference(x: &[f64], w: &[f64], n: usize, c: usize, g: &Plane) -> Vec<f64> {
        let (h, wd, k) = (g.h, g.w, [g.kh, g.kw]);
        let mut out = vec![0.0; n * c * g.oh * g.ow];
        for b in 0..n * c {
            let ch = b % c;
            for r in 0..g.oh {
                for q in 0..g.ow {
                    let mut acc = 0.0;
                    for i in 0..k[0] {
                        for j in 0..k[1] {
                            let ih = (r * g.stride[0] + i * g.dil[0]) as i64 - g.pad[0] as i64;
                            let iw = (q * g.stride[1] + j * g.dil[1]) as i64 - g.pad[1] as i64;
                            if ih >= 0 && iw >= 0 && (ih as usize) < h && (iw as usize) < wd {
                                acc += w[(ch * k[0] + i) * k[1] + j] * x[(b * h + ih as usize) * wd + iw as usize];
                            }
                        }
                    }
                    out[(b * g.oh + r) * g.ow + q] = acc;
                }
            }
        }
        out
    }

    fn check(h: usize, wd: usize, k: [usize; 2], stride: [usize; 2], pad: [usize; 2], dil: [usize; 2]) {
        let (n, c) = (2, 3);
        let oh = (h + 2 * pad[0] - dil[0] * (k[0] - 1) - 1) / stride[0] + 1;
        let ow = (wd + 2 * pad[1] - dil[1] * (k[1] - 1) - 1) / stride[1] + 1;
        let x: Vec<f64> = (0..n * c * h * wd).map(|v| ((v * 37 % 23) as f64 - 11.0) / 7.0).collect();
        let w: Vec<f64> = (0..c * k[0] * k[1]).map(|v| ((v * 13 % 11) as f64 - 5.0) / 3.0).collect();
        let mut out = vec![f64::NAN; n * c * oh * ow];
        let bufs = vec![buf(vec![n, c, h, wd]), buf(vec![c, 1, k[0], k[1]]), buf(vec![n, c, oh, ow])];
        let ptrs = [x.as_ptr() as usize, w.as_ptr() as usize, out.as_mut_ptr() as usize];
        let g = Geometry {
            stride: stride.map(|v| v as i64),
            padding: pad.map(|v| v as i64),
            dilation: dil.map(|v| v as i64),
        };
        run_depthwise(BufId(0), BufId(1), BufId(2), &g, &Memory { ptrs: &ptrs, bufs: &bufs })
            .expect("a convolution whose sizes agree");
        let plane = Plane { h, w: wd, kh: k[0], kw: k[1], oh, ow, wp: wd + 2 * pad[1], stride, pad, dil };
        let want = reference(&x, &w, n, c, &plane);
        for (got, want) in out.iter().zip(&want) {
            assert!((got - want).abs() <= 1e-12 * want.abs().max(1.0), "{got} vs {want}");
        }
    }

    #[test]
    fn scratch_that_cannot_be_allocated_is_an_error() {
        assert!(zeros::<f32>(usize::MAX / 2).is_none());
        let chunk = |k: usize| if k == 1 { Err(4096) } else { Ok(()) };
        assert!(matches!(run_chunks(3, &chunk), Err(CodegenError::OutOfMemory(4096))));
        assert!(run_chunks(3, &|_| Ok(())).is_ok());
    }

    #[test]
    fn matches_the_definition() {
        check(7, 7, [3, 3], [1, 1], [1, 1], [1, 1]);
        check(9, 6, [3, 3], [2, 2], [1, 1], [1, 1]);
        check(11, 10, [5, 5], [2, 1], [2, 2], [1, 1]);
        check(8, 9, [3, 2], [1, 2], [0, 1], [2, 1]);
        check(5, 5, [1, 1], [1, 1], [0, 0], [1, 1]);
    }
}
