//! Arithmetic the function emitters share: float32 operations (additions
//! and products in `.rn`, so ptxas does not contract them into FMAs),
//! immediates, Horner polynomials, sign and NaN handling; and the float64
//! counting loop of the series.

use crate::ptx::func::{f32_imm, f64_imm as d64, Class, Func};

/// `op` on f32 registers, result in a new register.
pub(crate) fn op2(f: &mut Func, op: &str, a: &str, b: &str) -> String {
    f.op(Class::F32, op, &[a, b])
}

pub(crate) fn op1(f: &mut Func, op: &str, a: &str) -> String {
    f.op(Class::F32, op, &[a])
}

pub(crate) fn add(f: &mut Func, a: &str, b: &str) -> String {
    op2(f, "add.rn", a, b)
}
pub(crate) fn sub(f: &mut Func, a: &str, b: &str) -> String {
    op2(f, "sub.rn", a, b)
}
pub(crate) fn mul(f: &mut Func, a: &str, b: &str) -> String {
    op2(f, "mul.rn", a, b)
}
pub(crate) fn div(f: &mut Func, a: &str, b: &str) -> String {
    op2(f, "div.rn", a, b)
}
pub(crate) fn fma(f: &mut Func, a: &str, b: &str, c: &str) -> String {
    f.op(Class::F32, "fma.rn", &[a, b, c])
}
pub(crate) fn k(v: f64) -> String {
    f32_imm(v)
}

/// `x` unless `x` is NaN, where the result is `x` (restores NaN inputs
/// after clamping, which drops them).
pub(crate) fn keep_nan(f: &mut Func, x: &str, result: &str) -> String {
    let nan = f.setp("nan", "f32", x, x);
    f.selp(Class::F32, x, result, &nan)
}

/// Horner evaluation of `c[0] + c[1]·z + …` in float32.
pub(crate) fn poly(f: &mut Func, z: &str, c: &[f64]) -> String {
    f.horner(Class::F32, z, c)
}

pub(crate) fn copysign(f: &mut Func, mag: &str, sign: &str) -> String {
    let (a, b, r) = (f.reg(Class::B32), f.reg(Class::B32), f.reg(Class::F32));
    f.ins(format!("mov.b32 {a}, {mag}"));
    f.ins(format!("mov.b32 {b}, {sign}"));
    f.ins(format!("and.b32 {a}, {a}, 2147483647"));
    f.ins(format!("and.b32 {b}, {b}, 0x80000000"));
    f.ins(format!("or.b32 {a}, {a}, {b}"));
    f.ins(format!("mov.b32 {r}, {a}"));
    r
}

/// `for j in first..end { body(j) }` in f64 with `body` branching to `out`
/// to leave early.
pub(crate) fn series(f: &mut Func, first: f64, end: f64, body: impl FnOnce(&mut Func, &str, &str)) {
    let j = f.mov(Class::F64, &d64(first));
    let (top, out) = (f.label("series"), f.label("series_end"));
    f.place(&top);
    let done = f.setp("ge", "f64", &j, &d64(end));
    f.ins(format!("@{done} bra {out}"));
    body(f, &j, &out);
    f.ins(format!("add.rn.f64 {j}, {j}, {}", d64(1.0)));
    f.ins(format!("bra {top}"));
    f.place(&out);
}
