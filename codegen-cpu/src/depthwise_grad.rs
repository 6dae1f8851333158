//! The weight gradient of a depthwise 2-D convolution:
//! `gw[c, 0, i, j] = Σₙ Σ_{y,x} grad[n, c, y, x] · xpad[n, c, y·sy + i·dy, x·sx + j·dx]`.
//!
//! Each channel is one thread's: for every image its input plane is copied
//! into the zero-bordered scratch plane of the forward kernel
//! ([`crate::depthwise`]) and its gradient plane into a dense one, then each
//! tap is a dot product of the gradient's rows with the scratch rows the tap
//! read, in blocks of eight lanes (contiguous loads for stride 1, fixed-step
//! for stride 2). The input's gradient needs no kernel of its own: it is the
//! forward kernel over the spread gradient with the flipped filter
//! (`python/rdyn/_decomp_conv.py`).
//!
//! ATen's CPU `convolution_backward` for a depthwise convolution of NCHW
//! tensors (oneDNN) spends ~0.25 ms per call setting up, whatever the size,
//! and ~85 ms on ConvNeXt's 7x7 over `[8, 96, 56, 56]`. A reduction over
//! the input's windows in rdyn's loop IR (the taps as output dims) is correct
//! but runs one short row per (channel, tap, image, row): 0.35 ms for
//! ShuffleNet's `[2, 232, 2, 2]` 3x3 layers.

use rdyn_ir::loops::BufId;
use rdyn_ir::DType;

use crate::depthwise::{avx2, fill_scratch, run_chunks, zeros, Elem, Plane};
use crate::plan::{BufPlan, Geometry};
use crate::tile::Memory;
use crate::CodegenError;

/// Below this many multiply-adds the gradient runs on the calling thread
/// (as the forward kernel's `PARALLEL_MIN_MACS`: a thread's start costs
/// about what 32 K multiply-adds do).
const PARALLEL_MIN_MACS: i64 = 1 << 15;

/// Lanes of a dot product summed apart (one vector register of float32).
const LANES: usize = 8;

/// `gw = ∂conv/∂w` from the output's gradient `grad` `[n, c, oh, ow]` and
/// the input `x` `[n, c, h, w]`, into `gw` `[c, 1, kh, kw]`; any strides.
pub fn run_depthwise_weight_grad(
    grad: BufId,
    x: BufId,
    gw: BufId,
    g: &Geometry,
    mem: &Memory,
) -> Result<(), CodegenError> {
    let (pg, px, pw) = (&mem.bufs[grad.0 as usize], &mem.bufs[x.0 as usize], &mem.bufs[gw.0 as usize]);
    let (n, c, plane) = Plane::of(&px.sizes, &pw.sizes, &pg.sizes, g)?;
    let macs = (n * c * plane.oh * plane.ow * plane.kh * plane.kw) as i64;
    let ptr = |b: BufId, p: &BufPlan, size: usize| mem.ptrs[b.0 as usize] + p.offset as usize * size;
    macro_rules! go {
        ($t:ty) => {{
            let size = std::mem::size_of::<$t>();
            let job = Job::<$t> {
                grad: ptr(grad, pg, size),
                x: ptr(x, px, size),
                gw: ptr(gw, pw, size),
                sg: [pg.strides[0], pg.strides[1], pg.strides[2], pg.strides[3]],
                sx: [px.strides[0], px.strides[1], px.strides[2], px.strides[3]],
                sw: [pw.strides[0], pw.strides[2], pw.strides[3]],
                batch: n,
                plane,
                avx2: avx2(),
                _t: std::marker::PhantomData,
            };
            job.run(c, macs)?
        }};
    }
    match pw.dtype {
        DType::F32 if px.dtype == DType::F32 && pg.dtype == DType::F32 => go!(f32),
        DType::F64 if px.dtype == DType::F64 && pg.dtype == DType::F64 => go!(f64),
        _ => return Err(CodegenError::Internal("depthwise weight gradient dtype")),
    }
    Ok(())
}

/// One gradient's addresses (of element 0) and element strides.
struct Job<T> {
    grad: usize,
    x: usize,
    gw: usize,
    /// Gradient strides (n, c, oh, ow).
    sg: [i64; 4],
    /// Input strides (n, c, h, w).
    sx: [i64; 4],
    /// Weight gradient strides (c, kh, kw).
    sw: [i64; 3],
    batch: usize,
    plane: Plane,
    avx2: bool,
    _t: std::marker::PhantomData<T>,
}

/// A thread's buffers: the scratch plane, the dense gradient plane and
/// the per-tap sums.
struct Scratch<T> {
    plane: Vec<T>,
    grad: Vec<T>,
    sums: Vec<T>,
}

impl<T: Elem> Job<T> {
    fn run(&self, channels: usize, macs: i64) -> Result<(), CodegenError> {
        let threads = crate::parallel::threads();
        let chunks = if macs < PARALLEL_MIN_MACS || threads < 2 { 1 } else { (threads * 4).min(channels) };
        let per = channels.div_ceil(chunks.max(1));
        let p = self.plane;
        let chunk = |k: usize| {
            // LANES elements of slack: `narrow_rows` reads whole blocks.
            let lens = [p.hp() * p.wp + LANES, p.oh * p.ow, p.kh * p.kw];
            let bytes = lens.iter().sum::<usize>() * std::mem::size_of::<T>();
            let (Some(plane), Some(grad), Some(sums)) = (zeros(lens[0]), zeros(lens[1]), zeros(lens[2])) else {
                return Err(bytes);
            };
            let mut s = Scratch { plane, grad, sums };
            for channel in k * per..((k + 1) * per).min(channels) {
                self.channel(channel, &mut s);
            }
            Ok(())
        };
        run_chunks(chunks, &chunk)
    }

    /// The gradient of channel `ci`'s filter: its sums over every image,
    /// then written out.
    fn channel(&self, ci: usize, s: &mut Scratch<T>) {
        let p = self.plane;
        let at = |base: usize, offset: i64| (base as i64 + offset * std::mem::size_of::<T>() as i64) as *const T;
        s.sums.iter_mut().for_each(|v| *v = T::default());
        for ni in 0..self.batch {
            let (n, c) = (ni as i64, ci as i64);
            let x = at(self.x, n * self.sx[0] + c * self.sx[1]);
            let g = at(self.grad, n * self.sg[0] + c * self.sg[1]);
            // SAFETY (both copies): the addresses and strides describe live
            // buffers of this call whose sizes `Plane::of` checked.
            unsafe { fill_scratch(x, [self.sx[2], self.sx[3]], &p, &mut s.plane) };
            for (r, row) in s.grad.chunks_mut(p.ow.max(1)).enumerate() {
                for (q, v) in row.iter_mut().enumerate() {
                    *v = unsafe { *g.offset((r as i64 * self.sg[2] + q as i64 * self.sg[3]) as isize) };
                }
            }
            add_taps(self.avx2, &s.plane, &s.grad, &p, &mut s.sums);
        }
        let gw = at(self.gw, ci as i64 * self.sw[0]) as *mut T;
        for i in 0..p.kh {
            for j in 0..p.kw {
                // SAFETY: `gw` is the channel's `[kh, kw]` filter gradient,
                // written by this thread only.
                unsafe { *gw.offset((i as i64 * self.sw[1] + j as i64 * self.sw[2]) as isize) = s.sums[i * p.kw + j] };
            }
        }
    }
}

/// `sums[i·kw + j] += Σ_{y,x} grad[y, x] · plane[y·sy + i·dy, x·sx + j·dx]`
/// for one image; in the AVX2 build when `avx2`.
fn add_taps<T: Elem>(avx2: bool, plane: &[T], grad: &[T], p: &Plane, sums: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` says the CPU supports AVX2.
        unsafe { add_taps_avx2(plane, grad, p, sums) };
        return;
    }
    let _ = avx2;
    add_taps_body(plane, grad, p, sums);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_taps_avx2<T: Elem>(plane: &[T], grad: &[T], p: &Plane, sums: &mut [T]) {
    add_taps_body(plane, grad, p, sums);
}

/// Strides 1 and 2 compiled as constants; any other read from the plane.
/// Rows narrower than [`LANES`] (small planes under large filters: 6x6
/// under 7x7 in ConvNeXt's last stage) run a filter row's taps side by side
/// instead.
#[inline(always)]
fn add_taps_body<T: Elem>(plane: &[T], grad: &[T], p: &Plane, sums: &mut [T]) {
    if p.ow < LANES && p.dil[1] == 1 && p.kw <= LANES {
        return narrow_rows(plane, grad, p, sums);
    }
    match p.stride[1] {
        1 => taps::<T, 1>(plane, grad, p, sums),
        2 => taps::<T, 2>(plane, grad, p, sums),
        _ => taps::<T, 0>(plane, grad, p, sums),
    }
}

/// Every tap's dot product over the image's rows, [`LANES`] sums apart.
/// `S` is the column stride (0: read it from the plane).
#[inline(always)]
fn taps<T: Elem, const S: usize>(plane: &[T], grad: &[T], p: &Plane, sums: &mut [T]) {
    if p.ow == 0 {
        return;
    }
    let s = if S == 0 { p.stride[1] } else { S };
    let whole = p.ow / LANES * LANES;
    for i in 0..p.kh {
        for j in 0..p.kw {
            let mut acc = [T::default(); LANES];
            let mut tail = T::default();
            for (y, g) in grad.chunks_exact(p.ow).enumerate() {
                let start = (y * p.stride[0] + i * p.dil[0]) * p.wp + j * p.dil[1];
                let row = &plane[start..][..(p.ow - 1) * s + 1];
                for b in (0..whole).step_by(LANES) {
                    // Fixed-length slices: no bounds test per lane.
                    let (gb, xb) = (&g[b..][..LANES], &row[b * s..][..(LANES - 1) * s + 1]);
                    for (l, a) in acc.iter_mut().enumerate() {
                        *a = *a + gb[l] * xb[l * s];
                    }
                }
                for q in whole..p.ow {
                    tail = tail + g[q] * row[q * s];
                }
            }
            sums[i * p.kw + j] = acc.iter().fold(sums[i * p.kw + j] + tail, |t, &a| t + a);
        }
    }
}

/// For each filter row `i`, image row and pixel `x`, the pixel's gradient
/// times the scratch elements its `kw ≤ LANES` taps read (one contiguous
/// run, for dilation 1), read as a whole block of [`LANES`] (the scratch's
/// slack covers the last) and added to the filter row's lane sums at once;
/// the lanes past `kw` are dropped.
#[inline(always)]
fn narrow_rows<T: Elem>(plane: &[T], grad: &[T], p: &Plane, sums: &mut [T]) {
    if p.ow == 0 {
        return;
    }
    for (i, row_sums) in sums.chunks_exact_mut(p.kw).enumerate() {
        let mut acc = [T::default(); LANES];
        for (y, g) in grad.chunks_exact(p.ow).enumerate() {
            let start = (y * p.stride[0] + i * p.dil[0]) * p.wp;
            for (x, &gx) in g.iter().enumerate() {
                let window = &plane[start + x * p.stride[1]..][..LANES];
                for (a, &v) in acc.iter_mut().zip(window) {
                    *a = *a + gx * v;
                }
            }
        }
        for (s, a) in row_sums.iter_mut().zip(acc) {
            *s = *s + a;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::depthwise::tests::buf;

    /// The gradient by its definition, bounds checked per tap.
    fn reference(x: &[f64], g: &[f64], n: usize, c: usize, p: &Plane) -> Vec<f64> {
        let mut out = vec![0.0; c * p.kh * p.kw];
        for b in 0..n * c {
            let ch = b % c;
            for (i, j) in (0..p.kh).flat_map(|i| (0..p.kw).map(move |j| (i, j))) {
                for r in 0..p.oh {
                    for q in 0..p.ow {
                        let ih = (r * p.stride[0] + i * p.dil[0]) as i64 - p.pad[0] as i64;
                        let iw = (q * p.stride[1] + j * p.dil[1]) as i64 - p.pad[1] as i64;
                        if ih >= 0 && iw >= 0 && (ih as usize) < p.h && (iw as usize) < p.w {
                            let xv = x[(b * p.h + ih as usize) * p.w + iw as usize];
                            out[(ch * p.kh + i) * p.kw + j] += g[(b * p.oh + r) * p.ow + q] * xv;
                        }
                    }
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
        let g: Vec<f64> = (0..n * c * oh * ow).map(|v| ((v * 13 % 17) as f64 - 8.0) / 3.0).collect();
        let mut out = vec![f64::NAN; c * k[0] * k[1]];
        let bufs = vec![buf(vec![n, c, oh, ow]), buf(vec![n, c, h, wd]), buf(vec![c, 1, k[0], k[1]])];
        let ptrs = [g.as_ptr() as usize, x.as_ptr() as usize, out.as_mut_ptr() as usize];
        let geometry = Geometry {
            stride: stride.map(|v| v as i64),
            padding: pad.map(|v| v as i64),
            dilation: dil.map(|v| v as i64),
        };
        run_depthwise_weight_grad(BufId(0), BufId(1), BufId(2), &geometry, &Memory { ptrs: &ptrs, bufs: &bufs })
            .expect("a gradient whose sizes agree");
        let plane = Plane { h, w: wd, kh: k[0], kw: k[1], oh, ow, wp: wd + 2 * pad[1], stride, pad, dil };
        let want = reference(&x, &g, n, c, &plane);
        for (got, want) in out.iter().zip(&want) {
            assert!((got - want).abs() <= 1e-12 * want.abs().max(1.0), "{got} vs {want}");
        }
    }

    #[test]
    fn matches_the_definition() {
        check(7, 7, [3, 3], [1, 1], [1, 1], [1, 1]);
        check(9, 6, [3, 3], [2, 2], [1, 1], [1, 1]);
        check(11, 10, [5, 5], [2, 1], [2, 2], [1, 1]);
        check(8, 9, [3, 2], [1, 2], [0, 1], [2, 1]);
        check(5, 5, [1, 1], [1, 1], [0, 0], [1, 1]);
        check(10, 21, [3, 3], [3, 3], [1, 1], [1, 1]);
        check(20, 19, [7, 7], [1, 1], [3, 3], [1, 1]);
        // Rows narrower than the lanes: the taps side by side.
        check(6, 6, [7, 7], [1, 1], [3, 3], [1, 1]);
        check(9, 5, [3, 3], [2, 2], [1, 1], [1, 1]);
        check(5, 4, [3, 3], [1, 1], [2, 2], [2, 2]);
    }

    #[test]
    fn disagreeing_sizes_are_an_error() {
        let buf = |sizes: Vec<i64>| BufPlan {
            dtype: DType::F32,
            strides: vec![1; 4],
            sizes,
            offset: 0,
            storage: rdyn_memplan::Storage::Arena(0),
        };
        // A 3x3 filter over a 4x4 input cannot give 4x4 outputs unpadded.
        let bufs = vec![buf(vec![1, 2, 4, 4]), buf(vec![1, 2, 4, 4]), buf(vec![2, 1, 3, 3])];
        let g = Geometry { stride: [1, 1], padding: [0, 0], dilation: [1, 1] };
        let result =
            run_depthwise_weight_grad(BufId(0), BufId(1), BufId(2), &g, &Memory { ptrs: &[0; 3], bufs: &bufs });
        assert!(matches!(result, Err(CodegenError::Internal(_))));
    }
}
