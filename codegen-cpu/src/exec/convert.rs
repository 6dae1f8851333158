//! Lane values between kinds and dtypes: reading a buffer into a register
//! tile, writing lanes back, casts, integer wrapping, constant fills.

use half::{bf16, f16};
use rdyn_ir::loops::BinaryOp;
use rdyn_ir::DType;

use super::regs::Tile;
use crate::ops;

#[inline(always)]
pub(super) unsafe fn write_f64(ptr: usize, dtype: DType, i: i64, x: f64, x32: f32) {
    let i = i as isize;
    match dtype {
        DType::F32 => *(ptr as *mut f32).offset(i) = x32,
        DType::F64 => *(ptr as *mut f64).offset(i) = x,
        DType::F16 => *(ptr as *mut f16).offset(i) = f16::from_f32(x32),
        DType::BF16 => *(ptr as *mut bf16).offset(i) = bf16::from_f32(x32),
        DType::Bool => *(ptr as *mut u8).offset(i) = (x != 0.0) as u8,
        _ => write_i64(ptr, dtype, i as i64, x as i64),
    }
}

#[inline(always)]
pub(super) unsafe fn write_i64(ptr: usize, dtype: DType, i: i64, x: i64) {
    let i = i as isize;
    match dtype {
        DType::Bool => *(ptr as *mut u8).offset(i) = (x != 0) as u8,
        DType::U8 => *(ptr as *mut u8).offset(i) = x as u8,
        DType::I8 => *(ptr as *mut i8).offset(i) = x as i8,
        DType::I16 => *(ptr as *mut i16).offset(i) = x as i16,
        DType::I32 => *(ptr as *mut i32).offset(i) = x as i32,
        DType::I64 => *(ptr as *mut i64).offset(i) = x,
        DType::F32 => *(ptr as *mut f32).offset(i) = x as f32,
        DType::F64 => *(ptr as *mut f64).offset(i) = x as f64,
        DType::F16 => *(ptr as *mut f16).offset(i) = f16::from_f32(x as f32),
        DType::BF16 => *(ptr as *mut bf16).offset(i) = bf16::from_f32(x as f32),
    }
}

#[inline(always)]
pub(super) unsafe fn read_f64(ptr: usize, dtype: DType, i: i64) -> f64 {
    let i = i as isize;
    match dtype {
        DType::F32 => *(ptr as *const f32).offset(i) as f64,
        DType::F64 => *(ptr as *const f64).offset(i),
        DType::F16 => (*(ptr as *const f16).offset(i)).to_f64(),
        DType::BF16 => (*(ptr as *const bf16).offset(i)).to_f64(),
        _ => read_i64(ptr, dtype, i as i64) as f64,
    }
}

#[inline(always)]
pub(super) unsafe fn read_i64(ptr: usize, dtype: DType, i: i64) -> i64 {
    let i = i as isize;
    match dtype {
        DType::Bool | DType::U8 => *(ptr as *const u8).offset(i) as i64,
        DType::I8 => *(ptr as *const i8).offset(i) as i64,
        DType::I16 => *(ptr as *const i16).offset(i) as i64,
        DType::I32 => *(ptr as *const i32).offset(i) as i64,
        DType::I64 => *(ptr as *const i64).offset(i),
        _ => read_f64(ptr, dtype, i as i64) as i64,
    }
}

/// `out[at(l)] = op(out[at(l)], tile[l])` for each lane in order (a
/// scatter-reduce), in the tile's kind as the register program would.
///
/// # Safety
/// Every `at(l)` must be an element of the buffer at `ptr`.
// Inlined into the store, so that `at` is a known closure, not a call per
// lane (index_add of 2048x64: 0.31 ms inlined, 0.53 ms not).
#[inline(always)]
pub(super) unsafe fn accumulate_tile(
    op: BinaryOp,
    ptr: usize,
    dtype: DType,
    len: usize,
    at: &dyn Fn(usize) -> i64,
    tile: &Tile,
) {
    match tile {
        // The common case (a float32 scatter-add, an embedding's gradient)
        // without a dtype test per lane.
        Tile::F32(v) if op == BinaryOp::Add && dtype == DType::F32 => {
            let out = ptr as *mut f32;
            for (l, &x) in v[..len].iter().enumerate() {
                *out.offset(at(l) as isize) += x;
            }
        }
        Tile::F32(v) => {
            for (l, &x) in v[..len].iter().enumerate() {
                let i = at(l);
                let old = read_f64(ptr, dtype, i) as f32;
                let new = if op == BinaryOp::Add {
                    old + x
                } else {
                    let mut out = [0.0f32];
                    ops::binary_f32(op, &[old], &[x], &mut out);
                    out[0]
                };
                write_f64(ptr, dtype, i, new as f64, new);
            }
        }
        Tile::F64(v) => {
            for (l, &x) in v[..len].iter().enumerate() {
                let i = at(l);
                let mut out = [0.0f64];
                ops::binary_f64(op, &[read_f64(ptr, dtype, i)], &[x], &mut out);
                write_f64(ptr, dtype, i, out[0], out[0] as f32);
            }
        }
        Tile::I64(v) => {
            let mut error = false;
            for (l, &x) in v[..len].iter().enumerate() {
                let i = at(l);
                let mut out = [0i64];
                ops::binary_i64(op, &[read_i64(ptr, dtype, i)], &[x], &mut out, &mut error);
                write_i64(ptr, dtype, i, out[0]);
            }
        }
    }
}

pub(super) fn select<T: Copy>(c: &[i64], a: &[T], b: &[T], out: &mut [T]) {
    for (((o, &c), &x), &y) in out.iter_mut().zip(c).zip(a).zip(b) {
        *o = if c != 0 { x } else { y };
    }
}

/// [`select`] of float32 lanes, as a bit blend built for AVX2 too: the
/// generic loop compiled to a choice of address and a load per lane
/// (`logaddexp`'s stage spent 40% of its time there).
pub(super) fn select_f32(c: &[i64], a: &[f32], b: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        unsafe { select_f32_avx2(c, a, b, out) };
        return;
    }
    select_f32_body(c, a, b, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn select_f32_avx2(c: &[i64], a: &[f32], b: &[f32], out: &mut [f32]) {
    select_f32_body(c, a, b, out);
}

#[inline(always)]
fn select_f32_body(c: &[i64], a: &[f32], b: &[f32], out: &mut [f32]) {
    for (((o, &c), &x), &y) in out.iter_mut().zip(c).zip(a).zip(b) {
        let m = ((c != 0) as u32).wrapping_neg();
        *o = f32::from_bits((x.to_bits() & m) | (y.to_bits() & !m));
    }
}

pub(super) fn fill_f(dst: &mut Tile, x: f64, len: usize) {
    match dst {
        Tile::F32(d) => d[..len].iter_mut().for_each(|v| *v = x as f32),
        Tile::F64(d) => d[..len].iter_mut().for_each(|v| *v = x),
        Tile::I64(d) => d[..len].iter_mut().for_each(|v| *v = x as i64),
    }
}

pub(super) fn fill_i(dst: &mut Tile, x: i64, len: usize) {
    match dst {
        Tile::F32(d) => d[..len].iter_mut().for_each(|v| *v = x as f32),
        Tile::F64(d) => d[..len].iter_mut().for_each(|v| *v = x as f64),
        Tile::I64(d) => d[..len].iter_mut().for_each(|v| *v = x),
    }
}

pub(super) fn wrap(d: &mut [i64], dtype: DType) {
    match dtype {
        DType::Bool => d.iter_mut().for_each(|v| *v = (*v != 0) as i64),
        DType::U8 => d.iter_mut().for_each(|v| *v = *v as u8 as i64),
        DType::I8 => d.iter_mut().for_each(|v| *v = *v as i8 as i64),
        DType::I16 => d.iter_mut().for_each(|v| *v = *v as i16 as i64),
        DType::I32 => d.iter_mut().for_each(|v| *v = *v as i32 as i64),
        _ => {}
    }
}

fn round_half(x: f32, to: DType) -> f32 {
    match to {
        DType::F16 => f16::from_f32(x).to_f32(),
        DType::BF16 => bf16::from_f32(x).to_f32(),
        _ => x,
    }
}

fn float_to_int(x: f64, to: DType) -> i64 {
    match to {
        DType::Bool => (x != 0.0) as i64,
        DType::U8 => (x as i64) as u8 as i64,
        _ => x as i64,
    }
}

pub(super) fn cast(dst: &mut Tile, src: &Tile, to: DType, len: usize) {
    match (dst, src) {
        (Tile::F32(d), Tile::F32(a)) => {
            for (o, &x) in d[..len].iter_mut().zip(&a[..len]) {
                *o = round_half(x, to);
            }
        }
        (Tile::F32(d), Tile::F64(a)) => {
            for (o, &x) in d[..len].iter_mut().zip(&a[..len]) {
                *o = round_half(x as f32, to);
            }
        }
        (Tile::F32(d), Tile::I64(a)) => {
            for (o, &x) in d[..len].iter_mut().zip(&a[..len]) {
                *o = round_half(x as f32, to);
            }
        }
        (Tile::F64(d), Tile::F32(a)) => d[..len].iter_mut().zip(&a[..len]).for_each(|(o, &x)| *o = x as f64),
        (Tile::F64(d), Tile::F64(a)) => d[..len].copy_from_slice(&a[..len]),
        (Tile::F64(d), Tile::I64(a)) => d[..len].iter_mut().zip(&a[..len]).for_each(|(o, &x)| *o = x as f64),
        (Tile::I64(d), Tile::F32(a)) => {
            d[..len].iter_mut().zip(&a[..len]).for_each(|(o, &x)| *o = float_to_int(x as f64, to))
        }
        (Tile::I64(d), Tile::F64(a)) => d[..len].iter_mut().zip(&a[..len]).for_each(|(o, &x)| *o = float_to_int(x, to)),
        (Tile::I64(d), Tile::I64(a)) => {
            d[..len].copy_from_slice(&a[..len]);
            wrap(&mut d[..len], to);
        }
    }
}

/// Read `len` lanes of a buffer of `dtype` into a register of its kind.
pub(super) fn load(
    dst: &mut Tile,
    ptr: usize,
    dtype: DType,
    affine: Option<(i64, i64)>,
    lanes: &[i64],
    mask: Option<&[i64]>,
    len: usize,
) {
    macro_rules! read_into {
        ($d:expr, $t:ty, $conv:expr) => {{
            let p = ptr as *const $t;
            let conv = $conv;
            // SAFETY: see the module comment.
            unsafe {
                match (affine, mask) {
                    (Some((base, 1)), None) => {
                        let src = std::slice::from_raw_parts(p.offset(base as isize), len);
                        for (o, &x) in $d[..len].iter_mut().zip(src) {
                            *o = conv(x);
                        }
                    }
                    (Some((base, 0)), None) => {
                        let x = conv(*p.offset(base as isize));
                        $d[..len].iter_mut().for_each(|o| *o = x);
                    }
                    (Some((base, step)), None) => {
                        for (l, o) in $d[..len].iter_mut().enumerate() {
                            *o = conv(*p.offset((base + step * l as i64) as isize));
                        }
                    }
                    (_, _) => {
                        for (l, o) in $d[..len].iter_mut().enumerate() {
                            if mask.is_some_and(|m| m[l] == 0) {
                                *o = Default::default();
                                continue;
                            }
                            let i = match affine {
                                Some((base, step)) => base + step * l as i64,
                                None => lanes[l],
                            };
                            *o = conv(*p.offset(i as isize));
                        }
                    }
                }
            }
        }};
    }
    match (dst, dtype) {
        (Tile::F32(d), DType::F32) => read_into!(d, f32, |x: f32| x),
        (Tile::F32(d), DType::F16) => read_into!(d, f16, |x: f16| x.to_f32()),
        (Tile::F32(d), DType::BF16) => read_into!(d, bf16, |x: bf16| x.to_f32()),
        (Tile::F64(d), DType::F64) => read_into!(d, f64, |x: f64| x),
        (Tile::I64(d), DType::I64) => read_into!(d, i64, |x: i64| x),
        (Tile::I64(d), DType::I32) => read_into!(d, i32, |x: i32| x as i64),
        (Tile::I64(d), DType::I16) => read_into!(d, i16, |x: i16| x as i64),
        (Tile::I64(d), DType::I8) => read_into!(d, i8, |x: i8| x as i64),
        (Tile::I64(d), DType::U8) => read_into!(d, u8, |x: u8| x as i64),
        (Tile::I64(d), DType::Bool) => read_into!(d, u8, |x: u8| (x != 0) as i64),
        _ => {}
    }
}
