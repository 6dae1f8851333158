//! Modified Bessel functions I0/I1 and K0/K1 (plain and exponentially
//! scaled), Airy Ai and the spherical Bessel function j0, with PyTorch's
//! edge cases (NaN, ±inf, zeros, poles).

use std::f64::consts::{FRAC_1_SQRT_2, LN_2, PI};

use super::builder::Builder;
use super::{Binary, Reg, SpecialFn, Unary};
use crate::approx::{AIRY_AI0, AIRY_DAI0, AIRY_SERIES};

const EPS: f64 = 1.1102230246251565e-16;
const EULER_GAMMA: f64 = 0.577_215_664_901_532_9;
const SQRT_2PI: f64 = 2.506_628_274_631_000_5;
const FRAC_1_SQRT_PI: f64 = 0.564_189_583_547_756_3;

/// I_ν(x) for 0 ≤ x ≤ 20, ν ∈ {0, 1}: power series, all terms positive.
fn bessel_i_series(b: &mut Builder, x: Reg, nu: u32) -> Reg {
    let q = b.mul(0.25, x);
    let y = b.mul(q, x);
    let (term, sum) = (b.var(1.0), b.var(1.0));
    b.repeat(1.0, 199, |b, k| {
        let kn = b.add(k, f64::from(nu));
        let den = b.mul(k, kn);
        let ratio = b.div(y, den);
        b.update(term, Binary::Mul, term, ratio);
        b.update(sum, Binary::Add, sum, term);
        let lim = b.mul(0.1 * EPS, sum);
        let done = b.lt(term, lim);
        b.break_if(done);
    });
    if nu == 0 {
        sum
    } else {
        let half = b.mul(0.5, x);
        b.mul(sum, half)
    }
}

/// e^{-x}·I_ν(x) for x > 20 from the large-argument expansion
/// √(2πx)·e^{-x}·I_ν(x) ~ Σ_k Π_{j≤k} ((2j-1)² - 4ν²)/(8jx).
fn bessel_i_scaled_asymptotic(b: &mut Builder, x: Reg, nu: u32) -> Reg {
    let mu = f64::from(4 * nu * nu);
    let (term, sum) = (b.var(1.0), b.var(1.0));
    b.repeat(1.0, 79, |b, j| {
        let twice = b.mul(2.0, j);
        let odd = b.sub(twice, 1.0);
        let sq = b.mul(odd, odd);
        let num = b.sub(sq, mu);
        let t = b.mul(term, num);
        let eight_j = b.mul(8.0, j);
        let den = b.mul(eight_j, x);
        let next = b.div(t, den);
        let (an, at) = (b.abs(next), b.abs(term));
        let grows = b.gt(an, at);
        b.break_if(grows);
        b.set(term, next);
        b.update(sum, Binary::Add, sum, term);
        let (at, asum) = (b.abs(term), b.abs(sum));
        let lim = b.mul(0.1 * EPS, asum);
        let done = b.lt(at, lim);
        b.break_if(done);
    });
    let sx = b.sqrt(x);
    let den = b.mul(SQRT_2PI, sx);
    b.div(sum, den)
}

/// I0 or I1 (`nu`), plain or scaled by e^{-|x|}.
pub(super) fn bessel_i(name: &'static str, nu: u32, scaled: bool) -> SpecialFn {
    let mut b = Builder::new(name);
    let x = b.param();
    let ax = b.abs(x);
    let r = b.var(0.0);
    let small = b.le(ax, 20.0);
    b.if_else(
        small,
        |b| {
            let s = bessel_i_series(b, ax, nu);
            if scaled {
                let nax = b.neg(ax);
                let e = b.exp(nax);
                b.update(r, Binary::Mul, e, s);
            } else {
                b.set(r, s);
            }
        },
        |b| {
            let s = bessel_i_scaled_asymptotic(b, ax, nu);
            if scaled {
                b.set(r, s);
            } else {
                let e = b.exp(ax);
                b.update(r, Binary::Mul, e, s);
            }
        },
    );
    if nu == 0 {
        return b.finish(r);
    }
    // I1 is odd; like PyTorch, -0.0 maps to +0.0.
    let neg = b.lt(x, 0.0);
    let sign = b.select(neg, -1.0, 1.0);
    let out = b.mul(r, sign);
    b.finish(out)
}

/// K_ν(x) for 0 < x ≤ 1 (ν = `nu`) from the ascending series (y = x²/4,
/// H_k the harmonic numbers, L = ln(x/2) + γ):
/// K0 = -L·I0 + Σ_{k≥1} H_k y^k/(k!)²,
/// K1 = 1/x + L·I1 - (x/4)·Σ_{k≥0} (H_k + H_{k+1}) y^k/(k!(k+1)!).
fn bessel_k_small(b: &mut Builder, x: Reg, nu: u32) -> Reg {
    let q = b.mul(0.25, x);
    let y = b.mul(q, x);
    let lx = b.log(x);
    let l = b.sub(lx, LN_2);
    let l = b.add(l, EULER_GAMMA);
    // t0 = y^k/(k!)², t1 = y^k/(k!(k+1)!); the loop stops on t0.
    let (t0, t1, h) = (b.var(1.0), b.var(1.0), b.var(0.0));
    let (i0s, s0) = (b.var(1.0), b.var(0.0));
    let (i1s, s1) = (b.var(1.0), b.var(1.0));
    b.repeat(1.0, 59, |b, k| {
        let inv = b.div(1.0, k);
        b.update(h, Binary::Add, h, inv);
        let kk = b.mul(k, k);
        let r0 = b.div(y, kk);
        b.update(t0, Binary::Mul, t0, r0);
        if nu == 0 {
            b.update(i0s, Binary::Add, i0s, t0);
            let ht = b.mul(h, t0);
            b.update(s0, Binary::Add, s0, ht);
        } else {
            let k1 = b.add(k, 1.0);
            let kk1 = b.mul(k, k1);
            let r1 = b.div(y, kk1);
            b.update(t1, Binary::Mul, t1, r1);
            b.update(i1s, Binary::Add, i1s, t1);
            let h2 = b.mul(2.0, h);
            let inv1 = b.div(1.0, k1);
            let w = b.add(h2, inv1);
            let wt = b.mul(w, t1);
            b.update(s1, Binary::Add, s1, wt);
        }
        let done = b.lt(t0, 0.01 * EPS);
        b.break_if(done);
    });
    if nu == 0 {
        let li = b.mul(l, i0s);
        return b.sub(s0, li);
    }
    let inv = b.div(1.0, x);
    let lh = b.mul(l, 0.5);
    let lhx = b.mul(lh, x);
    let li = b.mul(lhx, i1s);
    let a = b.add(inv, li);
    let qx = b.mul(0.25, x);
    let qs = b.mul(qx, s1);
    b.sub(a, qs)
}

/// e^x·K_ν(x) for x > 1 from
/// e^x·K_ν(x) = ∫_0^∞ exp(-2x·sinh²(t/2))·cosh(νt) dt by the trapezoidal
/// rule, which converges exponentially for this analytic integrand.
fn bessel_k_scaled_integral(b: &mut Builder, x: Reg, nu: u32) -> Reg {
    let sx = b.sqrt(x);
    // Step from the error bound exp(x(1 - cos d) - 2πd/h) over the strip
    // |Im t| < d: d → π/2 for moderate x, d ~ 2π/(hx) for large x.
    let h = b.div(0.65, sx);
    let moderate = b.le(x, 40.0);
    b.when(moderate, |b| {
        let den = b.add(45.0, x);
        let wide = b.div(PI * PI, den);
        b.update(h, Binary::Min, wide, h);
    });
    // s0 and s1 both run: the loop stops on the K1 terms.
    let (s0, s1) = (b.var(0.5), b.var(0.5));
    b.repeat(1.0, 1999, |b, j| {
        let t = b.mul(j, h);
        let half = b.mul(0.5, t);
        let sh = b.unary(Unary::Sinh, half);
        let u = b.mul(sh, sx); // scaled so that sinh² cannot underflow
        let m2u = b.mul(-2.0, u);
        let arg = b.mul(m2u, u);
        let e = b.exp(arg);
        b.update(s0, Binary::Add, s0, e);
        let ch = b.unary(Unary::Cosh, t);
        let e1 = b.mul(e, ch);
        b.update(s1, Binary::Add, s1, e1);
        let lim = b.mul(1e-18, s1);
        let done = b.lt(e1, lim);
        b.break_if(done);
    });
    b.mul(h, if nu == 0 { s0 } else { s1 })
}

/// K0 or K1 (`nu`), plain or scaled by e^x: NaN below 0, +inf at 0, 0 at
/// +inf, as PyTorch.
pub(super) fn bessel_k(name: &'static str, nu: u32, scaled: bool) -> SpecialFn {
    let mut b = Builder::new(name);
    let x = b.param();
    let nan = b.is_nan(x);
    let neg = b.lt(x, 0.0);
    let bad = b.or(nan, neg);
    b.return_if(bad, f64::NAN);
    let zero = b.eq(x, 0.0);
    b.return_if(zero, f64::INFINITY);
    let inf = b.eq(x, f64::INFINITY);
    b.return_if(inf, 0.0);
    let small = b.le(x, 1.0);
    let r = b.var(0.0);
    b.if_else(
        small,
        |b| {
            let k = bessel_k_small(b, x, nu);
            if scaled {
                let e = b.exp(x);
                b.update(r, Binary::Mul, k, e);
            } else {
                b.set(r, k);
            }
        },
        |b| {
            let k = bessel_k_scaled_integral(b, x, nu);
            if scaled {
                b.set(r, k);
            } else {
                let nx = b.neg(x);
                let e = b.exp(nx);
                b.update(r, Binary::Mul, k, e);
            }
        },
    );
    b.finish(r)
}

/// Airy's Maclaurin series on `AIRY_SERIES`: f = Σ t_k, t_k =
/// t_(k−1)·x³/((3k−1)·3k); g = Σ u_k from x, u_k = u_(k−1)·x³/(3k·(3k+1)).
fn airy_series(b: &mut Builder, x: Reg) -> Reg {
    let x2 = b.mul(x, x);
    let x3 = b.mul(x2, x);
    let (t, u, f, g) = (b.var(1.0), b.var(x), b.var(1.0), b.var(x));
    b.repeat(1.0, 199, |b, k| {
        let k3 = b.mul(3.0, k);
        let km = b.sub(k3, 1.0);
        let kp = b.add(k3, 1.0);
        let dt = b.mul(km, k3);
        let rt = b.div(x3, dt);
        b.update(t, Binary::Mul, t, rt);
        let du = b.mul(k3, kp);
        let ru = b.div(x3, du);
        b.update(u, Binary::Mul, u, ru);
        b.update(f, Binary::Add, f, t);
        b.update(g, Binary::Add, g, u);
        let (at, au, af, ag) = (b.abs(t), b.abs(u), b.abs(f), b.abs(g));
        let size = b.add(at, au);
        let total = b.add(af, ag);
        let lim = b.mul(0.1 * EPS, total);
        let done = b.lt(size, lim);
        b.break_if(done);
    });
    let a = b.mul(AIRY_AI0, f);
    let d = b.mul(AIRY_DAI0, g);
    b.sub(a, d)
}

/// The terms u_k/ζ^k of Airy's large-argument expansions
/// (`rdyn_ir::approx::airy_u_ratio`), summed with each expansion's signs
/// until a term is negligible or grows: for x > 0, Σ (−1)^k u_k ζ^(−k) in
/// `even`; for x < 0, P = Σ (−1)^j u_2j ζ^(−2j) in `even` and
/// Q = Σ (−1)^j u_(2j+1) ζ^(−2j−1) in `odd`.
fn airy_expansion(b: &mut Builder, x: Reg, zeta: Reg) -> (Reg, Reg) {
    let (term, even, odd, alt) = (b.var(1.0), b.var(1.0), b.var(0.0), b.var(1.0));
    let positive = b.gt(x, 0.0);
    b.repeat(1.0, 99, |b, k| {
        // (6k−5)(6k−3)(6k−1) / ((2k−1)·216·k).
        let k6 = b.mul(6.0, k);
        let (a, c, d) = (b.sub(k6, 5.0), b.sub(k6, 3.0), b.sub(k6, 1.0));
        let num = b.mul(a, c);
        let num = b.mul(num, d);
        let k2 = b.mul(2.0, k);
        let k2 = b.sub(k2, 1.0);
        let den = b.mul(k2, 216.0);
        let den = b.mul(den, k);
        let ratio = b.div(num, den);
        let t = b.mul(term, ratio);
        let next = b.div(t, zeta);
        let (an, at) = (b.abs(next), b.abs(term));
        let grows = b.gt(an, at);
        b.break_if(grows);
        b.set(term, next);
        // k mod 4, exact from the float counter.
        let quarter = b.mul(k, 0.25);
        let fl = b.unary(Unary::Floor, quarter);
        let fl4 = b.mul(fl, 4.0);
        let m = b.sub(k, fl4);
        let nterm = b.neg(term);
        b.if_else(
            positive,
            |b| {
                b.update(alt, Binary::Sub, 0.0, alt);
                let at = b.mul(alt, term);
                b.update(even, Binary::Add, even, at);
            },
            |b| {
                let (m0, m1, m2) = (b.eq(m, 0.0), b.eq(m, 1.0), b.eq(m, 2.0));
                let k_even = b.or(m0, m2);
                b.if_else(
                    k_even,
                    |b| {
                        let v = b.select(m0, term, nterm);
                        b.update(even, Binary::Add, even, v);
                    },
                    |b| {
                        let v = b.select(m1, term, nterm);
                        b.update(odd, Binary::Add, odd, v);
                    },
                );
            },
        );
        let done = b.lt(term, 0.1 * EPS);
        b.break_if(done);
    });
    (even, odd)
}

/// Airy function Ai(x): the Maclaurin series on `AIRY_SERIES`, beyond it
/// the large-argument expansions (DLMF 9.7.5 and 9.7.9) with ζ = (2/3)|x|^(3/2),
/// summed until a term is negligible or grows. NaN at ±inf, as PyTorch.
pub(super) fn airy_ai() -> SpecialFn {
    let mut b = Builder::new("airy_ai");
    let x = b.param();
    let nan = b.is_nan(x);
    let ax = b.abs(x);
    let inf = b.eq(ax, f64::INFINITY);
    let bad = b.or(nan, inf);
    b.return_if(bad, f64::NAN);
    let (lo, hi) = AIRY_SERIES;
    let (above_lo, below_hi) = (b.le(lo, x), b.le(x, hi));
    let inside = b.and(above_lo, below_hi);
    b.when(inside, |b| {
        let v = airy_series(b, x);
        b.ret(v);
    });
    let z = ax;
    let sz = b.sqrt(z);
    let tt = b.mul(2.0 / 3.0, z);
    let zeta = b.mul(tt, sz);
    let (even, odd) = airy_expansion(&mut b, x, zeta);
    let qz = b.sqrt(sz);
    let scale = b.div(FRAC_1_SQRT_PI, qz);
    let positive = b.gt(x, 0.0);
    let r = b.var(0.0);
    b.if_else(
        positive,
        |b| {
            let hs = b.mul(0.5, scale);
            let nz = b.neg(zeta);
            let e = b.exp(nz);
            let v = b.mul(hs, e);
            b.update(r, Binary::Mul, v, even);
        },
        |b| {
            // cos(ζ − π/4)·P + sin(ζ − π/4)·Q.
            let (s, c) = (b.unary(Unary::Sin, zeta), b.unary(Unary::Cos, zeta));
            let sc = b.mul(scale, FRAC_1_SQRT_2);
            let plus = b.add(c, s);
            let minus = b.sub(s, c);
            let pe = b.mul(plus, even);
            let mo = b.mul(minus, odd);
            let sum = b.add(pe, mo);
            b.update(r, Binary::Mul, sc, sum);
        },
    );
    b.finish(r)
}

/// Spherical Bessel function j0(x) = sin(x)/x (0 at ±inf); below 0.5,
/// Σ_k (-1)^k x^{2k}/(2k+1)! to x^12, nested.
pub(super) fn spherical_j0() -> SpecialFn {
    let mut b = Builder::new("spherical_j0");
    let x = b.param();
    let ax = b.abs(x);
    let inf = b.eq(ax, f64::INFINITY);
    b.return_if(inf, 0.0);
    let far = b.ge(ax, 0.5);
    b.when(far, |b| {
        let s = b.unary(Unary::Sin, x);
        let v = b.div(s, x);
        b.ret(v);
    });
    let z = b.mul(x, x);
    let mut acc = b.c(1.0);
    for k in (1..=6).rev() {
        let k = f64::from(k);
        let zd = b.div(z, (2.0 * k) * (2.0 * k + 1.0));
        let t = b.mul(zd, acc);
        acc = b.sub(1.0, t);
    }
    b.finish(acc)
}
