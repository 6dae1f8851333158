//! The digamma function ψ(x) = Γ'(x)/Γ(x): reflection for negative x,
//! upward recurrence to x ≥ 10, then the asymptotic series to the x^−16
//! term (the first omitted one is below 1e-17 relative there; stopping at
//! 6 with five terms, as this backend once did, left errors of 1e-11).
//! And ln|Γ(x)| for every x: the library's `lgamma` (`Unary::Lgamma`, for
//! positive arguments in PTX) above ½, reflection below.

use super::builder::Builder;
use super::{Binary, Reg, SpecialFn, Unary};

const PI: f64 = std::f64::consts::PI;

/// ψ(x): ∓inf at ±0 (as PyTorch: +inf at −0), NaN at the negative
/// integers and at −inf.
pub(super) fn digamma() -> SpecialFn {
    let mut b = Builder::new("digamma");
    let x0 = b.param();
    let zero = b.eq(x0, 0.0);
    b.when(zero, |b| {
        // 1/x tells −0 from +0.
        let inv = b.div(1.0, x0);
        let neg = b.lt(inv, 0.0);
        let v = b.select(neg, f64::INFINITY, f64::NEG_INFINITY);
        b.ret(v);
    });
    let negative = b.lt(x0, 0.0);
    let integer = b.is_integer(x0);
    let pole = b.and(negative, integer);
    b.return_if(pole, f64::NAN);
    let (x, result) = (b.var(x0), b.var(0.0));
    b.when(negative, |b| {
        // ψ(1 − x) − ψ(x) = π cot(πx). cot(πx) has period 1: πx is taken
        // of r = x − ⌊x + ½⌋ (exact, |r| ≤ ½), so that sin and cos see an
        // argument below π/2 whose rounding is relative to r. Near a pole
        // r is small and cot(πr) keeps its relative accuracy, where
        // sin(πx) of a large x (or of x − ⌊x⌋ near 1) would not.
        let shifted = b.add(x0, 0.5);
        let nearest = b.unary(Unary::Floor, shifted);
        let r = b.sub(x0, nearest);
        let px = b.mul(PI, r);
        let (s, c) = (b.unary(Unary::Sin, px), b.unary(Unary::Cos, px));
        let pc = b.mul(PI, c);
        let cot = b.div(pc, s);
        b.update(result, Binary::Sub, result, cot);
        b.update(x, Binary::Sub, 1.0, x0);
    });
    // x ≥ 1 after reflection, so ten steps at most (eleven for tiny x > 0).
    b.repeat(0.0, 11, |b, _| {
        let big = b.ge(x, 10.0);
        b.break_if(big);
        let inv = b.div(1.0, x);
        b.update(result, Binary::Sub, result, inv);
        b.update(x, Binary::Add, x, 1.0);
    });
    // ln x − 1/(2x) − Σ_(k=1..8) B_2k/(2k x^2k).
    let inv = b.div(1.0, x);
    let inv2 = b.mul(inv, inv);
    #[rustfmt::skip]
    let bernoulli = [
        -3617.0 / 8160.0, 1.0 / 12.0, -691.0 / 32760.0, 1.0 / 132.0,
        -1.0 / 240.0, 1.0 / 252.0, -1.0 / 120.0, 1.0 / 12.0,
    ];
    let series = b.poly(&bernoulli, inv2);
    let series = b.mul(inv2, series);
    let l = b.log(x);
    let half = b.mul(0.5, inv);
    let t = b.sub(l, half);
    let t = b.sub(t, series);
    let r = b.add(result, t);
    b.finish(r)
}

/// |sin(πx)|, with x reduced by whole periods first (exact), so that it is
/// exactly 0 at the integers and accurate near them.
fn abs_sin_pi(b: &mut Builder, x: Reg) -> Reg {
    let half = b.mul(x, 0.5);
    let fl = b.unary(Unary::Floor, half);
    let r = b.fma(fl, -2.0, x);
    // r in [0, 2): |sin(πr)| has period 1, and is symmetric about ½.
    let ge1 = b.ge(r, 1.0);
    let r1 = b.sub(r, 1.0);
    let r = b.select(ge1, r1, r);
    let other = b.sub(1.0, r);
    let r = b.binary(Binary::Min, r, other);
    let a = b.mul(r, PI);
    b.unary(Unary::Sin, a)
}

/// ln|Γ(x)| (PyTorch's `lgamma`): +inf at ±inf and at the poles 0, −1,
/// −2, …, 0 at 1 and 2; below ½ by reflection, ln(π/|sin(πx)|) − ln Γ(1 − x).
pub(super) fn lgamma() -> SpecialFn {
    let mut b = Builder::new("lgamma");
    let x = b.param();
    let nan = b.is_nan(x);
    b.return_if(nan, f64::NAN);
    let ax = b.abs(x);
    let inf = b.eq(ax, f64::INFINITY);
    let non_positive = b.le(x, 0.0);
    let integer = b.is_integer(x);
    let pole = b.and(non_positive, integer);
    let infinite = b.or(inf, pole);
    b.return_if(infinite, f64::INFINITY);
    // Γ(1) = Γ(2) = 1 exactly (libm's lgamma gives 0 there, PTX's software
    // routine a few ulps of 1e-15).
    let (one, two) = (b.eq(x, 1.0), b.eq(x, 2.0));
    let unit = b.or(one, two);
    b.return_if(unit, 0.0);
    let direct = b.ge(x, 0.5);
    b.when(direct, |b| {
        let v = b.unary(Unary::Lgamma, x);
        b.ret(v);
    });
    let s = abs_sin_pi(&mut b, x);
    let q = b.div(PI, s);
    let lq = b.log(q);
    let one_minus = b.sub(1.0, x);
    let lg = b.unary(Unary::Lgamma, one_minus);
    let out = b.sub(lq, lg);
    b.finish(out)
}
