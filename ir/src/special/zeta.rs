//! The Hurwitz zeta function ζ(x, q) = Σ_{k≥0} (k + q)^(−x) with the
//! Cephes/PyTorch domain conventions: direct summation to past q + 9 (at
//! least nine terms), then an Euler–Maclaurin tail.

use super::builder::Builder;
use super::{Binary, Reg, SpecialFn};

const EPS: f64 = 1.1102230246251565e-16;

/// B_{2k}/(2k)! for k = 1..12.
#[rustfmt::skip]
const B2K: [f64; 12] = [
    1.0 / 12.0, -1.0 / 720.0, 1.0 / 30240.0, -1.0 / 1209600.0, 1.0 / 47900160.0,
    -691.0 / 1307674368000.0, 1.0 / 74724249600.0, -3617.0 / 10670622842880000.0,
    43867.0 / 5109094217170944000.0, -174611.0 / 802857662698291200000.0,
    854513.0 / 155112100433309859840000.0, -236364091.0 / 1693824136731743669452800000.0,
];

/// The terms past w: ∫ − ½f(w) + Σ_k B_2k/(2k)!·x(x+1)…(x+2k−2)·w^(−x−2k+1),
/// added to `sum` until one is negligible (`b` = w^(−x), already counted).
fn tail(b: &mut Builder, x: Reg, w: Reg, last: Reg, sum: Reg) {
    let bw = b.mul(last, w);
    let xm1 = b.sub(x, 1.0);
    let integral = b.div(bw, xm1);
    let half = b.mul(0.5, last);
    let t = b.sub(integral, half);
    b.update(sum, Binary::Add, sum, t);
    let (rising, pw) = (b.var(1.0), b.var(last));
    // One trip: a block the terms can break out of.
    b.repeat(0.0, 1, |b, _| {
        for (j, coef) in B2K.into_iter().enumerate() {
            let xk = b.add(x, 2.0 * j as f64);
            b.update(rising, Binary::Mul, rising, xk);
            b.update(pw, Binary::Div, pw, w);
            let cr = b.mul(coef, rising);
            let t = b.mul(cr, pw);
            b.update(sum, Binary::Add, sum, t);
            let ratio = b.div(t, sum);
            let ratio = b.abs(ratio);
            let small = b.lt(ratio, EPS);
            b.break_if(small);
            let xk1 = b.add(xk, 1.0);
            b.update(rising, Binary::Mul, rising, xk1);
            b.update(pw, Binary::Div, pw, w);
        }
    });
}

/// ζ(x, q): +inf at x = 1 and at the poles of q (non-positive integers),
/// NaN for x < 1 and for q ≤ 0 with a non-integer x.
pub(super) fn zeta() -> SpecialFn {
    let mut b = Builder::new("zeta");
    let (x, q) = (b.param(), b.param());
    let low = b.le(x, 1.0);
    b.when(low, |b| {
        let one = b.eq(x, 1.0);
        let v = b.select(one, f64::INFINITY, f64::NAN);
        b.ret(v);
    });
    let q_low = b.le(q, 0.0);
    let q_int = b.is_integer(q);
    let pole = b.and(q_low, q_int);
    b.return_if(pole, f64::INFINITY);
    let x_int = b.is_integer(x);
    let x_frac = b.not(x_int);
    let bad = b.and(q_low, x_frac);
    b.return_if(bad, f64::NAN);
    let nx = b.neg(x);
    let first = b.binary(Binary::Pow, q, nx);
    let (sum, w, last) = (b.var(first), b.var(q), b.var(0.0));
    // Terms (q + n)^(−x) while n < 9 or q + n ≤ 9 (n counts the terms
    // added); a negligible one ends the sum.
    b.repeat(1.0, u32::MAX, |b, n| {
        let few = b.le(n, 9.0);
        let near = b.le(w, 9.0);
        let more = b.or(few, near);
        let enough = b.not(more);
        b.break_if(enough);
        b.update(w, Binary::Add, w, 1.0);
        b.update(last, Binary::Pow, w, nx);
        b.update(sum, Binary::Add, sum, last);
        let size = b.abs(last);
        let lim = b.mul(EPS, sum);
        let done = b.lt(size, lim);
        b.return_if(done, sum);
    });
    tail(&mut b, x, w, last, sum);
    b.finish(sum)
}
