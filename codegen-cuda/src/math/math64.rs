//! float64 exp and log in software (PTX has no float64 transcendentals),
//! and what is built on them: expm1, log1p, pow, tanh, sigmoid for float64,
//! and float32 pow computed in float64.
//!
//! log: x = m·2ᵉ with m in [√½, √2), ln m = 2·atanh((m−1)/(m+1)) as a series;
//! exp: n = round(x/ln 2), a two-part ln 2 reduction, a Taylor polynomial,
//! then the scale 2ⁿ applied in two steps so it never overflows early.

use crate::ptx::func::{f64_imm, Class, Func};

/// ln 2 split so that n·LN2_HI is exact for |n| < 2¹¹ (fdlibm's split).
const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
const LN2_LO: f64 = f64::from_bits(0x3DEA_39EF_3579_3C76);

fn d(v: f64) -> String {
    f64_imm(v)
}

fn op2(f: &mut Func, op: &str, a: &str, b: &str) -> String {
    f.op(Class::F64, op, &[a, b])
}

fn fma(f: &mut Func, a: &str, b: &str, c: &str) -> String {
    f.op(Class::F64, "fma.rn", &[a, b, c])
}

fn poly(f: &mut Func, z: &str, c: &[f64]) -> String {
    f.horner(Class::F64, z, c)
}

/// 2ⁿ for an integer-valued float64 `n` in [−1022, 1023], built from bits.
fn pow2(f: &mut Func, n: &str) -> String {
    let i = f.reg(Class::S64);
    f.ins(format!("cvt.rzi.s64.f64 {i}, {n}"));
    f.ins(format!("add.s64 {i}, {i}, 1023"));
    f.ins(format!("shl.b64 {i}, {i}, 52"));
    let r = f.reg(Class::F64);
    f.ins(format!("mov.b64 {r}, {i}"));
    r
}

pub fn exp(f: &mut Func, x: &str) -> String {
    let c = f.reg(Class::F64);
    f.ins(format!("min.f64 {c}, {x}, {}", d(710.0)));
    f.ins(format!("max.f64 {c}, {c}, {}", d(-746.0)));
    let t = op2(f, "mul.rn", &c, &d(std::f64::consts::LOG2_E));
    let n = f.reg(Class::F64);
    f.ins(format!("cvt.rni.f64.f64 {n}, {t}"));
    let r = fma(f, &n, &d(-LN2_HI), &c);
    let r = fma(f, &n, &d(-LN2_LO), &r);
    let inv: Vec<f64> = (0..=13)
        .scan(1.0, |acc, k| {
            if k > 0 {
                *acc /= k as f64;
            }
            Some(*acc)
        })
        .collect();
    let e = poly(f, &r, &inv);
    // 2ⁿ = 2^⌊n/2⌋ · 2^(n − ⌊n/2⌋), each factor in range.
    let half = op2(f, "mul.rn", &n, &d(0.5));
    let h1 = f.reg(Class::F64);
    f.ins(format!("cvt.rmi.f64.f64 {h1}, {half}"));
    let h2 = op2(f, "sub.rn", &n, &h1);
    let s1 = pow2(f, &h1);
    let s2 = pow2(f, &h2);
    let e = op2(f, "mul.rn", &e, &s1);
    let e = op2(f, "mul.rn", &e, &s2);
    let nan = f.setp("nan", "f64", x, x);
    f.selp(Class::F64, x, &e, &nan)
}

pub fn log(f: &mut Func, x: &str) -> String {
    // Subnormals: scale up by 2^54 first.
    let tiny = f.setp("lt", "f64", x, &d(f64::MIN_POSITIVE));
    let scaled = op2(f, "mul.rn", x, &d(18_014_398_509_481_984.0));
    let y = f.selp(Class::F64, &scaled, x, &tiny);
    let bits = f.reg(Class::S64);
    f.ins(format!("mov.b64 {bits}, {y}"));
    let e = f.reg(Class::S64);
    f.ins(format!("shr.u64 {e}, {bits}, 52"));
    f.ins(format!("and.b64 {e}, {e}, 2047"));
    f.ins(format!("sub.s64 {e}, {e}, 1023"));
    // Mantissa with exponent 0: m in [1, 2); above √2 use m/2.
    let mb = f.reg(Class::S64);
    f.ins(format!("and.b64 {mb}, {bits}, 4503599627370495"));
    f.ins(format!("or.b64 {mb}, {mb}, 4607182418800017408"));
    let m = f.reg(Class::F64);
    f.ins(format!("mov.b64 {m}, {mb}"));
    let big = f.setp("gt", "f64", &m, &d(std::f64::consts::SQRT_2));
    let mh = op2(f, "mul.rn", &m, &d(0.5));
    let m = f.selp(Class::F64, &mh, &m, &big);
    f.ins(format!("@{big} add.s64 {e}, {e}, 1"));
    let adj = f.reg(Class::S64);
    f.ins(format!("selp.s64 {adj}, 54, 0, {tiny}"));
    f.ins(format!("sub.s64 {e}, {e}, {adj}"));
    let ef = f.reg(Class::F64);
    f.ins(format!("cvt.rn.f64.s64 {ef}, {e}"));
    let num = op2(f, "sub.rn", &m, &d(1.0));
    let den = op2(f, "add.rn", &m, &d(1.0));
    let s = op2(f, "div.rn", &num, &den);
    let z = op2(f, "mul.rn", &s, &s);
    let coefs: Vec<f64> = (0..12).map(|k| 1.0 / (2 * k + 1) as f64).collect();
    let p = poly(f, &z, &coefs);
    let p = op2(f, "mul.rn", &p, &s);
    let lm = op2(f, "add.rn", &p, &p);
    let lo = fma(f, &ef, &d(LN2_LO), &lm);
    let r = fma(f, &ef, &d(LN2_HI), &lo);
    // Special values: 0 → −inf, negative → NaN, +inf → +inf, NaN → NaN.
    let zero = f.setp("eq", "f64", x, &d(0.0));
    let r = f.selp(Class::F64, &d(f64::NEG_INFINITY), &r, &zero);
    let neg = f.setp("lt", "f64", x, &d(0.0));
    let r = f.selp(Class::F64, &d(f64::NAN), &r, &neg);
    let inf = f.setp("eq", "f64", x, &d(f64::INFINITY));
    let r = f.selp(Class::F64, x, &r, &inf);
    let nan = f.setp("nan", "f64", x, x);
    f.selp(Class::F64, x, &r, &nan)
}

pub fn expm1(f: &mut Func, x: &str) -> String {
    let inv: Vec<f64> = (1..=17)
        .scan(1.0, |acc, k| {
            *acc /= k as f64;
            Some(*acc)
        })
        .collect();
    let p = poly(f, x, &inv);
    let small = op2(f, "mul.rn", x, &p);
    let e = exp(f, x);
    let big = op2(f, "sub.rn", &e, &d(1.0));
    let a = f.reg(Class::F64);
    f.ins(format!("abs.f64 {a}, {x}"));
    let is_small = f.setp("lt", "f64", &a, &d(0.5));
    f.selp(Class::F64, &small, &big, &is_small)
}

pub fn log1p(f: &mut Func, x: &str) -> String {
    // Near 0: 2·atanh(x / (2 + x)) as a series.
    let den = op2(f, "add.rn", x, &d(2.0));
    let s = op2(f, "div.rn", x, &den);
    let z = op2(f, "mul.rn", &s, &s);
    let coefs: Vec<f64> = (0..14).map(|k| 1.0 / (2 * k + 1) as f64).collect();
    let p = poly(f, &z, &coefs);
    let p = op2(f, "mul.rn", &p, &s);
    let near = op2(f, "add.rn", &p, &p);
    let one = op2(f, "add.rn", x, &d(1.0));
    let far = log(f, &one);
    let a = f.reg(Class::F64);
    f.ins(format!("abs.f64 {a}, {x}"));
    let is_near = f.setp("lt", "f64", &a, &d(0.25));
    f.selp(Class::F64, &near, &far, &is_near)
}

pub fn tanh(f: &mut Func, x: &str) -> String {
    let a = f.reg(Class::F64);
    f.ins(format!("abs.f64 {a}, {x}"));
    f.ins(format!("min.f64 {a}, {a}, {}", d(20.0)));
    let two = op2(f, "mul.rn", &a, &d(2.0));
    let e = expm1(f, &two);
    let den = op2(f, "add.rn", &e, &d(2.0));
    let t = op2(f, "div.rn", &e, &den);
    let neg = f.setp("lt", "f64", x, &d(0.0));
    let nt = f.reg(Class::F64);
    f.ins(format!("neg.f64 {nt}, {t}"));
    let r = f.selp(Class::F64, &nt, &t, &neg);
    let nan = f.setp("nan", "f64", x, x);
    f.selp(Class::F64, x, &r, &nan)
}

pub fn sigmoid(f: &mut Func, x: &str) -> String {
    let n = f.reg(Class::F64);
    f.ins(format!("neg.f64 {n}, {x}"));
    let e = exp(f, &n);
    let den = op2(f, "add.rn", &e, &d(1.0));
    let r = f.reg(Class::F64);
    f.ins(format!("rcp.rn.f64 {r}, {den}"));
    r
}

/// aᵇ in float64 with C's special cases: exact small integer powers by
/// squaring, exp(b·ln|a|) otherwise, the sign for odd integer b.
pub fn pow(f: &mut Func, a: &str, b: &str) -> String {
    let abs_a = f.reg(Class::F64);
    f.ins(format!("abs.f64 {abs_a}, {a}"));
    let l = log(f, &abs_a);
    let e = op2(f, "mul.rn", &l, b);
    let mut r = exp(f, &e);
    // b an integer? odd?
    let tb = f.reg(Class::F64);
    f.ins(format!("cvt.rzi.f64.f64 {tb}, {b}"));
    let int_exp = f.setp("eq", "f64", &tb, b);
    let half = op2(f, "mul.rn", b, &d(0.5));
    let th = f.reg(Class::F64);
    f.ins(format!("cvt.rzi.f64.f64 {th}, {half}"));
    let even = f.setp("eq", "f64", &th, &half);
    let odd = f.pred("and", &int_exp, &format!("!{even}"));
    // Small integer exponents: repeated squaring (|b| ≤ 64).
    let ab = f.reg(Class::F64);
    f.ins(format!("abs.f64 {ab}, {b}"));
    let small = f.setp("le", "f64", &ab, &d(64.0));
    let use_sq = f.pred("and", &small, &int_exp);
    let n = f.reg(Class::B32);
    f.ins(format!("cvt.rzi.u32.f64 {n}, {ab}"));
    let acc = f.mov(Class::F64, &d(1.0));
    let base = f.mov(Class::F64, a);
    for bit in 0..7 {
        let m = f.reg(Class::B32);
        f.ins(format!("and.b32 {m}, {n}, {}", 1u32 << bit));
        let set = f.setp("ne", "u32", &m, "0");
        f.ins(format!("@{set} mul.rn.f64 {acc}, {acc}, {base}"));
        f.ins(format!("mul.rn.f64 {base}, {base}, {base}"));
    }
    let negb = f.setp("lt", "f64", b, &d(0.0));
    let inv = f.reg(Class::F64);
    f.ins(format!("rcp.rn.f64 {inv}, {acc}"));
    let sq = f.selp(Class::F64, &inv, &acc, &negb);
    // General path's sign: negative base with odd integer b is negative,
    // with a non-integer b NaN.
    let neg_base = f.setp("lt", "f64", a, &d(0.0));
    let flip = f.pred("and", &neg_base, &odd);
    let nr = f.reg(Class::F64);
    f.ins(format!("neg.f64 {nr}, {r}"));
    r = f.selp(Class::F64, &nr, &r, &flip);
    let bad = f.pred("and", &neg_base, &format!("!{int_exp}"));
    // (−inf and −0 bases with non-integer b follow C: |a|ᵇ.)
    let finite_a = f.setp("ne", "f64", &abs_a, &d(f64::INFINITY));
    let nonzero_a = f.setp("ne", "f64", &abs_a, &d(0.0));
    f.ins(format!("and.pred {bad}, {bad}, {finite_a}"));
    f.ins(format!("and.pred {bad}, {bad}, {nonzero_a}"));
    r = f.selp(Class::F64, &d(f64::NAN), &r, &bad);
    r = f.selp(Class::F64, &sq, &r, &use_sq);
    // a = ±1 special cases: 1ᵇ = 1; (−1)^±inf = 1; x⁰ = 1.
    let one = f.setp("eq", "f64", a, &d(1.0));
    let m1 = f.setp("eq", "f64", a, &d(-1.0));
    let binf = f.setp("eq", "f64", &ab, &d(f64::INFINITY));
    let m1inf = f.pred("and", &m1, &binf);
    let zero_b = f.setp("eq", "f64", b, &d(0.0));
    let unit = f.pred("or", &one, &m1inf);
    f.ins(format!("or.pred {unit}, {unit}, {zero_b}"));
    f.selp(Class::F64, &d(1.0), &r, &unit)
}
