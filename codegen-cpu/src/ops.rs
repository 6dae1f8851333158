//! Element-wise operations over tiles. Each function runs one tight loop
//! over slices, so dispatch happens once per tile, never per element, and the
//! loops auto-vectorise where the math allows.
//!
//! The float32 unary and binary loops are also compiled for AVX-512 and for
//! AVX2+FMA and chosen at run time; those builds fuse the transcendentals'
//! multiply-adds (`fastmath.rs`), so their last bits may differ from the
//! baseline build's, within the tested bounds.
//! The integer binary loops (indices, masks, integer tensors) have an AVX2 build.

use rdyn_ir::loops::{BinaryOp, ReduceOp, UnaryOp};

use crate::special as sp;

macro_rules! float_ops {
    ($t:ident, $unary:ident, $binary:ident, $libm_erf:path, $libm_erfc:path, $libm_lgamma:path, $libm_nextafter:path) => {
        pub fn $unary(op: UnaryOp, x: &[$t], out: &mut [$t]) {
            macro_rules! map {
                ($f:expr) => {
                    for (o, &v) in out.iter_mut().zip(x) {
                        *o = $f(v);
                    }
                };
            }
            match op {
                UnaryOp::Neg => map!(|v: $t| -v),
                UnaryOp::Abs => map!(|v: $t| v.abs()),
                UnaryOp::Exp => map!(|v: $t| v.exp()),
                UnaryOp::Exp2 => map!(|v: $t| v.exp2()),
                UnaryOp::Expm1 => map!(|v: $t| v.exp_m1()),
                UnaryOp::Log => map!(|v: $t| v.ln()),
                UnaryOp::Log2 => map!(|v: $t| v.log2()),
                UnaryOp::Log10 => map!(|v: $t| v.log10()),
                UnaryOp::Log1p => map!(|v: $t| v.ln_1p()),
                UnaryOp::Sqrt => map!(|v: $t| v.sqrt()),
                UnaryOp::Rsqrt => map!(|v: $t| 1.0 / v.sqrt()),
                UnaryOp::Sin => map!(|v: $t| v.sin()),
                UnaryOp::Cos => map!(|v: $t| v.cos()),
                UnaryOp::Tan => map!(|v: $t| v.tan()),
                UnaryOp::Asin => map!(|v: $t| v.asin()),
                UnaryOp::Acos => map!(|v: $t| v.acos()),
                UnaryOp::Atan => map!(|v: $t| v.atan()),
                UnaryOp::Sinh => map!(|v: $t| v.sinh()),
                UnaryOp::Cosh => map!(|v: $t| v.cosh()),
                UnaryOp::Tanh => map!(|v: $t| v.tanh()),
                UnaryOp::Asinh => map!(|v: $t| v.asinh()),
                UnaryOp::Acosh => map!(|v: $t| v.acosh()),
                UnaryOp::Atanh => map!(|v: $t| v.atanh()),
                UnaryOp::Sigmoid => map!(|v: $t| 1.0 / (1.0 + (-v).exp())),
                UnaryOp::Erf => map!(|v: $t| $libm_erf(v)),
                UnaryOp::Gelu => map!(|v: $t| 0.5 * v * (1.0 + $libm_erf(v * std::f64::consts::FRAC_1_SQRT_2 as $t))),
                UnaryOp::GeluGrad => map!(|v: $t| {
                    let cdf = 0.5 * (1.0 + $libm_erf(v * std::f64::consts::FRAC_1_SQRT_2 as $t));
                    cdf + v
                        * (-0.5 * v * v).exp()
                        * (0.5 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2) as $t
                }),
                UnaryOp::Erfc => map!(|v: $t| $libm_erfc(v)),
                UnaryOp::Erfinv => map!(|v: $t| sp::erfinv(v as f64) as $t),
                UnaryOp::Floor => map!(|v: $t| v.floor()),
                UnaryOp::Ceil => map!(|v: $t| v.ceil()),
                UnaryOp::Round => map!(|v: $t| v.round_ties_even()),
                UnaryOp::Trunc => map!(|v: $t| v.trunc()),
                // ATen's `(0 < v) - (v < 0)`: NaN and -0.0 give +0.0.
                UnaryOp::Sign => map!(|v: $t| if v > 0.0 {
                    1.0
                } else if v < 0.0 {
                    -1.0
                } else {
                    0.0
                }),
                UnaryOp::Reciprocal => map!(|v: $t| 1.0 / v),
                UnaryOp::Not => map!(|v: $t| (v == 0.0) as u8 as $t),
                UnaryOp::BitNot => map!(|v: $t| v),
                UnaryOp::IsNan => map!(|v: $t| v.is_nan() as u8 as $t),
                UnaryOp::IsInf => map!(|v: $t| v.is_infinite() as u8 as $t),
                UnaryOp::Signbit => map!(|v: $t| v.is_sign_negative() as u8 as $t),
                UnaryOp::Lgamma => map!(|v: $t| $libm_lgamma(v)),
                UnaryOp::Digamma => map!(|v: $t| sp::digamma(v as f64) as $t),
                UnaryOp::I0 => map!(|v: $t| sp::i0(v as f64) as $t),
                UnaryOp::I0e => map!(|v: $t| sp::i0e(v as f64) as $t),
                UnaryOp::I1 => map!(|v: $t| sp::i1(v as f64) as $t),
                UnaryOp::I1e => map!(|v: $t| sp::i1e(v as f64) as $t),
                UnaryOp::K0 => map!(|v: $t| sp::k0(v as f64) as $t),
                UnaryOp::K1 => map!(|v: $t| sp::k1(v as f64) as $t),
                UnaryOp::K0e => map!(|v: $t| sp::k0e(v as f64) as $t),
                UnaryOp::K1e => map!(|v: $t| sp::k1e(v as f64) as $t),
                UnaryOp::BesselJ0 => map!(|v: $t| sp::j0(v as f64) as $t),
                UnaryOp::BesselJ1 => map!(|v: $t| sp::j1(v as f64) as $t),
                UnaryOp::BesselY0 => map!(|v: $t| sp::y0(v as f64) as $t),
                UnaryOp::BesselY1 => map!(|v: $t| sp::y1(v as f64) as $t),
                UnaryOp::SphericalJ0 => map!(|v: $t| sp::spherical_j0(v as f64) as $t),
                UnaryOp::AiryAi => map!(|v: $t| sp::airy_ai(v as f64) as $t),
                UnaryOp::Erfcx => map!(|v: $t| sp::erfcx(v as f64) as $t),
                UnaryOp::Ndtri => map!(|v: $t| sp::ndtri(v as f64) as $t),
            }
        }

        #[inline(always)]
        pub fn $binary(op: BinaryOp, a: &[$t], b: &[$t], out: &mut [$t]) {
            macro_rules! zip {
                ($f:expr) => {
                    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                        *o = $f(x, y);
                    }
                };
            }
            match op {
                BinaryOp::Add => zip!(|x: $t, y: $t| x + y),
                BinaryOp::Sub => zip!(|x: $t, y: $t| x - y),
                BinaryOp::Mul => zip!(|x: $t, y: $t| x * y),
                BinaryOp::Div => zip!(|x: $t, y: $t| x / y),
                // As PyTorch computes it: through fmod, so 1 // 0.1 is 9.
                BinaryOp::FloorDiv => zip!(|x: $t, y: $t| {
                    if y == 0.0 {
                        return x / y;
                    }
                    let m = x % y;
                    let mut div = (x - m) / y;
                    if m != 0.0 && ((y < 0.0) != (m < 0.0)) {
                        div -= 1.0;
                    }
                    if div == 0.0 {
                        return (0.0 as $t).copysign(x / y);
                    }
                    let fl = div.floor();
                    if div - fl > 0.5 {
                        fl + 1.0
                    } else {
                        fl
                    }
                }),
                BinaryOp::TruncDiv => zip!(|x: $t, y: $t| (x / y).trunc()),
                BinaryOp::Rem => zip!(|x: $t, y: $t| {
                    let r = x % y;
                    if r != 0.0 && ((r < 0.0) != (y < 0.0)) {
                        r + y
                    } else {
                        r
                    }
                }),
                BinaryOp::Fmod => zip!(|x: $t, y: $t| x % y),
                BinaryOp::Pow => zip!(|x: $t, y: $t| x.powf(y)),
                BinaryOp::Max => zip!(|x: $t, y: $t| if x.is_nan() || x > y {
                    x
                } else if y.is_nan() {
                    y
                } else {
                    y
                }),
                BinaryOp::Min => zip!(|x: $t, y: $t| if x.is_nan() || x < y { x } else { y }),
                BinaryOp::Fmax => zip!(|x: $t, y: $t| x.max(y)),
                BinaryOp::Fmin => zip!(|x: $t, y: $t| x.min(y)),
                BinaryOp::Atan2 => zip!(|x: $t, y: $t| x.atan2(y)),
                BinaryOp::Hypot => zip!(|x: $t, y: $t| x.hypot(y)),
                BinaryOp::Copysign => zip!(|x: $t, y: $t| x.copysign(y)),
                BinaryOp::Nextafter => zip!(|x: $t, y: $t| $libm_nextafter(x, y)),
                BinaryOp::Zeta => zip!(|x: $t, q: $t| sp::zeta(x as f64, q as f64) as $t),
                BinaryOp::Igamma => zip!(|a: $t, x: $t| sp::igamma(a as f64, x as f64) as $t),
                BinaryOp::Igammac => zip!(|a: $t, x: $t| sp::igammac(a as f64, x as f64) as $t),
                BinaryOp::ChebyshevT => zip!(|x: $t, n: $t| sp::chebyshev_t(x as f64, n as f64) as $t),
                BinaryOp::ChebyshevU => zip!(|x: $t, n: $t| sp::chebyshev_u(x as f64, n as f64) as $t),
                BinaryOp::ChebyshevV => zip!(|x: $t, n: $t| sp::chebyshev_v(x as f64, n as f64) as $t),
                BinaryOp::ChebyshevW => zip!(|x: $t, n: $t| sp::chebyshev_w(x as f64, n as f64) as $t),
                BinaryOp::ShiftedChebyshevT => zip!(|x: $t, n: $t| sp::shifted_chebyshev_t(x as f64, n as f64) as $t),
                BinaryOp::ShiftedChebyshevU => zip!(|x: $t, n: $t| sp::shifted_chebyshev_u(x as f64, n as f64) as $t),
                BinaryOp::ShiftedChebyshevV => zip!(|x: $t, n: $t| sp::shifted_chebyshev_v(x as f64, n as f64) as $t),
                BinaryOp::ShiftedChebyshevW => zip!(|x: $t, n: $t| sp::shifted_chebyshev_w(x as f64, n as f64) as $t),
                BinaryOp::HermiteH => zip!(|x: $t, n: $t| sp::hermite_h(x as f64, n as f64) as $t),
                BinaryOp::HermiteHe => zip!(|x: $t, n: $t| sp::hermite_he(x as f64, n as f64) as $t),
                BinaryOp::LaguerreL => zip!(|x: $t, n: $t| sp::laguerre_l(x as f64, n as f64) as $t),
                BinaryOp::LegendreP => zip!(|x: $t, n: $t| sp::legendre_p(x as f64, n as f64) as $t),
                BinaryOp::Eq => zip!(|x: $t, y: $t| (x == y) as u8 as $t),
                BinaryOp::Ne => zip!(|x: $t, y: $t| (x != y) as u8 as $t),
                BinaryOp::Lt => zip!(|x: $t, y: $t| (x < y) as u8 as $t),
                BinaryOp::Le => zip!(|x: $t, y: $t| (x <= y) as u8 as $t),
                BinaryOp::Gt => zip!(|x: $t, y: $t| (x > y) as u8 as $t),
                BinaryOp::Ge => zip!(|x: $t, y: $t| (x >= y) as u8 as $t),
                BinaryOp::And => zip!(|x: $t, y: $t| (x != 0.0 && y != 0.0) as u8 as $t),
                BinaryOp::Or => zip!(|x: $t, y: $t| (x != 0.0 || y != 0.0) as u8 as $t),
                BinaryOp::Xor => zip!(|x: $t, y: $t| ((x != 0.0) != (y != 0.0)) as u8 as $t),
                BinaryOp::BitAnd
                | BinaryOp::BitOr
                | BinaryOp::BitXor
                | BinaryOp::Shl
                | BinaryOp::Shr
                | BinaryOp::HashMix => {
                    zip!(|x: $t, _y: $t| x)
                }
            }
        }
    };
}

float_ops!(
    f32,
    unary_f32_generic,
    binary_f32_body,
    libm::erff,
    libm::erfcf,
    crate::special::lgamma_f32,
    libm::nextafterf
);

/// float32 unary ops: the common transcendentals use the vectorisable
/// versions in [`crate::fastmath`], compiled for AVX2+FMA and AVX-512 too
/// and chosen at run time. Those builds fuse the polynomial steps, so their
/// last bits can differ from the baseline build's (both are within the
/// tested error bounds; the JIT calls this same function).
pub fn unary_f32(op: UnaryOp, x: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx512() {
        // SAFETY: the CPU supports AVX-512F, AVX2 and FMA (checked just above).
        unsafe { unary_f32_avx512(op, x, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked just above).
        unsafe { unary_f32_avx2(op, x, out) };
        return;
    }
    unary_f32_body::<false>(op, x, out);
}

/// Whether this CPU runs the AVX2+FMA builds of the float32 loops.
#[cfg(target_arch = "x86_64")]
fn avx2_fma() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

/// Whether this CPU runs the AVX-512 builds of the float32 loops (sixteen
/// lanes per instruction; the same operations, so the same results).
#[cfg(target_arch = "x86_64")]
fn avx512() -> bool {
    avx2_fma() && is_x86_feature_detected!("avx512f")
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn binary_f32_avx512(op: BinaryOp, a: &[f32], b: &[f32], out: &mut [f32]) {
    binary_f32_fast::<true>(op, a, b, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn unary_f32_avx512(op: UnaryOp, x: &[f32], out: &mut [f32]) {
    unary_f32_body::<true>(op, x, out);
}

/// float32 binary ops, compiled for AVX2+FMA too and chosen at run time.
pub fn binary_f32(op: BinaryOp, a: &[f32], b: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx512() {
        // SAFETY: the CPU supports AVX-512F, AVX2 and FMA (checked just above).
        unsafe { binary_f32_avx512(op, a, b, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked just above).
        unsafe { binary_f32_avx2(op, a, b, out) };
        return;
    }
    binary_f32_fast::<false>(op, a, b, out);
}

/// The scalar forms of the float32 binary ops, which the vector forms of
/// [`crate::binary64`] agree with on their covered domains.
#[cfg(test)]
pub(crate) fn binary_f32_scalar(op: BinaryOp, a: &[f32], b: &[f32], out: &mut [f32]) {
    binary_f32_body(op, a, b, out);
}

/// float32 binary ops: the vectorisable forms of [`crate::binary64`] where
/// the scalar ones call libm, else the table's loops.
#[inline(always)]
fn binary_f32_fast<const FMA: bool>(op: BinaryOp, a: &[f32], b: &[f32], out: &mut [f32]) {
    use crate::binary64 as b64;
    let one = move |x, y| binary_f32_one(op, x, y);
    match op {
        BinaryOp::Fmod => covered_zip(a, b, out, b64::fmod, b64::fmod_covered, one),
        BinaryOp::Rem => covered_zip(a, b, out, b64::remainder, b64::fmod_covered, one),
        BinaryOp::FloorDiv => covered_zip(a, b, out, b64::floor_div, b64::fmod_covered, one),
        BinaryOp::Pow => covered_zip(a, b, out, b64::pow::<FMA>, b64::pow_covered, one),
        BinaryOp::Atan2 => covered_zip(a, b, out, b64::atan2::<FMA>, b64::atan2_covered, one),
        BinaryOp::Hypot => covered_zip(a, b, out, b64::hypot, b64::hypot_covered, one),
        _ => binary_f32_body(op, a, b, out),
    }
}

/// `out = fast(a, b)` lane by lane (a vector loop), then `scalar` for the
/// lanes outside `covered`, tested first as one vectorised fold (most tiles
/// have none). `scalar` calls a function that is not inlined
/// ([`binary_f32_one`]). The float32 binary ops, the trigonometric
/// functions (`b` is `a`) and int64 division share it.
#[inline(always)]
fn covered_zip<T: Copy>(
    a: &[T],
    b: &[T],
    out: &mut [T],
    fast: impl Fn(T, T) -> T,
    covered: impl Fn(T, T) -> bool,
    scalar: impl Fn(T, T) -> T,
) {
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = fast(x, y);
    }
    if a.iter().zip(b).fold(true, |all, (&x, &y)| all & covered(x, y)) {
        return;
    }
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        if !covered(x, y) {
            *o = scalar(x, y);
        }
    }
}

/// One lane of a float32 binary op in its scalar form. Not inlined: inlined,
/// LLVM vectorised the fix-up loops around it by computing the (pure) scalar
/// form on every lane and blending, which made them as slow as the scalar
/// loop they replace.
#[inline(never)]
fn binary_f32_one(op: BinaryOp, x: f32, y: f32) -> f32 {
    let mut out = [0f32];
    binary_f32_body(op, &[x], &[y], &mut out);
    out[0]
}

/// One lane of a libm function (not inlined, as [`binary_f32_one`]).
#[inline(never)]
fn unary_f32_one(f: fn(f32) -> f32, x: f32) -> f32 {
    f(x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn binary_f32_avx2(op: BinaryOp, a: &[f32], b: &[f32], out: &mut [f32]) {
    binary_f32_fast::<true>(op, a, b, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn unary_f32_avx2(op: UnaryOp, x: &[f32], out: &mut [f32]) {
    unary_f32_body::<true>(op, x, out);
}

#[inline(always)]
fn unary_f32_body<const FMA: bool>(op: UnaryOp, x: &[f32], out: &mut [f32]) {
    use crate::fastmath as fm;
    use crate::fastmath64 as f64m;
    macro_rules! map {
        ($f:expr) => {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = $f(v);
            }
        };
    }
    match op {
        UnaryOp::Exp => map!(fm::exp::<FMA>),
        UnaryOp::Tanh => map!(fm::tanh::<FMA>),
        UnaryOp::Sigmoid => map!(fm::sigmoid::<FMA>),
        UnaryOp::Log => map!(fm::ln::<FMA>),
        UnaryOp::Erf => map!(fm::erf::<FMA>),
        UnaryOp::Gelu => map!(fm::gelu::<FMA>),
        UnaryOp::GeluGrad => map!(fm::gelu_grad::<FMA>),
        UnaryOp::Expm1 => map!(f64m::expm1::<FMA>),
        UnaryOp::Log1p => map!(fm::log1p::<FMA>),
        UnaryOp::Exp2 => map!(fm::exp2::<FMA>),
        UnaryOp::Log2 => map!(f64m::log2::<FMA>),
        UnaryOp::Log10 => map!(f64m::log10::<FMA>),
        UnaryOp::Atan => map!(f64m::atan::<FMA>),
        UnaryOp::Asin => map!(f64m::asin::<FMA>),
        UnaryOp::Acos => map!(f64m::acos::<FMA>),
        UnaryOp::Sinh => map!(f64m::sinh::<FMA>),
        UnaryOp::Cosh => map!(f64m::cosh::<FMA>),
        UnaryOp::Asinh => map!(f64m::asinh::<FMA>),
        UnaryOp::Acosh => map!(f64m::acosh::<FMA>),
        UnaryOp::Atanh => map!(f64m::atanh::<FMA>),
        UnaryOp::Sin => trig(x, out, f64m::sin::<FMA>, libm::sinf),
        UnaryOp::Cos => trig(x, out, f64m::cos::<FMA>, libm::cosf),
        UnaryOp::Tan => trig(x, out, f64m::tan::<FMA>, libm::tanf),
        other => unary_f32_generic(other, x, out),
    }
}

/// A trigonometric function over a tile: the vectorised loop, then libm for
/// the lanes beyond [`crate::fastmath64::TRIG_LIMIT`] (and inf/NaN), which
/// its reduction does not cover.
#[inline(always)]
fn trig(x: &[f32], out: &mut [f32], fast: impl Fn(f32) -> f32, exact: fn(f32) -> f32) {
    let reduced = |v: f32, _| v.abs() <= crate::fastmath64::TRIG_LIMIT;
    covered_zip(x, x, out, |v, _| fast(v), reduced, |v, _| unary_f32_one(exact, v));
}
float_ops!(f64, unary_f64, binary_f64, libm::erf, libm::erfc, libm::lgamma, libm::nextafter);

/// `x` to the power `e` by squaring, wrapping as ATen's integer `pow`
/// does, over the whole 64-bit exponent (`u32` exponents would cut
/// `2**32 + 1` short).
fn wrapping_pow(mut x: i64, mut e: u64) -> i64 {
    let mut acc: i64 = 1;
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wrapping_mul(x);
        }
        x = x.wrapping_mul(x);
        e >>= 1;
    }
    acc
}

/// Integer (and bool, as 0/1) unary ops. Float-only ops never reach here:
/// lowering rejects them for integer dtypes.
pub fn unary_i64(op: UnaryOp, x: &[i64], out: &mut [i64]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = match op {
            UnaryOp::Neg => v.wrapping_neg(),
            UnaryOp::Abs => v.wrapping_abs(),
            UnaryOp::Sign => v.signum(),
            UnaryOp::Not => (v == 0) as i64,
            UnaryOp::BitNot => !v,
            UnaryOp::IsNan | UnaryOp::IsInf => 0,
            UnaryOp::Signbit => (v < 0) as i64,
            _ => v,
        };
    }
}

/// Integer binary ops (indices, masks, integer tensors), compiled for AVX2
/// too and chosen at run time.
pub fn binary_i64(op: BinaryOp, a: &[i64], b: &[i64], out: &mut [i64], error: &mut bool) {
    #[cfg(target_arch = "x86_64")]
    if avx512() && is_x86_feature_detected!("avx512dq") {
        // SAFETY: the CPU supports AVX-512F/DQ, AVX2 and FMA (checked just above).
        unsafe { binary_i64_avx512(op, a, b, out, error) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: the CPU supports AVX2 (checked just above).
        unsafe { binary_i64_avx2(op, a, b, out, error) };
        return;
    }
    binary_i64_body(op, a, b, out, error);
}

/// AVX-512 with DQ converts int64 lanes to float64 and back in one
/// instruction each (integer division's vector form).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
unsafe fn binary_i64_avx512(op: BinaryOp, a: &[i64], b: &[i64], out: &mut [i64], error: &mut bool) {
    binary_i64_body(op, a, b, out, error);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn binary_i64_avx2(op: BinaryOp, a: &[i64], b: &[i64], out: &mut [i64], error: &mut bool) {
    binary_i64_body(op, a, b, out, error);
}

#[inline(always)]
fn binary_i64_body(op: BinaryOp, a: &[i64], b: &[i64], out: &mut [i64], error: &mut bool) {
    macro_rules! zip {
        ($f:expr) => {
            for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                *o = $f(x, y);
            }
        };
    }
    match op {
        BinaryOp::Add => zip!(|x: i64, y: i64| x.wrapping_add(y)),
        BinaryOp::Sub => zip!(|x: i64, y: i64| x.wrapping_sub(y)),
        BinaryOp::Mul => zip!(|x: i64, y: i64| x.wrapping_mul(y)),
        BinaryOp::Div | BinaryOp::TruncDiv | BinaryOp::FloorDiv | BinaryOp::Rem | BinaryOp::Fmod => {
            // A fold, not `any`: its early exit kept the test scalar.
            if b.iter().take(out.len()).fold(false, |zero, &y| zero | (y == 0)) {
                *error = true;
            }
            // Lanes beyond int32 (or dividing by 0) take the scalar form.
            let fast = |x, y| crate::binary64::int_div(op, x, y);
            covered_zip(a, b, out, fast, crate::binary64::int_div_covered, |x, y| int_div_one(op, x, y));
        }
        BinaryOp::Pow => zip!(|x: i64, y: i64| if y < 0 {
            if x == 1 {
                1
            } else if x == -1 {
                if y % 2 == 0 {
                    1
                } else {
                    -1
                }
            } else {
                0
            }
        } else {
            wrapping_pow(x, y as u64)
        }),
        BinaryOp::Max | BinaryOp::Fmax => zip!(|x: i64, y: i64| x.max(y)),
        BinaryOp::Min | BinaryOp::Fmin => zip!(|x: i64, y: i64| x.min(y)),
        BinaryOp::Eq => zip!(|x: i64, y: i64| (x == y) as i64),
        BinaryOp::Ne => zip!(|x: i64, y: i64| (x != y) as i64),
        BinaryOp::Lt => zip!(|x: i64, y: i64| (x < y) as i64),
        BinaryOp::Le => zip!(|x: i64, y: i64| (x <= y) as i64),
        BinaryOp::Gt => zip!(|x: i64, y: i64| (x > y) as i64),
        BinaryOp::Ge => zip!(|x: i64, y: i64| (x >= y) as i64),
        // `&` and `|`, not `&&` and `||`: branch-free, so the loops vectorise.
        BinaryOp::And => zip!(|x: i64, y: i64| ((x != 0) & (y != 0)) as i64),
        BinaryOp::Or => zip!(|x: i64, y: i64| ((x != 0) | (y != 0)) as i64),
        BinaryOp::Xor => zip!(|x: i64, y: i64| ((x != 0) != (y != 0)) as i64),
        BinaryOp::BitAnd => zip!(|x: i64, y: i64| x & y),
        BinaryOp::BitOr => zip!(|x: i64, y: i64| x | y),
        BinaryOp::BitXor => zip!(|x: i64, y: i64| x ^ y),
        BinaryOp::Shl => zip!(|x: i64, y: i64| if (0..64).contains(&y) { x.wrapping_shl(y as u32) } else { 0 }),
        BinaryOp::Shr => zip!(|x: i64, y: i64| if (0..64).contains(&y) {
            x >> y
        } else if x < 0 {
            -1
        } else {
            0
        }),
        BinaryOp::HashMix => zip!(|x: i64, y: i64| rdyn_ir::random::hash_mix(x, y)),
        // Float-only ops: lowering never sends integers here.
        _ => zip!(|x: i64, _y: i64| x),
    }
}

/// One lane of an int64 division in its scalar form (0 for a zero divisor,
/// which the caller reports). Not inlined, as [`binary_f32_one`].
#[inline(never)]
fn int_div_one(op: BinaryOp, x: i64, y: i64) -> i64 {
    if y == 0 {
        return 0;
    }
    match op {
        BinaryOp::FloorDiv => x.wrapping_div_euclid(y) - if (x.wrapping_rem_euclid(y) != 0) && y < 0 { 1 } else { 0 },
        BinaryOp::Rem => {
            let r = x.wrapping_rem(y);
            if r != 0 && ((r < 0) != (y < 0)) {
                r + y
            } else {
                r
            }
        }
        BinaryOp::Fmod => x.wrapping_rem(y),
        _ => x.wrapping_div(y),
    }
}

/// [`int_div_one`], for the tests of the vector forms.
#[cfg(test)]
pub(crate) fn int_div_scalar(op: BinaryOp, x: i64, y: i64) -> i64 {
    int_div_one(op, x, y)
}

/// Reduction identities and combines, NaN-propagating like PyTorch.
pub trait Reducible: Copy + PartialOrd {
    fn identity(op: ReduceOp) -> Self;
    fn combine(op: ReduceOp, acc: Self, x: Self) -> Self;
    fn is_nan_value(self) -> bool;
}

macro_rules! reducible_float {
    ($t:ty) => {
        impl Reducible for $t {
            fn identity(op: ReduceOp) -> $t {
                match op {
                    ReduceOp::Sum | ReduceOp::Any => 0.0,
                    ReduceOp::Prod | ReduceOp::All => 1.0,
                    ReduceOp::Max | ReduceOp::ArgMax => <$t>::NEG_INFINITY,
                    ReduceOp::Min | ReduceOp::ArgMin => <$t>::INFINITY,
                }
            }
            #[inline(always)]
            fn combine(op: ReduceOp, acc: $t, x: $t) -> $t {
                match op {
                    ReduceOp::Sum => acc + x,
                    ReduceOp::Prod => acc * x,
                    ReduceOp::Max | ReduceOp::ArgMax => {
                        if acc.is_nan() || acc > x {
                            acc
                        } else if x.is_nan() || x > acc {
                            x
                        } else {
                            acc
                        }
                    }
                    ReduceOp::Min | ReduceOp::ArgMin => {
                        if acc.is_nan() || acc < x {
                            acc
                        } else if x.is_nan() || x < acc {
                            x
                        } else {
                            acc
                        }
                    }
                    ReduceOp::Any => ((acc != 0.0) || (x != 0.0)) as u8 as $t,
                    ReduceOp::All => ((acc != 0.0) && (x != 0.0)) as u8 as $t,
                }
            }
            fn is_nan_value(self) -> bool {
                self.is_nan()
            }
        }
    };
}

reducible_float!(f32);
reducible_float!(f64);

impl Reducible for i64 {
    fn identity(op: ReduceOp) -> i64 {
        match op {
            ReduceOp::Sum | ReduceOp::Any => 0,
            ReduceOp::Prod | ReduceOp::All => 1,
            ReduceOp::Max | ReduceOp::ArgMax => i64::MIN,
            ReduceOp::Min | ReduceOp::ArgMin => i64::MAX,
        }
    }
    #[inline(always)]
    fn combine(op: ReduceOp, acc: i64, x: i64) -> i64 {
        match op {
            ReduceOp::Sum => acc.wrapping_add(x),
            ReduceOp::Prod => acc.wrapping_mul(x),
            ReduceOp::Max | ReduceOp::ArgMax => acc.max(x),
            ReduceOp::Min | ReduceOp::ArgMin => acc.min(x),
            ReduceOp::Any => ((acc != 0) || (x != 0)) as i64,
            ReduceOp::All => ((acc != 0) && (x != 0)) as i64,
        }
    }
    fn is_nan_value(self) -> bool {
        false
    }
}

/// Whether candidate `(x, xi)` beats the current arg-reduction `(acc, ai)`:
/// strictly better, or NaN first, with ties to the lower index.
#[inline(always)]
pub fn arg_better<T: Reducible>(op: ReduceOp, acc: T, ai: i64, x: T, xi: i64) -> bool {
    if ai < 0 {
        return true;
    }
    let (acc_nan, x_nan) = (acc.is_nan_value(), x.is_nan_value());
    if acc_nan || x_nan {
        return x_nan && (!acc_nan || xi < ai);
    }
    let better = if op == ReduceOp::ArgMax { x > acc } else { x < acc };
    better || (x == acc && xi < ai)
}
