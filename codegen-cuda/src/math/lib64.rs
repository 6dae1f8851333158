//! Float64 software routines behind the special-function language's
//! library calls (`rdyn_ir::special::Unary`: erfc, lgamma; `scalar.rs`
//! translates the rest).

use crate::math::math64;
use crate::ptx::arith::series;
use crate::ptx::func::{f64_imm as d64, Class, Func};

const EPS: f64 = 1.110_223_024_625_156_5e-16;
/// Terms at most of the series and the continued fraction (each converges
/// in under 100 on its range).
const MAX_ITER: f64 = 5000.0;

fn dd(f: &mut Func, op: &str, a: &str, b: &str) -> String {
    f.op(Class::F64, op, &[a, b])
}

/// `for i in first..MAX_ITER { body(i) }` over a float64 counter, `body`
/// branching to its second argument to leave early.
fn repeat(f: &mut Func, first: f64, body: impl FnOnce(&mut Func, &str, &str)) {
    series(f, first, MAX_ITER, body);
}

/// erfc(w) in float64: 1 − erf by its Maclaurin series below |w| = 2,
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

/// ln Γ(z) for z > 0 (the language's `lgamma` in PTX): z·(z+1)…(z+n−1)
/// while z + n < 10, then Stirling's series at z + n (its first omitted
/// term is below 2e-18 there); a few 1e-15 absolute, plenty for the
/// float32 results these routines serve.
pub(crate) fn lgamma(f: &mut Func, z0: &str) -> String {
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
