//! float32 special functions as PTX: lgamma, digamma, erfinv and polygamma
//! (through a float32 Hurwitz zeta function), the erfc fit (erf, erfc) and
//! ndtri (Bessel J and Y are in `bessel.rs`; Bessel I and K, Airy Ai,
//! spherical j0, `special.zeta` and erfcx come from `rdyn_ir::special`
//! through `scalar.rs`). lgamma to polygamma follow the WGSL backend (recurrence to
//! a large argument, then an asymptotic series; Giles' approximation for
//! erfinv), ndtri Acklam's fractions in float64; loops are branches.

use rdyn_ir::approx::{NDTRI_ACKLAM, NDTRI_TAIL};

use crate::math::math32::{exp, log, pow};
use crate::math::math64;
use crate::ptx::arith::{add, copysign, div, fma, k, mul, op1, op2, poly, sub};
use crate::ptx::func::{f64_imm as d64, Class, Func};

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

pub fn digamma(f: &mut Func, x0: &str) -> String {
    let neg = f.setp("lt", "f32", x0, &k(0.0));
    // Reflection: ψ(1 − x) − ψ(x) = π cot(πx), with the period reduced.
    let fl = op1(f, "cvt.rmi.f32", x0);
    let frac = sub(f, x0, &fl);
    let a = mul(f, &frac, &k(PI));
    let sn = op1(f, "sin.approx", &a);
    let cs = op1(f, "cos.approx", &a);
    let cot = div(f, &cs, &sn);
    let refl = mul(f, &cot, &k(-PI));
    let result = f.selp(Class::F32, &refl, &k(0.0), &neg);
    let result = f.mov(Class::F32, &result);
    let one_minus = sub(f, &k(1.0), x0);
    let x = f.selp(Class::F32, &one_minus, x0, &neg);
    let x = f.mov(Class::F32, &x);
    let ax = op1(f, "abs", &x);
    let inf = f.setp("eq", "f32", &ax, &k(f64::INFINITY));
    f.ins(format!("@{inf} mov.f32 {x}, {}", k(6.0)));
    count_up(f, &x, 6.0, |f, x| {
        let r = f.reg(Class::F32);
        f.ins(format!("rcp.rn.f32 {r}, {x}"));
        f.ins(format!("sub.rn.f32 {result}, {result}, {r}"));
    });
    let inv = op1(f, "rcp.rn", &x);
    let inv2 = mul(f, &inv, &inv);
    let mut s = f.mov(Class::F32, &k(1.0 / 132.0));
    for c in [1.0 / 240.0, 1.0 / 252.0, 1.0 / 120.0, 1.0 / 12.0] {
        let t = mul(f, &inv2, &s);
        s = sub(f, &k(c), &t);
    }
    let tail = mul(f, &inv2, &s);
    let lx = log(f, &x);
    let h = mul(f, &inv, &k(0.5));
    let r = add(f, &result, &lx);
    let r = sub(f, &r, &h);
    let r = sub(f, &r, &tail);
    // ψ(+∞) = +∞; poles give NaN; ψ(±0) = ∓∞.
    let pinf = f.setp("eq", "f32", x0, &k(f64::INFINITY));
    let r = f.selp(Class::F32, &k(f64::INFINITY), &r, &pinf);
    let int = f.setp("eq", "f32", &fl, x0);
    let pole = f.pred("and", &int, &neg);
    let r = f.selp(Class::F32, &k(f64::NAN), &r, &pole);
    let zero = f.setp("eq", "f32", x0, &k(0.0));
    let inf0 = copysign(f, &k(f64::INFINITY), x0);
    let minus = op1(f, "neg", &inf0);
    let r = f.selp(Class::F32, &minus, &r, &zero);
    let nan = f.setp("nan", "f32", x0, x0);
    f.selp(Class::F32, x0, &r, &nan)
}

/// Giles' single-precision approximation.
pub fn erfinv(f: &mut Func, x: &str) -> String {
    let a = sub(f, &k(1.0), x);
    let b = add(f, &k(1.0), x);
    let p = mul(f, &a, &b);
    let l = log(f, &p);
    let w = op1(f, "neg", &l);
    let central = [
        1.501_409_41,
        0.246_640_727,
        -0.004_177_681_64,
        -0.001_253_725_03,
        0.000_218_580_87,
        -4.391_506_54e-06,
        -3.523_387_7e-06,
        3.432_739_39e-07,
        2.810_226_36e-08,
    ];
    let tail = [
        2.832_976_82,
        1.001_674_06,
        0.009_438_870_47,
        -0.007_622_461_3,
        0.005_739_507_73,
        -0.003_673_428_44,
        0.001_349_343_22,
        0.000_100_950_558,
        -0.000_200_214_257,
    ];
    let wc = sub(f, &w, &k(2.5));
    let pc = poly(f, &wc, &central);
    let sw = op1(f, "sqrt.rn", &w);
    let wt = sub(f, &sw, &k(3.0));
    let pt = poly(f, &wt, &tail);
    let small = f.setp("lt", "f32", &w, &k(5.0));
    let p = f.selp(Class::F32, &pc, &pt, &small);
    let r = mul(f, &p, x);
    // ±1 → ±inf; |x| > 1 → NaN.
    let ax = op1(f, "abs", x);
    let one = f.setp("eq", "f32", &ax, &k(1.0));
    let inf = mul(f, x, &k(f64::INFINITY));
    let r = f.selp(Class::F32, &inf, &r, &one);
    let out = f.setp("gtu", "f32", &ax, &k(1.0));
    f.selp(Class::F32, &k(f64::NAN), &r, &out)
}

/// Hurwitz ζ(s, q), s > 1, by Euler–Maclaurin summation in float32, for
/// polygamma (`torch.special.zeta` itself is `rdyn_ir::special`'s).
fn zeta(f: &mut Func, s: &str, q: &str) -> String {
    let neg_s = op1(f, "neg", s);
    let first = pow(f, q, &neg_s);
    let sum = f.mov(Class::F32, &first);
    let a = f.mov(Class::F32, q);
    let b = f.mov(Class::F32, &k(0.0));
    let i = f.mov(Class::B32, "0");
    let (top, series, done) = (f.label("zeta"), f.label("zeta_series"), f.label("zeta_end"));
    f.place(&top);
    // Sum terms until a > 9 (at least 9 of them); NaN and runaway stop.
    let enough = f.setp("ge", "s32", &i, "9");
    let past = f.setp("gt", "f32", &a, &k(9.0));
    let stop = f.pred("and", &enough, &past);
    let nan = f.setp("nan", "f32", &a, &a);
    f.ins(format!("or.pred {stop}, {stop}, {nan}"));
    let runaway = f.setp("gt", "s32", &i, "4194304");
    f.ins(format!("or.pred {stop}, {stop}, {runaway}"));
    f.ins(format!("@{stop} bra {series}"));
    f.ins(format!("add.s32 {i}, {i}, 1"));
    f.ins(format!("add.rn.f32 {a}, {a}, {}", k(1.0)));
    let term = pow(f, &a, &neg_s);
    f.ins(format!("mov.f32 {b}, {term}"));
    f.ins(format!("add.rn.f32 {sum}, {sum}, {b}"));
    let ratio = div(f, &b, &sum);
    let ratio = op1(f, "abs", &ratio);
    let converged = f.setp("lt", "f32", &ratio, &k(1e-8));
    f.ins(format!("@{converged} bra {done}"));
    f.ins(format!("bra {top}"));
    f.place(&series);
    let w = f.mov(Class::F32, &a);
    let bw = mul(f, &b, &w);
    let sm1 = sub(f, s, &k(1.0));
    let t = div(f, &bw, &sm1);
    f.ins(format!("add.rn.f32 {sum}, {sum}, {t}"));
    f.ins(format!("fma.rn.f32 {sum}, {b}, {}, {sum}", k(-0.5)));
    let fac = f.mov(Class::F32, &k(1.0));
    let kk = f.mov(Class::F32, &k(0.0));
    const DEN: [f64; 12] = [
        12.0,
        -720.0,
        30240.0,
        -1_209_600.0,
        47_900_160.0,
        -1.892_437_580_318_379_2e9,
        7.472_424_96e10,
        -2.950_130_727_918_164e12,
        1.164_678_281_435_006_7e14,
        -4.597_978_722_407_473e15,
        1.815_210_540_194_354_7e17,
        -7.166_165_256_175_667e18,
    ];
    for den in DEN {
        let sk = add(f, s, &kk);
        f.ins(format!("mul.rn.f32 {fac}, {fac}, {sk}"));
        f.ins(format!("div.rn.f32 {b}, {b}, {w}"));
        let t = mul(f, &fac, &b);
        let t = div(f, &t, &k(den));
        f.ins(format!("add.rn.f32 {sum}, {sum}, {t}"));
        let ratio = div(f, &t, &sum);
        let ratio = op1(f, "abs", &ratio);
        let converged = f.setp("lt", "f32", &ratio, &k(1e-8));
        f.ins(format!("@{converged} bra {done}"));
        f.ins(format!("add.rn.f32 {kk}, {kk}, {}", k(1.0)));
        let sk = add(f, s, &kk);
        f.ins(format!("mul.rn.f32 {fac}, {fac}, {sk}"));
        f.ins(format!("div.rn.f32 {b}, {b}, {w}"));
        f.ins(format!("add.rn.f32 {kk}, {kk}, {}", k(1.0)));
    }
    f.place(&done);
    // q at a pole (a non-positive integer): +inf.
    let pole = non_positive_integer(f, q);
    f.selp(Class::F32, &k(f64::INFINITY), &sum, &pole)
}

/// polygamma(n, x) = (−1)ⁿ⁺¹ n! ζ(n + 1, x) for n ≥ 1 (lowering sends n = 0
/// to digamma).
pub fn polygamma(f: &mut Func, n: &str, x: &str) -> String {
    let fact = f.mov(Class::F32, &k(1.0));
    let j = f.mov(Class::F32, &k(2.0));
    let (top, done) = (f.label("fact"), f.label("fact_end"));
    f.place(&top);
    let stop = f.setp("gtu", "f32", &j, n);
    // (j stops growing at 2^24: huge n overflows n! anyway.)
    let huge = f.setp("ge", "f32", &j, &k(16_777_216.0));
    f.ins(format!("or.pred {stop}, {stop}, {huge}"));
    f.ins(format!("@{stop} bra {done}"));
    f.ins(format!("mul.rn.f32 {fact}, {fact}, {j}"));
    f.ins(format!("add.rn.f32 {j}, {j}, {}", k(1.0)));
    f.ins(format!("bra {top}"));
    f.place(&done);
    let half = mul(f, n, &k(0.5));
    let fl = op1(f, "cvt.rmi.f32", &half);
    let twice = add(f, &fl, &fl);
    let odd = f.setp("neu", "f32", &twice, n);
    let sign = f.selp(Class::F32, &k(1.0), &k(-1.0), &odd);
    let s = add(f, n, &k(1.0));
    let z = zeta(f, &s, x);
    let r = mul(f, &sign, &fact);
    mul(f, &r, &z)
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

/// Float64 Horner of `c` (highest degree first) at `z`.
fn horner64(f: &mut Func, c: &[f64], z: &str) -> String {
    let low_first: Vec<f64> = c.iter().rev().copied().collect();
    f.horner(Class::F64, z, &low_first)
}

/// ndtri(p), the standard normal quantile of a float32 p, in float64:
/// Acklam's central fraction (`rdyn_ir::approx`, finer than float32 needs) for |p − ½| ≤ 0.47575, the tail fraction of
/// √(−2 ln p) (of 1 − p above, negated) beyond; 0 and 1 give ∓inf, p
/// outside [0, 1] or NaN gives NaN.
pub fn ndtri(f: &mut Func, p: &str) -> String {
    let p64 = f.reg(Class::F64);
    f.ins(format!("cvt.f64.f32 {p64}, {p}"));
    let c = f.op(Class::F64, "sub.rn", &[&p64, &d64(0.5)]);
    let r = f.op(Class::F64, "mul.rn", &[&c, &c]);
    let num = horner64(f, &NDTRI_ACKLAM[0], &r);
    let den = horner64(f, &NDTRI_ACKLAM[1], &r);
    let central = f.op(Class::F64, "mul.rn", &[&c, &num]);
    let central = f.op(Class::F64, "div.rn", &[&central, &den]);
    let high = f.setp("gt", "f64", &p64, &d64(1.0 - NDTRI_TAIL));
    let upper = f.op(Class::F64, "sub.rn", &[&d64(1.0), &p64]);
    let pt = f.selp(Class::F64, &upper, &p64, &high);
    let l = math64::log(f, &pt);
    let q = f.op(Class::F64, "mul.rn", &[&l, &d64(-2.0)]);
    let q = f.op(Class::F64, "sqrt.rn", &[&q]);
    let num = horner64(f, &NDTRI_ACKLAM[2], &q);
    let den = horner64(f, &NDTRI_ACKLAM[3], &q);
    let tail = f.op(Class::F64, "div.rn", &[&num, &den]);
    let neg_tail = f.op(Class::F64, "neg", &[&tail]);
    let tail = f.selp(Class::F64, &neg_tail, &tail, &high);
    let low = f.setp("lt", "f64", &p64, &d64(NDTRI_TAIL));
    let in_tail = f.pred("or", &low, &high);
    let x = f.selp(Class::F64, &tail, &central, &in_tail);
    let out = f.reg(Class::F32);
    f.ins(format!("cvt.rn.f32.f64 {out}, {x}"));
    let zero = f.setp("eq", "f32", p, &k(0.0));
    let out = f.selp(Class::F32, &k(f64::NEG_INFINITY), &out, &zero);
    let one = f.setp("eq", "f32", p, &k(1.0));
    let out = f.selp(Class::F32, &k(f64::INFINITY), &out, &one);
    // NaN, or outside [0, 1].
    let inside = f.setp("le", "f32", p, &k(1.0));
    let nonneg = f.setp("ge", "f32", p, &k(0.0));
    let valid = f.pred("and", &inside, &nonneg);
    f.selp(Class::F32, &out, &k(f64::NAN), &valid)
}
