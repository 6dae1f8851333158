//! Chebyshev polynomials of the four kinds, plain and shifted, with
//! PyTorch's degree conversion, end values and switch to the
//! trigonometric form (`aten/src/ATen/native/Math.h`): the three-term
//! recurrence r = 2y·q − p in float64, and above a degree (6 or 8 by
//! kind, as PyTorch) with |y| < 1 the closed form in θ = acos(y).
//!
//! θ is the primitive `Unary::Acos`: the library's on the CPU, WGSL's
//! built-in, and in PTX [`acos_body`], built here from sin and cos:
//! θ = 2·asin(s) with s = √((1 − |y|)/2) ≤ √½ (π − θ for y < 0), asin by
//! Newton's method on sin φ = s.

use std::sync::OnceLock;

use super::builder::Builder;
use super::poly::{degree, MAX_STEPS};
use super::{Binary, Reg, SpecialFn, Unary};

const PI: f64 = std::f64::consts::PI;

/// The four kinds.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(super) enum Kind {
    T,
    U,
    V,
    W,
}

/// acos(y) for |y| ≤ 1 from sin and cos alone, for backends without a
/// library acos (PTX's `Unary::Acos`). φ₀ = s + s³/6 + 3s⁵/40 + 5s⁷/112 is
/// within 3e-3 of asin(s) at s = √½, and Newton's steps square the error
/// (times tan φ/2 ≤ ½): three steps leave it below 1e-20, under the final
/// rounding of sin and cos.
pub fn acos_body() -> &'static SpecialFn {
    static BODY: OnceLock<SpecialFn> = OnceLock::new();
    BODY.get_or_init(|| {
        let mut b = Builder::new("acos");
        let y = b.param();
        let ay = b.abs(y);
        let rest = b.sub(1.0, ay);
        let half = b.mul(rest, 0.5);
        let s = b.sqrt(half);
        let s2 = b.mul(s, s);
        let series = b.poly(&[5.0 / 112.0, 3.0 / 40.0, 1.0 / 6.0, 1.0], s2);
        let phi = b.var(0.0);
        b.update(phi, Binary::Mul, s, series);
        for _ in 0..3 {
            let (sin, cos) = (b.unary(Unary::Sin, phi), b.unary(Unary::Cos, phi));
            let err = b.sub(sin, s);
            let step = b.div(err, cos);
            b.update(phi, Binary::Sub, phi, step);
        }
        let twice = b.add(phi, phi);
        let negative = b.lt(y, 0.0);
        let other = b.sub(PI, twice);
        let v = b.select(negative, other, twice);
        b.finish(v)
    })
}

/// The polynomial of kind `kind` (shifted: of 2x − 1), switching to the
/// trigonometric form above degree `trig_from`.
pub(super) fn chebyshev(name: &'static str, kind: Kind, shifted: bool, trig_from: f64) -> SpecialFn {
    let mut b = Builder::new(name);
    let (x, n) = (b.param(), b.param());
    let d = degree(&mut b, n);
    let y = if shifted {
        let twice = b.add(x, x);
        b.sub(twice, 1.0)
    } else {
        x
    };
    let twice_y = b.add(y, y);
    // Values at the ends: (−1)^n·(1, n + 1, 2n + 1) by kind.
    let half_d = b.mul(d, 0.5);
    let fl = b.unary(Unary::Floor, half_d);
    let even_part = b.add(fl, fl);
    let even = b.eq(even_part, d);
    let parity = b.select(even, 1.0, -1.0);
    let n1 = b.add(d, 1.0);
    let twice_d = b.add(d, d);
    let n2 = b.add(twice_d, 1.0);
    let (v_pos, v_neg, first) = match kind {
        Kind::T => (b.c(1.0), parity, y),
        Kind::U => (n1, b.mul(parity, n1), twice_y),
        Kind::V => (b.c(1.0), b.mul(parity, n2), b.sub(twice_y, 1.0)),
        Kind::W => (n2, parity, b.add(twice_y, 1.0)),
    };
    let (at_pos, at_neg) = if shifted { (b.eq(x, 1.0), b.eq(x, 0.0)) } else { (b.eq(x, 1.0), b.eq(x, -1.0)) };
    b.return_if(at_pos, v_pos);
    b.return_if(at_neg, v_neg);
    let ay = b.abs(y);
    let inside = b.lt(ay, 1.0);
    let high = b.gt(d, trig_from);
    let trig = b.and(inside, high);
    b.when(trig, |b| trigonometric(b, kind, shifted, y, d, (v_pos, v_neg)));
    let zero = b.eq(d, 0.0);
    b.return_if(zero, 1.0);
    // r = 2y·q − p from (p, q) = (1, first), k = 2 … n; stops once q is NaN.
    let (p, q, r) = (b.var(1.0), b.var(first), b.var(first));
    b.repeat(2.0, MAX_STEPS, |b, k| {
        let done = b.gt(k, d);
        b.break_if(done);
        let nan = b.is_nan(q);
        b.break_if(nan);
        let t = b.mul(twice_y, q);
        b.update(r, Binary::Sub, t, p);
        b.set(p, q);
        b.set(q, r);
    });
    b.finish(r)
}

/// Returns the closed form in θ = acos(y): cos nθ, sin((n+1)θ)/sin θ,
/// cos((n+½)θ)/cos(θ/2), sin((n+½)θ)/sin(θ/2), with PyTorch's values where
/// a denominator is degenerate.
fn trigonometric(b: &mut Builder, kind: Kind, shifted: bool, y: Reg, d: Reg, (v_pos, v_neg): (Reg, Reg)) {
    let th = b.unary(Unary::Acos, y);
    let nh = b.add(d, 0.5);
    let half = b.mul(th, 0.5);
    let angle = |b: &mut Builder, m: Reg| b.mul(m, th);
    match kind {
        Kind::T => {
            let a = angle(b, d);
            let v = b.unary(Unary::Cos, a);
            b.ret(v);
        }
        Kind::U => {
            let n1 = b.add(d, 1.0);
            let a = angle(b, n1);
            let s = b.unary(Unary::Sin, th);
            let degenerate = b.eq(s, 0.0);
            b.when(degenerate, |b| {
                let c = b.unary(Unary::Cos, a);
                let m = b.mul(n1, c);
                let v = b.div(m, y);
                b.ret(v);
            });
            let num = b.unary(Unary::Sin, a);
            let v = b.div(num, s);
            b.ret(v);
        }
        Kind::V => {
            let sh = b.unary(Unary::Sin, half);
            let degenerate = b.eq(sh, 1.0);
            b.return_if(degenerate, v_neg);
            let a = angle(b, nh);
            let (num, den) = (b.unary(Unary::Cos, a), b.unary(Unary::Cos, half));
            let v = b.div(num, den);
            b.ret(v);
        }
        Kind::W => {
            let ch = b.unary(Unary::Cos, half);
            let degenerate = b.eq(ch, 1.0);
            let end = if shifted {
                v_neg
            } else {
                let pos = b.gt(y, 0.0);
                b.select(pos, v_pos, v_neg)
            };
            b.return_if(degenerate, end);
            let a = angle(b, nh);
            let (num, den) = (b.unary(Unary::Sin, a), b.unary(Unary::Sin, half));
            let v = b.div(num, den);
            b.ret(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Special;

    /// acos built from sin and cos (PTX's) is within 2 ulp of the
    /// library's across [−1, 1].
    #[test]
    fn acos_from_sin_and_cos_matches_the_library() {
        let mut ys: Vec<f64> = (0..=20000).map(|i| -1.0 + f64::from(i) / 10000.0).collect();
        ys.extend([1.0 - f64::EPSILON, -1.0 + f64::EPSILON, 1e-300, -0.0, std::f64::consts::FRAC_1_SQRT_2]);
        for y in ys {
            let (got, want) = (super::super::eval(super::acos_body(), &[y]), y.acos());
            assert!(
                (got - want).abs() <= 2.0 * f64::EPSILON * want.abs().max(1e-300),
                "acos({y}) = {got}, library {want}"
            );
        }
    }

    /// The trigonometric form: |T_n(y) − cos(n·acos y)| stays at the
    /// rounding of nθ, across (−1, 1) and its ends.
    #[test]
    fn trigonometric_form() {
        let mut ys: Vec<f64> = (1..2000).map(|i| -1.0 + f64::from(i) / 1000.0).collect();
        ys.extend([1.0 - f64::EPSILON, -1.0 + f64::EPSILON, 1e-300, -0.5, 0.5, std::f64::consts::FRAC_1_SQRT_2]);
        for n in [7.0, 13.0, 50.0, 1000.0] {
            for &y in &ys {
                let got = Special::ChebyshevT.eval(&[y, n]);
                let want = (n * y.acos()).cos();
                let tol = n * 4.0 * f64::EPSILON + 1e-15;
                assert!((got - want).abs() <= tol, "T_{n}({y}) = {got}, cos(n acos y) = {want}");
            }
        }
        // The recurrence below the switch, the ends, and a negative degree.
        assert_eq!(Special::ChebyshevT.eval(&[0.3, 2.0]), 2.0 * 0.3 * 0.3 - 1.0);
        assert_eq!(Special::ChebyshevU.eval(&[-1.0, 3.0]), -4.0);
        assert_eq!(Special::ShiftedChebyshevW.eval(&[0.0, 5.0]), -1.0);
        assert_eq!(Special::ChebyshevV.eval(&[0.2, -1.0]), 0.0);
    }
}
