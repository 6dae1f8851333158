//! Bessel functions J0/J1 and Y0/Y1 of a float32 value as PTX, computed in
//! float64 (power series to |x| = 12, Hankel's expansion beyond; the power
//! series of Y is the standard one in ln(x/2) + γ and harmonic numbers;
//! every series runs until its terms are negligible; loops are branches),
//! and the float64 sin and cos they and `scalar.rs` use. They stay here,
//! not in `rdyn_ir::special`, because the CPU backend takes J and Y from
//! libm. Bessel I and K and Airy Ai are written once in `rdyn_ir::special`
//! (`scalar.rs` translates them).

use crate::math::math64;
use crate::ptx::arith::series;
use crate::ptx::func::{f64_imm as d64, Class, Func};

const EPS: f64 = 1.110_223_024_625_156_5e-16;
const EULER_GAMMA: f64 = 0.577_215_664_901_532_9;
const PI: f64 = std::f64::consts::PI;
const FRAC_1_SQRT_2: f64 = std::f64::consts::FRAC_1_SQRT_2;
/// Where J and Y switch to Hankel's expansion: its smallest term is about
/// e^(−2x), 4e-11 at 12; the power series' largest term there is 4e3.
const JY_ASYMPTOTIC: f64 = 12.0;

fn dd(f: &mut Func, op: &str, a: &str, b: &str) -> String {
    f.op(Class::F64, op, &[a, b])
}

/// π/2 in four parts (fdlibm's 33-bit splits, then the tail), for the
/// FMA reduction x − n·π/2.
const PIO2: [f64; 4] = [
    f64::from_bits(0x3FF9_21FB_5440_0000),
    f64::from_bits(0x3DD0_B461_1A60_0000),
    f64::from_bits(0x3BA3_198A_2E00_0000),
    f64::from_bits(0x397B_839A_2520_49C1),
];

/// Reduction passes. One suffices below about 2^52, where the remainder
/// is accurate to about 1e-16; up to about 2^62 the first pass leaves a
/// remainder of up to a few hundred, accurate to about 1e-8, which the
/// second brings into [−π/4, π/4]; beyond, each pass shrinks it by about
/// 6e-11, so four bring any float32 argument into range, with its phase
/// lost: J and Y are then below 4e-10 in magnitude, and the result stays
/// within their amplitude.
const PASSES: usize = 4;

/// (sin x, cos x) in float64: the π/2 reduction (`PASSES` times, the
/// quadrant counted mod 4), Taylor polynomials on |r| ≤ π/4 (to r¹⁷ and
/// r¹⁸), then the quadrant.
pub(crate) fn sincos64(f: &mut Func, x: &str) -> (String, String) {
    let mut r = x.to_string();
    let q = f.mov(Class::F64, &d64(0.0));
    for _ in 0..PASSES {
        let t = dd(f, "mul.rn", &r, &d64(2.0 / PI));
        let n = f.op(Class::F64, "cvt.rni.f64", &[&t]);
        let nn = f.op(Class::F64, "neg", &[&n]);
        for part in PIO2 {
            r = f.op(Class::F64, "fma.rn", &[&nn, &d64(part), &r]);
        }
        // q += n mod 4, exact for any integral float64.
        let quarter = dd(f, "mul.rn", &n, &d64(0.25));
        let fl = f.op(Class::F64, "cvt.rmi.f64", &[&quarter]);
        let m = f.op(Class::F64, "fma.rn", &[&fl, &d64(-4.0), &n]);
        f.ins(format!("add.rn.f64 {q}, {q}, {m}"));
    }
    // Bounded whatever happened above (NaN inputs, which callers override,
    // become a bound).
    let r = dd(f, "min", &r, &d64(PI / 4.0));
    let r = dd(f, "max", &r, &d64(-PI / 4.0));
    let quarter = dd(f, "mul.rn", &q, &d64(0.25));
    let fl = f.op(Class::F64, "cvt.rmi.f64", &[&quarter]);
    let q = f.op(Class::F64, "fma.rn", &[&fl, &d64(-4.0), &q]);
    let z = dd(f, "mul.rn", &r, &r);
    let fact = |k: u32| (1..=k).map(f64::from).product::<f64>();
    let sign = |k: u32| if k.is_multiple_of(2) { 1.0 } else { -1.0 };
    let sc: Vec<f64> = (1..=8).map(|k| sign(k) / fact(2 * k + 1)).collect();
    let cc: Vec<f64> = (0..=9).map(|k| sign(k) / fact(2 * k)).collect();
    let sp = f.horner(Class::F64, &z, &sc);
    let sp = dd(f, "mul.rn", &sp, &z);
    let s = f.op(Class::F64, "fma.rn", &[&sp, &r, &r]);
    let c = f.horner(Class::F64, &z, &cc);
    let odd = f.setp("eq", "f64", &q, &d64(1.0));
    let q3 = f.setp("eq", "f64", &q, &d64(3.0));
    let odd = f.pred("or", &odd, &q3);
    let q2 = f.setp("ge", "f64", &q, &d64(2.0));
    let sin = f.selp(Class::F64, &c, &s, &odd);
    let cos = f.selp(Class::F64, &s, &c, &odd);
    let nsin = f.op(Class::F64, "neg", &[&sin]);
    let sin = f.selp(Class::F64, &nsin, &sin, &q2);
    // cos flips in quadrants 1 and 2.
    let flip = f.pred("xor", &odd, &q2);
    let ncos = f.op(Class::F64, "neg", &[&cos]);
    let cos = f.selp(Class::F64, &ncos, &cos, &flip);
    (sin, cos)
}

/// The power series of order `n` at y = x²/4: S = Σ (−1)^k y^k/(k!(k+n)!)
/// and H = Σ h_k (−1)^k y^k/(k!(k+n)!), with h_k = H_k (n = 0) or
/// H_k + H_(k+1) (n = 1), H_k the harmonic numbers.
fn power_series(f: &mut Func, ax: &str, n: u32) -> (String, String) {
    let q = dd(f, "mul.rn", &d64(0.25), ax);
    let ay = dd(f, "mul.rn", &q, ax);
    let y = f.op(Class::F64, "neg", &[&ay]);
    let term = f.mov(Class::F64, &d64(1.0));
    let s = f.mov(Class::F64, &d64(1.0));
    let h = f.mov(Class::F64, &d64(if n == 0 { 0.0 } else { 1.0 }));
    let harmonic = f.mov(Class::F64, &d64(0.0));
    series(f, 1.0, 120.0, |f, kf, out| {
        let kn = dd(f, "add.rn", kf, &d64(f64::from(n)));
        let den = dd(f, "mul.rn", kf, &kn);
        let ratio = dd(f, "div.rn", &y, &den);
        f.ins(format!("mul.rn.f64 {term}, {term}, {ratio}"));
        let inv = dd(f, "div.rn", &d64(1.0), kf);
        f.ins(format!("add.rn.f64 {harmonic}, {harmonic}, {inv}"));
        let hk = if n == 0 {
            harmonic.clone()
        } else {
            let k1 = dd(f, "add.rn", kf, &d64(1.0));
            let inv1 = dd(f, "div.rn", &d64(1.0), &k1);
            f.op(Class::F64, "fma.rn", &[&harmonic, &d64(2.0), &inv1])
        };
        f.ins(format!("add.rn.f64 {s}, {s}, {term}"));
        f.ins(format!("fma.rn.f64 {h}, {hk}, {term}, {h}"));
        // Negligible once |term|·(1 + h_k) < ε/10·(1 + |S|); terms only
        // shrink once k(k+n) > |y|, and they are compared only then.
        let shrinking = f.setp("gt", "f64", &den, &ay);
        let at = f.op(Class::F64, "abs", &[&term]);
        let weight = dd(f, "add.rn", &hk, &d64(1.0));
        let size = dd(f, "mul.rn", &at, &weight);
        let as_ = f.op(Class::F64, "abs", &[&s]);
        let scale = dd(f, "add.rn", &as_, &d64(1.0));
        let lim = dd(f, "mul.rn", &scale, &d64(0.1 * EPS));
        let small = f.setp("lt", "f64", &size, &lim);
        let stop = f.pred("and", &small, &shrinking);
        f.ins(format!("@{stop} bra {out}"));
    });
    (s, h)
}

/// The large-argument expansion of order `n` at ax: the terms
/// t_k = t_(k−1)·(4n² − (2k−1)²)/(8k·ax), summed until one is negligible or
/// grows (the series is asymptotic): (P, Q) with P = t0 − t2 + t4 − … and
/// Q = t1 − t3 + ….
fn expansion(f: &mut Func, ax: &str, n: u32) -> (String, String) {
    let mu = d64(f64::from(4 * n * n));
    let term = f.mov(Class::F64, &d64(1.0));
    let (p, q) = (f.mov(Class::F64, &d64(1.0)), f.mov(Class::F64, &d64(0.0)));
    // Hankel's signs: + + − − + + … for k = 0, 1, 2, …
    let sign = f.mov(Class::F64, &d64(1.0));
    series(f, 1.0, 80.0, |f, kf, out| {
        let odd = f.op(Class::F64, "fma.rn", &[kf, &d64(2.0), &d64(-1.0)]);
        let sq = dd(f, "mul.rn", &odd, &odd);
        let num = dd(f, "sub.rn", &mu, &sq);
        let t = dd(f, "mul.rn", &term, &num);
        let eight_k = dd(f, "mul.rn", &d64(8.0), kf);
        let den = dd(f, "mul.rn", &eight_k, ax);
        let next = dd(f, "div.rn", &t, &den);
        let (an, at) = (f.op(Class::F64, "abs", &[&next]), f.op(Class::F64, "abs", &[&term]));
        let grows = f.setp("gt", "f64", &an, &at);
        f.ins(format!("@{grows} bra {out}"));
        f.ins(format!("mov.f64 {term}, {next}"));
        // k even: the sign flips and the term goes to P; k odd: to Q.
        let half = dd(f, "mul.rn", kf, &d64(0.5));
        let fl = f.op(Class::F64, "cvt.rmi.f64", &[&half]);
        let even = f.setp("eq", "f64", &fl, &half);
        f.ins(format!("@{even} neg.f64 {sign}, {sign}"));
        let signed = dd(f, "mul.rn", &sign, &term);
        f.ins(format!("@{even} add.rn.f64 {p}, {p}, {signed}"));
        f.ins(format!("@!{even} add.rn.f64 {q}, {q}, {signed}"));
        let small = f.setp("lt", "f64", &an, &d64(0.1 * EPS));
        f.ins(format!("@{small} bra {out}"));
    });
    (p, q)
}

/// Which Bessel function of the first or second kind.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    J,
    Y,
}

/// J_n or Y_n (n = 0, 1) of a float32 value. As PyTorch: J(±inf) and
/// Y(+inf) are NaN, Y(±0) = −inf, Y of a negative number is NaN; J0 is even
/// and J1 odd.
pub(crate) fn bessel_jy(f: &mut Func, x: &str, n: u32, kind: Kind) -> String {
    let x64 = f.reg(Class::F64);
    f.ins(format!("cvt.f64.f32 {x64}, {x}"));
    let ax = f.op(Class::F64, "abs", &[&x64]);
    let r = f.reg(Class::F64);
    let (asym, done) = (f.label("bessel_hankel"), f.label("bessel_done"));
    let small = f.setp("le", "f64", &ax, &d64(JY_ASYMPTOTIC));
    f.ins(format!("@!{small} bra {asym}"));
    let (s, h) = power_series(f, &ax, n);
    let half = dd(f, "mul.rn", &ax, &d64(0.5));
    let j = if n == 0 { s.clone() } else { dd(f, "mul.rn", &half, &s) };
    if kind == Kind::J {
        f.ins(format!("mov.f64 {r}, {j}"));
    } else {
        // L = ln(x/2) + γ; Y0 = (2/π)(L·S − H),
        // Y1 = −2/(πx) + (2/π)·L·J1 − (x/(2π))·H.
        let ln = math64::log(f, &half);
        let l = dd(f, "add.rn", &ln, &d64(EULER_GAMMA));
        if n == 0 {
            let lj = dd(f, "mul.rn", &l, &j);
            let diff = dd(f, "sub.rn", &lj, &h);
            f.ins(format!("mul.rn.f64 {r}, {diff}, {}", d64(2.0 / PI)));
        } else {
            let lj = dd(f, "mul.rn", &l, &j);
            let a = dd(f, "mul.rn", &lj, &d64(2.0 / PI));
            let inv = dd(f, "div.rn", &d64(-2.0 / PI), &ax);
            let a = dd(f, "add.rn", &a, &inv);
            let xh = dd(f, "mul.rn", &ax, &h);
            f.ins(format!("fma.rn.f64 {r}, {xh}, {}, {a}", d64(-0.5 / PI)));
        }
    }
    f.ins(format!("bra {done}"));
    // √(2/(πx))·(P cos χ − Q sin χ) for J, (P sin χ + Q cos χ) for Y, with
    // χ = x − π/4 (n = 0) or x − 3π/4 (n = 1) taken from sin x and cos x.
    f.place(&asym);
    let (p, q) = expansion(f, &ax, n);
    let (sin, cos) = sincos64(f, &ax);
    let plus = dd(f, "add.rn", &sin, &cos);
    let minus = dd(f, "sub.rn", &sin, &cos);
    let (cos_chi, sin_chi) = if n == 0 {
        (plus, minus)
    } else {
        let nplus = f.op(Class::F64, "neg", &[&plus]);
        (minus, nplus)
    };
    let v = if kind == Kind::J {
        let qs = dd(f, "mul.rn", &q, &sin_chi);
        let nqs = f.op(Class::F64, "neg", &[&qs]);
        f.op(Class::F64, "fma.rn", &[&p, &cos_chi, &nqs])
    } else {
        let qc = dd(f, "mul.rn", &q, &cos_chi);
        f.op(Class::F64, "fma.rn", &[&p, &sin_chi, &qc])
    };
    let px = dd(f, "mul.rn", &d64(PI), &ax);
    let amp = dd(f, "div.rn", &d64(2.0), &px);
    let amp = f.op(Class::F64, "sqrt.rn", &[&amp]);
    let amp = dd(f, "mul.rn", &amp, &d64(FRAC_1_SQRT_2));
    f.ins(format!("mul.rn.f64 {r}, {amp}, {v}"));
    f.place(&done);
    let nan = d64(f64::NAN);
    let is_inf = f.setp("eq", "f64", &ax, &d64(f64::INFINITY));
    if kind == Kind::J {
        if n == 1 {
            // J1 is odd, −0 included (its sign bit).
            let bits = f.reg(Class::S64);
            f.ins(format!("mov.b64 {bits}, {x64}"));
            let neg = f.setp("lt", "s64", &bits, "0");
            f.ins(format!("@{neg} neg.f64 {r}, {r}"));
        }
        f.ins(format!("@{is_inf} mov.f64 {r}, {nan}"));
    } else {
        let neg = f.setp("lt", "f64", &x64, &d64(0.0));
        let bad = f.pred("or", &neg, &is_inf);
        f.ins(format!("@{bad} mov.f64 {r}, {nan}"));
        let zero = f.setp("eq", "f64", &x64, &d64(0.0));
        f.ins(format!("@{zero} mov.f64 {r}, {}", d64(f64::NEG_INFINITY)));
    }
    let is_nan = f.setp("nan", "f64", &x64, &x64);
    f.ins(format!("@{is_nan} mov.f64 {r}, {nan}"));
    let out = f.reg(Class::F32);
    f.ins(format!("cvt.rn.f32.f64 {out}, {r}"));
    out
}
