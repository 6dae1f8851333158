//! Orthogonal polynomials of a float degree by their three-term
//! recurrences: Hermite H and He, Laguerre L, Legendre P, with PyTorch's
//! degree conversion and special cases.
//!
//! The degree is a float as PyTorch converts it (C++ float → int64
//! truncation on x86): NaN, ±inf and |n| ≥ 2^63 read as negative, and a
//! negative degree gives 0. The recurrences count in float64, exact up to
//! 2^53; Laguerre and Legendre stop after 2^32 − 1 steps (the loop bound),
//! where a degree that high would take seconds per element anyway.

use super::builder::Builder;
use super::{Reg, SpecialFn, Unary};

/// 2^63: degrees at or beyond it (in magnitude) convert to i64::MIN.
const I64_RANGE: f64 = 9_223_372_036_854_775_808.0;

/// The most steps of an unbounded recurrence.
pub(super) const MAX_STEPS: u32 = u32::MAX;

/// Returns 0 for a negative degree (as converted), else the truncated
/// degree (≥ 0, exact).
pub(super) fn degree(b: &mut Builder, n: Reg) -> Reg {
    let an = b.abs(n);
    let in_range = b.lt(an, I64_RANGE);
    let out_of_range = b.not(in_range);
    let below = b.le(n, -1.0);
    let negative = b.or(out_of_range, below);
    b.return_if(negative, 0.0);
    // n > −1 here: trunc(n) = floor(|n|).
    b.unary(Unary::Floor, an)
}

/// Physicists' Hermite polynomial H_n(x); NaN above degree 512 like PyTorch.
pub(super) fn hermite_h() -> SpecialFn {
    let mut b = Builder::new("hermite_h");
    let (x, n) = (b.param(), b.param());
    let d = degree(&mut b, n);
    let zero = b.eq(d, 0.0);
    b.return_if(zero, 1.0);
    let twice = b.add(x, x);
    let one = b.eq(d, 1.0);
    b.return_if(one, twice);
    let big = b.gt(d, 512.0);
    b.return_if(big, f64::NAN);
    // r = 2x·q − k·p for k = 2, 4, … 2n − 2 (j = k/2 = 1 … n − 1).
    let (p, q, r) = (b.var(1.0), b.var(twice), b.var(0.0));
    b.repeat(1.0, 511, |b, j| {
        let done = b.ge(j, d);
        b.break_if(done);
        let k = b.add(j, j);
        let a = b.mul(twice, q);
        let c = b.mul(k, p);
        b.update(r, super::Binary::Sub, a, c);
        b.set(p, q);
        b.set(q, r);
    });
    b.finish(r)
}

/// Probabilists' Hermite polynomial He_n(x); NaN above degree 512.
pub(super) fn hermite_he() -> SpecialFn {
    let mut b = Builder::new("hermite_he");
    let (x, n) = (b.param(), b.param());
    let d = degree(&mut b, n);
    let zero = b.eq(d, 0.0);
    b.return_if(zero, 1.0);
    let big = b.gt(d, 512.0);
    b.return_if(big, f64::NAN);
    // q ← x·q − k·p for k = 1 … n − 1.
    let (p, q) = (b.var(1.0), b.var(x));
    b.repeat(1.0, 511, |b, k| {
        let done = b.ge(k, d);
        b.break_if(done);
        let a = b.mul(x, q);
        let c = b.mul(k, p);
        let next = b.sub(a, c);
        b.set(p, q);
        b.set(q, next);
    });
    b.finish(q)
}

/// q ← (lead(k)·q − k·p)/(k + 1) for k = 1 … n − 1, stopping once q is
/// NaN; q from `first`.
fn three_term(b: &mut Builder, d: Reg, first: Reg, lead: impl Fn(&mut Builder, Reg) -> Reg) -> Reg {
    let (p, q) = (b.var(1.0), b.var(first));
    b.repeat(1.0, MAX_STEPS, |b, k| {
        // Two exits rather than one of `or`: each a compare and a branch.
        let last = b.ge(k, d);
        b.break_if(last);
        let nan = b.is_nan(q);
        b.break_if(nan);
        let l = lead(b, k);
        let a = b.mul(l, q);
        let c = b.mul(k, p);
        let num = b.sub(a, c);
        let den = b.add(k, 1.0);
        let next = b.div(num, den);
        b.set(p, q);
        b.set(q, next);
    });
    q
}

/// Laguerre polynomial L_n(x).
pub(super) fn laguerre_l() -> SpecialFn {
    let mut b = Builder::new("laguerre_l");
    let (x, n) = (b.param(), b.param());
    let d = degree(&mut b, n);
    let at0 = b.eq(x, 0.0);
    b.return_if(at0, 1.0);
    let zero = b.eq(d, 0.0);
    b.return_if(zero, 1.0);
    let first = b.sub(1.0, x);
    // lead(k) = 2k + (1 − x).
    let q = three_term(&mut b, d, first, |b, k| {
        let twice = b.add(k, k);
        b.add(twice, first)
    });
    b.finish(q)
}

/// Legendre polynomial P_n(x).
pub(super) fn legendre_p() -> SpecialFn {
    let mut b = Builder::new("legendre_p");
    let (x, n) = (b.param(), b.param());
    let d = degree(&mut b, n);
    let ax = b.abs(x);
    let end = b.eq(ax, 1.0);
    b.when(end, |b| {
        // 1 at x = 1, (−1)^n at x = −1.
        let half = b.mul(d, 0.5);
        let fl = b.unary(Unary::Floor, half);
        let twice = b.add(fl, fl);
        let even = b.eq(twice, d);
        let pos = b.gt(x, 0.0);
        let plus = b.or(pos, even);
        let v = b.select(plus, 1.0, -1.0);
        b.ret(v);
    });
    let zero = b.eq(d, 0.0);
    b.return_if(zero, 1.0);
    // lead(k) = (2k + 1)·x.
    let q = three_term(&mut b, d, x, |b, k| {
        let twice = b.add(k, k);
        let odd = b.add(twice, 1.0);
        b.mul(odd, x)
    });
    b.finish(q)
}
