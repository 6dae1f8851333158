//! float32 trigonometry: sin, cos and tan with a π/2 reduction and Taylor
//! polynomials; atan2 (and through it atan, asin, acos).

use crate::ptx::arith::{add, copysign, div, fma, k, mul, op1, op2, poly, sub};
use crate::ptx::func::{Class, Func};

const PI: f64 = std::f64::consts::PI;

/// Which trigonometric function [`trig`] computes.
#[derive(Copy, Clone, PartialEq)]
pub(crate) enum Trig {
    Sin,
    Cos,
    Tan,
}

/// sin, cos or tan: reduce by π/2 (three-part Cody–Waite with FMAs), Taylor
/// polynomials on |r| ≤ π/4, then the quadrant.
pub(crate) fn trig(f: &mut Func, x: &str, which: Trig) -> String {
    let t = mul(f, x, &k(2.0 / PI));
    let n = op1(f, "cvt.rni.f32", &t);
    let r = fma(f, &n, &k(-1.570_796_370_506_286_6), x);
    let r = fma(f, &n, &k(4.371_138_828_673_793e-8), &r);
    let r = fma(f, &n, &k(1.715_124_510_005_881_9e-15), &r);
    let z = mul(f, &r, &r);
    let sp = poly(f, &z, &[-1.0 / 6.0, 1.0 / 120.0, -1.0 / 5040.0, 1.0 / 362_880.0, -1.0 / 39_916_800.0]);
    let sp = mul(f, &sp, &z);
    let s = fma(f, &sp, &r, &r);
    let c =
        poly(f, &z, &[1.0, -0.5, 1.0 / 24.0, -1.0 / 720.0, 1.0 / 40_320.0, -1.0 / 3_628_800.0, 1.0 / 479_001_600.0]);
    // Quadrant n mod 4, from the float n (exact below 2^24).
    let quarter = mul(f, &n, &k(0.25));
    let fl = op1(f, "cvt.rmi.f32", &quarter);
    let q = fma(f, &fl, &k(-4.0), &n);
    let qi = f.reg(Class::B32);
    f.ins(format!("cvt.rzi.s32.f32 {qi}, {q}"));
    let (b0, b1) = (f.reg(Class::B32), f.reg(Class::B32));
    f.ins(format!("and.b32 {b0}, {qi}, 1"));
    f.ins(format!("and.b32 {b1}, {qi}, 2"));
    let odd = f.setp("ne", "s32", &b0, "0");
    let high = f.setp("ne", "s32", &b1, "0");
    match which {
        Trig::Sin => {
            let v = f.selp(Class::F32, &c, &s, &odd);
            let nv = op1(f, "neg", &v);
            f.selp(Class::F32, &nv, &v, &high)
        }
        Trig::Cos => {
            let v = f.selp(Class::F32, &s, &c, &odd);
            let nv = op1(f, "neg", &v);
            let flip = f.pred("xor", &odd, &high);
            f.selp(Class::F32, &nv, &v, &flip)
        }
        Trig::Tan => {
            let even = div(f, &s, &c);
            let oddv = div(f, &c, &s);
            let oddv = op1(f, "neg", &oddv);
            f.selp(Class::F32, &oddv, &even, &odd)
        }
    }
}

/// atan on [0, 1] after the tan(π/8) split, as an odd series.
fn atan_unit(f: &mut Func, t: &str) -> String {
    // t > tan(π/8): atan t = π/4 + atan((t − 1)/(t + 1)).
    let big = f.setp("gt", "f32", t, &k(0.414_213_562_373_095));
    let num = sub(f, t, &k(1.0));
    let den = add(f, t, &k(1.0));
    let q = div(f, &num, &den);
    let u = f.selp(Class::F32, &q, t, &big);
    let z = mul(f, &u, &u);
    let coefs: Vec<f64> = (0..12).map(|i| if i % 2 == 0 { 1.0 } else { -1.0 } / (2 * i + 1) as f64).collect();
    let p = poly(f, &z, &coefs);
    let p = mul(f, &u, &p);
    let shifted = add(f, &p, &k(PI / 4.0));
    f.selp(Class::F32, &shifted, &p, &big)
}

/// atan2(y, x) with the quadrant, signed-zero and infinity rules of libm.
pub(crate) fn atan2(f: &mut Func, y: &str, x: &str) -> String {
    let ay = op1(f, "abs", y);
    let ax = op1(f, "abs", x);
    let mx = op2(f, "max", &ay, &ax);
    let mn = op2(f, "min", &ay, &ax);
    let t = div(f, &mn, &mx);
    let both_zero = f.setp("eq", "f32", &mx, &k(0.0));
    let both_inf = f.setp("eq", "f32", &mn, &k(f64::INFINITY));
    let t = f.selp(Class::F32, &k(0.0), &t, &both_zero);
    let t = f.selp(Class::F32, &k(1.0), &t, &both_inf);
    let base = atan_unit(f, &t);
    let steep = f.setp("gt", "f32", &ay, &ax);
    let flip = sub(f, &k(PI / 2.0), &base);
    let base = f.selp(Class::F32, &flip, &base, &steep);
    // x negative (including −0): the angle from the negative axis.
    let xb = f.reg(Class::B32);
    f.ins(format!("mov.b32 {xb}, {x}"));
    let neg = f.setp("lt", "s32", &xb, "0");
    let back = sub(f, &k(PI), &base);
    let base = f.selp(Class::F32, &back, &base, &neg);
    let r = copysign(f, &base, y);
    let nan = f.setp("nan", "f32", x, y);
    let sum = add(f, x, y);
    f.selp(Class::F32, &sum, &r, &nan)
}
