//! Branch-free float32 functions evaluated in float64 lanes, so their tile
//! loops vectorise: expm1, log2, log10, the circular functions
//! and their inverses, and the hyperbolic ones other than tanh.
//!
//! Each converts its float32 argument to float64, runs a float64 core (exp,
//! ln, sin/cos after a Cody–Waite reduction, atan after one division) that
//! is accurate to about 1e-11 relative (series cut where float32 stops
//! caring: every term is a multiply-add on half as many lanes), and rounds
//! once: the float32 result is the correctly rounded one except where the
//! float64 value lies within ~1e-11 of a rounding boundary, and then off
//! by under 0.51 ulp; so no range needs its own float32 fit and
//! cancellation (`exp(x) − 1` near 0, `ln(1 + x)`, `acos` near 1) costs
//! float64 digits, not float32 ones. Half as many lanes per instruction as
//! a float32 polynomial, and still an order of magnitude faster than the
//! scalar libm calls they replace (a libm call stops the loop vectorising).
//!
//! The trigonometric functions reduce exactly only for |x| ≤
//! [`TRIG_LIMIT`]; `ops.rs` recomputes the lanes beyond it (and inf/NaN)
//! with libm after the loop.
//!
//! `FMA` picks fused multiply-adds for the polynomial steps, as in
//! `fastmath.rs`.

#![allow(clippy::excessive_precision)]

use std::f64::consts::{FRAC_PI_2, FRAC_PI_4, LOG10_E, LOG2_E};

use crate::fastmath::{madd, poly};

/// Adding and subtracting 1.5·2^52 rounds a float64 of magnitude below 2^51
/// to the nearest integer, which also lands in the low bits of the sum.
const ROUND: f64 = 6_755_399_441_055_744.0;

/// ln 2 in two parts, the first with trailing zero bits so `n·LN2_HI` is
/// exact for |n| < 2^11 (fdlibm's split).
const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-01;
const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;

/// `e^x` for `x` in [-700, 700] (callers clamp; NaN propagates): `x = n·ln2
/// + r`, |r| ≤ ln2/2, `e^r` by its Taylor series to r^9 (truncation below
/// 1e-11 relative), `2^n` built in the exponent bits.
#[inline(always)]
pub(crate) fn exp_core<const FMA: bool>(x: f64) -> f64 {
    let t = madd::<FMA, f64>(x, LOG2_E, ROUND);
    let n = t - ROUND;
    let r = madd::<FMA, f64>(-n, LN2_LO, madd::<FMA, f64>(-n, LN2_HI, x));
    let p = poly::<FMA, f64, 10>(
        r,
        [
            1.0 / 362_880.0,
            1.0 / 40_320.0,
            1.0 / 5_040.0,
            1.0 / 720.0,
            1.0 / 120.0,
            1.0 / 24.0,
            1.0 / 6.0,
            0.5,
            1.0,
            1.0,
        ],
    );
    let ni = (t.to_bits() as i64).wrapping_sub(ROUND.to_bits() as i64);
    p * f64::from_bits((ni.wrapping_add(1023) << 52) as u64)
}

/// `ln x` for a positive, finite, normal `x` (callers set zero, negatives,
/// inf and NaN): `x = 2^e·m` with m in [√½, √2), `ln m = 2·atanh(s)`,
/// `s = (m − 1)/(m + 1)`, |s| ≤ 0.172, by its series to s^17 (truncation
/// below 3e-14).
#[inline(always)]
pub(crate) fn ln_core<const FMA: bool>(x: f64) -> f64 {
    let bits = x.to_bits();
    let e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    let high = m > std::f64::consts::SQRT_2;
    let m = if high { m * 0.5 } else { m };
    let e = (e + high as i64) as f64;
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let p = poly::<FMA, f64, 8>(
        z,
        [1.0 / 17.0, 1.0 / 15.0, 1.0 / 13.0, 1.0 / 11.0, 1.0 / 9.0, 1.0 / 7.0, 1.0 / 5.0, 1.0 / 3.0],
    );
    // ln m = 2s + 2s·z·P(z): the leading term kept apart, so `f` (exact)
    // carries the result's first bits.
    let tail = 2.0 * s * z * p;
    madd::<FMA, f64>(e, LN2_HI, madd::<FMA, f64>(e, LN2_LO, tail) + 2.0 * s)
}

/// `ln(1 + y)` for `y` ≥ −1 (NaN, inf and y < −1 as `ln`): `u = 1 + y`
/// rounds, and `((u − 1) − y)/u` corrects for it to first order.
#[inline(always)]
fn log1p_core<const FMA: bool>(y: f64) -> f64 {
    let u = 1.0 + y;
    let v = ln_core::<FMA>(if u > 0.0 && u < f64::INFINITY { u } else { 1.0 }) - ((u - 1.0) - y) / u;
    // ±0 stays itself (the correction would make −0 into +0).
    if y == 0.0 {
        y
    } else {
        special_ln(u, v)
    }
}

/// `ln`'s results for `u` = 0, negative, inf and NaN; `v` otherwise.
#[inline(always)]
fn special_ln(u: f64, v: f64) -> f64 {
    if u == 0.0 {
        f64::NEG_INFINITY
    } else if u < 0.0 {
        f64::NAN
    } else if u == f64::INFINITY || u.is_nan() {
        u
    } else {
        v
    }
}

/// `ln x` with its special values (zero, negatives, inf, NaN).
#[inline(always)]
fn ln64<const FMA: bool>(x: f64) -> f64 {
    special_ln(x, ln_core::<FMA>(if x > 0.0 && x < f64::INFINITY { x } else { 1.0 }))
}

pub fn expm1<const FMA: bool>(x: f32) -> f32 {
    let d = x as f64;
    let e = exp_core::<FMA>(d.clamp(-120.0, 100.0));
    // Below 1e-5 the series x + x²/2 + x³/6 is exact to float64; above,
    // `e − 1` loses at most 1e-11 relative.
    let small = madd::<FMA, f64>(d * d, madd::<FMA, f64>(d, 1.0 / 6.0, 0.5), d);
    let v = if d.abs() < 1e-5 { small } else { e - 1.0 };
    // NaN, and −0 (which the series would turn into +0).
    if x.is_nan() || x == 0.0 {
        x
    } else {
        v as f32
    }
}

pub fn log2<const FMA: bool>(x: f32) -> f32 {
    (ln64::<FMA>(x as f64) * LOG2_E) as f32
}

pub fn log10<const FMA: bool>(x: f32) -> f32 {
    (ln64::<FMA>(x as f64) * LOG10_E) as f32
}

/// Arguments the trigonometric reduction handles exactly: `q = round(x·2/π)`
/// stays below 2^17, so `q` times each 33-bit part of π/2 is exact.
pub const TRIG_LIMIT: f32 = 100_000.0;

/// π/2 in three parts of 33 significant bits and a tail (fdlibm's).
const PIO2_1: f64 = 1.570_796_326_734_125_614_17e+00;
const PIO2_2: f64 = 6.077_100_506_303_965_976_60e-11;
const PIO2_3: f64 = 2.022_266_248_711_166_455_80e-21;
const PIO2_3T: f64 = 8.478_427_660_368_899_569_97e-32;

/// `(sin r, cos r, q mod 4)` for `x = q·π/2 + r`, |r| ≤ π/4 (|x| ≤
/// [`TRIG_LIMIT`]); Taylor series to r^11 and r^12, truncation below 1e-11.
#[inline(always)]
fn sin_cos_core<const FMA: bool>(x: f64) -> (f64, f64, i64) {
    let t = madd::<FMA, f64>(x, std::f64::consts::FRAC_2_PI, ROUND);
    let q = t - ROUND;
    let r = madd::<FMA, f64>(-q, PIO2_1, x);
    let r = madd::<FMA, f64>(-q, PIO2_2, r);
    let r = madd::<FMA, f64>(-q, PIO2_3, r);
    let r = madd::<FMA, f64>(-q, PIO2_3T, r);
    let z = r * r;
    let s = poly::<FMA, f64, 5>(z, [-1.0 / 39_916_800.0, 1.0 / 362_880.0, -1.0 / 5_040.0, 1.0 / 120.0, -1.0 / 6.0]);
    let sin = madd::<FMA, f64>(r * z, s, r);
    let c = poly::<FMA, f64, 7>(
        z,
        [1.0 / 479_001_600.0, -1.0 / 3_628_800.0, 1.0 / 40_320.0, -1.0 / 720.0, 1.0 / 24.0, -0.5, 1.0],
    );
    let quadrant = (t.to_bits() as i64) & 3;
    (sin, c, quadrant)
}

/// The argument the core sees: out-of-range lanes get 0 (they are
/// recomputed after the loop).
#[inline(always)]
fn trig_arg(x: f32) -> f64 {
    if x.abs() <= TRIG_LIMIT {
        x as f64
    } else {
        0.0
    }
}

pub fn sin<const FMA: bool>(x: f32) -> f32 {
    let (s, c, q) = sin_cos_core::<FMA>(trig_arg(x));
    let v = if q & 1 == 0 { s } else { c };
    let v = (if q & 2 == 0 { v } else { -v }) as f32;
    // ±0 keeps its sign (the series' `r + r³·S` rounds −0 to +0).
    if x == 0.0 {
        x
    } else {
        v
    }
}

pub fn cos<const FMA: bool>(x: f32) -> f32 {
    let (s, c, q) = sin_cos_core::<FMA>(trig_arg(x));
    let v = if q & 1 == 0 { c } else { s };
    (if (q + 1) & 2 == 0 { v } else { -v }) as f32
}

pub fn tan<const FMA: bool>(x: f32) -> f32 {
    let (s, c, q) = sin_cos_core::<FMA>(trig_arg(x));
    let v = (if q & 1 == 0 { s / c } else { -c / s }) as f32;
    if x == 0.0 {
        x
    } else {
        v
    }
}

/// tan(π/8) and tan(3π/8), where [`atan_ratio`]'s reductions switch.
const TAN_PI_8: f64 = 0.414_213_562_373_095_048_80;
const TAN_3PI_8: f64 = 2.414_213_562_373_095_048_80;

/// `atan(x/y)` for `x ≥ 0`, `y ≥ 0` (not both 0; NaN propagates) with one
/// division: `t` is `x/y` below tan(π/8), `(x − y)/(x + y)` (plus π/4) up
/// to tan(3π/8), and `−y/x` (plus π/2) beyond, so |t| ≤ tan(π/8) and the
/// series to t^25 truncates below 5e-12·t. Division is the slow part of a
/// float64 lane (about ten cycles per eight lanes): reducing by `1/a` and
/// then again by `(t − 1)/(t + 1)` took two, `atan2`'s `x/y` a third.
#[inline(always)]
pub(crate) fn atan_ratio<const FMA: bool>(x: f64, y: f64) -> f64 {
    let big = x > TAN_3PI_8 * y;
    let mid = x > TAN_PI_8 * y;
    let (num, den, offset) = if big {
        (-y, x, FRAC_PI_2)
    } else if mid {
        (x - y, x + y, FRAC_PI_4)
    } else {
        (x, y, 0.0)
    };
    let t = num / den;
    let z = t * t;
    let p = poly::<FMA, f64, 12>(
        z,
        [
            1.0 / 25.0,
            -1.0 / 23.0,
            1.0 / 21.0,
            -1.0 / 19.0,
            1.0 / 17.0,
            -1.0 / 15.0,
            1.0 / 13.0,
            -1.0 / 11.0,
            1.0 / 9.0,
            -1.0 / 7.0,
            1.0 / 5.0,
            -1.0 / 3.0,
        ],
    );
    offset + madd::<FMA, f64>(t * z, p, t)
}

pub fn atan<const FMA: bool>(x: f32) -> f32 {
    let d = x as f64;
    atan_ratio::<FMA>(d.abs(), 1.0).copysign(d) as f32
}

/// `asin x = atan(x / √((1 − x)(1 + x)))`: ±π/2 at ±1, NaN beyond.
#[inline(always)]
fn asin64<const FMA: bool>(d: f64) -> f64 {
    atan_ratio::<FMA>(d.abs(), ((1.0 - d) * (1.0 + d)).sqrt()).copysign(d)
}

pub fn asin<const FMA: bool>(x: f32) -> f32 {
    asin64::<FMA>(x as f64) as f32
}

pub fn acos<const FMA: bool>(x: f32) -> f32 {
    (FRAC_PI_2 - asin64::<FMA>(x as f64)) as f32
}

/// `(e^|x|, e^−|x|)` for the hyperbolic functions, |x| clamped to 200
/// (beyond float32's range either way).
#[inline(always)]
fn exp_pair<const FMA: bool>(d: f64) -> (f64, f64) {
    let e = exp_core::<FMA>(d.abs().min(200.0));
    (e, 1.0 / e)
}

pub fn sinh<const FMA: bool>(x: f32) -> f32 {
    let d = x as f64;
    let (e, inv) = exp_pair::<FMA>(d);
    // Below 1e-3 the series to x^7 is exact to float64; above, `e − 1/e`
    // loses at most 1e-13 relative.
    let z = d * d;
    let small = madd::<FMA, f64>(d * z, poly::<FMA, f64, 3>(z, [1.0 / 5_040.0, 1.0 / 120.0, 1.0 / 6.0]), d);
    let large = (0.5 * (e - inv)).copysign(d);
    let v = if d.abs() < 1e-3 { small } else { large };
    if x.is_nan() {
        x
    } else {
        v as f32
    }
}

pub fn cosh<const FMA: bool>(x: f32) -> f32 {
    let (e, inv) = exp_pair::<FMA>(x as f64);
    if x.is_nan() {
        x
    } else {
        (0.5 * (e + inv)) as f32
    }
}

/// `asinh x = ±log1p(|x| + x²/(1 + √(x² + 1)))`: no cancellation near 0.
pub fn asinh<const FMA: bool>(x: f32) -> f32 {
    let a = (x as f64).abs();
    let z = a * a;
    let v = log1p_core::<FMA>(a + z / (1.0 + (z + 1.0).sqrt()));
    // inf: z/(1 + √z) is inf/inf; the sum is inf either way.
    let v = if a == f64::INFINITY { a } else { v };
    (v.copysign(x as f64)) as f32
}

/// `acosh x = log1p((x − 1) + √((x − 1)(x + 1)))`, exact in `x − 1`.
pub fn acosh<const FMA: bool>(x: f32) -> f32 {
    let d = x as f64;
    let m = d - 1.0;
    let v = log1p_core::<FMA>(m + (m * (d + 1.0)).sqrt());
    (if d == f64::INFINITY { d } else { v }) as f32
}

/// `atanh x = ½·log1p(2x/(1 − x))`: ±inf at ±1, NaN beyond.
pub fn atanh<const FMA: bool>(x: f32) -> f32 {
    let d = x as f64;
    (0.5 * log1p_core::<FMA>(2.0 * d / (1.0 - d))) as f32
}

#[cfg(test)]
mod tests {
    /// Checks `f` (with and without fused multiply-adds) on `steps + 1`
    /// points of [lo, hi] against `reference` in float64: within `ulps`
    /// float32 ulps of the reference (its magnitude's), or `abs`.
    fn check(name: &str, f: [fn(f32) -> f32; 2], reference: fn(f64) -> f64, lo: f32, hi: f32, ulps: f64, abs: f64) {
        let steps = 20_000;
        for f in f {
            for k in 0..=steps {
                let x = (lo as f64 + (hi as f64 - lo as f64) * k as f64 / steps as f64) as f32;
                let got = f(x) as f64;
                let want = reference(x as f64);
                if want.is_nan() {
                    assert!(got.is_nan(), "{name}({x}) = {got}, want NaN");
                    continue;
                }
                if want.abs() > f32::MAX as f64 {
                    assert!(got.is_infinite() && got.signum() == want.signum(), "{name}({x}) = {got}, want {want}");
                    continue;
                }
                let ulp = (want.abs().max(f32::MIN_POSITIVE as f64)) * f32::EPSILON as f64;
                let err = (got - want).abs();
                assert!(err <= abs + ulps * ulp, "{name}({x}) = {got}, want {want} ({:.2} ulp)", err / ulp);
            }
        }
    }

    macro_rules! both {
        ($f:ident) => {
            [super::$f::<false>, super::$f::<true>]
        };
    }

    /// One float32 rounding of a float64 value: within 0.5 ulp of the
    /// reference plus the core's error, so allow 0.51.
    const ROUNDED: f64 = 0.51;

    #[test]
    fn exp_family() {
        check("expm1", both!(expm1), f64::exp_m1, -20.0, 20.0, ROUNDED, 0.0);
        check("expm1", both!(expm1), f64::exp_m1, -1e-4, 1e-4, ROUNDED, 0.0);
        check("expm1", both!(expm1), f64::exp_m1, 80.0, 89.0, ROUNDED, 0.0);
        for f in both!(expm1) {
            assert_eq!(f(f32::INFINITY), f32::INFINITY);
            assert_eq!(f(f32::NEG_INFINITY), -1.0);
            assert_eq!(f(-0.0).to_bits(), (-0.0f32).to_bits());
            assert_eq!(f(1e-30), 1e-30);
            assert!(f(f32::NAN).is_nan());
        }
    }

    #[test]
    fn log_family() {
        check("log2", both!(log2), f64::log2, 1e-38, 3e38, ROUNDED, 0.0);
        check("log2", both!(log2), f64::log2, 0.5, 2.0, ROUNDED, 0.0);
        check("log10", both!(log10), f64::log10, 1e-45, 1e-38, ROUNDED, 0.0);
        check("log10", both!(log10), f64::log10, 0.9, 1.1, ROUNDED, 0.0);
        for f in [super::log2::<true>, super::log10::<true>] {
            assert_eq!(f(0.0), f32::NEG_INFINITY);
            assert!(f(-1.0).is_nan() && f(f32::NAN).is_nan());
            assert_eq!(f(f32::INFINITY), f32::INFINITY);
            assert_eq!(f(1.0), 0.0);
        }
    }

    #[test]
    fn trigonometric() {
        let lim = super::TRIG_LIMIT;
        check("sin", both!(sin), f64::sin, -10.0, 10.0, ROUNDED, 0.0);
        check("sin", both!(sin), f64::sin, -lim, lim, ROUNDED, 0.0);
        check("sin", both!(sin), f64::sin, -1e-3, 1e-3, ROUNDED, 0.0);
        check("cos", both!(cos), f64::cos, -lim, lim, ROUNDED, 0.0);
        check("cos", both!(cos), f64::cos, 1.5, 1.65, ROUNDED, 0.0);
        check("tan", both!(tan), f64::tan, -lim, lim, ROUNDED, 0.0);
        check("tan", both!(tan), f64::tan, 1.55, 1.6, ROUNDED, 0.0);
        for f in [both!(sin), both!(tan)].concat() {
            assert_eq!(f(-0.0).to_bits(), (-0.0f32).to_bits());
        }
    }

    #[test]
    fn inverse_trigonometric() {
        check("atan", both!(atan), f64::atan, -1e3, 1e3, ROUNDED, 0.0);
        check("atan", both!(atan), f64::atan, -2.0, 2.0, ROUNDED, 0.0);
        check("atan", both!(atan), f64::atan, 1e30, 3e38, ROUNDED, 0.0);
        check("asin", both!(asin), f64::asin, -1.0, 1.0, ROUNDED, 0.0);
        check("asin", both!(asin), f64::asin, -1.1, -1.0, ROUNDED, 0.0);
        check("acos", both!(acos), f64::acos, -1.0, 1.0, ROUNDED, 0.0);
        check("acos", both!(acos), f64::acos, 0.999, 1.0, ROUNDED, 0.0);
        for f in both!(atan) {
            assert_eq!(f(f32::INFINITY), std::f32::consts::FRAC_PI_2);
            assert_eq!(f(f32::NEG_INFINITY), -std::f32::consts::FRAC_PI_2);
            assert_eq!(f(-0.0).to_bits(), (-0.0f32).to_bits());
            assert!(f(f32::NAN).is_nan());
        }
        for f in [super::asin::<true>, super::acos::<true>] {
            assert!(f(1.5).is_nan() && f(f32::NAN).is_nan());
        }
    }

    #[test]
    fn hyperbolic() {
        check("sinh", both!(sinh), f64::sinh, -90.0, 90.0, ROUNDED, 0.0);
        check("sinh", both!(sinh), f64::sinh, -2e-3, 2e-3, ROUNDED, 0.0);
        check("cosh", both!(cosh), f64::cosh, -90.0, 90.0, ROUNDED, 0.0);
        check("asinh", both!(asinh), f64::asinh, -1e3, 1e3, ROUNDED, 0.0);
        check("asinh", both!(asinh), f64::asinh, -1e-5, 1e-5, ROUNDED, 0.0);
        check("asinh", both!(asinh), f64::asinh, 1e30, 3e38, ROUNDED, 0.0);
        check("acosh", both!(acosh), f64::acosh, 0.5, 1e3, ROUNDED, 0.0);
        check("acosh", both!(acosh), f64::acosh, 1.0, 1.001, ROUNDED, 0.0);
        check("atanh", both!(atanh), f64::atanh, -1.5, 1.5, ROUNDED, 0.0);
        check("atanh", both!(atanh), f64::atanh, -1e-5, 1e-5, ROUNDED, 0.0);
        for f in both!(sinh) {
            assert_eq!(f(f32::NEG_INFINITY), f32::NEG_INFINITY);
            assert_eq!(f(-0.0).to_bits(), (-0.0f32).to_bits());
            assert!(f(f32::NAN).is_nan());
        }
        for f in both!(atanh) {
            assert_eq!(f(1.0), f32::INFINITY);
            assert_eq!(f(-1.0), f32::NEG_INFINITY);
        }
        for f in [super::asinh::<true>, super::acosh::<true>, super::cosh::<true>] {
            assert_eq!(f(f32::INFINITY), f32::INFINITY);
            assert!(f(f32::NAN).is_nan());
        }
    }
}
