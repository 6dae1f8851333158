//! The regularized incomplete gamma functions P(a, x) (`igamma`) and
//! Q(a, x) (`igammac`), with PyTorch's edge cases (`calc_igamma`): the
//! series for P, Legendre's continued fraction for Q (modified Lentz), a
//! series for Q at small x that avoids 1 − P, and Temme's uniform expansion
//! (DLMF 8.12) for large a with x near a; the other function is 1 minus
//! the one computed where that loses nothing.

use super::builder::Builder;
use super::{Binary, Reg, SpecialFn, Unary};
use crate::approx::{LN_GAMMA_1P_ZM1, TEMME_D};

const EPS: f64 = 1.1102230246251565e-16;
const EULER_GAMMA: f64 = 0.577_215_664_901_532_9;
const TWO_PI: f64 = 2.0 * std::f64::consts::PI;
/// The continued fraction's guard against division by zero.
const TINY: f64 = 1e-300;
/// Iterations at most of the series and the continued fraction (Temme's
/// expansion takes the large a where they would need many).
const MAX_ITERS: u32 = 20_000;

/// λ − 1 − ln λ for λ = x/a, accurate also near λ = 1: with s = (x − a)/a
/// and u = s/(2 + s), s·u − 2(u³/3 + u⁵/5 + …) while |s| < ½.
fn lambda_m1_mlog(b: &mut Builder, a: Reg, x: Reg) -> Reg {
    let d = b.sub(x, a);
    let s = b.div(d, a);
    let r = b.var(0.0);
    let abs_s = b.abs(s);
    let far = b.ge(abs_s, 0.5);
    b.if_else(
        far,
        |b| {
            let ratio = b.div(x, a);
            let l = b.log(ratio);
            b.update(r, Binary::Sub, s, l);
        },
        |b| {
            let two_s = b.add(2.0, s);
            let u = b.div(s, two_s);
            let u2 = b.mul(u, u);
            let pw = b.mul(u2, u);
            let pw = b.var(pw);
            let tail = b.var(0.0);
            // k = 2j + 1 < 80.
            b.repeat(1.0, 39, |b, j| {
                let k = b.fma(j, 2.0, 1.0);
                let t = b.div(pw, k);
                b.update(tail, Binary::Add, tail, t);
                b.update(pw, Binary::Mul, pw, u2);
                b.break_if_negligible(t, tail, 1e-3 * EPS);
            });
            let su = b.mul(s, u);
            let twice = b.mul(2.0, tail);
            b.update(r, Binary::Sub, su, twice);
        },
    );
    r
}

/// ln Γ*(a) = ln Γ(a) − ((a − ½)ln a − a + ½ln 2π), Stirling's series (a ≥ 10).
fn ln_gamma_star(b: &mut Builder, a: Reg) -> Reg {
    #[rustfmt::skip]
    const C: [f64; 8] = [
        -3617.0 / 122_400.0, 1.0 / 156.0, -691.0 / 360_360.0, 1.0 / 1188.0,
        -1.0 / 1680.0, 1.0 / 1260.0, -1.0 / 360.0, 1.0 / 12.0,
    ];
    let aa = b.mul(a, a);
    let w = b.div(1.0, aa);
    let h = b.poly(&C, w);
    b.div(h, a)
}

/// ln Γ(1 + a) for a > 0, accurate also where 1 + a rounds:
/// −γa + (a − ln(1+a)) + a²·Σ_k (ζ(k) − 1)/k·(−a)^(k−2) below 0.2.
fn ln_gamma_1p(b: &mut Builder, a: Reg) -> Reg {
    let r = b.var(0.0);
    let large = b.ge(a, 0.2);
    b.if_else(
        large,
        |b| {
            let a1 = b.add(1.0, a);
            let lg = b.unary(Unary::Lgamma, a1);
            b.set(r, lg);
        },
        |b| {
            let g = b.mul(-EULER_GAMMA, a);
            let l1p = b.unary(Unary::Log1p, a);
            let d = b.sub(a, l1p);
            let g = b.add(g, d);
            let na = b.neg(a);
            let h = b.poly(&LN_GAMMA_1P_ZM1, na);
            let ha = b.mul(h, a);
            let tail = b.mul(ha, a);
            b.update(r, Binary::Add, g, tail);
        },
    );
    r
}

/// x^a e^(−x)/Γ(a+1) for a > 0, 0 < x < ∞.
fn prefactor(b: &mut Builder, a: Reg, x: Reg) -> Reg {
    let r = b.var(0.0);
    let large_a = b.ge(a, 10.0);
    b.if_else(
        large_a,
        |b| {
            // e^(−a(λ − 1 − ln λ) − ln Γ*(a))/√(2πa).
            let phi = lambda_m1_mlog(b, a, x);
            let t = b.mul(a, phi);
            let star = ln_gamma_star(b, a);
            let t = b.add(t, star);
            let t = b.neg(t);
            let e = b.exp(t);
            let ta = b.mul(TWO_PI, a);
            let s = b.sqrt(ta);
            b.update(r, Binary::Div, e, s);
        },
        |b| {
            let a1 = b.add(a, 1.0);
            let near = b.lt(x, 700.0);
            b.if_else(
                near,
                |b| {
                    let pw = b.binary(Binary::Pow, x, a);
                    let nx = b.neg(x);
                    let e = b.exp(nx);
                    let num = b.mul(pw, e);
                    let g = b.unary(Unary::Tgamma, a1);
                    b.update(r, Binary::Div, num, g);
                },
                |b| {
                    let l = b.log(x);
                    let t = b.mul(a, l);
                    let t = b.sub(t, x);
                    let lg = b.unary(Unary::Lgamma, a1);
                    let t = b.sub(t, lg);
                    let e = b.exp(t);
                    b.set(r, e);
                },
            );
        },
    );
    r
}

/// P(a, x) = x^a e^(−x)/Γ(a+1)·Σ_n x^n/((a+1)…(a+n)).
fn series_p(b: &mut Builder, a: Reg, x: Reg) -> Reg {
    let pre = prefactor(b, a, x);
    let (r, c, sum) = (b.var(a), b.var(1.0), b.var(1.0));
    let zero = b.eq(pre, 0.0);
    let live = b.not(zero);
    b.when(live, |b| {
        b.repeat(0.0, MAX_ITERS, |b, _| {
            b.update(r, Binary::Add, r, 1.0);
            let ratio = b.div(x, r);
            b.update(c, Binary::Mul, c, ratio);
            b.update(sum, Binary::Add, sum, c);
            let lim = b.mul(EPS, sum);
            let small = b.le(c, lim);
            b.break_if(small);
        });
    });
    b.mul(pre, sum)
}

/// `v` with its magnitude raised to at least `TINY`.
fn nonzero(b: &mut Builder, v: Reg) {
    let av = b.abs(v);
    let tiny = b.lt(av, TINY);
    b.when(tiny, |b| {
        let neg = b.lt(v, 0.0);
        let t = b.select(neg, -TINY, TINY);
        b.set(v, t);
    });
}

/// Q(a, x) for x > 1 from Legendre's continued fraction (modified Lentz).
fn fraction_q(b: &mut Builder, a: Reg, x: Reg) -> Reg {
    // x^a e^(−x)/Γ(a) = a·x^a e^(−x)/Γ(a+1).
    let pre = prefactor(b, a, x);
    let pre = b.mul(a, pre);
    let x1 = b.add(x, 1.0);
    let bn = b.sub(x1, a);
    let bn = b.var(bn);
    let c = b.var(1.0 / TINY);
    let d = b.var(bn);
    nonzero(b, d);
    b.update(d, Binary::Div, 1.0, d);
    let h = b.var(d);
    let zero = b.eq(pre, 0.0);
    let live = b.not(zero);
    b.when(live, |b| {
        b.repeat(1.0, MAX_ITERS, |b, i| {
            // a_i = −i(i − a), b_i = b_(i−1) + 2.
            let ia = b.sub(i, a);
            let an = b.mul(i, ia);
            let an = b.neg(an);
            b.update(bn, Binary::Add, bn, 2.0);
            let t = b.mul(an, d);
            b.update(d, Binary::Add, t, bn);
            nonzero(b, d);
            b.update(d, Binary::Div, 1.0, d);
            let q = b.div(an, c);
            b.update(c, Binary::Add, bn, q);
            nonzero(b, c);
            let del = b.mul(d, c);
            b.update(h, Binary::Mul, h, del);
            let off = b.sub(del, 1.0);
            let off = b.abs(off);
            let done = b.le(off, EPS);
            b.break_if(done);
        });
    });
    b.mul(pre, h)
}

/// Q(a, x) for x ≤ 1.1 and small a without the cancellation of 1 − P:
/// Q = −expm1(lg) − a·e^lg·Σ_(n≥1) (−x)^n/(n!(a+n)), lg = a ln x − ln Γ(1+a).
fn small_x_q(b: &mut Builder, a: Reg, x: Reg) -> Reg {
    let (fac, sum) = (b.var(1.0), b.var(0.0));
    let nx = b.neg(x);
    b.repeat(1.0, 2000, |b, n| {
        let ratio = b.div(nx, n);
        b.update(fac, Binary::Mul, fac, ratio);
        let an = b.add(a, n);
        let term = b.div(fac, an);
        b.update(sum, Binary::Add, sum, term);
        b.break_if_negligible(term, sum, EPS);
    });
    let l = b.log(x);
    let t = b.mul(a, l);
    let g = ln_gamma_1p(b, a);
    let lg = b.sub(t, g);
    let em1 = b.unary(Unary::Expm1, lg);
    let e = b.exp(lg);
    let ae = b.mul(a, e);
    let prod = b.mul(ae, sum);
    let neg = b.neg(em1);
    b.sub(neg, prod)
}

/// Temme's expansion: Q = ½erfc(η√(a/2)) + R, P = ½erfc(−η√(a/2)) − R, with
/// ½η² = λ − 1 − ln λ and R = e^(−aη²/2)/√(2πa)·Σ_k C_k(η)·a^(−k).
fn temme(b: &mut Builder, a: Reg, x: Reg, upper: bool) -> Reg {
    let phi = lambda_m1_mlog(b, a, x);
    let two_phi = b.mul(2.0, phi);
    let eta = b.sqrt(two_phi);
    let below = b.lt(x, a);
    let neg_eta = b.neg(eta);
    let eta = b.select(below, neg_eta, eta);
    let (sum, afac) = (b.var(0.0), b.var(1.0));
    for row in &TEMME_D {
        let high_first: Vec<f64> = row.iter().rev().copied().collect();
        let ck = b.poly(&high_first, eta);
        let t = b.mul(ck, afac);
        b.update(sum, Binary::Add, sum, t);
        b.update(afac, Binary::Div, afac, a);
    }
    let ap = b.mul(a, phi);
    let nap = b.neg(ap);
    let e = b.exp(nap);
    let ta = b.mul(TWO_PI, a);
    let s = b.sqrt(ta);
    let r = b.div(e, s);
    let r = b.mul(r, sum);
    let ha = b.mul(0.5, a);
    let sh = b.sqrt(ha);
    let z = b.mul(eta, sh);
    if upper {
        let c = b.unary(Unary::Erfc, z);
        let hc = b.mul(0.5, c);
        b.add(hc, r)
    } else {
        let nz = b.neg(z);
        let c = b.unary(Unary::Erfc, nz);
        let hc = b.mul(0.5, c);
        b.sub(hc, r)
    }
}

/// PyTorch's edge cases, shared by P and Q: returns P (or 1 − P for Q)
/// where they decide it.
fn edges(b: &mut Builder, a: Reg, x: Reg, upper: bool) {
    let value = |p: f64| if upper { 1.0 - p } else { p };
    let neg_x = b.lt(x, 0.0);
    let neg_a = b.lt(a, 0.0);
    let negative = b.or(neg_x, neg_a);
    b.return_if(negative, f64::NAN);
    let a_zero = b.eq(a, 0.0);
    b.when(a_zero, |b| {
        let pos = b.gt(x, 0.0);
        let v = b.select(pos, value(1.0), f64::NAN);
        b.ret(v);
    });
    let x_zero = b.eq(x, 0.0);
    b.return_if(x_zero, value(0.0));
    let a_inf = b.eq(a, f64::INFINITY);
    b.when(a_inf, |b| {
        let x_inf = b.eq(x, f64::INFINITY);
        let v = b.select(x_inf, f64::NAN, value(0.0));
        b.ret(v);
    });
    let x_inf = b.eq(x, f64::INFINITY);
    b.return_if(x_inf, value(1.0));
    let a_nan = b.is_nan(a);
    let x_nan = b.is_nan(x);
    let nan = b.or(a_nan, x_nan);
    b.return_if(nan, f64::NAN);
}

/// Whether Temme's expansion (with its truncated table) is used:
/// a > 100 and |x − a|/a < 0.1.
fn uses_temme(b: &mut Builder, a: Reg, x: Reg) -> super::Flag {
    let big = b.gt(a, 100.0);
    let d = b.sub(x, a);
    let s = b.div(d, a);
    let s = b.abs(s);
    let near = b.lt(s, 0.1);
    b.and(big, near)
}

/// `v` clamped to [0, 1].
fn unit(b: &mut Builder, v: Reg) -> Reg {
    let v = b.binary(Binary::Max, v, 0.0);
    b.binary(Binary::Min, v, 1.0)
}

/// The regularized lower incomplete gamma function P(a, x).
pub(super) fn igamma() -> SpecialFn {
    let mut b = Builder::new("igamma");
    let (a, x) = (b.param(), b.param());
    edges(&mut b, a, x, false);
    let temme_here = uses_temme(&mut b, a, x);
    b.when(temme_here, |b| {
        let p = temme(b, a, x, false);
        let p = unit(b, p);
        b.ret(p);
    });
    let above_one = b.gt(x, 1.0);
    let above_a = b.gt(x, a);
    let by_q = b.and(above_one, above_a);
    b.when(by_q, |b| {
        let q = q_directly(b, a, x);
        let p = b.sub(1.0, q);
        let p = unit(b, p);
        b.ret(p);
    });
    let p = series_p(&mut b, a, x);
    let p = unit(&mut b, p);
    b.finish(p)
}

/// Whether P(a, x) is small, so that Q = 1 − P loses nothing: x < a above
/// x = 1.1, −0.4/ln x < a up to 0.5, 1.1·x < a between (x > 0 here).
fn p_is_small(b: &mut Builder, a: Reg, x: Reg) -> super::Flag {
    let above = b.gt(x, 1.1);
    let tiny = b.le(x, 0.5);
    let middle = b.not(above);
    let not_tiny = b.not(tiny);
    let middle = b.and(middle, not_tiny);
    let small_above = b.lt(x, a);
    let l = b.log(x);
    let t = b.div(-0.4, l);
    let small_tiny = b.lt(t, a);
    let t = b.mul(x, 1.1);
    let small_middle = b.lt(t, a);
    let one = b.and(above, small_above);
    let two = b.and(tiny, small_tiny);
    let three = b.and(middle, small_middle);
    let either = b.or(one, two);
    b.or(either, three)
}

/// Q(a, x) where P is not small: Legendre's continued fraction above
/// x = 1.1, the small-x series up to it; clamped to [0, 1].
fn q_directly(b: &mut Builder, a: Reg, x: Reg) -> Reg {
    let q = b.var(0.0);
    let far = b.gt(x, 1.1);
    b.if_else(
        far,
        |b| {
            let v = fraction_q(b, a, x);
            b.set(q, v);
        },
        |b| {
            let v = small_x_q(b, a, x);
            b.set(q, v);
        },
    );
    unit(b, q)
}

/// The regularized upper incomplete gamma function Q(a, x).
pub(super) fn igammac() -> SpecialFn {
    let mut b = Builder::new("igammac");
    let (a, x) = (b.param(), b.param());
    edges(&mut b, a, x, true);
    let temme_here = uses_temme(&mut b, a, x);
    b.when(temme_here, |b| {
        let q = temme(b, a, x, true);
        let q = unit(b, q);
        b.ret(q);
    });
    let small_p = p_is_small(&mut b, a, x);
    b.when(small_p, |b| {
        let p = series_p(b, a, x);
        let q = b.sub(1.0, p);
        let q = unit(b, q);
        b.ret(q);
    });
    let q = q_directly(&mut b, a, x);
    b.finish(q)
}
