//! float32 special functions as PTX: lgamma (recurrence to a large
//! argument, then Stirling's series, as the WGSL backend) and the erfc fit
//! (erf, erfc). Bessel J, Y, I and K, Airy Ai, spherical j0, zeta, erfcx,
//! ndtri, digamma, erfinv and the incomplete gamma functions come from
//! `rdyn_ir::special` through `scalar.rs`.

use crate::math::math32::{exp, log};
use crate::ptx::arith::{add, div, fma, k, mul, op1, op2, poly, sub};
use crate::ptx::func::{Class, Func};

const PI: f64 = std::f64::consts::PI;

/// |sin(πx)| with x reduced first, so it is exact at integers.
fn abs_sinpi(f: &mut Func, x: &str) -> String {
    let half = mul(f, x, &k(0.5));
    let fl = op1(f, "cvt.rmi.f32", &half);
    let r = fma(f, &fl, &k(-2.0), x);
    let r = op1(f, "abs", &r);
    let r1 = sub(f, &r, &k(1.0));
    let ge = f.setp("ge", "f32", &r, &k(1.0));
    let r = f.selp(Class::F32, &r1, &r, &ge);
    let other = sub(f, &k(1.0), &r);
    let r = op2(f, "min", &r, &other);
    let a = mul(f, &r, &k(PI));
    op1(f, "sin.approx", &a)
}

/// A predicate: `x` is 0, −1, −2, … (a pole of Γ and of ζ(s, ·)).
fn non_positive_integer(f: &mut Func, x: &str) -> String {
    let fl = op1(f, "cvt.rmi.f32", x);
    let int = f.setp("eq", "f32", &fl, x);
    let nonpos = f.setp("le", "f32", x, &k(0.0));
    f.pred("and", &int, &nonpos)
}

/// `while x < limit { body(x); x += 1 }`, leaving on NaN too.
fn count_up(f: &mut Func, x: &str, limit: f64, body: impl FnOnce(&mut Func, &str)) {
    let (top, done) = (f.label("up"), f.label("up_end"));
    f.place(&top);
    let stop = f.setp("geu", "f32", x, &k(limit));
    f.ins(format!("@{stop} bra {done}"));
    body(f, x);
    f.ins(format!("add.rn.f32 {x}, {x}, {}", k(1.0)));
    f.ins(format!("bra {top}"));
    f.place(&done);
}

pub fn lgamma(f: &mut Func, x0: &str) -> String {
    let reflect = f.setp("lt", "f32", x0, &k(0.5));
    let one_minus = sub(f, &k(1.0), x0);
    let x = f.selp(Class::F32, &one_minus, x0, &reflect);
    let x = f.mov(Class::F32, &x);
    // Infinite inputs skip the recurrence.
    let ax = op1(f, "abs", &x);
    let inf = f.setp("eq", "f32", &ax, &k(f64::INFINITY));
    f.ins(format!("@{inf} mov.f32 {x}, {}", k(8.0)));
    let prod = f.mov(Class::F32, &k(1.0));
    count_up(f, &x, 8.0, |f, x| f.ins(format!("mul.rn.f32 {prod}, {prod}, {x}")));
    let inv = op1(f, "rcp.rn", &x);
    let inv2 = mul(f, &inv, &inv);
    let s = fma(f, &inv2, &k(-0.000_595_238_095), &k(0.000_793_650_794));
    let s = mul(f, &inv2, &s);
    let s = sub(f, &k(0.002_777_777_78), &s);
    let s = mul(f, &inv2, &s);
    let s = sub(f, &k(0.083_333_333_3), &s);
    let series = mul(f, &inv, &s);
    let lx = log(f, &x);
    let xm = sub(f, &x, &k(0.5));
    let t = mul(f, &xm, &lx);
    let t = sub(f, &t, &x);
    let t = add(f, &t, &k(0.918_938_533));
    let t = add(f, &t, &series);
    let lp = log(f, &prod);
    let lg = sub(f, &t, &lp);
    let s = abs_sinpi(f, x0);
    let q = div(f, &k(PI), &s);
    let lq = log(f, &q);
    let reflected = sub(f, &lq, &lg);
    let r = f.selp(Class::F32, &reflected, &lg, &reflect);
    // Poles (non-positive integers) and infinities give +inf; NaN stays.
    let pole = non_positive_integer(f, x0);
    let ax0 = op1(f, "abs", x0);
    let inf0 = f.setp("eq", "f32", &ax0, &k(f64::INFINITY));
    f.ins(format!("or.pred {pole}, {pole}, {inf0}"));
    let r = f.selp(Class::F32, &k(f64::INFINITY), &r, &pole);
    let nan = f.setp("nan", "f32", x0, x0);
    f.selp(Class::F32, x0, &r, &nan)
}

/// erfc for x ≥ 0 as t·exp(p(t)) (Numerical Recipes' Chebyshev fit,
/// fractional error below 1.2e-7); returns (erfc(|x|), x).
pub(crate) fn erfc_abs(f: &mut Func, x: &str) -> String {
    let z = op1(f, "abs", x);
    let (t, p) = erfc_fit(f, &z);
    let zz = mul(f, &z, &z);
    let arg = sub(f, &p, &zz);
    let e = exp(f, &arg);
    mul(f, &t, &e)
}

/// t = 1/(1 + z/2) and p(t), with erfc(z) = t·e^(p(t) − z²) for z ≥ 0.
fn erfc_fit(f: &mut Func, z: &str) -> (String, String) {
    let d = fma(f, z, &k(0.5), &k(1.0));
    let t = div(f, &k(1.0), &d);
    let p = poly(
        f,
        &t,
        &[
            -1.265_512_23,
            1.000_023_68,
            0.374_091_96,
            0.096_784_18,
            -0.186_288_06,
            0.278_868_07,
            -1.135_203_98,
            1.488_515_87,
            -0.822_152_23,
            0.170_872_77,
        ],
    );
    (t, p)
}
