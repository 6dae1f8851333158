//! Branch-free float32 transcendentals, so their tile loops vectorise (libm
//! calls do not). Minimax polynomials after Cephes; each is within a couple
//! of ulps of the correctly rounded result on the ranges that matter, and
//! handles inf/NaN like the libm function. Checked against f64 std in tests.

// The coefficients are the published ones, digits kept as printed.
#![allow(clippy::excessive_precision)]

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let xc = x.clamp(-87.3, 88.72);
    // Round to nearest by the 1.5·2^23 trick: `floor` is a libm call on
    // baseline x86-64 (no SSE4.1) and would stop the loop vectorising.
    let n = (xc * LOG2E + 12_582_912.0) - 12_582_912.0;
    let r = xc - n * LN2_HI - n * LN2_LO;
    let p = ((((1.987_569_1e-4 * r + 1.398_2e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r + 1.666_666_5e-1) * r
        + 5.000_000_1e-1;
    let y = p * r * r + r + 1.0;
    // SAFETY: n is an integer in [-126, 128] after the clamp (finite, in
    // i32 range). The unchecked conversion is a plain cvttps2dq; `as i32`
    // saturates, which does not vectorise on baseline x86-64.
    let ni: i32 = unsafe { n.to_int_unchecked() };
    let scale = f32::from_bits(((ni + 127) << 23) as u32);
    let v = y * scale;
    let v = if x > 88.72 { f32::INFINITY } else { v };
    let v = if x < -87.3 { 0.0 } else { v };
    if x.is_nan() {
        x
    } else {
        v
    }
}

#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let small = ((((-5.704_988_7e-3 * z + 2.063_908_9e-2) * z - 5.373_971_6e-2) * z + 1.333_144_2e-1) * z
        - 3.333_328_2e-1)
        * z
        * x
        + x;
    let e = exp(2.0 * a);
    let large = (1.0 - 2.0 / (e + 1.0)).copysign(x);
    let v = if a < 0.625 { small } else { large };
    if x.is_nan() {
        x
    } else {
        v
    }
}

#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

#[inline(always)]
pub fn ln(x: f32) -> f32 {
    let bits = x.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 126;
    let mut m = f32::from_bits((bits & 0x807f_ffff) | 0x3f00_0000);
    let below = m < std::f32::consts::FRAC_1_SQRT_2;
    e -= below as i32;
    m = if below { m + m - 1.0 } else { m - 1.0 };
    let z = m * m;
    let mut y = ((((((((7.037_683_6e-2 * m - 1.151_461e-1) * m + 1.167_699_9e-1) * m - 1.242_014_1e-1) * m
        + 1.424_932_3e-1)
        * m
        - 1.666_805_8e-1)
        * m
        + 2.000_071_4e-1)
        * m
        - 2.499_999_4e-1)
        * m
        + 3.333_333_1e-1)
        * m
        * z;
    let ef = e as f32;
    y += LN2_LO * ef;
    y -= 0.5 * z;
    let v = m + y + LN2_HI * ef;
    let v = if x < f32::MIN_POSITIVE { x.ln() } else { v };
    if x == f32::INFINITY || x.is_nan() {
        x
    } else {
        v
    }
}

/// erf via erfc's Chebyshev fit (Numerical Recipes `erfcc`), |error| < 1.2e-7.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_2
        + t * (1.000_023_7
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * exp(poly);
    let v = (1.0 - erfc).copysign(x);
    if x.is_nan() {
        x
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    fn check(name: &str, f: fn(f32) -> f32, reference: fn(f64) -> f64, lo: f32, hi: f32, rel: f64, abs: f64) {
        let steps = 20_000;
        for k in 0..=steps {
            let x = lo + (hi - lo) * k as f32 / steps as f32;
            let got = f(x) as f64;
            let want = reference(x as f64);
            let err = (got - want).abs();
            assert!(err <= abs + rel * want.abs(), "{name}({x}) = {got}, want {want}");
        }
    }

    #[test]
    fn exp_matches_f64() {
        check("exp", super::exp, f64::exp, -80.0, 80.0, 4e-7, 0.0);
        assert_eq!(super::exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(super::exp(f32::NEG_INFINITY), 0.0);
        assert!(super::exp(f32::NAN).is_nan());
    }

    #[test]
    fn tanh_sigmoid_match_f64() {
        check("tanh", super::tanh, f64::tanh, -20.0, 20.0, 4e-7, 1e-9);
        check("sigmoid", super::sigmoid, |x| 1.0 / (1.0 + (-x).exp()), -50.0, 50.0, 4e-7, 1e-30);
    }

    #[test]
    fn ln_matches_f64() {
        check("ln", super::ln, f64::ln, 1e-30, 1e30, 3e-7, 1e-7);
        check("ln", super::ln, f64::ln, 0.5, 2.0, 3e-7, 1e-7);
        assert_eq!(super::ln(0.0), f32::NEG_INFINITY);
        assert!(super::ln(-1.0).is_nan());
    }

    #[test]
    fn erf_matches_f64() {
        check("erf", super::erf, libm::erf, -6.0, 6.0, 0.0, 2.5e-7);
    }
}
