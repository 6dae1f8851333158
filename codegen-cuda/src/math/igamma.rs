//! The regularized incomplete gamma functions P(a, x) (`igamma`) and
//! Q(a, x) (`igammac`) of float32 values as PTX, computed in float64 with
//! the CPU backend's methods and selection rules (`codegen-cpu`'s
//! `special/gamma.rs`): the series for P, Legendre's continued fraction
//! for Q (modified Lentz), the small-x series for Q, and Temme's uniform
//! expansion for large a with x near a; the other function is 1 minus the
//! one computed, where that loses nothing. The series' prefactor is
//! exp(a·ln x − x − ln Γ(a+1)), ln Γ by upward recurrence to 10 and
//! Stirling's series (ln Γ(1+a) at small a from `LN_GAMMA_1P_ZM1`).
//! PyTorch's edge cases (negative or NaN arguments, a = 0, x = 0,
//! infinities) are applied last, in its order.

use rdyn_ir::approx::{LN_GAMMA_1P_ZM1, TEMME_D};

use crate::math::math64;
use crate::ptx::arith::series;
use crate::ptx::func::{f64_imm as d64, Class, Func};

const EPS: f64 = 1.110_223_024_625_156_5e-16;
/// The continued fraction's guard against division by zero.
const TINY: f64 = 1e-300;
/// Iterations at most for the series and the continued fraction (Temme's
/// expansion takes the large a where they would need more).
const MAX_ITER: f64 = 5000.0;
const EULER_GAMMA: f64 = 0.577_215_664_901_532_9;

fn dd(f: &mut Func, op: &str, a: &str, b: &str) -> String {
    f.op(Class::F64, op, &[a, b])
}

/// `for i in first..MAX_ITER { body(i) }` over a float64 counter, `body`
/// branching to its second argument to leave early.
fn repeat(f: &mut Func, first: f64, body: impl FnOnce(&mut Func, &str, &str)) {
    series(f, first, MAX_ITER, body);
}

/// ln Γ(z) for z > 0: z·(z+1)…(z+n−1) while z + n < 10, then Stirling's
/// series at z + n (its first omitted term is below 2e-18 there).
fn lgamma64(f: &mut Func, z0: &str) -> String {
    const B: [f64; 8] = [
        1.0 / 12.0,
        -1.0 / 360.0,
        1.0 / 1260.0,
        -1.0 / 1680.0,
        1.0 / 1188.0,
        -691.0 / 360_360.0,
        1.0 / 156.0,
        -3617.0 / 122_400.0,
    ];
    let z = f.mov(Class::F64, z0);
    let prod = f.mov(Class::F64, &d64(1.0));
    let (top, out) = (f.label("lgamma_up"), f.label("lgamma_stirling"));
    f.place(&top);
    let big = f.setp("ge", "f64", &z, &d64(10.0));
    f.ins(format!("@{big} bra {out}"));
    f.ins(format!("mul.rn.f64 {prod}, {prod}, {z}"));
    f.ins(format!("add.rn.f64 {z}, {z}, {}", d64(1.0)));
    f.ins(format!("bra {top}"));
    f.place(&out);
    let w = dd(f, "div.rn", &d64(1.0), &z);
    let w2 = dd(f, "mul.rn", &w, &w);
    let series = f.horner(Class::F64, &w2, &B);
    let series = dd(f, "mul.rn", &series, &w);
    let ln_z = math64::log(f, &z);
    let zh = dd(f, "sub.rn", &z, &d64(0.5));
    let main = f.op(Class::F64, "fma.rn", &[&zh, &ln_z, &series]);
    let main = dd(f, "sub.rn", &main, &z);
    let main = dd(f, "add.rn", &main, &d64(0.5 * (2.0 * std::f64::consts::PI).ln()));
    let ln_prod = math64::log(f, &prod);
    dd(f, "sub.rn", &main, &ln_prod)
}

/// ln(x^a e^(−x)/Γ(a+1)).
fn prefactor(f: &mut Func, a: &str, x: &str) -> String {
    let a1 = dd(f, "add.rn", a, &d64(1.0));
    let lg = lgamma64(f, &a1);
    let ln_x = math64::log(f, x);
    let t = dd(f, "mul.rn", a, &ln_x);
    let t = dd(f, "sub.rn", &t, x);
    dd(f, "sub.rn", &t, &lg)
}

/// P(a, x) by its series.
fn series_p(f: &mut Func, a: &str, x: &str, ln_pre: &str) -> String {
    let (r, c, sum) = (f.mov(Class::F64, a), f.mov(Class::F64, &d64(1.0)), f.mov(Class::F64, &d64(1.0)));
    repeat(f, 0.0, |f, _, out| {
        f.ins(format!("add.rn.f64 {r}, {r}, {}", d64(1.0)));
        let ratio = dd(f, "div.rn", x, &r);
        f.ins(format!("mul.rn.f64 {c}, {c}, {ratio}"));
        f.ins(format!("add.rn.f64 {sum}, {sum}, {c}"));
        let lim = dd(f, "mul.rn", &sum, &d64(EPS));
        let small = f.setp("le", "f64", &c, &lim);
        f.ins(format!("@{small} bra {out}"));
    });
    let pre = math64::exp(f, ln_pre);
    dd(f, "mul.rn", &pre, &sum)
}

/// |v| raised to at least `TINY`, keeping the sign.
fn nonzero(f: &mut Func, v: &str) {
    let av = f.op(Class::F64, "abs", &[v]);
    let tiny = f.setp("lt", "f64", &av, &d64(TINY));
    f.ins(format!("@{tiny} mov.f64 {v}, {}", d64(TINY)));
}

/// Q(a, x) by Legendre's continued fraction.
fn fraction_q(f: &mut Func, a: &str, x: &str, ln_pre: &str) -> String {
    let b = dd(f, "add.rn", x, &d64(1.0));
    let b = dd(f, "sub.rn", &b, a);
    let c = f.mov(Class::F64, &d64(1.0 / TINY));
    let d = f.mov(Class::F64, &b);
    nonzero(f, &d);
    f.ins(format!("div.rn.f64 {d}, {}, {d}", d64(1.0)));
    let h = f.mov(Class::F64, &d);
    repeat(f, 1.0, |f, i, out| {
        // a_i = −i(i − a), b_i = b_(i−1) + 2.
        let ia = dd(f, "sub.rn", i, a);
        let an = dd(f, "mul.rn", i, &ia);
        let an = f.op(Class::F64, "neg", &[&an]);
        f.ins(format!("add.rn.f64 {b}, {b}, {}", d64(2.0)));
        f.ins(format!("fma.rn.f64 {d}, {an}, {d}, {b}"));
        nonzero(f, &d);
        let q = dd(f, "div.rn", &an, &c);
        f.ins(format!("add.rn.f64 {c}, {b}, {q}"));
        nonzero(f, &c);
        f.ins(format!("div.rn.f64 {d}, {}, {d}", d64(1.0)));
        let del = dd(f, "mul.rn", &d, &c);
        f.ins(format!("mul.rn.f64 {h}, {h}, {del}"));
        let off = dd(f, "sub.rn", &del, &d64(1.0));
        let off = f.op(Class::F64, "abs", &[&off]);
        let done = f.setp("le", "f64", &off, &d64(EPS));
        f.ins(format!("@{done} bra {out}"));
    });
    // x^a e^(−x)/Γ(a) = a·x^a e^(−x)/Γ(a+1).
    let pre = math64::exp(f, ln_pre);
    let pre = dd(f, "mul.rn", &pre, a);
    dd(f, "mul.rn", &pre, &h)
}

/// ln Γ(1 + a) for a > 0, accurate also where 1 + a rounds.
fn ln_gamma_1p(f: &mut Func, a: &str) -> String {
    let r = f.reg(Class::F64);
    let (big, done) = (f.label("lg1p_big"), f.label("lg1p_done"));
    let large = f.setp("ge", "f64", a, &d64(0.2));
    f.ins(format!("@{large} bra {big}"));
    // −γa + (a − ln(1+a)) + a²·Σ (ζ(k) − 1)/k·(−a)^(k−2).
    let na = f.op(Class::F64, "neg", &[a]);
    let mut zm1 = LN_GAMMA_1P_ZM1;
    zm1.reverse();
    let h = f.horner(Class::F64, &na, &zm1);
    let a2 = dd(f, "mul.rn", a, a);
    let tail = dd(f, "mul.rn", &h, &a2);
    let l1p = math64::log1p(f, a);
    let d = dd(f, "sub.rn", a, &l1p);
    let g = dd(f, "mul.rn", a, &d64(-EULER_GAMMA));
    let g = dd(f, "add.rn", &g, &d);
    f.ins(format!("add.rn.f64 {r}, {g}, {tail}"));
    f.ins(format!("bra {done}"));
    f.place(&big);
    let a1 = dd(f, "add.rn", a, &d64(1.0));
    let lg = lgamma64(f, &a1);
    f.ins(format!("mov.f64 {r}, {lg}"));
    f.place(&done);
    r
}

/// Q(a, x) for x ≤ 1.1 without the cancellation of 1 − P:
/// Q = −expm1(lg) − a·e^lg·Σ_(n≥1) (−x)^n/(n!(a+n)), lg = a ln x − ln Γ(1+a).
fn small_x_q(f: &mut Func, a: &str, x: &str) -> String {
    let (fac, sum) = (f.mov(Class::F64, &d64(1.0)), f.mov(Class::F64, &d64(0.0)));
    let nx = f.op(Class::F64, "neg", &[x]);
    repeat(f, 1.0, |f, n, out| {
        let ratio = dd(f, "div.rn", &nx, n);
        f.ins(format!("mul.rn.f64 {fac}, {fac}, {ratio}"));
        let an = dd(f, "add.rn", a, n);
        let term = dd(f, "div.rn", &fac, &an);
        f.ins(format!("add.rn.f64 {sum}, {sum}, {term}"));
        let at = f.op(Class::F64, "abs", &[&term]);
        let as_ = f.op(Class::F64, "abs", &[&sum]);
        let lim = dd(f, "mul.rn", &as_, &d64(EPS));
        let small = f.setp("le", "f64", &at, &lim);
        f.ins(format!("@{small} bra {out}"));
    });
    let ln_x = math64::log(f, x);
    let t = dd(f, "mul.rn", a, &ln_x);
    let lg1p = ln_gamma_1p(f, a);
    let lg = dd(f, "sub.rn", &t, &lg1p);
    let em1 = math64::expm1(f, &lg);
    let e = math64::exp(f, &lg);
    let ae = dd(f, "mul.rn", a, &e);
    let prod = dd(f, "mul.rn", &ae, &sum);
    let neg = f.op(Class::F64, "neg", &[&em1]);
    dd(f, "sub.rn", &neg, &prod)
}

/// λ − 1 − ln λ for λ = x/a within 10% of 1 (where Temme's expansion is
/// used): with s = (x − a)/a and u = s/(2 + s), s·u − 2(u³/3 + u⁵/5 + …).
fn lambda_m1_mlog(f: &mut Func, a: &str, x: &str) -> String {
    let xa = dd(f, "sub.rn", x, a);
    let s = dd(f, "div.rn", &xa, a);
    let two_s = dd(f, "add.rn", &s, &d64(2.0));
    let u = dd(f, "div.rn", &s, &two_s);
    let u2 = dd(f, "mul.rn", &u, &u);
    let pw = dd(f, "mul.rn", &u2, &u);
    let tail = f.mov(Class::F64, &d64(0.0));
    repeat(f, 1.0, |f, j, out| {
        // k = 2j + 1.
        let k = f.op(Class::F64, "fma.rn", &[j, &d64(2.0), &d64(1.0)]);
        let t = dd(f, "div.rn", &pw, &k);
        f.ins(format!("add.rn.f64 {tail}, {tail}, {t}"));
        f.ins(format!("mul.rn.f64 {pw}, {pw}, {u2}"));
        let at = f.op(Class::F64, "abs", &[&t]);
        let atail = f.op(Class::F64, "abs", &[&tail]);
        let lim = dd(f, "mul.rn", &atail, &d64(1e-3 * EPS));
        let small = f.setp("le", "f64", &at, &lim);
        f.ins(format!("@{small} bra {out}"));
    });
    let su = dd(f, "mul.rn", &s, &u);
    f.op(Class::F64, "fma.rn", &[&tail, &d64(-2.0), &su])
}

/// erfc(w) in float64 (Temme's main term, where P or Q can be the small
/// difference of it and R): 1 − erf by its Maclaurin series below |w| = 2,
/// Laplace's continued fraction e^(−w²)/√π / (w + ½/(w + 1/(w + 3/2/…)))
/// (modified Lentz) above, and 2 − erfc(−w) for w < 0.
pub(crate) fn erfc64(f: &mut Func, w: &str) -> String {
    let aw = f.op(Class::F64, "abs", &[w]);
    let r = f.reg(Class::F64);
    let (by_fraction, done) = (f.label("erfc_fraction"), f.label("erfc_done"));
    let far = f.setp("ge", "f64", &aw, &d64(2.0));
    f.ins(format!("@{far} bra {by_fraction}"));
    // erf = 2/√π·Σ t_n/(2n+1), t_0 = w, t_n = t_(n−1)·(−w²)/n.
    let w2 = dd(f, "mul.rn", &aw, &aw);
    let nw2 = f.op(Class::F64, "neg", &[&w2]);
    let (t, sum) = (f.mov(Class::F64, &aw), f.mov(Class::F64, &aw));
    repeat(f, 1.0, |f, n, out| {
        let ratio = dd(f, "div.rn", &nw2, n);
        f.ins(format!("mul.rn.f64 {t}, {t}, {ratio}"));
        let k = f.op(Class::F64, "fma.rn", &[n, &d64(2.0), &d64(1.0)]);
        let term = dd(f, "div.rn", &t, &k);
        f.ins(format!("add.rn.f64 {sum}, {sum}, {term}"));
        let at = f.op(Class::F64, "abs", &[&term]);
        let lim = dd(f, "mul.rn", &sum, &d64(0.01 * EPS));
        let small = f.setp("lt", "f64", &at, &lim);
        f.ins(format!("@{small} bra {out}"));
    });
    let two_over_sqrt_pi = 2.0 / std::f64::consts::PI.sqrt();
    f.ins(format!("fma.rn.f64 {r}, {sum}, {}, {}", d64(-two_over_sqrt_pi), d64(1.0)));
    f.ins(format!("bra {done}"));
    f.place(&by_fraction);
    let frac = f.mov(Class::F64, &aw);
    let (c, dv) = (f.mov(Class::F64, &aw), f.mov(Class::F64, &d64(0.0)));
    repeat(f, 1.0, |f, n, out| {
        let an = dd(f, "mul.rn", n, &d64(0.5));
        f.ins(format!("fma.rn.f64 {dv}, {an}, {dv}, {aw}"));
        f.ins(format!("div.rn.f64 {dv}, {}, {dv}", d64(1.0)));
        let q = dd(f, "div.rn", &an, &c);
        f.ins(format!("add.rn.f64 {c}, {aw}, {q}"));
        let delta = dd(f, "mul.rn", &c, &dv);
        f.ins(format!("mul.rn.f64 {frac}, {frac}, {delta}"));
        let off = dd(f, "sub.rn", &delta, &d64(1.0));
        let off = f.op(Class::F64, "abs", &[&off]);
        let small = f.setp("le", "f64", &off, &d64(EPS));
        f.ins(format!("@{small} bra {out}"));
    });
    let nw2 = dd(f, "mul.rn", &aw, &aw);
    let nw2 = f.op(Class::F64, "neg", &[&nw2]);
    let e = math64::exp(f, &nw2);
    let den = dd(f, "mul.rn", &frac, &d64(std::f64::consts::PI.sqrt()));
    f.ins(format!("div.rn.f64 {r}, {e}, {den}"));
    f.place(&done);
    let neg = f.setp("lt", "f64", w, &d64(0.0));
    f.ins(format!("@{neg} sub.rn.f64 {r}, {}, {r}", d64(2.0)));
    r
}

/// Temme's expansion: Q = ½erfc(η√(a/2)) + R, P = ½erfc(−η√(a/2)) − R, with
/// ½η² = λ − 1 − ln λ and R = e^(−aη²/2)/√(2πa)·Σ_k C_k(η)·a^(−k).
fn temme(f: &mut Func, a: &str, x: &str, upper: bool) -> String {
    let phi = lambda_m1_mlog(f, a, x);
    let two_phi = dd(f, "mul.rn", &phi, &d64(2.0));
    let eta = f.op(Class::F64, "sqrt.rn", &[&two_phi]);
    let below = f.setp("lt", "f64", x, a);
    f.ins(format!("@{below} neg.f64 {eta}, {eta}"));
    let inv_a = dd(f, "div.rn", &d64(1.0), a);
    let sum = f.mov(Class::F64, &d64(0.0));
    let afac = f.mov(Class::F64, &d64(1.0));
    for row in &TEMME_D {
        let ck = f.horner(Class::F64, &eta, row);
        f.ins(format!("fma.rn.f64 {sum}, {ck}, {afac}, {sum}"));
        f.ins(format!("mul.rn.f64 {afac}, {afac}, {inv_a}"));
    }
    let na = f.op(Class::F64, "neg", &[a]);
    let arg = dd(f, "mul.rn", &na, &phi);
    let e = math64::exp(f, &arg);
    let tpa = dd(f, "mul.rn", a, &d64(2.0 * std::f64::consts::PI));
    let root = f.op(Class::F64, "sqrt.rn", &[&tpa]);
    let r = dd(f, "div.rn", &e, &root);
    let r = dd(f, "mul.rn", &r, &sum);
    let half_a = dd(f, "mul.rn", a, &d64(0.5));
    let sh = f.op(Class::F64, "sqrt.rn", &[&half_a]);
    let z = dd(f, "mul.rn", &eta, &sh);
    if upper {
        let c = erfc64(f, &z);
        f.op(Class::F64, "fma.rn", &[&c, &d64(0.5), &r])
    } else {
        let nz = f.op(Class::F64, "neg", &[&z]);
        let c = erfc64(f, &nz);
        let nr = f.op(Class::F64, "neg", &[&r]);
        f.op(Class::F64, "fma.rn", &[&c, &d64(0.5), &nr])
    }
}

/// The predicate `c ? a : b`.
fn pick(f: &mut Func, c: &str, a: &str, b: &str) -> String {
    let ta = f.pred("and", c, a);
    let tb = f.pred("and", &format!("!{c}"), b);
    f.pred("or", &ta, &tb)
}

/// The methods of P and Q, chosen per element by the CPU backend's rules.
#[derive(Copy, Clone)]
enum Method {
    Temme,
    SeriesP,
    FractionQ,
    SmallXQ,
}

/// P(a, x) (`upper` false) or Q(a, x) (`upper`) of float32 registers.
pub(crate) fn igamma(f: &mut Func, a32: &str, x32: &str, upper: bool) -> String {
    let (a_in, x_in) = (f.reg(Class::F64), f.reg(Class::F64));
    f.ins(format!("cvt.f64.f32 {a_in}, {a32}"));
    f.ins(format!("cvt.f64.f32 {x_in}, {x32}"));
    // The methods run on a positive, finite a and x (1 in place of
    // anything else): the edge cases below override those results, and the
    // loops then stay short.
    let sane = |f: &mut Func, v: &str| {
        let ok = f.setp("gt", "f64", v, &d64(0.0));
        let finite = f.setp("lt", "f64", v, &d64(f64::INFINITY));
        let ok = f.pred("and", &ok, &finite);
        f.selp(Class::F64, v, &d64(1.0), &ok)
    };
    let (a, x) = (sane(f, &a_in), sane(f, &x_in));
    let r = f.reg(Class::F64);
    // Temme: a > 100 and |x − a|/a < 0.1.
    let xa = dd(f, "sub.rn", &x, &a);
    let rel = dd(f, "div.rn", &xa, &a);
    let rel = f.op(Class::F64, "abs", &[&rel]);
    let near = f.setp("lt", "f64", &rel, &d64(0.1));
    let big = f.setp("gt", "f64", &a, &d64(100.0));
    let use_temme = f.pred("and", &near, &big);
    // Where the series for P runs, and else where the fraction for Q (the
    // small-x series for Q elsewhere); the function not computed is 1
    // minus the one computed.
    let (series_when, fraction_when) = if upper {
        // Q: 1 − P where P is small, else the fraction (x > 1.1) or the
        // small-x series.
        let x_big = f.setp("gt", "f64", &x, &d64(1.1));
        let x_lt_a = f.setp("lt", "f64", &x, &a);
        let ln_x = math64::log(f, &x);
        let t = dd(f, "div.rn", &d64(-0.4), &ln_x);
        let t_lt_a = f.setp("lt", "f64", &t, &a);
        let x11 = dd(f, "mul.rn", &x, &d64(1.1));
        let x11_lt_a = f.setp("lt", "f64", &x11, &a);
        let x_tiny = f.setp("le", "f64", &x, &d64(0.5));
        let mid = pick(f, &x_tiny, &t_lt_a, &x11_lt_a);
        let p_small = pick(f, &x_big, &x_lt_a, &mid);
        (p_small, x_big)
    } else {
        // P: 1 − Q where x > 1 and x > a, else the series.
        let x_gt_1 = f.setp("gt", "f64", &x, &d64(1.0));
        let x_gt_a = f.setp("gt", "f64", &x, &a);
        let via_q = f.pred("and", &x_gt_1, &x_gt_a);
        let x_big = f.setp("gt", "f64", &x, &d64(1.1));
        (format!("!{via_q}"), x_big)
    };
    // A label per method; the series computes P, the others Q (Temme
    // the one asked for).
    let labels = [f.label("ig_temme"), f.label("ig_series"), f.label("ig_fraction"), f.label("ig_small_x")];
    let done = f.label("ig_done");
    f.ins(format!("@{use_temme} bra {}", labels[0]));
    f.ins(format!("@{series_when} bra {}", labels[1]));
    f.ins(format!("@{fraction_when} bra {}", labels[2]));
    f.ins(format!("bra {}", labels[3]));
    for (method, label) in [Method::Temme, Method::SeriesP, Method::FractionQ, Method::SmallXQ].iter().zip(&labels) {
        f.place(label);
        let (v, is_p) = match method {
            Method::Temme => (temme(f, &a, &x, upper), !upper),
            Method::SeriesP => {
                let pre = prefactor(f, &a, &x);
                (series_p(f, &a, &x, &pre), true)
            }
            Method::FractionQ => {
                let pre = prefactor(f, &a, &x);
                (fraction_q(f, &a, &x, &pre), false)
            }
            Method::SmallXQ => (small_x_q(f, &a, &x), false),
        };
        if is_p == upper {
            f.ins(format!("sub.rn.f64 {r}, {}, {v}", d64(1.0)));
        } else {
            f.ins(format!("mov.f64 {r}, {v}"));
        }
        f.ins(format!("bra {done}"));
    }
    f.place(&done);
    // Into [0, 1], NaN kept.
    let below = f.setp("lt", "f64", &r, &d64(0.0));
    f.ins(format!("@{below} mov.f64 {r}, {}", d64(0.0)));
    let above = f.setp("gt", "f64", &r, &d64(1.0));
    f.ins(format!("@{above} mov.f64 {r}, {}", d64(1.0)));
    let (a, x) = (a_in, x_in);
    // Edge cases, lowest priority first; each gives P (Q = 1 − P).
    let set = |f: &mut Func, pred: &str, p: f64| {
        let v = if upper { 1.0 - p } else { p };
        f.ins(format!("@{pred} mov.f64 {r}, {}", d64(v)));
    };
    let a_nan = f.setp("nan", "f64", &a, &a);
    let x_nan = f.setp("nan", "f64", &x, &x);
    let any_nan = f.pred("or", &a_nan, &x_nan);
    set(f, &any_nan, f64::NAN);
    let x_inf = f.setp("eq", "f64", &x, &d64(f64::INFINITY));
    set(f, &x_inf, 1.0);
    let a_inf = f.setp("eq", "f64", &a, &d64(f64::INFINITY));
    let a_inf_x_finite = f.pred("and", &a_inf, &format!("!{x_inf}"));
    set(f, &a_inf_x_finite, 0.0);
    let both_inf = f.pred("and", &a_inf, &x_inf);
    set(f, &both_inf, f64::NAN);
    let x_zero = f.setp("eq", "f64", &x, &d64(0.0));
    set(f, &x_zero, 0.0);
    let a_zero = f.setp("eq", "f64", &a, &d64(0.0));
    let x_pos = f.setp("gt", "f64", &x, &d64(0.0));
    let a_zero_x_pos = f.pred("and", &a_zero, &x_pos);
    set(f, &a_zero_x_pos, 1.0);
    let a_zero_x_not = f.pred("and", &a_zero, &format!("!{x_pos}"));
    set(f, &a_zero_x_not, f64::NAN);
    let a_neg = f.setp("lt", "f64", &a, &d64(0.0));
    let x_neg = f.setp("lt", "f64", &x, &d64(0.0));
    let neg = f.pred("or", &a_neg, &x_neg);
    set(f, &neg, f64::NAN);
    let out = f.reg(Class::F32);
    f.ins(format!("cvt.rn.f32.f64 {out}, {r}"));
    out
}
