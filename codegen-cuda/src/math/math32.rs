//! float32 exp/log family, pow and acos.
//!
//! float32 transcendentals are built on the hardware approximations
//! (`ex2.approx`, `lg2.approx`, `sin.approx`, `cos.approx`) with range
//! reduction and short series where those lose precision (near 1 for log,
//! near 0 for expm1); additions and products use `.rn` so ptxas does not
//! contract them into FMAs. float64 has no hardware transcendentals: exp, log
//! and what is built on them are in software in `math64.rs`.
//! Exact GELU and its gradient compute Φ through erfc, the tail `erfc(|z|)/2`
//! taken directly for negative x (no `1 + erf` cancellation).

use crate::math::math64;
use crate::math::trig::atan2;
use crate::ptx::arith::{add, div, fma, k, keep_nan, mul, op1, poly, sub};
use crate::ptx::func::{Class, Func};

pub(crate) const LOG2E: f64 = std::f64::consts::LOG2_E;
pub(crate) const LN2: f64 = std::f64::consts::LN_2;

/// √((1 − x)(1 + x)).
pub(crate) fn cos_of_asin(f: &mut Func, x: &str) -> String {
    let a = sub(f, &k(1.0), x);
    let b = add(f, &k(1.0), x);
    let c = mul(f, &a, &b);
    op1(f, "sqrt.rn", &c)
}

/// float32 acos, as atan2(√((1 − x)(1 + x)), x).
pub(crate) fn acos(f: &mut Func, x: &str) -> String {
    let s = cos_of_asin(f, x);
    atan2(f, &s, x)
}

/// eˣ: Cody–Waite reduction by ln 2, `ex2.approx` on the remainder, the
/// scale applied in two halves so 2ⁿ never overflows early.
pub(crate) fn exp(f: &mut Func, x: &str) -> String {
    let c = f.reg(Class::F32);
    f.ins(format!("min.f32 {c}, {x}, {}", k(89.0)));
    f.ins(format!("max.f32 {c}, {c}, {}", k(-104.0)));
    let t = mul(f, &c, &k(LOG2E));
    let n = op1(f, "cvt.rni.f32", &t);
    let r = fma(f, &n, &k(-0.693_145_751_953_125), &c);
    let r = fma(f, &n, &k(-1.428_606_765_330_187e-6), &r);
    let r = mul(f, &r, &k(LOG2E));
    let e = op1(f, "ex2.approx", &r);
    let half = mul(f, &n, &k(0.5));
    let h1 = op1(f, "cvt.rmi.f32", &half);
    let h2 = sub(f, &n, &h1);
    let s1 = op1(f, "ex2.approx", &h1);
    let s2 = op1(f, "ex2.approx", &h2);
    let e = mul(f, &e, &s1);
    let e = mul(f, &e, &s2);
    keep_nan(f, x, &e)
}

/// eˣ − 1: a series below |x| = 0.5, else exp(x) − 1.
pub(crate) fn expm1(f: &mut Func, x: &str) -> String {
    let inv_fact: Vec<f64> = (1..=9)
        .scan(1.0, |acc, n| {
            *acc /= n as f64;
            Some(*acc)
        })
        .collect();
    // x·(1 + x/2 + x²/6 + …)
    let p = poly(f, x, &inv_fact);
    let small = mul(f, x, &p);
    let e = exp(f, x);
    let big = sub(f, &e, &k(1.0));
    let a = op1(f, "abs", x);
    let is_small = f.setp("lt", "f32", &a, &k(0.5));
    f.selp(Class::F32, &small, &big, &is_small)
}

/// ln(1 + u) for small u: 2·atanh(u / (2 + u)) as a series.
fn log1p_series(f: &mut Func, u: &str) -> String {
    let d = add(f, u, &k(2.0));
    let s = div(f, u, &d);
    let s2 = mul(f, &s, &s);
    let p = poly(f, &s2, &[1.0, 1.0 / 3.0, 1.0 / 5.0, 1.0 / 7.0, 1.0 / 9.0, 1.0 / 11.0]);
    let p = mul(f, &s, &p);
    mul(f, &p, &k(2.0))
}

/// log₂ x: `lg2.approx` (exact at powers of two) away from 1, the series
/// near 1.
pub(crate) fn log2(f: &mut Func, x: &str) -> String {
    let u = sub(f, x, &k(1.0));
    let near = log1p_series(f, &u);
    let near = mul(f, &near, &k(LOG2E));
    let far = op1(f, "lg2.approx", x);
    let a = op1(f, "abs", &u);
    let is_near = f.setp("lt", "f32", &a, &k(0.25));
    f.selp(Class::F32, &near, &far, &is_near)
}

/// ln x: the series near 1, `lg2.approx` elsewhere.
pub(crate) fn log(f: &mut Func, x: &str) -> String {
    let u = sub(f, x, &k(1.0));
    let near = log1p_series(f, &u);
    let l = op1(f, "lg2.approx", x);
    let far = mul(f, &l, &k(LN2));
    let a = op1(f, "abs", &u);
    let is_near = f.setp("lt", "f32", &a, &k(0.25));
    f.selp(Class::F32, &near, &far, &is_near)
}

pub(crate) fn log1p(f: &mut Func, x: &str) -> String {
    let near = log1p_series(f, x);
    let one = add(f, x, &k(1.0));
    let far = log(f, &one);
    let a = op1(f, "abs", x);
    let is_near = f.setp("lt", "f32", &a, &k(0.25));
    f.selp(Class::F32, &near, &far, &is_near)
}

/// aᵇ for float32, computed in float64 (one rounding, like libm's powf).
pub(crate) fn pow(f: &mut Func, a: &str, b: &str) -> String {
    let (a64, b64, r) = (f.reg(Class::F64), f.reg(Class::F64), f.reg(Class::F32));
    f.ins(format!("cvt.f64.f32 {a64}, {a}"));
    f.ins(format!("cvt.f64.f32 {b64}, {b}"));
    let p = math64::pow(f, &a64, &b64);
    f.ins(format!("cvt.rn.f32.f64 {r}, {p}"));
    r
}
