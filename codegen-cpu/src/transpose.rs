//! Kernels that only move elements from one layout to its transpose.
//!
//! NCHW to channels-last before a convolution (and the weights' copy) is a
//! kernel whose one stage loads an element and stores it unchanged, unit
//! steps along different variables on the two sides. The tile executor
//! runs it as a strided gather per lane; here it is blocks of 64 x 64
//! elements, each copied 8 x 8 at a time through AVX registers (a scalar
//! loop without AVX, or for elements other than 4 bytes wide), in
//! parallel over blocks. The values are the same bits either way. A
//! stage whose value is its float32 load put through binary ops with
//! constants is such a copy too, each column then put through them while
//! in cache by the interpreter's own vector loops (the same values as the
//! tile executor's): `x + 0.0`, what a piecewise split leaves of a sum of
//! one-hot selects (`unbind`'s gradient); `max(x, 0.0)`, a ReLU of an NCHW
//! convolution's output stored channels-last beside a skip connection (a
//! U-Net decoder's `cat`: 0.38 ms for `[2, 64, 64, 64]` as a strided
//! gather, 0.7 ns an element; 0.11 ms blocked).
//! `[2, 32, 56, 56]` NCHW to channels-last, the suite's conv-BN-ReLU
//! input: 43 to 33 µs; a compiled `x.contiguous()` of a channels-last `x`
//! of that size takes 26-28 µs a call (ATen's copy: 71-75 µs).
//!
//! Staging such reads per column inside a kernel that also computes (the
//! NCHW output of a batch norm over a channels-last convolution) was
//! tried and dropped: 57 to 55 µs, the 4-lane arithmetic, not the
//! gathers, being what that kernel waits on.

use rdyn_ir::loops::BinaryOp;
use rdyn_ir::DType;

use crate::plan::{
    storage_root, BufPlan, IndexFn, Inst, InstOp, KernelPlan, PostOp, Reg, StagePlan, TileMode, TransposeCopy,
};
use crate::tile::Memory;

/// Block edge: a 64 x 64 block of float32 is 16 KiB on each side, in L1.
const BLOCK: usize = 64;

/// Outer dimensions a transposing copy may have (a block's point lives on
/// the stack: no allocation per block).
const MAX_DIMS: usize = 16;

/// The stages of `kernel` as transposing copies, when every stage is one.
pub(crate) fn detect(kernel: &KernelPlan, bufs: &[BufPlan]) -> Option<Vec<TransposeCopy>> {
    if kernel.serial || kernel.mode != TileMode::Outer || kernel.stages.is_empty() {
        return None;
    }
    let m = kernel.outer.len();
    if m > MAX_DIMS {
        return None;
    }
    kernel
        .stages
        .iter()
        .map(|stage| {
            if !stage.inner.is_empty() || stage.reduce.is_some() || !stage.store_indirect.is_empty() {
                return None;
            }
            let (inst, rest) = stage.insts.split_first()?;
            let (post, value) = post_ops(stage, inst.dst, rest)?;
            let InstOp::Load { buf, dtype, index, indirect, mask: None } = &inst.op else { return None };
            let itemsize = dtype.itemsize();
            let plain = |i: &IndexFn| i.rest.is_none();
            if value != stage.value
                || inst.narrow.is_some()
                || !indirect.is_empty()
                || *dtype != stage.out_dtype
                || !matches!(itemsize, 1 | 2 | 4 | 8)
                || !plain(index)
                || !plain(&stage.store)
                || storage_root(bufs, *buf) == storage_root(bufs, stage.out)
            {
                return None;
            }
            let (outer, src_index, dst_index) = merged(&kernel.outer, index, &stage.store)?;
            let n = outer.len() as u32;
            let unit = |i: &IndexFn| (0..n).find(|&v| i.step(v) == Some(1));
            let (a, b) = (unit(&dst_index)?, unit(&src_index)?);
            let (src_a, dst_b) = (src_index.step(a)?, dst_index.step(b)?);
            // A transpose worth blocking: both sides long, far apart.
            let long = |v: u32| outer[v as usize] >= 8;
            (a != b && long(a) && long(b) && src_a.abs() >= 8 && dst_b.abs() >= 8).then_some(TransposeCopy {
                post,
                src: *buf,
                dst: stage.out,
                itemsize,
                outer,
                a: a as usize,
                b: b as usize,
                src_index,
                dst_index,
                src_a,
                dst_b,
            })
        })
        .collect()
}

/// The copy's dims, those of `outer` that both sides walk as one merged (a
/// dim steps by its inner neighbour's step times that one's size, on both
/// sides) and those of size 1 dropped, with both indices over them. A
/// nearest upsampling splits `w` as `(w / 2, 2)` for its reads; a copy of
/// another input beside it (the skip connection of a U-Net's `cat`) walks
/// the two as one dim of `w`.
fn merged(outer: &[i64], src: &IndexFn, dst: &IndexFn) -> Option<(Vec<i64>, IndexFn, IndexFn)> {
    let mut dims: Vec<(i64, i64, i64)> = Vec::new();
    for (v, &size) in outer.iter().enumerate() {
        let (s, d) = (src.step(v as u32)?, dst.step(v as u32)?);
        if size == 1 {
            continue;
        }
        match dims.last_mut() {
            Some(last) if last.1 == s * size && last.2 == d * size => *last = (last.0 * size, s, d),
            _ => dims.push((size, s, d)),
        }
    }
    let index = |c0: i64, step: &dyn Fn(&(i64, i64, i64)) -> i64| IndexFn {
        c0,
        coefs: dims.iter().enumerate().map(|(v, dim)| (v as u32, step(dim))).collect(),
        rest: None,
    };
    let (src_index, dst_index) = (index(src.c0, &|d| d.1), index(dst.c0, &|d| d.2));
    Some((dims.iter().map(|d| d.0).collect(), src_index, dst_index))
}

/// The ops after a copy's load (register `x`): each a float32 binary op
/// of the previous value and a constant, none narrowed; with the register
/// holding the last value. `None` for anything else.
fn post_ops(stage: &StagePlan, x: Reg, insts: &[Inst]) -> Option<(Vec<PostOp>, Reg)> {
    let constant = |r: Reg| {
        stage.consts.iter().find_map(|(c, op)| match op {
            InstOp::ConstF(v) if *c == r => Some(*v as f32),
            _ => None,
        })
    };
    let mut value = x;
    let mut post = Vec::with_capacity(insts.len());
    for inst in insts {
        let InstOp::Binary(op, p, q) = &inst.op else { return None };
        let (op, p, q) = (*op, *p, *q);
        let elementwise =
            matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Max | BinaryOp::Min);
        if !elementwise || inst.narrow.is_some() || stage.out_dtype != DType::F32 {
            return None;
        }
        let (c, constant_first) = match (p == value, q == value) {
            (true, false) => (constant(q)?, false),
            (false, true) => (constant(p)?, true),
            _ => return None,
        };
        post.push(PostOp { op, constant: c, constant_first });
        value = inst.dst;
    }
    Some((post, value))
}

/// Run the copies of a kernel `detect` accepted.
pub(crate) fn run(copies: &[TransposeCopy], mem: &Memory) {
    for copy in copies {
        run_one(copy, mem);
    }
}

fn run_one(copy: &TransposeCopy, mem: &Memory) {
    let outer = &copy.outer[..];
    let (na, nb) = (outer[copy.a] as usize, outer[copy.b] as usize);
    let (ba, bb) = (na.div_ceil(BLOCK), nb.div_ceil(BLOCK));
    let heads: usize =
        outer.iter().enumerate().filter(|(v, _)| *v != copy.a && *v != copy.b).map(|(_, &n)| n as usize).product();
    let items = heads * ba * bb;
    let (src, dst) = (mem.ptrs[copy.src.0 as usize], mem.ptrs[copy.dst.0 as usize]);
    let item = |k: usize| {
        let mut env = [0i64; MAX_DIMS];
        // Unravel the head point (every variable but a and b, in order).
        let mut flat = k / (ba * bb);
        for v in (0..outer.len()).rev().filter(|v| *v != copy.a && *v != copy.b) {
            let n = outer[v] as usize;
            env[v] = (flat % n) as i64;
            flat /= n;
        }
        let (ia, ib) = (k / bb % ba * BLOCK, k % bb * BLOCK);
        env[copy.a] = ia as i64;
        env[copy.b] = ib as i64;
        let size = copy.itemsize as i64;
        let from = (src as i64 + copy.src_index.eval(&env) * size) as *const u8;
        let to = (dst as i64 + copy.dst_index.eval(&env) * size) as *mut u8;
        let block = Block {
            rows: BLOCK.min(na - ia),
            cols: BLOCK.min(nb - ib),
            src_stride: copy.src_a as isize,
            dst_stride: copy.dst_b as isize,
        };
        // SAFETY: the block's elements are points of the kernel's ranges,
        // which the plan indexes in bounds of both buffers; the buffers do
        // not overlap (`detect`).
        unsafe {
            match copy.itemsize {
                1 => block.copy(from, to),
                2 => block.copy(from as *const u16, to as *mut u16),
                4 if !copy.post.is_empty() => block.copy_then(from as *const f32, to as *mut f32, &copy.post),
                4 => block.copy_4(from as *const u32, to as *mut u32),
                _ => block.copy(from as *const u64, to as *mut u64),
            }
        }
    };
    if items == 1 || na * nb * heads < crate::tile::PARALLEL_MIN_WORK {
        (0..items).for_each(item);
    } else {
        crate::parallel::for_each(items, &item);
    }
}

/// `rows x cols` elements: `dst[c * dst_stride + r] = src[r * src_stride + c]`.
struct Block {
    rows: usize,
    cols: usize,
    src_stride: isize,
    dst_stride: isize,
}

impl Block {
    /// # Safety
    /// Every `src` and `dst` element the block names must be valid.
    unsafe fn copy<T: Copy>(&self, src: *const T, dst: *mut T) {
        // SAFETY: as the caller says.
        unsafe { self.copy_range(src, dst, (0, self.rows), (0, self.cols)) }
    }

    /// # Safety
    /// As for `copy`.
    unsafe fn copy_range<T: Copy>(&self, src: *const T, dst: *mut T, rows: (usize, usize), cols: (usize, usize)) {
        for c in cols.0..cols.1 {
            for r in rows.0..rows.1 {
                // SAFETY: as the caller says.
                unsafe {
                    *dst.offset(c as isize * self.dst_stride + r as isize) =
                        *src.offset(r as isize * self.src_stride + c as isize);
                }
            }
        }
    }

    /// float32 elements put through `post` after the transposed copy, each
    /// column while it is in cache, by the interpreter's vector loops.
    ///
    /// # Safety
    /// As for `copy`.
    unsafe fn copy_then(&self, src: *const f32, dst: *mut f32, post: &[PostOp]) {
        // SAFETY: as the caller says.
        unsafe { self.copy_4(src as *const u32, dst as *mut u32) };
        let mut before = [0f32; BLOCK];
        let mut constant = [0f32; BLOCK];
        for p in post {
            let (x, k) = (&mut before[..self.rows], &mut constant[..self.rows]);
            k.fill(p.constant);
            for c in 0..self.cols {
                // SAFETY: column `c` of the block, which the copy just wrote.
                let column =
                    unsafe { std::slice::from_raw_parts_mut(dst.offset(c as isize * self.dst_stride), self.rows) };
                x.copy_from_slice(column);
                let (a, b) = if p.constant_first { (&*k, &*x) } else { (&*x, &*k) };
                crate::ops::binary_f32(p.op, a, b, column);
            }
        }
    }

    /// Four-byte elements: 8 x 8 squares through AVX where the CPU has it.
    ///
    /// # Safety
    /// As for `copy`.
    unsafe fn copy_4(&self, src: *const u32, dst: *mut u32) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx") {
            // SAFETY: AVX is present; the elements as the caller says.
            unsafe { self.copy_4_avx(src, dst) };
            return;
        }
        // SAFETY: as the caller says.
        unsafe { self.copy(src, dst) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx")]
    unsafe fn copy_4_avx(&self, src: *const u32, dst: *mut u32) {
        let (rows8, cols8) = (self.rows / 8 * 8, self.cols / 8 * 8);
        for r in (0..rows8).step_by(8) {
            for c in (0..cols8).step_by(8) {
                // SAFETY: an 8 x 8 square inside the block.
                unsafe {
                    square_8x8(
                        src.offset(r as isize * self.src_stride + c as isize) as *const f32,
                        self.src_stride,
                        dst.offset(c as isize * self.dst_stride + r as isize) as *mut f32,
                        self.dst_stride,
                    )
                };
            }
        }
        // SAFETY: the edges, inside the block.
        unsafe {
            self.copy_range(src, dst, (0, rows8), (cols8, self.cols));
            self.copy_range(src, dst, (rows8, self.rows), (0, self.cols));
        }
    }
}

/// Transpose the 8 x 8 square at `src` (rows `src_stride` apart) into `dst`
/// (rows `dst_stride` apart). Moves and shuffles only: every bit pattern,
/// NaN payloads included, arrives unchanged.
///
/// # Safety
/// AVX must be present; the 64 elements on each side must be valid.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn square_8x8(src: *const f32, src_stride: isize, dst: *mut f32, dst_stride: isize) {
    use std::arch::x86_64::*;
    // SAFETY: as the caller says.
    unsafe {
        let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(src.offset(i as isize * src_stride)));
        // Pairs of rows interleaved, then pairs of pairs, then halves.
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let s = [
            _mm256_shuffle_ps::<0x44>(t0, t2),
            _mm256_shuffle_ps::<0xEE>(t0, t2),
            _mm256_shuffle_ps::<0x44>(t1, t3),
            _mm256_shuffle_ps::<0xEE>(t1, t3),
            _mm256_shuffle_ps::<0x44>(t4, t6),
            _mm256_shuffle_ps::<0xEE>(t4, t6),
            _mm256_shuffle_ps::<0x44>(t5, t7),
            _mm256_shuffle_ps::<0xEE>(t5, t7),
        ];
        for j in 0..4 {
            _mm256_storeu_ps(dst.offset(j as isize * dst_stride), _mm256_permute2f128_ps::<0x20>(s[j], s[j + 4]));
            _mm256_storeu_ps(dst.offset((j + 4) as isize * dst_stride), _mm256_permute2f128_ps::<0x31>(s[j], s[j + 4]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every block shape around the 8 x 8 squares, both element widths,
    /// against the plain loop.
    #[test]
    fn blocks_match_the_plain_loop() {
        for (rows, cols) in [(8, 8), (1, 9), (9, 1), (13, 21), (64, 64), (17, 64), (64, 3), (40, 33)] {
            let (ss, ds) = (cols + 5, rows + 3);
            let src: Vec<u32> = (0..rows * ss).map(|i| (i as u32).wrapping_mul(2_654_435_761)).collect();
            let block = Block { rows, cols, src_stride: ss as isize, dst_stride: ds as isize };
            let mut want = vec![0u32; cols * ds];
            let mut got = want.clone();
            // SAFETY: the vectors hold every element the blocks name.
            unsafe {
                block.copy(src.as_ptr(), want.as_mut_ptr());
                block.copy_4(src.as_ptr(), got.as_mut_ptr());
            }
            assert_eq!(got, want, "{rows} x {cols}");
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(want[c * ds + r], src[r * ss + c]);
                }
            }
            let wide: Vec<u64> = src.iter().map(|&x| x as u64 * 3).collect();
            let mut out = vec![0u64; cols * ds];
            // SAFETY: as above.
            unsafe { block.copy(wide.as_ptr(), out.as_mut_ptr()) };
            assert!(out.iter().zip(&want).all(|(o, w)| *o == *w as u64 * 3));
        }
    }

    /// Copies put through ops with constants (`x + 0.0`: `-0.0` arrives as
    /// `+0.0`; a ReLU: NaN stays NaN; a scale by a constant on the left)
    /// give what the ops give elementwise, in and around the 8 x 8 squares.
    #[test]
    fn copies_then_ops_match_the_elementwise_ops() {
        let plus_zero = vec![PostOp { op: BinaryOp::Add, constant: 0.0, constant_first: false }];
        let relu_scaled = vec![
            PostOp { op: BinaryOp::Max, constant: 0.0, constant_first: false },
            PostOp { op: BinaryOp::Div, constant: 3.0, constant_first: true },
        ];
        for post in [plus_zero, relu_scaled] {
            for (rows, cols) in [(8, 8), (13, 21), (3, 9), (64, 64)] {
                let (ss, ds) = (cols + 1, rows + 2);
                let src: Vec<f32> = (0..rows * ss)
                    .map(|i| match i % 4 {
                        0 => -0.0,
                        1 => f32::NAN,
                        _ => i as f32 - 7.5,
                    })
                    .collect();
                let block = Block { rows, cols, src_stride: ss as isize, dst_stride: ds as isize };
                let mut got = vec![1.0f32; cols * ds];
                // SAFETY: the vectors hold every element the block names.
                unsafe { block.copy_then(src.as_ptr(), got.as_mut_ptr(), &post) };
                for r in 0..rows {
                    for c in 0..cols {
                        let mut want = [src[r * ss + c]];
                        for p in &post {
                            let (x, k) = (want, [p.constant]);
                            let (a, b) = if p.constant_first { (k, x) } else { (x, k) };
                            crate::ops::binary_f32(p.op, &a, &b, &mut want);
                        }
                        let (g, w) = (got[c * ds + r], want[0]);
                        assert!(g.to_bits() == w.to_bits(), "{rows} x {cols} at {r}, {c}: {g} vs {w}");
                    }
                }
            }
        }
    }
}
