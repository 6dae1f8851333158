//! Orthogonal polynomials of float32 values as PTX: Chebyshev (four kinds,
//! plain and shifted) here, with the algorithms and special cases of the
//! CPU backend (`codegen-cpu/src/special/poly.rs`): recurrences in float64,
//! and above a degree with |y| < 1 PyTorch's trigonometric form (in
//! float32, as eager CUDA computes it). Hermite (both), Laguerre and
//! Legendre are their `rdyn_ir::special` definitions through the generic
//! translator (`scalar.rs`).

use rdyn_ir::loops::BinaryOp;
use rdyn_ir::special::Special;

use crate::math::math32::acos;
use crate::math::trig::{trig, Trig};
use crate::ptx::arith::{div, k, mul};
use crate::ptx::func::{f64_imm as c, Class, Func};

/// f64 `op` of registers or immediates into a fresh register.
fn d(f: &mut Func, op: &str, args: &[&str]) -> String {
    f.op(Class::F64, op, args)
}

/// The degree as PyTorch converts it: truncation, with NaN, ±inf and
/// |n| ≥ 2^63 read as negative (`-1`).
fn degree(f: &mut Func, n: &str) -> String {
    let an = f.op(Class::F32, "abs", &[n]);
    let finite = f.setp("lt", "f32", &an, &k(9.223_372_036_854_776e18));
    let nd = f.reg(Class::S64);
    f.ins(format!("cvt.rzi.s64.f32 {nd}, {n}"));
    f.selp(Class::S64, &nd, "-1", &finite)
}

/// The result register, the label after the branches, and the degree; a
/// negative degree gives 0.
fn begin(f: &mut Func, n: &str, stem: &str) -> (String, String, String) {
    let r = f.reg(Class::F64);
    let done = f.label(stem);
    let nd = degree(f, n);
    let neg = f.setp("lt", "s64", &nd, "0");
    take(f, &r, &c(0.0), &neg, &done);
    (r, done, nd)
}

/// Place `done`; the result rounded to float32.
fn finish(f: &mut Func, r: &str, done: &str) -> String {
    f.place(done);
    let out = f.reg(Class::F32);
    f.ins(format!("cvt.rn.f32.f64 {out}, {r}"));
    out
}

/// `r = v; bra done` where `p` holds.
fn take(f: &mut Func, r: &str, v: &str, p: &str, done: &str) {
    f.ins(format!("@{p} mov.f64 {r}, {v}"));
    f.ins(format!("@{p} bra {done}"));
}

/// `while k <= last && !isnan(q) { body; k += 1 }` (`k < last` when
/// `strict`; no NaN test without `q`) with `k` from `first`, `last` an f64
/// register.
fn recurrence(f: &mut Func, first: f64, last: &str, q: Option<&str>, strict: bool, body: impl FnOnce(&mut Func, &str)) {
    let kf = f.mov(Class::F64, &c(first));
    let (top, end) = (f.label("rec"), f.label("rec_end"));
    f.place(&top);
    let mut out = f.setp(if strict { "ge" } else { "gt" }, "f64", &kf, last);
    if let Some(q) = q {
        let nan = f.setp("nan", "f64", q, q);
        out = f.pred("or", &out, &nan);
    }
    f.ins(format!("@{out} bra {end}"));
    body(f, &kf);
    f.ins(format!("add.rn.f64 {kf}, {kf}, {}", c(1.0)));
    f.ins(format!("bra {top}"));
    f.place(&end);
}

#[derive(Copy, Clone, PartialEq)]
enum Cheb {
    T,
    U,
    V,
    W,
}

/// A float32 result of Chebyshev kind `kind` (see the CPU version).
fn chebyshev(f: &mut Func, kind: Cheb, x: &str, n: &str, trig_from: i64, shifted: bool) -> String {
    let (r, done, nd) = begin(f, n, "cheb_done");
    let x64 = f.reg(Class::F64);
    f.ins(format!("cvt.f64.f32 {x64}, {x}"));
    let y = if shifted {
        let twice = d(f, "add.rn", &[&x64, &x64]);
        d(f, "sub.rn", &[&twice, &c(1.0)])
    } else {
        x64.clone()
    };
    let (at_pos, at_neg) = if shifted {
        (f.setp("eq", "f32", x, &k(1.0)), f.setp("eq", "f32", x, &k(0.0)))
    } else {
        (f.setp("eq", "f32", x, &k(1.0)), f.setp("eq", "f32", x, &k(-1.0)))
    };
    // Values at the ends: parity·(1, n+1, 2n+1) by kind.
    let odd_bit = f.reg(Class::S64);
    f.ins(format!("and.b64 {odd_bit}, {nd}, 1"));
    let odd = f.setp("ne", "s64", &odd_bit, "0");
    let parity = f.selp(Class::F64, &c(-1.0), &c(1.0), &odd);
    let (n1, n2) = (f.reg(Class::S64), f.reg(Class::S64));
    f.ins(format!("add.s64 {n1}, {nd}, 1"));
    f.ins(format!("mad.lo.s64 {n2}, {nd}, 2, 1"));
    let (n1f, n2f) = (f.reg(Class::F64), f.reg(Class::F64));
    f.ins(format!("cvt.rn.f64.s64 {n1f}, {n1}"));
    f.ins(format!("cvt.rn.f64.s64 {n2f}, {n2}"));
    let twice_y = d(f, "add.rn", &[&y, &y]);
    let (v_pos, v_neg, first) = match kind {
        Cheb::T => (c(1.0), parity.clone(), y.clone()),
        Cheb::U => (c(1.0), d(f, "mul.rn", &[&parity, &n1f]), twice_y.clone()),
        Cheb::V => (c(1.0), d(f, "mul.rn", &[&parity, &n2f]), d(f, "sub.rn", &[&twice_y, &c(1.0)])),
        Cheb::W => (n2f.clone(), parity.clone(), d(f, "add.rn", &[&twice_y, &c(1.0)])),
    };
    let v_pos = if kind == Cheb::U { n1f.clone() } else { v_pos };
    take(f, &r, &v_pos, &at_pos, &done);
    take(f, &r, &v_neg, &at_neg, &done);
    // The trigonometric form, in float32.
    let ay = d(f, "abs", &[&y]);
    let inside = f.setp("lt", "f64", &ay, &c(1.0));
    let high = f.setp("gt", "s64", &nd, &trig_from.to_string());
    let use_trig = f.pred("and", &inside, &high);
    let recur = f.label("cheb_rec");
    f.ins(format!("@!{use_trig} bra {recur}"));
    let y32 = f.reg(Class::F32);
    f.ins(format!("cvt.rn.f32.f64 {y32}, {y}"));
    let th = acos(f, &y32);
    let nf = f.reg(Class::F32);
    f.ins(format!("cvt.rn.f32.s64 {nf}, {nd}"));
    let t32 = match kind {
        Cheb::T => {
            let a = mul(f, &nf, &th);
            trig(f, &a, Trig::Cos)
        }
        Cheb::U => {
            let n1 = f.op(Class::F32, "add.rn", &[&nf, &k(1.0)]);
            let a = mul(f, &n1, &th);
            let s = trig(f, &th, Trig::Sin);
            let num = trig(f, &a, Trig::Sin);
            let q = div(f, &num, &s);
            let cs = trig(f, &a, Trig::Cos);
            let alt = mul(f, &n1, &cs);
            let alt = div(f, &alt, &y32);
            let zero = f.setp("eq", "f32", &s, &k(0.0));
            f.selp(Class::F32, &alt, &q, &zero)
        }
        Cheb::V | Cheb::W => {
            let nh = f.op(Class::F32, "add.rn", &[&nf, &k(0.5)]);
            let a = mul(f, &nh, &th);
            let half = mul(f, &th, &k(0.5));
            let (sh, ch) = (trig(f, &half, Trig::Sin), trig(f, &half, Trig::Cos));
            let (num, den, edge, fallback) = if kind == Cheb::V {
                (trig(f, &a, Trig::Cos), ch, f.setp("eq", "f32", &sh, &k(1.0)), v_neg.clone())
            } else {
                let end = if shifted {
                    v_neg.clone()
                } else {
                    let pos = f.setp("gt", "f64", &y, &c(0.0));
                    f.selp(Class::F64, &v_pos, &v_neg, &pos)
                };
                (trig(f, &a, Trig::Sin), sh, f.setp("eq", "f32", &ch, &k(1.0)), end)
            };
            let q = div(f, &num, &den);
            let q64 = f.reg(Class::F64);
            f.ins(format!("cvt.f64.f32 {q64}, {q}"));
            let v = f.selp(Class::F64, &fallback, &q64, &edge);
            f.ins(format!("mov.f64 {r}, {v}"));
            f.ins(format!("bra {done}"));
            String::new()
        }
    };
    if !t32.is_empty() {
        f.ins(format!("cvt.f64.f32 {r}, {t32}"));
        f.ins(format!("bra {done}"));
    }
    f.place(&recur);
    let zero = f.setp("eq", "s64", &nd, "0");
    take(f, &r, &c(1.0), &zero, &done);
    // r = 2y·q − p from (p, q) = (1, first).
    let (p, q) = (f.mov(Class::F64, &c(1.0)), f.mov(Class::F64, &first));
    f.ins(format!("mov.f64 {r}, {first}"));
    let last = f.reg(Class::F64);
    f.ins(format!("cvt.rn.f64.s64 {last}, {nd}"));
    recurrence(f, 2.0, &last, Some(&q), false, |f, _| {
        let t = d(f, "mul.rn", &[&twice_y, &q]);
        f.ins(format!("sub.rn.f64 {r}, {t}, {p}"));
        f.ins(format!("mov.f64 {p}, {q}"));
        f.ins(format!("mov.f64 {q}, {r}"));
    });
    finish(f, &r, &done)
}

/// The float32 polynomial `op` of `x` and degree `n`, if `op` is one.
pub fn polynomial(f: &mut Func, op: BinaryOp, x: &str, n: &str) -> Option<String> {
    use BinaryOp::*;
    Some(match op {
        ChebyshevT => chebyshev(f, Cheb::T, x, n, 6, false),
        ChebyshevU => chebyshev(f, Cheb::U, x, n, 8, false),
        ChebyshevV => chebyshev(f, Cheb::V, x, n, 8, false),
        ChebyshevW => chebyshev(f, Cheb::W, x, n, 8, false),
        ShiftedChebyshevT => chebyshev(f, Cheb::T, x, n, 6, true),
        ShiftedChebyshevU => chebyshev(f, Cheb::U, x, n, 6, true),
        ShiftedChebyshevV => chebyshev(f, Cheb::V, x, n, 6, true),
        ShiftedChebyshevW => chebyshev(f, Cheb::W, x, n, 4, true),
        HermiteH => scalar(f, Special::HermiteH, x, n),
        HermiteHe => scalar(f, Special::HermiteHe, x, n),
        LaguerreL => scalar(f, Special::LaguerreL, x, n),
        LegendreP => scalar(f, Special::LegendreP, x, n),
        _ => return None,
    })
}

/// The definition of `which` at float32 `x` and degree `n`.
fn scalar(f: &mut Func, which: Special, x: &str, n: &str) -> String {
    crate::math::scalar::call_f32(f, which.body(), &[x, n])
}
