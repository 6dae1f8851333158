//! Branch-free float32 transcendentals, so their tile loops vectorise (libm
//! calls do not). exp, tanh and ln are minimax polynomials after Cephes; erf
//! is rdyn's own two-piece fit (`tools/fit_erf.py`, |error| < 1.3e-7). Exact
//! GELU is one piece: its tail `Φ(−|x|)` is `2^Q(|x|)` (`tools/fit_gelu.py`),
//! with no separate erf call and scaling around it; its derivative shares Φ and
//! adds one exp. Each is within a couple of ulps
//! of the correctly rounded result on the ranges that matter, and handles
//! inf/NaN like the libm function. Checked against f64 in tests.
//!
//! `FMA` picks fused multiply-adds for the polynomial steps: the AVX2 and
//! AVX-512 builds of the tile loops use them (one instruction instead of two,
//! one rounding instead of two); the baseline build, where `mul_add` would be
//! a libm call, does not.

// Cephes' coefficients are the published ones, digits kept as printed.
#![allow(clippy::excessive_precision)]

/// float32 and float64 (`fastmath64.rs` evaluates in float64 lanes).
pub(crate) trait Lane: Copy + std::ops::Mul<Output = Self> + std::ops::Add<Output = Self> {
    fn fused(self, b: Self, c: Self) -> Self;
}

impl Lane for f32 {
    #[inline(always)]
    fn fused(self, b: f32, c: f32) -> f32 {
        self.mul_add(b, c)
    }
}

impl Lane for f64 {
    #[inline(always)]
    fn fused(self, b: f64, c: f64) -> f64 {
        self.mul_add(b, c)
    }
}

/// `a * b + c`, fused when `FMA`.
#[inline(always)]
pub(crate) fn madd<const FMA: bool, T: Lane>(a: T, b: T, c: T) -> T {
    if FMA {
        a.fused(b, c)
    } else {
        a * b + c
    }
}

/// Horner's rule over `coeffs`, highest degree first.
#[inline(always)]
pub(crate) fn poly<const FMA: bool, T: Lane, const N: usize>(x: T, coeffs: [T; N]) -> T {
    let mut r = coeffs[0];
    for &c in &coeffs[1..] {
        r = madd::<FMA, T>(r, x, c);
    }
    r
}

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// `e^x`, correctly overflowing to infinity above ~88.72 and giving
/// subnormal results down to ~-103.3 (then 0), as ATen's does.
#[inline(always)]
pub fn exp<const FMA: bool>(x: f32) -> f32 {
    // Below -104 (masked scores at -inf) the result is 0: the core runs on
    // 0 there and is replaced, so those lanes make no subnormal, which
    // costs x86 a microcode assist per instruction (a causal softmax took
    // twice as long). A NaN fails both comparisons and propagates.
    let zero = x < -104.0;
    let v = exp_in_range::<FMA>(if zero {
        0.0
    } else if x > 89.0 {
        89.0
    } else {
        x
    });
    if zero {
        0.0
    } else {
        v
    }
}

/// `exp` of `x` in [-104, 89] (or NaN; no clamping): `exp`'s core, and what
/// callers that bound their argument use (erf's tail).
#[inline(always)]
fn exp_in_range<const FMA: bool>(x: f32) -> f32 {
    // Round to nearest by the 1.5·2^23 trick (`floor` is a libm call on
    // baseline x86-64 and would stop the loop vectorising); the integer n
    // is then also in the low bits of `t`.
    let t = madd::<FMA, _>(x, LOG2E, 12_582_912.0);
    let n = t - 12_582_912.0;
    let r = madd::<FMA, _>(-n, LN2_LO, madd::<FMA, _>(-n, LN2_HI, x));
    let p = poly::<FMA, _, 6>(
        r,
        [1.987_569_1e-4, 1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 5.000_000_1e-1],
    );
    let y = madd::<FMA, _>(p, r * r, r) + 1.0;
    // 2^n for n in [-150, 128] as two normal powers 2^h · 2^(n-h), so the
    // top overflows and the bottom rounds to subnormals (or 0) in the last
    // multiply. Integer parts from t's bits: no float-to-int conversion.
    let ni = (t.to_bits() as i32).wrapping_sub(0x4B40_0000);
    let h = ni >> 1;
    let pow2 = |k: i32| f32::from_bits((k.wrapping_add(127) << 23) as u32);
    y * pow2(h) * pow2(ni.wrapping_sub(h))
}

#[inline(always)]
pub fn tanh<const FMA: bool>(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let p = poly::<FMA, _, 5>(z, [-5.704_988_7e-3, 2.063_908_9e-2, -5.373_971_6e-2, 1.333_144_2e-1, -3.333_328_2e-1]);
    let small = madd::<FMA, _>(p * z, x, x);
    let e = exp::<FMA>(2.0 * a);
    let large = (1.0 - 2.0 / (e + 1.0)).copysign(x);
    let v = if a < 0.625 { small } else { large };
    if x.is_nan() {
        x
    } else {
        v
    }
}

#[inline(always)]
pub fn sigmoid<const FMA: bool>(x: f32) -> f32 {
    1.0 / (1.0 + exp::<FMA>(-x))
}

#[inline(always)]
pub fn ln<const FMA: bool>(x: f32) -> f32 {
    // A subnormal is scaled by 2^23 into the normal range first (and its
    // exponent corrected): no libm call, which would keep the loop from
    // vectorising (a branch-free select computes both sides; log ran 12x
    // slower than exp that way). Zero, negatives, inf and NaN are set last.
    let tiny = x < f32::MIN_POSITIVE;
    let bits = if tiny { x * 8_388_608.0 } else { x }.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 126 - if tiny { 23 } else { 0 };
    let mut m = f32::from_bits((bits & 0x807f_ffff) | 0x3f00_0000);
    let below = m < std::f32::consts::FRAC_1_SQRT_2;
    e -= below as i32;
    m = if below { m + m - 1.0 } else { m - 1.0 };
    let z = m * m;
    let p = poly::<FMA, _, 9>(
        m,
        [
            7.037_683_6e-2,
            -1.151_461e-1,
            1.167_699_9e-1,
            -1.242_014_1e-1,
            1.424_932_3e-1,
            -1.666_805_8e-1,
            2.000_071_4e-1,
            -2.499_999_4e-1,
            3.333_333_1e-1,
        ],
    );
    let mut y = p * m * z;
    let ef = e as f32;
    y += LN2_LO * ef;
    y -= 0.5 * z;
    let v = m + y + LN2_HI * ef;
    let v = if x == 0.0 {
        f32::NEG_INFINITY
    } else if x < 0.0 {
        f32::NAN
    } else {
        v
    };
    if x == f32::INFINITY || x.is_nan() {
        x
    } else {
        v
    }
}

/// `ln(1 + x)`: `u = 1 + x` rounds, and `((u − 1) − x)/u` corrects [`ln`]
/// of it to first order (Goldberg's trick), so small `x` keep their
/// relative accuracy; within 2 ulps. ±0 stays itself, −1 gives −inf.
#[inline(always)]
pub fn log1p<const FMA: bool>(x: f32) -> f32 {
    let u = 1.0 + x;
    let v = ln::<FMA>(u) - ((u - 1.0) - x) / u;
    // u = 0 or inf: the correction is 0/0 or inf/inf; ln's value stands.
    let v = if u == 0.0 || u == f32::INFINITY { ln::<FMA>(u) } else { v };
    if x == 0.0 {
        x
    } else {
        v
    }
}

/// `2^x`: `x = n + f` with `n` the nearest integer (exact), `2^f` by
/// [`exp2_in_range`]'s fit, `2^n` as two normal powers so the top
/// overflows to inf and the bottom rounds through the subnormals to 0.
#[inline(always)]
pub fn exp2<const FMA: bool>(x: f32) -> f32 {
    let v = x.clamp(-152.0, 130.0);
    let t = v + 12_582_912.0;
    let f = v - (t - 12_582_912.0);
    let p = exp2_poly::<FMA>(f);
    let ni = (t.to_bits() as i32).wrapping_sub(0x4B40_0000);
    let h = ni >> 1;
    let pow2 = |k: i32| f32::from_bits((k.wrapping_add(127) << 23) as u32);
    let y = p * pow2(h) * pow2(ni.wrapping_sub(h));
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// Below this |x|, erf is `x·P(x²)`; from it on, `1 − exp(Q(|x|))`.
const ERF_SPLIT: f32 = 0.7;

/// erf from two polynomials fitted by `tools/fit_erf.py` (weighted minimax):
/// `x·P(x²)` near zero, where the relative error matters, and
/// `1 − exp(Q(|x|))` beyond, where `Q` fits `ln erfc`. Both are computed
/// and one is picked, so the loop stays branch-free. |error| < 1.3e-7, and
/// relative error < 2e-7 below the split.
#[inline(always)]
// P's constant term is the fit's, one ulp below 2/√π (erf's slope at 0).
#[allow(clippy::approx_constant)]
pub fn erf<const FMA: bool>(x: f32) -> f32 {
    let a = x.abs();
    let small =
        x * poly::<FMA, _, 5>(x * x, [4.281_771e-3, -2.647_445_5e-2, 1.127_699_8e-1, -3.761_222e-1, 1.128_379_1]);
    // erfc(4) < 2^-25, so erf rounds to ±1 from there on: clamp Q's input.
    let t = a.min(4.0);
    let q = poly::<FMA, _, 7>(
        t,
        [
            2.156_577_4e-4,
            -3.228_359_6e-3,
            2.293_110_5e-2,
            -1.053_212_8e-1,
            -6.356_802_6e-1,
            -1.128_519_4,
            -2.907_436_3e-6,
        ],
    );
    // Q is within [-17.9, -0.7] on [0.7, 4] (and stays finite below 0.7,
    // where `small` is taken): no special cases in its exp.
    let large = (1.0 - exp_in_range::<FMA>(q)).copysign(x);
    let v = if a < ERF_SPLIT { small } else { large };
    if x.is_nan() {
        x
    } else {
        v
    }
}

/// Beyond this |x| GELU's tail Φ(−|x|) is below 2^-26 (|x|/√2 = 4) and
/// is dropped: Φ is exactly 0 or 1 there.
const GELU_CLAMP: f32 = 5.656_854;

/// Exact GELU, `x·Φ(x)` with `Φ(x) = (1 + erf(x/√2))/2`, in one piece:
/// the tail `T(a) = Φ(−a) = erfc(a/√2)/2` is `2^Q(a)` for `a = |x|` up to
/// the clamp, `Q` a degree-8 polynomial fitted to `log2 T` by
/// `tools/fit_gelu.py` (error weighted by `T`, so Φ's absolute error is
/// what is minimised), and Φ is `T` for negative `x`, `1 − T` otherwise:
/// no `1 + erf` cancellation in the negative tail, and no second branch near
/// zero (where erf's own split is). About 30 instructions per vector where
/// erf-then-scale took 45. gelu(−inf) is NaN and gelu(+inf) is +inf, as
/// float64 eager gives them; NaN stays NaN through the final product.
#[inline(always)]
pub fn gelu<const FMA: bool>(x: f32) -> f32 {
    x * normal_cdf::<FMA>(x)
}

/// 1/√(2π), the standard normal density at 0.
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;

/// Exact GELU's derivative `Φ(x) + x·φ(x)`, `φ(x) = e^(−x²/2)/√(2π)`, as
/// ATen's `gelu_backward` computes it (so `x = ±inf` gives NaN, as there):
/// Φ as in [`gelu`], one exp for φ. Where erf, an exp and eight more
/// operations each took a pass over the tile.
#[inline(always)]
pub fn gelu_grad<const FMA: bool>(x: f32) -> f32 {
    let density = exp::<FMA>(-0.5 * x * x) * FRAC_1_SQRT_2PI;
    madd::<FMA, _>(x, density, normal_cdf::<FMA>(x))
}

/// Φ(x), the standard normal distribution function (see [`gelu`]).
#[inline(always)]
fn normal_cdf<const FMA: bool>(x: f32) -> f32 {
    let a = x.abs();
    let q = poly::<FMA, _, 9>(
        a.min(GELU_CLAMP),
        [
            -2.772_096_7e-6,
            3.862_132_5e-5,
            -1.825_503_9e-4,
            -1.458_632_2e-4,
            7.075_462_5e-3,
            -5.250_502e-2,
            -4.592_049e-1,
            -1.151_105_8,
            -1.0,
        ],
    );
    let tail = exp2_in_range::<FMA>(q);
    let tail = if a > GELU_CLAMP { 0.0 } else { tail };
    if x < 0.0 {
        tail
    } else {
        1.0 - tail
    }
}

/// `2^v` for a finite `v` in [-126, 0]: `v = n + f` with `n` the nearest
/// integer, `2^f` by a degree-6 fit on [-1/2, 1/2] (`tools/fit_gelu.py`,
/// relative error 2e-9), `2^n` built in the exponent bits.
#[inline(always)]
fn exp2_in_range<const FMA: bool>(v: f32) -> f32 {
    let n = (v + 12_582_912.0) - 12_582_912.0;
    let f = v - n;
    let p = exp2_poly::<FMA>(f);
    // SAFETY: n is an integer in [-126, 0] (see above): a plain cvttps2dq.
    let ni: i32 = unsafe { n.to_int_unchecked() };
    p * f32::from_bits(((ni + 127) << 23) as u32)
}

/// `2^f` for f in [-1/2, 1/2] (`tools/fit_gelu.py`, relative error 2e-9).
#[inline(always)]
fn exp2_poly<const FMA: bool>(f: f32) -> f32 {
    poly::<FMA, _, 7>(
        f,
        [1.534_581_8e-4, 1.339_993_4e-3, 9.618_489e-3, 5.550_328_6e-2, 2.402_264_6e-1, 6.931_472e-1, 1.0],
    )
}

#[cfg(test)]
mod tests {
    /// Checks `f` with and without fused multiply-adds on [lo, hi].
    fn check(name: &str, f: [fn(f32) -> f32; 2], reference: fn(f64) -> f64, lo: f32, hi: f32, rel: f64, abs: f64) {
        let steps = 20_000;
        for f in f {
            for k in 0..=steps {
                let x = (lo as f64 + (hi as f64 - lo as f64) * k as f64 / steps as f64) as f32;
                let got = f(x) as f64;
                let want = reference(x as f64);
                let err = (got - want).abs();
                assert!(err <= abs + rel * want.abs(), "{name}({x}) = {got}, want {want}");
            }
        }
    }

    macro_rules! both {
        ($f:ident) => {
            [super::$f::<false>, super::$f::<true>]
        };
    }

    #[test]
    fn exp_matches_f64() {
        check("exp", both!(exp), f64::exp, -80.0, 80.0, 4e-7, 0.0);
        // Up to overflow, and down through the subnormal results.
        check("exp", both!(exp), f64::exp, 80.0, 88.72, 4e-7, 0.0);
        check("exp", both!(exp), f64::exp, -87.3, -80.0, 4e-7, 0.0);
        check("exp", both!(exp), f64::exp, -103.9, -87.3, 4e-7, 1.5e-45);
        for f in both!(exp) {
            assert_eq!(f(88.73), f32::INFINITY);
            assert_eq!(f(1000.0), f32::INFINITY);
            assert_eq!(f(-104.0), 0.0);
            assert_eq!(f(-1000.0), 0.0);
            assert_eq!(f(f32::INFINITY), f32::INFINITY);
            assert_eq!(f(f32::NEG_INFINITY), 0.0);
            assert!(f(f32::NAN).is_nan());
        }
    }

    #[test]
    fn tanh_sigmoid_match_f64() {
        check("tanh", both!(tanh), f64::tanh, -20.0, 20.0, 4e-7, 1e-9);
        check("sigmoid", both!(sigmoid), |x| 1.0 / (1.0 + (-x).exp()), -50.0, 50.0, 4e-7, 1e-30);
    }

    #[test]
    fn ln_matches_f64() {
        check("ln", both!(ln), f64::ln, 1e-30, 1e30, 3e-7, 1e-7);
        check("ln", both!(ln), f64::ln, 0.5, 2.0, 3e-7, 1e-7);
        // Subnormal inputs, down to the smallest.
        check("ln", both!(ln), f64::ln, 1.4e-45, 1.2e-38, 3e-7, 1e-7);
        for f in both!(ln) {
            assert_eq!(f(0.0), f32::NEG_INFINITY);
            assert_eq!(f(-0.0), f32::NEG_INFINITY);
            assert!(f(-1.0).is_nan() && f(-1e-40).is_nan() && f(f32::NEG_INFINITY).is_nan());
            assert_eq!(f(f32::INFINITY), f32::INFINITY);
            assert!(f(f32::NAN).is_nan());
        }
    }

    #[test]
    fn log1p_exp2_match_f64() {
        // Relative error, in units of 2^-24.
        let ulps = |n: f64| n * f64::from(f32::EPSILON) / 2.0;
        check("log1p", both!(log1p), f64::ln_1p, -0.999_99, 10.0, ulps(4.0), 0.0);
        check("log1p", both!(log1p), f64::ln_1p, -1e-4, 1e-4, ulps(4.0), 0.0);
        check("log1p", both!(log1p), f64::ln_1p, 1e30, 3e38, ulps(4.0), 0.0);
        check("exp2", both!(exp2), f64::exp2, -126.0, 127.9, ulps(3.0), 0.0);
        check("exp2", both!(exp2), f64::exp2, -149.0, -126.0, ulps(3.0), 1.5e-45);
        for f in both!(log1p) {
            assert_eq!(f(-1.0), f32::NEG_INFINITY);
            assert!(f(-1.5).is_nan() && f(f32::NEG_INFINITY).is_nan() && f(f32::NAN).is_nan());
            assert_eq!(f(f32::INFINITY), f32::INFINITY);
            assert_eq!(f(-0.0).to_bits(), (-0.0f32).to_bits());
            assert_eq!(f(1e-30), 1e-30);
        }
        for f in both!(exp2) {
            assert_eq!(f(128.0), f32::INFINITY);
            assert_eq!(f(-150.0), 0.0);
            assert_eq!(f(f32::NEG_INFINITY), 0.0);
            assert_eq!(f(f32::INFINITY), f32::INFINITY);
            assert!(f(f32::NAN).is_nan());
            for k in -20..20 {
                assert_eq!(f(k as f32), (k as f32).exp2(), "2^{k} is exact");
            }
        }
    }

    #[test]
    fn erf_matches_f64() {
        check("erf", both!(erf), libm::erf, -6.0, 6.0, 0.0, 1.5e-7);
        // Relative accuracy near zero, down to subnormals.
        check("erf", both!(erf), libm::erf, -0.75, 0.75, 2.5e-7, 0.0);
        check("erf", both!(erf), libm::erf, 0.0, 1e-30, 2.5e-7, 0.0);
        for f in both!(erf) {
            assert_eq!(f(f32::INFINITY), 1.0);
            assert_eq!(f(f32::NEG_INFINITY), -1.0);
            assert_eq!(f(-0.0).to_bits(), (-0.0f32).to_bits());
            assert!(f(f32::NAN).is_nan());
        }
    }

    fn gelu64(x: f64) -> f64 {
        0.5 * x * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2))
    }

    #[test]
    fn gelu_matches_f64() {
        check("gelu", both!(gelu), gelu64, -12.0, 12.0, 5e-7, 1e-7);
        check("gelu", both!(gelu), gelu64, -1.0, 1.0, 5e-7, 1e-30);
        // The negative tail keeps some relative accuracy (eager's float32
        // GELU has none there: it rounds 1 + erf).
        check("gelu", both!(gelu), gelu64, -3.0, -1.0, 4e-6, 0.0);
        check("gelu", both!(gelu), gelu64, -5.6, -3.0, 6e-2, 0.0);
        for f in both!(gelu) {
            assert_eq!(f(f32::INFINITY), f32::INFINITY);
            assert!(f(f32::NEG_INFINITY).is_nan());
            assert_eq!(f(-0.0).to_bits(), (-0.0f32).to_bits());
            assert!(f(f32::NAN).is_nan());
            assert_eq!(f(1e-30), 5e-31);
            assert_eq!(f(-1e-30), -5e-31);
        }
    }

    #[test]
    fn gelu_grad_matches_f64() {
        let grad64 = |x: f64| {
            let density = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
            0.5 * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2)) + x * density
        };
        // Φ's absolute error (the derivative is within [-0.17, 1.13]).
        check("gelu_grad", both!(gelu_grad), grad64, -12.0, 12.0, 5e-7, 2e-7);
        for f in both!(gelu_grad) {
            // ATen's formula: Φ + x·φ is NaN at ±inf (inf · 0).
            assert!(f(f32::INFINITY).is_nan() && f(f32::NEG_INFINITY).is_nan() && f(f32::NAN).is_nan());
            assert_eq!(f(0.0), 0.5);
        }
    }
}
