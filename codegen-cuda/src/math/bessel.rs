//! Bessel functions of a float32 value as PTX, computed in float64: I0/I1
//! (as the CPU backend does: power series to |x| = 20, the large-argument
//! expansion beyond), J0/J1 and Y0/Y1 (power series to |x| = 12, Hankel's
//! expansion beyond), K0/K1 and their scaled forms (power series to x = 9,
//! the large-argument expansion beyond), and Airy Ai (Maclaurin series,
//! then its large-argument expansions). The power series of Y and K are
//! the standard ones in ln(x/2) + γ and harmonic numbers; every series runs
//! until its terms are negligible. Loops are branches.

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
/// Where K switches to its expansion (smallest term about e^(−2x), 1.5e-8
/// at 9): below, the series' cancellation against I costs I(x)/K(x)·ε,
/// under 1e-8 at 9.
const K_ASYMPTOTIC: f64 = 9.0;

fn dd(f: &mut Func, op: &str, a: &str, b: &str) -> String {
    f.op(Class::F64, op, &[a, b])
}

/// I0 or I1 (`nu`), plain or scaled by e^(−|x|), of a float32 value:
/// computed in float64 as the CPU backend does (power series to |x| = 20,
/// the large-argument expansion beyond).
pub fn bessel_i(f: &mut Func, x: &str, nu: u32, scaled: bool) -> String {
    const SQRT_2PI: f64 = 2.506_628_274_631_000_5;
    let x64 = f.reg(Class::F64);
    f.ins(format!("cvt.f64.f32 {x64}, {x}"));
    let ax = f.op(Class::F64, "abs", &[&x64]);
    let r = f.reg(Class::F64);
    let (asym, done) = (f.label("bessel_asym"), f.label("bessel_done"));
    let small = f.setp("le", "f64", &ax, &d64(20.0));
    f.ins(format!("@!{small} bra {asym}"));
    // Σ y^k / (k! (k+ν)!) with y = x²/4, until a term is negligible.
    let q = dd(f, "mul.rn", &d64(0.25), &ax);
    let y = dd(f, "mul.rn", &q, &ax);
    let (term, sum) = (f.mov(Class::F64, &d64(1.0)), f.mov(Class::F64, &d64(1.0)));
    series(f, 1.0, 200.0, |f, kf, out| {
        let kn = dd(f, "add.rn", kf, &d64(f64::from(nu)));
        let den = dd(f, "mul.rn", kf, &kn);
        let ratio = dd(f, "div.rn", &y, &den);
        f.ins(format!("mul.rn.f64 {term}, {term}, {ratio}"));
        f.ins(format!("add.rn.f64 {sum}, {sum}, {term}"));
        let lim = dd(f, "mul.rn", &d64(0.1 * EPS), &sum);
        let stop = f.setp("lt", "f64", &term, &lim);
        f.ins(format!("@{stop} bra {out}"));
    });
    let factor = if nu == 0 { d64(1.0) } else { dd(f, "mul.rn", &d64(0.5), &ax) };
    f.ins(format!("mul.rn.f64 {r}, {sum}, {factor}"));
    if scaled {
        let nax = f.op(Class::F64, "neg", &[&ax]);
        let e = math64::exp(f, &nax);
        f.ins(format!("mul.rn.f64 {r}, {e}, {r}"));
    }
    f.ins(format!("bra {done}"));
    // √(2πx)·e^(−x)·I_ν(x) ~ Σ_k Π_{j≤k} ((2j−1)² − 4ν²)/(8jx).
    f.place(&asym);
    let mu = d64(f64::from(4 * nu * nu));
    let (term, sum) = (f.mov(Class::F64, &d64(1.0)), f.mov(Class::F64, &d64(1.0)));
    series(f, 1.0, 80.0, |f, j, out| {
        let odd = f.op(Class::F64, "fma.rn", &[j, &d64(2.0), &d64(-1.0)]);
        let sq = dd(f, "mul.rn", &odd, &odd);
        let num = dd(f, "sub.rn", &sq, &mu);
        let t = dd(f, "mul.rn", &term, &num);
        let eight_j = dd(f, "mul.rn", &d64(8.0), j);
        let den = dd(f, "mul.rn", &eight_j, &ax);
        let next = dd(f, "div.rn", &t, &den);
        let (an, at) = (f.op(Class::F64, "abs", &[&next]), f.op(Class::F64, "abs", &[&term]));
        let grows = f.setp("gt", "f64", &an, &at);
        f.ins(format!("@{grows} bra {out}"));
        f.ins(format!("mov.f64 {term}, {next}"));
        f.ins(format!("add.rn.f64 {sum}, {sum}, {term}"));
        let (a_t, a_s) = (f.op(Class::F64, "abs", &[&term]), f.op(Class::F64, "abs", &[&sum]));
        let lim = dd(f, "mul.rn", &d64(0.1 * EPS), &a_s);
        let stop = f.setp("lt", "f64", &a_t, &lim);
        f.ins(format!("@{stop} bra {out}"));
    });
    let sx = f.op(Class::F64, "sqrt.rn", &[&ax]);
    let den = dd(f, "mul.rn", &d64(SQRT_2PI), &sx);
    f.ins(format!("div.rn.f64 {r}, {sum}, {den}"));
    if !scaled {
        let e = math64::exp(f, &ax);
        f.ins(format!("mul.rn.f64 {r}, {e}, {r}"));
    }
    f.place(&done);
    if nu == 1 {
        // I1 is odd; −0 maps to +0 as in PyTorch.
        let neg = f.setp("lt", "f64", &x64, &d64(0.0));
        f.ins(format!("@{neg} neg.f64 {r}, {r}"));
    }
    let out = f.reg(Class::F32);
    f.ins(format!("cvt.rn.f32.f64 {out}, {r}"));
    out
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

/// The power series of order `n` at y = x²/4: S = Σ s^k y^k/(k!(k+n)!) and
/// H = Σ h_k s^k y^k/(k!(k+n)!), with s = −1 (`alternating`, J and Y) or 1
/// (I and K) and h_k = H_k (n = 0) or H_k + H_(k+1) (n = 1), H_k the
/// harmonic numbers.
fn power_series(f: &mut Func, ax: &str, n: u32, alternating: bool) -> (String, String) {
    let q = dd(f, "mul.rn", &d64(0.25), ax);
    let ay = dd(f, "mul.rn", &q, ax);
    let y = if alternating { f.op(Class::F64, "neg", &[&ay]) } else { ay.clone() };
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
/// grows (the series is asymptotic). `hankel`: (P, Q) with P = t0 − t2 + t4
/// − … and Q = t1 − t3 + …; otherwise (Σ t_k, unused).
fn expansion(f: &mut Func, ax: &str, n: u32, hankel: bool) -> (String, String) {
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
        if hankel {
            // k even: the sign flips and the term goes to P; k odd: to Q.
            let half = dd(f, "mul.rn", kf, &d64(0.5));
            let fl = f.op(Class::F64, "cvt.rmi.f64", &[&half]);
            let even = f.setp("eq", "f64", &fl, &half);
            f.ins(format!("@{even} neg.f64 {sign}, {sign}"));
            let signed = dd(f, "mul.rn", &sign, &term);
            f.ins(format!("@{even} add.rn.f64 {p}, {p}, {signed}"));
            f.ins(format!("@!{even} add.rn.f64 {q}, {q}, {signed}"));
        } else {
            f.ins(format!("add.rn.f64 {p}, {p}, {term}"));
        }
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
    let (s, h) = power_series(f, &ax, n, true);
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
    let (p, q) = expansion(f, &ax, n, true);
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

/// K_n (n = 0, 1) of a float32 value, or e^x·K_n (`scaled`). As PyTorch:
/// NaN below 0, +inf at 0, 0 at +inf.
pub(crate) fn bessel_k(f: &mut Func, x: &str, n: u32, scaled: bool) -> String {
    let x64 = f.reg(Class::F64);
    f.ins(format!("cvt.f64.f32 {x64}, {x}"));
    let r = f.reg(Class::F64);
    let (asym, done) = (f.label("bessel_k_asym"), f.label("bessel_k_done"));
    let small = f.setp("le", "f64", &x64, &d64(K_ASYMPTOTIC));
    f.ins(format!("@!{small} bra {asym}"));
    // L = ln(x/2) + γ; K0 = H − L·S, K1 = 1/x + L·(x/2)·S − (x/4)·H.
    let (s, h) = power_series(f, &x64, n, false);
    let half = dd(f, "mul.rn", &x64, &d64(0.5));
    let ln = math64::log(f, &half);
    let l = dd(f, "add.rn", &ln, &d64(EULER_GAMMA));
    if n == 0 {
        let ls = dd(f, "mul.rn", &l, &s);
        f.ins(format!("sub.rn.f64 {r}, {h}, {ls}"));
    } else {
        let i1 = dd(f, "mul.rn", &half, &s);
        let li = dd(f, "mul.rn", &l, &i1);
        let inv = dd(f, "div.rn", &d64(1.0), &x64);
        let a = dd(f, "add.rn", &inv, &li);
        let xh = dd(f, "mul.rn", &x64, &h);
        f.ins(format!("fma.rn.f64 {r}, {xh}, {}, {a}", d64(-0.25)));
    }
    if scaled {
        let e = math64::exp(f, &x64);
        f.ins(format!("mul.rn.f64 {r}, {r}, {e}"));
    }
    f.ins(format!("bra {done}"));
    // e^x·K_n(x) ~ √(π/(2x))·Σ t_k.
    f.place(&asym);
    let (sum, _) = expansion(f, &x64, n, false);
    let twice = dd(f, "mul.rn", &x64, &d64(2.0));
    let ratio = dd(f, "div.rn", &d64(PI), &twice);
    let amp = f.op(Class::F64, "sqrt.rn", &[&ratio]);
    f.ins(format!("mul.rn.f64 {r}, {amp}, {sum}"));
    if !scaled {
        let nx = f.op(Class::F64, "neg", &[&x64]);
        let e = math64::exp(f, &nx);
        f.ins(format!("mul.rn.f64 {r}, {r}, {e}"));
    }
    f.place(&done);
    let neg = f.setp("lt", "f64", &x64, &d64(0.0));
    let is_nan = f.setp("nan", "f64", &x64, &x64);
    let bad = f.pred("or", &neg, &is_nan);
    f.ins(format!("@{bad} mov.f64 {r}, {}", d64(f64::NAN)));
    let zero = f.setp("eq", "f64", &x64, &d64(0.0));
    f.ins(format!("@{zero} mov.f64 {r}, {}", d64(f64::INFINITY)));
    let inf = f.setp("eq", "f64", &x64, &d64(f64::INFINITY));
    f.ins(format!("@{inf} mov.f64 {r}, {}", d64(0.0)));
    let out = f.reg(Class::F32);
    f.ins(format!("cvt.rn.f32.f64 {out}, {r}"));
    out
}

/// Airy Ai of a float32 value, in float64 as the CPU backend computes it:
/// the Maclaurin series on `AIRY_SERIES`, beyond it the large-argument
/// expansions in ζ = (2/3)|x|^(3/2) (decaying for x > 0, oscillating for
/// x < 0, with the float64 sin and cos of ζ). NaN at ±inf, as PyTorch.
pub(crate) fn airy_ai(f: &mut Func, x: &str) -> String {
    use rdyn_ir::approx::{AIRY_AI0, AIRY_DAI0, AIRY_SERIES};
    let x64 = f.reg(Class::F64);
    f.ins(format!("cvt.f64.f32 {x64}, {x}"));
    let r = f.reg(Class::F64);
    let (asym, done) = (f.label("airy_asym"), f.label("airy_done"));
    let below = f.setp("lt", "f64", &x64, &d64(AIRY_SERIES.0));
    let above = f.setp("gt", "f64", &x64, &d64(AIRY_SERIES.1));
    let outside = f.pred("or", &below, &above);
    f.ins(format!("@{outside} bra {asym}"));
    // f = Σ t_k, t_k = t_(k−1)·x³/((3k−1)·3k); g = Σ u_k from x,
    // u_k = u_(k−1)·x³/(3k·(3k+1)).
    let x2 = dd(f, "mul.rn", &x64, &x64);
    let x3 = dd(f, "mul.rn", &x2, &x64);
    let (t, u) = (f.mov(Class::F64, &d64(1.0)), f.mov(Class::F64, &x64));
    let (sf, sg) = (f.mov(Class::F64, &d64(1.0)), f.mov(Class::F64, &x64));
    series(f, 1.0, 200.0, |f, kf, out| {
        let k3 = dd(f, "mul.rn", kf, &d64(3.0));
        let km = dd(f, "sub.rn", &k3, &d64(1.0));
        let kp = dd(f, "add.rn", &k3, &d64(1.0));
        let dt = dd(f, "mul.rn", &km, &k3);
        let du = dd(f, "mul.rn", &k3, &kp);
        let rt = dd(f, "div.rn", &x3, &dt);
        let ru = dd(f, "div.rn", &x3, &du);
        f.ins(format!("mul.rn.f64 {t}, {t}, {rt}"));
        f.ins(format!("mul.rn.f64 {u}, {u}, {ru}"));
        f.ins(format!("add.rn.f64 {sf}, {sf}, {t}"));
        f.ins(format!("add.rn.f64 {sg}, {sg}, {u}"));
        let (at, au) = (f.op(Class::F64, "abs", &[&t]), f.op(Class::F64, "abs", &[&u]));
        let size = dd(f, "add.rn", &at, &au);
        let (af, ag) = (f.op(Class::F64, "abs", &[&sf]), f.op(Class::F64, "abs", &[&sg]));
        let total = dd(f, "add.rn", &af, &ag);
        let lim = dd(f, "mul.rn", &total, &d64(0.1 * EPS));
        let small = f.setp("lt", "f64", &size, &lim);
        f.ins(format!("@{small} bra {out}"));
    });
    let g = dd(f, "mul.rn", &sg, &d64(-AIRY_DAI0));
    f.ins(format!("fma.rn.f64 {r}, {sf}, {}, {g}", d64(AIRY_AI0)));
    f.ins(format!("bra {done}"));
    f.place(&asym);
    let z = f.op(Class::F64, "abs", &[&x64]);
    let sz = f.op(Class::F64, "sqrt.rn", &[&z]);
    let z32 = dd(f, "mul.rn", &z, &sz);
    let zeta = dd(f, "mul.rn", &z32, &d64(2.0 / 3.0));
    let positive = f.setp("gt", "f64", &x64, &d64(0.0));
    // Terms u_k/ζ^k: for x > 0 all into `even` with alternating signs;
    // for x < 0, P (even k) and Q (odd k), signs + − by pairs.
    let term = f.mov(Class::F64, &d64(1.0));
    let (even, odd) = (f.mov(Class::F64, &d64(1.0)), f.mov(Class::F64, &d64(0.0)));
    series(f, 1.0, 100.0, |f, kf, out| {
        // `rdyn_ir::approx::airy_u_ratio(k)`, over ζ:
        // (6k−5)(6k−3)(6k−1)/((2k−1)·216·k·ζ).
        let k6 = dd(f, "mul.rn", kf, &d64(6.0));
        let a = dd(f, "sub.rn", &k6, &d64(5.0));
        let b = dd(f, "sub.rn", &k6, &d64(3.0));
        let c = dd(f, "sub.rn", &k6, &d64(1.0));
        let num = dd(f, "mul.rn", &a, &b);
        let num = dd(f, "mul.rn", &num, &c);
        let k2 = f.op(Class::F64, "fma.rn", &[kf, &d64(2.0), &d64(-1.0)]);
        let den = dd(f, "mul.rn", &k2, kf);
        let den = dd(f, "mul.rn", &den, &d64(216.0));
        let den = dd(f, "mul.rn", &den, &zeta);
        let ratio = dd(f, "div.rn", &num, &den);
        let next = dd(f, "mul.rn", &term, &ratio);
        let grows = f.setp("gt", "f64", &next, &term);
        f.ins(format!("@{grows} bra {out}"));
        f.ins(format!("mov.f64 {term}, {next}"));
        // k mod 4 from the float counter (exact).
        let quarter = dd(f, "mul.rn", kf, &d64(0.25));
        let fl = f.op(Class::F64, "cvt.rmi.f64", &[&quarter]);
        let m = f.op(Class::F64, "fma.rn", &[&fl, &d64(-4.0), kf]);
        let m1 = f.setp("eq", "f64", &m, &d64(1.0));
        let m3 = f.setp("eq", "f64", &m, &d64(3.0));
        let k_odd = f.pred("or", &m1, &m3);
        let high = f.setp("ge", "f64", &m, &d64(2.0));
        // Minus: x > 0 for odd k ((−1)^k); x < 0 for k mod 4 in {2, 3}.
        let p1 = f.pred("and", &positive, &k_odd);
        let p2 = f.pred("and", &format!("!{positive}"), &high);
        let minus = f.pred("or", &p1, &p2);
        let neg_term = f.op(Class::F64, "neg", &[&term]);
        let signed = f.selp(Class::F64, &neg_term, &term, &minus);
        let to_odd = f.pred("and", &k_odd, &format!("!{positive}"));
        f.ins(format!("@{to_odd} add.rn.f64 {odd}, {odd}, {signed}"));
        f.ins(format!("@!{to_odd} add.rn.f64 {even}, {even}, {signed}"));
        let small = f.setp("lt", "f64", &term, &d64(0.1 * EPS));
        f.ins(format!("@{small} bra {out}"));
    });
    let qz = f.op(Class::F64, "sqrt.rn", &[&sz]);
    let scale = dd(f, "div.rn", &d64(1.0 / PI.sqrt()), &qz);
    // x > 0: ½·scale·e^(−ζ)·Σ.
    let nz = f.op(Class::F64, "neg", &[&zeta]);
    let e = math64::exp(f, &nz);
    let dec = dd(f, "mul.rn", &scale, &e);
    let dec = dd(f, "mul.rn", &dec, &even);
    let dec = dd(f, "mul.rn", &dec, &d64(0.5));
    // x < 0: scale/√2·((cos ζ + sin ζ)·P + (sin ζ − cos ζ)·Q).
    let (sin, cos) = sincos64(f, &zeta);
    let plus = dd(f, "add.rn", &cos, &sin);
    let minus = dd(f, "sub.rn", &sin, &cos);
    let qm = dd(f, "mul.rn", &minus, &odd);
    let osc = f.op(Class::F64, "fma.rn", &[&plus, &even, &qm]);
    let osc = dd(f, "mul.rn", &osc, &scale);
    let osc = dd(f, "mul.rn", &osc, &d64(FRAC_1_SQRT_2));
    f.ins(format!("selp.f64 {r}, {dec}, {osc}, {positive}"));
    f.place(&done);
    let ax = f.op(Class::F64, "abs", &[&x64]);
    let bad = f.setp("equ", "f64", &ax, &d64(f64::INFINITY));
    f.ins(format!("@{bad} mov.f64 {r}, {}", d64(f64::NAN)));
    let out = f.reg(Class::F32);
    f.ins(format!("cvt.rn.f32.f64 {out}, {r}"));
    out
}
