//! The standard normal quantile ndtri(p) = Φ⁻¹(p): Acklam's rational
//! approximation (`crate::approx`, about 1e-9 relative) as the start, then
//! two Halley steps on a residual that does not cancel, which bring it to a
//! few float64 ulps. In the middle (|p − ½| ≤ ¼) the residual is
//! ½erf(x/√2) − (p − ½) (|x/√2| < ½ there: erf's series); in the tails it is (Φ(x) − p)/φ(x), with Φ/φ = √(π/2)·erfcx(−x/√2),
//! accurate deep into the lower tail (subnormal p included). The upper tail
//! is the lower one mirrored: 1 − p is exact for p > ½.

use super::builder::Builder;
use super::erf::{erf, erfcx_nonneg};
use super::{Binary, Reg, SpecialFn};
use crate::approx::{NDTRI_ACKLAM as ACKLAM, NDTRI_TAIL};

const FRAC_1_SQRT_2: f64 = std::f64::consts::FRAC_1_SQRT_2;
const SQRT_2PI: f64 = 2.506_628_274_631_000_5;
/// √(π/2).
const SQRT_HALF_PI: f64 = 1.253_314_137_315_500_3;

/// Acklam's start: the tail fraction of √(−2 ln p) below `NDTRI_TAIL`, the
/// central fraction of p − ½ above (0 < p ≤ ½ + ¼).
fn guess(b: &mut Builder, p: Reg) -> Reg {
    let r = b.var(0.0);
    let tail = b.lt(p, NDTRI_TAIL);
    b.if_else(
        tail,
        |b| {
            let l = b.log(p);
            let q = b.mul(-2.0, l);
            let q = b.sqrt(q);
            let num = b.poly(&ACKLAM[2], q);
            let den = b.poly(&ACKLAM[3], q);
            b.update(r, Binary::Div, num, den);
        },
        |b| {
            let c = b.sub(p, 0.5);
            let cc = b.mul(c, c);
            let num = b.poly(&ACKLAM[0], cc);
            let den = b.poly(&ACKLAM[1], cc);
            let t = b.mul(c, num);
            b.update(r, Binary::Div, t, den);
        },
    );
    r
}

/// One Halley step for a residual u = (Φ(x) − p)/φ(x): x − u/(1 + ½xu).
fn halley(b: &mut Builder, x: Reg, u: Reg) {
    let hx = b.mul(0.5, x);
    let t = b.mul(hx, u);
    let den = b.add(1.0, t);
    let step = b.div(u, den);
    b.update(x, Binary::Sub, x, step);
}

/// ndtri for |p − ½| ≤ ¼ (c = p − ½, exact there).
fn central(b: &mut Builder, p: Reg) -> Reg {
    let c = b.sub(p, 0.5);
    let x = guess(b, p);
    for _ in 0..2 {
        let w = b.mul(x, FRAC_1_SQRT_2);
        let e = erf(b, w);
        let he = b.mul(0.5, e);
        let d = b.sub(he, c);
        let d = b.mul(d, SQRT_2PI);
        let hx = b.mul(0.5, x);
        let half_sq = b.mul(hx, x);
        let g = b.exp(half_sq);
        let u = b.mul(d, g);
        halley(b, x, u);
    }
    x
}

/// ndtri for 0 < p < ¼ (x < 0 throughout, so erfcx's argument is positive).
fn lower(b: &mut Builder, p: Reg) -> Reg {
    let x = guess(b, p);
    for _ in 0..2 {
        let nx = b.neg(x);
        let w = b.mul(nx, FRAC_1_SQRT_2);
        let e = erfcx_nonneg(b, w);
        let mills = b.mul(SQRT_HALF_PI, e);
        let hx = b.mul(0.5, x);
        let half_sq = b.mul(hx, x);
        // p·√(2π)·e^(x²/2), through the logarithm where e^(x²/2) overflows.
        let ratio = b.var(0.0);
        let near = b.lt(half_sq, 700.0);
        b.if_else(
            near,
            |b| {
                let g = b.exp(half_sq);
                let s = b.mul(p, SQRT_2PI);
                b.update(ratio, Binary::Mul, s, g);
            },
            |b| {
                let l = b.log(p);
                let l = b.add(l, half_sq);
                let g = b.exp(l);
                b.update(ratio, Binary::Mul, SQRT_2PI, g);
            },
        );
        let u = b.sub(mills, ratio);
        halley(b, x, u);
    }
    x
}

/// ndtri(p): NaN outside [0, 1] (and for NaN), ∓inf at 0 and 1.
pub(super) fn ndtri() -> SpecialFn {
    let mut b = Builder::new("ndtri");
    let p = b.param();
    let nonneg = b.ge(p, 0.0);
    let at_most_one = b.le(p, 1.0);
    let inside = b.and(nonneg, at_most_one);
    let outside = b.not(inside);
    b.return_if(outside, f64::NAN);
    let zero = b.eq(p, 0.0);
    b.return_if(zero, f64::NEG_INFINITY);
    let one = b.eq(p, 1.0);
    b.return_if(one, f64::INFINITY);
    let c = b.sub(p, 0.5);
    let ac = b.abs(c);
    let middle = b.le(ac, 0.25);
    b.when(middle, |b| {
        let x = central(b, p);
        b.ret(x);
    });
    // The tails: the lower one at min(p, 1 − p), mirrored for p > ½.
    let below = b.lt(p, 0.5);
    let q = b.sub(1.0, p);
    let q = b.select(below, p, q);
    let x = lower(&mut b, q);
    let nx = b.neg(x);
    let v = b.select(below, x, nx);
    b.finish(v)
}
