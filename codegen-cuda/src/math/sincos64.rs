//! The float64 sine and cosine of PTX's scalar routines (`scalar.rs`
//! translates `Unary::Sin` and `Unary::Cos` of `rdyn_ir::special` bodies,
//! Bessel J and Y's Hankel expansion among them, to these): fdlibm's
//! splitting of π/2 for the argument reduction, then Taylor polynomials.

use crate::ptx::func::{f64_imm as d64, Class, Func};

const PI: f64 = std::f64::consts::PI;

fn dd(f: &mut Func, op: &str, a: &str, b: &str) -> String {
    f.op(Class::F64, op, &[a, b])
}

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
