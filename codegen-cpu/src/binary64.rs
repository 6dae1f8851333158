//! Branch-free float32 binary ops evaluated in float64 lanes, so their tile
//! loops vectorise: `fmod`, `remainder`, floor division, `pow`, `atan2` and
//! `hypot` (the scalar forms call libm or compiler-builtins' bit-by-bit
//! `fmodf`, 5-25x slower than ATen's vector loops); and int64 division
//! through float64 where both operands fit in int32.
//!
//! Each has a *covered* domain on which the float64 form gives the
//! interpreter's result (bit for bit for the exact ops, rounded once from
//! a float64 value within ~1e-11 for the others); `ops.rs` recomputes the
//! lanes outside it (zeros, infinities, NaN, huge quotients, negative bases
//! with fractional exponents) with the scalar form after the loop.

use std::f64::consts::PI;

use crate::fastmath64::{atan_ratio, exp_core, ln_core};

/// Quotients below 2^24: `trunc(x/y)` in float64 is exact (x/y is at least
/// 2^-48 of itself from the next integer, float64 rounds within 2^-53),
/// `q·y` fits float64's 53 bits, and so does `x − q·y`, which is exactly
/// `fmod`'s result.
const QUOTIENT_LIMIT: f64 = 16_777_216.0;

/// Whether `fmod(x, y)` is covered: finite `x`, finite nonzero `y`, and a
/// quotient below [`QUOTIENT_LIMIT`] (false for NaN).
#[inline(always)]
pub fn fmod_covered(x: f32, y: f32) -> bool {
    let (x, y) = (x as f64, y as f64);
    y.is_finite() && x.abs() < y.abs() * QUOTIENT_LIMIT
}

/// C's `fmod` (the sign of `x`), exact.
#[inline(always)]
pub fn fmod(x: f32, y: f32) -> f32 {
    let (xd, yd) = (x as f64, y as f64);
    let q = (xd / yd).trunc();
    let r = (xd - q * yd) as f32;
    // Nonzero, it has x's sign already; zero, it must take it.
    r.copysign(x)
}

/// Python's `%` (the sign of `y`), as the interpreter computes it from
/// `fmod`.
#[inline(always)]
pub fn remainder(x: f32, y: f32) -> f32 {
    let r = fmod(x, y);
    if r != 0.0 && ((r < 0.0) != (y < 0.0)) {
        r + y
    } else {
        r
    }
}

/// Floor division as PyTorch computes it, through `fmod` (so `1 // 0.1` is
/// 9), the interpreter's steps with selects.
#[inline(always)]
pub fn floor_div(x: f32, y: f32) -> f32 {
    let m = fmod(x, y);
    let div = (x - m) / y;
    let div = if m != 0.0 && ((y < 0.0) != (m < 0.0)) { div - 1.0 } else { div };
    let fl = div.floor();
    let rounded = if div - fl > 0.5 { fl + 1.0 } else { fl };
    if div == 0.0 {
        0.0f32.copysign(x / y)
    } else {
        rounded
    }
}

/// Whether `pow(x, y)` is covered: finite nonzero `x`, finite `y`, and
/// for a negative base an integer exponent.
#[inline(always)]
pub fn pow_covered(x: f32, y: f32) -> bool {
    x.is_finite() && x != 0.0 && y.is_finite() && (x > 0.0 || y == y.trunc())
}

/// `x^y` as `e^(y·ln|x|)` in float64 (the exponent's error below 1e-11,
/// clamped where float32 over- or underflows anyway), negated for a
/// negative base and an odd exponent.
#[inline(always)]
pub fn pow<const FMA: bool>(x: f32, y: f32) -> f32 {
    let (xd, yd) = (x as f64, y as f64);
    let a = xd.abs();
    let l = ln_core::<FMA>(if a > 0.0 && a < f64::INFINITY { a } else { 1.0 });
    let v = exp_core::<FMA>((yd * l).clamp(-700.0, 700.0));
    let odd = (yd * 0.5).fract() != 0.0;
    (if x < 0.0 && odd { -v } else { v }) as f32
}

/// Whether `atan2(x, y)` is covered: finite `x`, finite nonzero `y`.
#[inline(always)]
pub fn atan2_covered(x: f32, y: f32) -> bool {
    x.is_finite() && y.is_finite() && y != 0.0
}

/// `atan2(x, y)` (x the ordinate, as ATen's argument order): the angle of
/// `(|y|, |x|)` from [`atan_ratio`] with its one division, reflected into
/// the left half-plane for negative `y` and given the sign of `x` (−0
/// keeps −0 and −π).
#[inline(always)]
pub fn atan2<const FMA: bool>(x: f32, y: f32) -> f32 {
    let (xd, yd) = (x as f64, y as f64);
    let a = atan_ratio::<FMA>(xd.abs(), yd.abs());
    (if yd < 0.0 { PI - a } else { a }).copysign(xd) as f32
}

/// Whether `hypot(x, y)` is covered: both finite.
#[inline(always)]
pub fn hypot_covered(x: f32, y: f32) -> bool {
    x.is_finite() && y.is_finite()
}

/// `√(x² + y²)`: the squares are exact in float64, the sum rounds once.
#[inline(always)]
pub fn hypot(x: f32, y: f32) -> f32 {
    let (xd, yd) = (x as f64, y as f64);
    (xd * xd + yd * yd).sqrt() as f32
}

/// Whether an int64 division is covered: a nonzero divisor and both
/// operands within int32's range.
#[inline(always)]
pub fn int_div_covered(x: i64, y: i64) -> bool {
    y != 0 && x as i32 as i64 == x && y as i32 as i64 == y
}

/// The truncated quotient and remainder of covered int64 operands through
/// float64: below 2^31 a quotient that is not an integer lies at least
/// 2^-31 of itself from one (float64 rounds within 2^-53), so `trunc` is
/// exact, and one float64 division on eight lanes replaces eight `idiv`s
/// of 15-40 cycles each.
#[inline(always)]
pub fn int_trunc_div(x: i64, y: i64) -> (i64, i64) {
    let q = (x as f64 / y as f64).trunc() as i64;
    (q, x.wrapping_sub(q.wrapping_mul(y)))
}

/// Integer division ops (`div`, `trunc_div`, floor division, Python's and
/// C's remainders) of covered operands.
#[inline(always)]
pub fn int_div(op: rdyn_ir::loops::BinaryOp, x: i64, y: i64) -> i64 {
    use rdyn_ir::loops::BinaryOp;
    let (q, r) = int_trunc_div(x, y);
    let differ = r != 0 && ((r < 0) != (y < 0));
    // Wrapping: uncovered lanes (recomputed after) may hold any values.
    match op {
        BinaryOp::FloorDiv => q.wrapping_sub(differ as i64),
        BinaryOp::Rem => r.wrapping_add(if differ { y } else { 0 }),
        BinaryOp::Fmod => r,
        _ => q,
    }
}

#[cfg(test)]
mod tests {
    use rdyn_ir::loops::BinaryOp;

    /// Pseudo-random float32 values over many magnitudes and both signs,
    /// with zeros, infinities and NaN mixed in.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|k| {
                s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let u = (s >> 11) as f64 / (1u64 << 53) as f64;
                let special = [0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1.0, -1.0, 2.0, 0.5, -3.0];
                match k % 13 {
                    0 => special[(s >> 7) as usize % special.len()],
                    1 => ((u * 40.0) - 20.0).round() as f32,
                    _ => {
                        let mag = 10f64.powf(u * 12.0 - 6.0);
                        (if (s >> 3) & 1 == 1 { -mag } else { mag }) as f32
                    }
                }
            })
            .collect()
    }

    /// The tile routine against the scalar body lane by lane: equal bits
    /// (or both NaN) for the exact ops, within `ulps` of it otherwise.
    fn agree(op: BinaryOp, ulps: f32) {
        let (a, b) = (values(20_000, 1), values(20_000, 2));
        // Every pair of specials too.
        let (mut xs, mut ys) = (a.clone(), b.clone());
        for &x in &a[..130] {
            for &y in &b[..130] {
                xs.push(x);
                ys.push(y);
            }
        }
        let mut fast = vec![0f32; xs.len()];
        super::super::ops::binary_f32(op, &xs, &ys, &mut fast);
        for (i, (&x, &y)) in xs.iter().zip(&ys).enumerate() {
            let mut want = [0f32];
            super::super::ops::binary_f32_scalar(op, &[x], &[y], &mut want);
            let (got, want) = (fast[i], want[0]);
            if want.is_nan() || got.is_nan() {
                assert!(want.is_nan() && got.is_nan(), "{op:?}({x}, {y}) = {got}, want {want}");
                continue;
            }
            let ulp = (want.abs().max(f32::MIN_POSITIVE) * f32::EPSILON).max(f32::from_bits(1));
            let ok = got.to_bits() == want.to_bits() || (ulps > 0.0 && (got - want).abs() <= ulps * ulp);
            assert!(ok, "{op:?}({x}, {y}) = {got:e}, want {want:e}");
        }
    }

    #[test]
    fn exact_ops_match_the_scalar_forms_bit_for_bit() {
        agree(BinaryOp::Fmod, 0.0);
        agree(BinaryOp::Rem, 0.0);
        agree(BinaryOp::FloorDiv, 0.0);
    }

    #[test]
    fn rounded_ops_are_within_an_ulp_of_libm() {
        // libm's own results are within an ulp of the true value; ours are
        // the float64 value rounded once.
        agree(BinaryOp::Pow, 1.0);
        agree(BinaryOp::Atan2, 1.0);
        agree(BinaryOp::Hypot, 1.0);
    }

    #[test]
    fn integer_division_matches_the_scalar_forms() {
        let mut s = 7u64;
        let mut next = |bits: u32| {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((s >> 11) as i64 >> (53 - bits)) - (1i64 << (bits - 1))
        };
        let edges = [0, 1, -1, 2, -2, 7, -7, i32::MAX as i64, i32::MIN as i64, 1 << 31, i64::MAX, i64::MIN];
        let mut xs: Vec<i64> = (0..20_000).map(|k| next(if k % 3 == 0 { 32 } else { 12 })).collect();
        let mut ys: Vec<i64> = (0..20_000).map(|k| next(if k % 5 == 0 { 32 } else { 6 })).collect();
        for &x in &edges {
            for &y in &edges {
                xs.push(x);
                ys.push(y);
            }
        }
        for op in [BinaryOp::Div, BinaryOp::TruncDiv, BinaryOp::FloorDiv, BinaryOp::Rem, BinaryOp::Fmod] {
            let mut fast = vec![0i64; xs.len()];
            let mut error = false;
            super::super::ops::binary_i64(op, &xs, &ys, &mut fast, &mut error);
            assert!(error, "a zero divisor is reported");
            for (i, (&x, &y)) in xs.iter().zip(&ys).enumerate() {
                assert_eq!(fast[i], super::super::ops::int_div_scalar(op, x, y), "{op:?}({x}, {y})");
            }
        }
    }

    #[test]
    fn pow_signs_and_edges() {
        let pow = super::pow::<true>;
        assert_eq!(pow(-2.0, 3.0), -8.0);
        assert_eq!(pow(-2.0, 2.0), 4.0);
        assert_eq!(pow(2.0, -1.0), 0.5);
        assert_eq!(pow(3.0, 0.0), 1.0);
        assert_eq!(pow(10.0, 39.0), f32::INFINITY);
        assert_eq!(pow(10.0, -46.0), 0.0);
        assert_eq!(pow(-1.5, 1e30), f32::INFINITY, "huge exponents are even");
    }
}
