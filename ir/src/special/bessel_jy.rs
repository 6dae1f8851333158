//! Bessel functions of the first and second kind, J0, J1, Y0 and Y1, with
//! PyTorch's edge cases: J(±inf) and Y(+inf) are NaN, Y(±0) = −inf, Y of a
//! negative number is NaN, J0 is even and J1 odd (−0 included).
//!
//! Up to |x| = 12 the power series at y = x²/4 (for Y the standard one in
//! ln(x/2) + γ and harmonic numbers), beyond it Hankel's large-argument
//! expansion, each a fixed polynomial (in y, and in 1/x²) whose
//! coefficients are computed when the body is built: no loop and no
//! division per term, so the CPU's machine code runs as fast as libm's
//! rational approximations did. Hankel's smallest term is about e^(−2x),
//! 4e-11 at 12, and the power series' largest term there is about 4e3
//! (its rounding, about 1e-12, is the larger error below 12), so every
//! result is within about 1e-11 of the true value, relative to the
//! functions' amplitude (the tests check against libm): far below a float32 ulp,
//! which is what rdyn computes them for (float64 J and Y run eagerly, as
//! PyTorch's own numerics differ from accurate values near the zeros).

use std::f64::consts::{FRAC_1_SQRT_2, PI};

use super::builder::Builder;
use super::{Binary, Reg, SpecialFn, Unary};

const EULER_GAMMA: f64 = 0.577_215_664_901_532_9;
/// Where J and Y switch from the power series to Hankel's expansion (see
/// the module docs for the error either side).
const JY_ASYMPTOTIC: f64 = 12.0;

/// Which Bessel function: of the first kind (J) or of the second (Y).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    J,
    Y,
}

/// Terms of the power series that reach every |x| ≤ 12 (y ≤ 36): the
/// k-th is y^k/(k!(k+n)!) ≤ 36^k/(k!)², below 1e-18 from k = 30 on, so
/// the tail beyond 34 terms is far below the float64 rounding of the sum.
const SERIES_TERMS: i32 = 34;

/// Terms of Hankel's expansion: they shrink while (2k−1)² − 4n² < 8k·x,
/// for every x > 12 up to k = 24, where the smallest, about e^(−2x), is
/// reached at x = 12; beyond, the terms past 24 are smaller still.
const HANKEL_TERMS: i32 = 25;

/// Highest degree first, as [`Builder::poly`] takes them.
fn highest_first(mut coeffs: Vec<f64>) -> Vec<f64> {
    coeffs.reverse();
    coeffs
}

/// The power series of order `n` as polynomials in y = x²/4:
/// S = Σ c_k y^k and H = Σ h_k c_k y^k, with c_k = (−1)^k/(k!(k+n)!) and
/// h_k = H_k (n = 0) or H_k + H_(k+1) (n = 1), H_k the harmonic numbers.
/// The coefficients are computed here, each from the last by one division
/// by an exact integer (half an ulp each); the terms' largest, about 4e3 at
/// y = 36, bounds the rounding error of either sum to about 1e-12.
fn power_series(b: &mut Builder, ax: Reg, n: u32) -> (Reg, Reg) {
    let (mut c, mut harmonic) = (1.0, 0.0);
    let mut s_coeffs = Vec::new();
    let mut h_coeffs = Vec::new();
    let mut factorial_n = 1.0;
    for j in 1..=n {
        factorial_n *= f64::from(j);
    }
    c /= factorial_n;
    for k in 0..SERIES_TERMS {
        let kf = f64::from(k);
        if k > 0 {
            c = -c / (kf * (kf + f64::from(n)));
            harmonic += 1.0 / kf;
        }
        let h = if n == 0 { harmonic } else { harmonic + (harmonic + 1.0 / (kf + 1.0)) };
        s_coeffs.push(c);
        h_coeffs.push(h * c);
    }
    let q = b.mul(0.25, ax);
    let y = b.mul(q, ax);
    let s = b.poly(&highest_first(s_coeffs), y);
    let h = b.poly(&highest_first(h_coeffs), y);
    (s, h)
}

/// Hankel's expansion of order `n` at `ax` as polynomials in z = 1/x²:
/// with a_k = Π_{j≤k} (4n² − (2j−1)²)/(8j), P = a_0 − a_2 z + a_4 z² − …
/// and Q = (a_1 − a_3 z + a_5 z² − …)/x.
fn expansion(b: &mut Builder, ax: Reg, n: u32) -> (Reg, Reg) {
    let mu = f64::from(4 * n * n);
    let mut a = 1.0;
    let (mut p_coeffs, mut q_coeffs) = (vec![1.0], Vec::new());
    for k in 1..HANKEL_TERMS {
        let kf = f64::from(k);
        let odd = 2.0 * kf - 1.0;
        a *= (mu - odd * odd) / (8.0 * kf);
        let sign = if (k / 2) % 2 == 0 { 1.0 } else { -1.0 };
        if k % 2 == 0 {
            p_coeffs.push(sign * a);
        } else {
            q_coeffs.push(sign * a);
        }
    }
    let inv = b.div(1.0, ax);
    let z = b.mul(inv, inv);
    let p = b.poly(&highest_first(p_coeffs), z);
    let q_sum = b.poly(&highest_first(q_coeffs), z);
    let q = b.mul(q_sum, inv);
    (p, q)
}

/// The series side (|x| ≤ 12) of J_n or Y_n at `ax` into `r`.
fn near(b: &mut Builder, ax: Reg, n: u32, kind: Kind, r: Reg) {
    let (s, h) = power_series(b, ax, n);
    let half = b.mul(ax, 0.5);
    let j = if n == 0 { s } else { b.mul(half, s) };
    if kind == Kind::J {
        b.set(r, j);
        return;
    }
    // L = ln(x/2) + γ; Y0 = (2/π)(L·S − H),
    // Y1 = −2/(πx) + (2/π)·L·J1 − (x/(2π))·H.
    let ln = b.log(half);
    let l = b.add(ln, EULER_GAMMA);
    let lj = b.mul(l, j);
    if n == 0 {
        let diff = b.sub(lj, h);
        b.update(r, Binary::Mul, diff, 2.0 / PI);
    } else {
        let a = b.mul(lj, 2.0 / PI);
        let inv = b.div(-2.0 / PI, ax);
        let a = b.add(a, inv);
        let xh = b.mul(ax, h);
        let v = b.fma(xh, -0.5 / PI, a);
        b.set(r, v);
    }
}

/// The asymptotic side (|x| > 12): √(2/(πx))·(P cos χ − Q sin χ) for J,
/// (P sin χ + Q cos χ) for Y, with χ = x − π/4 (n = 0) or x − 3π/4 (n = 1)
/// taken from sin x and cos x, into `r`.
fn far(b: &mut Builder, ax: Reg, n: u32, kind: Kind, r: Reg) {
    let (p, q) = expansion(b, ax, n);
    let sin = b.unary(Unary::Sin, ax);
    let cos = b.unary(Unary::Cos, ax);
    let plus = b.add(sin, cos);
    let minus = b.sub(sin, cos);
    let (cos_chi, sin_chi) = if n == 0 { (plus, minus) } else { (minus, b.neg(plus)) };
    let v = if kind == Kind::J {
        let qs = b.mul(q, sin_chi);
        let nqs = b.neg(qs);
        b.fma(p, cos_chi, nqs)
    } else {
        let qc = b.mul(q, cos_chi);
        b.fma(p, sin_chi, qc)
    };
    let px = b.mul(PI, ax);
    let amp = b.div(2.0, px);
    let amp = b.sqrt(amp);
    let amp = b.mul(amp, FRAC_1_SQRT_2);
    b.update(r, Binary::Mul, amp, v);
}

/// J_n or Y_n (`n` = 0 or 1, `kind`).
pub(super) fn bessel_jy(name: &'static str, n: u32, kind: Kind) -> SpecialFn {
    let mut b = Builder::new(name);
    let x = b.param();
    let nan = b.is_nan(x);
    b.return_if(nan, f64::NAN);
    let ax = b.abs(x);
    let inf = b.eq(ax, f64::INFINITY);
    let zero = b.eq(x, 0.0);
    if kind == Kind::J {
        b.return_if(inf, f64::NAN);
        if n == 1 {
            // J1(±0) = ±0: the series' first term x/2, exact.
            let half = b.mul(x, 0.5);
            b.return_if(zero, half);
        }
    } else {
        b.return_if(zero, f64::NEG_INFINITY);
        let negative = b.lt(x, 0.0);
        let bad = b.or(negative, inf);
        b.return_if(bad, f64::NAN);
    }
    let r = b.var(0.0);
    let small = b.le(ax, JY_ASYMPTOTIC);
    b.if_else(small, |b| near(b, ax, n, kind, r), |b| far(b, ax, n, kind, r));
    if kind == Kind::J && n == 1 {
        let negative = b.lt(x, 0.0);
        let flipped = b.neg(r);
        let out = b.select(negative, flipped, r);
        return b.finish(out);
    }
    b.finish(r)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::super::Special;

    /// Against libm's float64 J and Y (accurate to an ulp or so), on both
    /// sides of the switch to Hankel's expansion: within 1e-11 of the
    /// functions' amplitude (1 for J, and √(2/(πx)) beyond 1 for both).
    #[test]
    fn jy_match_libm() {
        type Reference = fn(f64) -> f64;
        let cases: [(Special, Reference); 4] =
            [(Special::J0, libm::j0), (Special::J1, libm::j1), (Special::Y0, libm::y0), (Special::Y1, libm::y1)];
        for (which, reference) in cases {
            for i in 1..=4000 {
                let x = f64::from(i) * 0.0137 + f64::from(i % 7) * 1e-3;
                let x = if i % 97 == 0 { x * 37.0 } else { x };
                let got = which.eval(&[x]);
                let want = reference(x);
                let amplitude = if x > 1.0 { (2.0 / (std::f64::consts::PI * x)).sqrt() } else { 1.0 };
                let tol = 1e-11 * amplitude + 1e-14 * want.abs();
                assert!((got - want).abs() <= tol, "{which:?}({x}) = {got:e}, libm {want:e}");
            }
        }
    }

    #[test]
    fn jy_edge_cases_are_pytorchs() {
        let inf = f64::INFINITY;
        assert_eq!(Special::J0.eval(&[0.0]), 1.0);
        assert_eq!(Special::J0.eval(&[-2.5]), Special::J0.eval(&[2.5]));
        assert_eq!(Special::J1.eval(&[-2.5]), -Special::J1.eval(&[2.5]));
        assert!(Special::J1.eval(&[-0.0]).is_sign_negative() && Special::J1.eval(&[0.0]) == 0.0);
        for which in [Special::J0, Special::J1] {
            assert!(which.eval(&[inf]).is_nan() && which.eval(&[-inf]).is_nan());
        }
        for which in [Special::Y0, Special::Y1] {
            assert_eq!(which.eval(&[0.0]), -inf);
            assert_eq!(which.eval(&[-0.0]), -inf);
            assert!(which.eval(&[-1.0]).is_nan() && which.eval(&[inf]).is_nan());
        }
        for which in [Special::J0, Special::J1, Special::Y0, Special::Y1] {
            assert!(which.eval(&[f64::NAN]).is_nan());
        }
    }
}
