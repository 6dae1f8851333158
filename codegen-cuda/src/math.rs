//! Scalar operations as PTX instruction sequences.
//!
//! float32 transcendentals are built on the hardware approximations
//! (`ex2.approx`, `lg2.approx`, `sin.approx`, `cos.approx`) with range
//! reduction and short series where those lose precision (near 1 for log,
//! near 0 for expm1); additions and products use `.rn` so ptxas does not
//! contract them into FMAs. float64 has no hardware transcendentals: exp, log
//! and what is built on them are in software in [`crate::math64`].
//! Exact GELU and its gradient compute Φ through erfc, the tail `erfc(|z|)/2`
//! taken directly for negative x (no `1 + erf` cancellation).

use rdyn_ir::loops::{BinaryOp, UnaryOp};
use rdyn_ir::{DType, Kind};

use crate::emit::{cast, f32_imm, imm, wrap_int, Class, Emitter, Func};
use crate::PtxError;

const LOG2E: f64 = std::f64::consts::LOG2_E;
const LN2: f64 = std::f64::consts::LN_2;

fn unsupported(op: impl std::fmt::Display, dtype: DType) -> PtxError {
    PtxError::Unsupported(format!("{op} on {dtype}"))
}

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

/// √((1 − x)(1 + x)).
fn cos_of_asin(f: &mut Func, x: &str) -> String {
    let a = sub(f, &k(1.0), x);
    let b = add(f, &k(1.0), x);
    let c = mul(f, &a, &b);
    op1(f, "sqrt.rn", &c)
}

/// float32 acos, as atan2(√((1 − x)(1 + x)), x).
pub(crate) fn acos(f: &mut Func, x: &str) -> String {
    let s = cos_of_asin(f, x);
    crate::trig::atan2(f, &s, x)
}

/// `x` unless `x` is NaN, where the result is `x` (restores NaN inputs
/// after clamping, which drops them).
fn keep_nan(f: &mut Func, x: &str, result: &str) -> String {
    let nan = f.setp("nan", "f32", x, x);
    f.selp(Class::F32, x, result, &nan)
}

/// Horner evaluation of `c[0] + c[1]·z + …` in float32.
pub(crate) fn poly(f: &mut Func, z: &str, c: &[f64]) -> String {
    f.horner(Class::F32, z, c)
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
fn expm1(f: &mut Func, x: &str) -> String {
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
fn log2(f: &mut Func, x: &str) -> String {
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

fn log1p(f: &mut Func, x: &str) -> String {
    let near = log1p_series(f, x);
    let one = add(f, x, &k(1.0));
    let far = log(f, &one);
    let a = op1(f, "abs", x);
    let is_near = f.setp("lt", "f32", &a, &k(0.25));
    f.selp(Class::F32, &near, &far, &is_near)
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

fn float32_unary(f: &mut Func, op: UnaryOp, x: &str) -> Result<String, PtxError> {
    use crate::bessel as b;
    Ok(match op {
        UnaryOp::Neg => op1(f, "neg", x),
        UnaryOp::Abs => op1(f, "abs", x),
        UnaryOp::Exp => exp(f, x),
        UnaryOp::Exp2 => op1(f, "ex2.approx", x),
        UnaryOp::Expm1 => expm1(f, x),
        UnaryOp::Log => log(f, x),
        UnaryOp::Log2 => log2(f, x),
        UnaryOp::Log10 => {
            let l = log(f, x);
            mul(f, &l, &k(std::f64::consts::LOG10_E))
        }
        UnaryOp::Log1p => log1p(f, x),
        UnaryOp::Sqrt => op1(f, "sqrt.rn", x),
        UnaryOp::Rsqrt => {
            let s = op1(f, "sqrt.rn", x);
            op1(f, "rcp.rn", &s)
        }
        UnaryOp::Reciprocal => op1(f, "rcp.rn", x),
        UnaryOp::Sin => crate::trig::trig(f, x, crate::trig::Trig::Sin),
        UnaryOp::Cos => crate::trig::trig(f, x, crate::trig::Trig::Cos),
        UnaryOp::Tan => crate::trig::trig(f, x, crate::trig::Trig::Tan),
        UnaryOp::Atan => {
            let one = f.mov(Class::F32, &k(1.0));
            crate::trig::atan2(f, x, &one)
        }
        UnaryOp::Asin => {
            let s = cos_of_asin(f, x);
            crate::trig::atan2(f, x, &s)
        }
        UnaryOp::Acos => acos(f, x),
        UnaryOp::Sinh => {
            let a = expm1(f, x);
            let nx = op1(f, "neg", x);
            let b = expm1(f, &nx);
            let d = sub(f, &a, &b);
            mul(f, &d, &k(0.5))
        }
        UnaryOp::Cosh => {
            let a = exp(f, x);
            let nx = op1(f, "neg", x);
            let b = exp(f, &nx);
            let s = add(f, &a, &b);
            mul(f, &s, &k(0.5))
        }
        UnaryOp::Tanh => {
            let a = op1(f, "abs", x);
            let a = op2(f, "min", &a, &k(10.0));
            let two = mul(f, &a, &k(2.0));
            let e = expm1(f, &two);
            let d = add(f, &e, &k(2.0));
            let t = div(f, &e, &d);
            let t = copysign(f, &t, x);
            keep_nan(f, x, &t)
        }
        UnaryOp::Asinh => {
            let a = op1(f, "abs", x);
            let a2 = mul(f, &a, &a);
            let s = add(f, &a2, &k(1.0));
            let s = op1(f, "sqrt.rn", &s);
            let d = add(f, &s, &k(1.0));
            let q = div(f, &a2, &d);
            let u = add(f, &a, &q);
            let small = log1p(f, &u);
            let l = log(f, &a);
            let large = add(f, &l, &k(LN2));
            let huge = f.setp("gt", "f32", &a, &k(1e18));
            let r = f.selp(Class::F32, &large, &small, &huge);
            copysign(f, &r, x)
        }
        UnaryOp::Acosh => {
            let u = sub(f, x, &k(1.0));
            let v = add(f, &u, &k(2.0));
            let w = mul(f, &u, &v);
            let s = op1(f, "sqrt.rn", &w);
            let t = add(f, &u, &s);
            let small = log1p(f, &t);
            let l = log(f, x);
            let large = add(f, &l, &k(LN2));
            let huge = f.setp("gt", "f32", x, &k(1e18));
            f.selp(Class::F32, &large, &small, &huge)
        }
        UnaryOp::Atanh => {
            let n = mul(f, x, &k(2.0));
            let d = sub(f, &k(1.0), x);
            let q = div(f, &n, &d);
            let l = log1p(f, &q);
            mul(f, &l, &k(0.5))
        }
        UnaryOp::Sigmoid => {
            let n = op1(f, "neg", x);
            let e = exp(f, &n);
            let d = add(f, &e, &k(1.0));
            op1(f, "rcp.rn", &d)
        }
        UnaryOp::Erf | UnaryOp::Erfc => {
            let c = crate::special::erfc_abs(f, x);
            let neg = f.setp("lt", "f32", x, &k(0.0));
            let r = if op == UnaryOp::Erf {
                let e = sub(f, &k(1.0), &c);
                let ne = op1(f, "neg", &e);
                f.selp(Class::F32, &ne, &e, &neg)
            } else {
                let m = sub(f, &k(2.0), &c);
                f.selp(Class::F32, &m, &c, &neg)
            };
            keep_nan(f, x, &r)
        }
        UnaryOp::Gelu | UnaryOp::GeluGrad => {
            // Φ(x), its tail erfc(|z|)/2 at z = x/√2 taken directly for
            // x < 0 (no 1 − (1 − tail)): Φ(−inf) = 0, so gelu(−inf) is NaN.
            let z = mul(f, x, &k(std::f64::consts::FRAC_1_SQRT_2));
            let c = crate::special::erfc_abs(f, &z);
            let tail = mul(f, &c, &k(0.5));
            let upper = sub(f, &k(1.0), &tail);
            let neg = f.setp("lt", "f32", x, &k(0.0));
            let phi = f.selp(Class::F32, &tail, &upper, &neg);
            let r = if op == UnaryOp::Gelu {
                // x·Φ(x)
                mul(f, x, &phi)
            } else {
                // Φ(x) + x·e^(−x²/2)/√(2π)
                let xx = mul(f, x, x);
                let arg = mul(f, &xx, &k(-0.5));
                let e = exp(f, &arg);
                let density = mul(f, &e, &k(0.5 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2));
                fma(f, x, &density, &phi)
            };
            keep_nan(f, x, &r)
        }
        UnaryOp::Lgamma => crate::special::lgamma(f, x),
        UnaryOp::Digamma => crate::special::digamma(f, x),
        UnaryOp::Erfinv => crate::special::erfinv(f, x),
        UnaryOp::SphericalJ0 => crate::special::spherical_j0(f, x),
        UnaryOp::Erfcx => crate::special::erfcx(f, x),
        UnaryOp::Ndtri => crate::special::ndtri(f, x),
        UnaryOp::I0 => b::bessel_i(f, x, 0, false),
        UnaryOp::I0e => b::bessel_i(f, x, 0, true),
        UnaryOp::I1 => b::bessel_i(f, x, 1, false),
        UnaryOp::I1e => b::bessel_i(f, x, 1, true),
        UnaryOp::K0 => b::bessel_k(f, x, 0, false),
        UnaryOp::K0e => b::bessel_k(f, x, 0, true),
        UnaryOp::K1 => b::bessel_k(f, x, 1, false),
        UnaryOp::K1e => b::bessel_k(f, x, 1, true),
        UnaryOp::BesselJ0 => b::bessel_jy(f, x, 0, b::Kind::J),
        UnaryOp::BesselJ1 => b::bessel_jy(f, x, 1, b::Kind::J),
        UnaryOp::BesselY0 => b::bessel_jy(f, x, 0, b::Kind::Y),
        UnaryOp::BesselY1 => b::bessel_jy(f, x, 1, b::Kind::Y),
        UnaryOp::AiryAi => b::airy_ai(f, x),
        other => return float_common_unary(f, other, x, Class::F32),
    })
}

fn float64_unary(f: &mut Func, op: UnaryOp, x: &str) -> Result<String, PtxError> {
    use crate::math64 as m;
    let scaled = |f: &mut Func, x: &str, c: f64| {
        let l = m::log(f, x);
        let r = f.reg(Class::F64);
        f.ins(format!("mul.rn.f64 {r}, {l}, {}", imm(Class::F64, c)));
        r
    };
    Ok(match op {
        UnaryOp::Exp => m::exp(f, x),
        UnaryOp::Expm1 => m::expm1(f, x),
        UnaryOp::Log => m::log(f, x),
        UnaryOp::Log1p => m::log1p(f, x),
        UnaryOp::Log2 => scaled(f, x, LOG2E),
        UnaryOp::Log10 => scaled(f, x, std::f64::consts::LOG10_E),
        UnaryOp::Tanh => m::tanh(f, x),
        UnaryOp::Sigmoid => m::sigmoid(f, x),
        other => float_common_unary(f, other, x, Class::F64)?,
    })
}

/// Unary ops that float32 and float64 share (no transcendentals).
fn float_common_unary(f: &mut Func, op: UnaryOp, x: &str, class: Class) -> Result<String, PtxError> {
    let ty = class.ty();
    let zero = imm(class, 0.0);
    let simple = |f: &mut Func, ins: &str| {
        let r = f.reg(class);
        f.ins(format!("{ins}.{ty} {r}, {x}"));
        r
    };
    Ok(match op {
        UnaryOp::Neg => simple(f, "neg"),
        UnaryOp::Abs => simple(f, "abs"),
        UnaryOp::Sqrt => simple(f, "sqrt.rn"),
        UnaryOp::Reciprocal => simple(f, "rcp.rn"),
        UnaryOp::Rsqrt => {
            let s = simple(f, "sqrt.rn");
            let r = f.reg(class);
            f.ins(format!("rcp.rn.{ty} {r}, {s}"));
            r
        }
        UnaryOp::Floor => simple(f, &format!("cvt.rmi.{ty}")),
        UnaryOp::Ceil => simple(f, &format!("cvt.rpi.{ty}")),
        UnaryOp::Round => simple(f, &format!("cvt.rni.{ty}")),
        UnaryOp::Trunc => simple(f, &format!("cvt.rzi.{ty}")),
        UnaryOp::Sign => {
            let pos = f.setp("gt", ty, x, &zero);
            let neg = f.setp("lt", ty, x, &zero);
            // ATen's `(0 < x) - (x < 0)`: NaN and -0.0 give +0.0.
            let r = f.selp(class, &imm(class, -1.0), &zero, &neg);
            f.selp(class, &imm(class, 1.0), &r, &pos)
        }
        UnaryOp::Not => {
            let p = f.setp("eq", ty, x, &zero);
            f.bool_of(&p)
        }
        UnaryOp::IsNan => {
            let p = f.setp("nan", ty, x, x);
            f.bool_of(&p)
        }
        UnaryOp::IsInf => {
            let a = simple(f, "abs");
            let p = f.setp("eq", ty, &a, &imm(class, f64::INFINITY));
            f.bool_of(&p)
        }
        UnaryOp::Signbit => {
            let (bits, bty) = if class == Class::F32 { (f.reg(Class::B32), "s32") } else { (f.reg(Class::S64), "s64") };
            let mty = if class == Class::F32 { "b32" } else { "b64" };
            f.ins(format!("mov.{mty} {bits}, {x}"));
            let p = f.setp("lt", bty, &bits, "0");
            f.bool_of(&p)
        }
        other => return Err(unsupported(other, if class == Class::F32 { DType::F32 } else { DType::F64 })),
    })
}

fn int_unary(f: &mut Func, op: UnaryOp, x: &str) -> Result<String, PtxError> {
    let simple = |f: &mut Func, ins: &str| {
        let r = f.reg(Class::S64);
        f.ins(format!("{ins} {r}, {x}"));
        r
    };
    Ok(match op {
        UnaryOp::Neg => simple(f, "neg.s64"),
        UnaryOp::Abs => simple(f, "abs.s64"),
        UnaryOp::BitNot => simple(f, "not.b64"),
        UnaryOp::Sign => {
            let pos = f.setp("gt", "s64", x, "0");
            let neg = f.setp("lt", "s64", x, "0");
            let r = f.selp(Class::S64, "-1", "0", &neg);
            f.selp(Class::S64, "1", &r, &pos)
        }
        UnaryOp::Not => {
            let p = f.setp("eq", "s64", x, "0");
            f.bool_of(&p)
        }
        UnaryOp::Signbit => {
            let p = f.setp("lt", "s64", x, "0");
            f.bool_of(&p)
        }
        UnaryOp::IsNan | UnaryOp::IsInf => f.mov(Class::S64, "0"),
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc => x.to_string(),
        other => return Err(unsupported(other, DType::I64)),
    })
}

/// A unary scalar op: operand of dtype `from`, result of dtype `to`.
pub fn unary(f: &mut Func, op: UnaryOp, x: &str, from: DType, to: DType) -> Result<String, PtxError> {
    let r = match from.kind() {
        Kind::F32 => float32_unary(f, op, x)?,
        Kind::F64 => float64_unary(f, op, x)?,
        Kind::I64 => int_unary(f, op, x)?,
    };
    Ok(fit(f, r, op_result_kind(from, to, is_predicate_unary(op)), to))
}

fn is_predicate_unary(op: UnaryOp) -> bool {
    matches!(op, UnaryOp::Not | UnaryOp::IsNan | UnaryOp::IsInf | UnaryOp::Signbit)
}

/// The kind the op's instructions produced: bool-valued ops give s64 0/1.
fn op_result_kind(from: DType, _to: DType, predicate: bool) -> Kind {
    if predicate {
        Kind::I64
    } else {
        from.kind()
    }
}

/// Bring a result computed in `kind` to the node's dtype `to`.
fn fit(f: &mut Func, r: String, kind: Kind, to: DType) -> String {
    if kind == to.kind() {
        // Integer results wrap to their dtype; a bool sum (`True + True`) is
        // True.
        if to.is_int() || to == DType::Bool {
            return wrap_int(f, &r, to);
        }
        return r;
    }
    let from = match kind {
        Kind::F32 => DType::F32,
        Kind::F64 => DType::F64,
        Kind::I64 => DType::I64,
    };
    cast(f, &r, from, to)
}

/// A binary scalar op: operands of dtype `from`, result of dtype `to`.
pub fn binary(
    f: &mut Func,
    em: &Emitter<'_>,
    op: BinaryOp,
    a: &str,
    b: &str,
    from: DType,
    to: DType,
) -> Result<String, PtxError> {
    let class = Class::of(from.kind());
    let ty = class.ty();
    let logical = matches!(op, BinaryOp::And | BinaryOp::Or | BinaryOp::Xor);
    if op.is_comparison() || logical {
        let p = if logical {
            let (cmp, zero) = if class == Class::S64 { ("ne", "0".to_string()) } else { ("neu", imm(class, 0.0)) };
            let pa = f.setp(cmp, ty, a, &zero);
            let pb = f.setp(cmp, ty, b, &zero);
            let pop = match op {
                BinaryOp::And => "and",
                BinaryOp::Or => "or",
                _ => "xor",
            };
            f.pred(pop, &pa, &pb)
        } else {
            let float = class != Class::S64;
            let cmp = match op {
                BinaryOp::Eq => "eq",
                BinaryOp::Ne if float => "neu",
                BinaryOp::Ne => "ne",
                BinaryOp::Lt => "lt",
                BinaryOp::Le => "le",
                BinaryOp::Gt => "gt",
                _ => "ge",
            };
            f.setp(cmp, ty, a, b)
        };
        let r = f.bool_of(&p);
        return Ok(fit(f, r, Kind::I64, to));
    }
    let r = match class {
        Class::S64 => int_binary(f, em, op, a, b)?,
        _ => float_binary(f, op, a, b, class, from)?,
    };
    Ok(fit(f, r, from.kind(), to))
}

fn float_binary(f: &mut Func, op: BinaryOp, a: &str, b: &str, class: Class, from: DType) -> Result<String, PtxError> {
    let ty = class.ty();
    let two = |f: &mut Func, ins: &str| {
        let r = f.reg(class);
        f.ins(format!("{ins}.{ty} {r}, {a}, {b}"));
        r
    };
    let quotient_rounded = |f: &mut Func, mode: &str| {
        let q = two(f, "div.rn");
        let r = f.reg(class);
        f.ins(format!("cvt.{mode}.{ty}.{ty} {r}, {q}"));
        r
    };
    Ok(match op {
        BinaryOp::Add => two(f, "add.rn"),
        BinaryOp::Sub => two(f, "sub.rn"),
        BinaryOp::Mul => two(f, "mul.rn"),
        BinaryOp::Div => two(f, "div.rn"),
        BinaryOp::FloorDiv if class == Class::F32 => floor_divide(f, a, b),
        BinaryOp::TruncDiv => quotient_rounded(f, "rzi"),
        BinaryOp::Rem | BinaryOp::Fmod if class == Class::F32 => {
            let r = fmod(f, a, b);
            if op == BinaryOp::Fmod {
                r
            } else {
                // Python's modulo: the sign of the divisor.
                let rz = f.setp("ne", "f32", &r, &k(0.0));
                let rn = f.setp("lt", "f32", &r, &k(0.0));
                let bn = f.setp("lt", "f32", b, &k(0.0));
                let fix = f.pred("xor", &rn, &bn);
                f.ins(format!("and.pred {fix}, {fix}, {rz}"));
                let moved = add(f, &r, b);
                f.selp(Class::F32, &moved, &r, &fix)
            }
        }
        BinaryOp::Max | BinaryOp::Min if class == Class::F64 => {
            // max.f64 has no .NaN form: NaN operands give a + b (NaN).
            let r = two(f, if op == BinaryOp::Max { "max" } else { "min" });
            let nan = f.setp("nan", ty, a, b);
            let s = two(f, "add.rn");
            f.selp(class, &s, &r, &nan)
        }
        BinaryOp::Max => two(f, "max.NaN"),
        BinaryOp::Min => two(f, "min.NaN"),
        BinaryOp::Fmax => two(f, "max"),
        BinaryOp::Fmin => two(f, "min"),
        BinaryOp::Hypot => {
            // max·sqrt(1 + (min/max)²): no overflow; inf wins over NaN.
            let (aa, ab, mx, mn, q, s) =
                (f.reg(class), f.reg(class), f.reg(class), f.reg(class), f.reg(class), f.reg(class));
            f.ins(format!("abs.{ty} {aa}, {a}"));
            f.ins(format!("abs.{ty} {ab}, {b}"));
            f.ins(format!("max.{ty} {mx}, {aa}, {ab}"));
            f.ins(format!("min.{ty} {mn}, {aa}, {ab}"));
            f.ins(format!("div.rn.{ty} {q}, {mn}, {mx}"));
            f.ins(format!("fma.rn.{ty} {s}, {q}, {q}, {}", imm(class, 1.0)));
            f.ins(format!("sqrt.rn.{ty} {s}, {s}"));
            f.ins(format!("mul.rn.{ty} {s}, {s}, {mx}"));
            let zero = f.setp("eq", ty, &mx, &imm(class, 0.0));
            let r = f.selp(class, &imm(class, 0.0), &s, &zero);
            let nan = f.setp("nan", ty, a, b);
            let sum = two(f, "add.rn");
            let r = f.selp(class, &sum, &r, &nan);
            let inf = f.setp("eq", ty, &mx, &imm(class, f64::INFINITY));
            let ia = f.setp("eq", ty, &aa, &imm(class, f64::INFINITY));
            let ib = f.setp("eq", ty, &ab, &imm(class, f64::INFINITY));
            let any_inf = f.pred("or", &ia, &ib);
            let _ = inf;
            f.selp(class, &imm(class, f64::INFINITY), &r, &any_inf)
        }
        BinaryOp::Copysign if class == Class::F32 => copysign(f, a, b),
        BinaryOp::Copysign => {
            let (x, y, r) = (f.reg(Class::S64), f.reg(Class::S64), f.reg(Class::F64));
            f.ins(format!("mov.b64 {x}, {a}"));
            f.ins(format!("mov.b64 {y}, {b}"));
            f.ins(format!("and.b64 {x}, {x}, 9223372036854775807"));
            f.ins(format!("and.b64 {y}, {y}, 0x8000000000000000"));
            f.ins(format!("or.b64 {x}, {x}, {y}"));
            f.ins(format!("mov.b64 {r}, {x}"));
            r
        }
        BinaryOp::Atan2 if class == Class::F32 => crate::trig::atan2(f, a, b),
        BinaryOp::Pow if class == Class::F32 => pow(f, a, b),
        BinaryOp::Pow => crate::math64::pow(f, a, b),
        BinaryOp::Nextafter if class == Class::F32 => nextafter(f, a, b),
        BinaryOp::Polygamma if class == Class::F32 => crate::special::polygamma(f, a, b),
        BinaryOp::Zeta if class == Class::F32 => crate::special::special_zeta(f, a, b),
        BinaryOp::Igamma if class == Class::F32 => crate::igamma::igamma(f, a, b, false),
        BinaryOp::Igammac if class == Class::F32 => crate::igamma::igamma(f, a, b, true),
        other if class == Class::F32 => {
            crate::poly::polynomial(f, other, a, b).ok_or_else(|| unsupported(other, from))?
        }
        other => return Err(unsupported(other, from)),
    })
}

/// fmod of float32 values, exact: computed in float64, where a − q·b is
/// exact for quotients below 2²⁹, then one correction step.
fn fmod(f: &mut Func, a: &str, b: &str) -> String {
    let (x, y, q, r) = (f.reg(Class::F64), f.reg(Class::F64), f.reg(Class::F64), f.reg(Class::F64));
    f.ins(format!("cvt.f64.f32 {x}, {a}"));
    f.ins(format!("cvt.f64.f32 {y}, {b}"));
    f.ins(format!("div.rn.f64 {q}, {x}, {y}"));
    f.ins(format!("cvt.rzi.f64.f64 {q}, {q}"));
    f.ins(format!("neg.f64 {q}, {q}"));
    f.ins(format!("fma.rn.f64 {r}, {q}, {y}, {x}"));
    // The remainder takes a's sign and stays below |b|.
    let step = f.reg(Class::F64);
    f.ins(format!("abs.f64 {step}, {y}"));
    let neg_a = f.setp("lt", "f64", &x, &imm(Class::F64, 0.0));
    f.ins(format!("@{neg_a} neg.f64 {step}, {step}"));
    let nz = f.setp("ne", "f64", &r, &imm(Class::F64, 0.0));
    let rn = f.setp("lt", "f64", &r, &imm(Class::F64, 0.0));
    let wrong = f.pred("xor", &rn, &neg_a);
    f.ins(format!("and.pred {wrong}, {wrong}, {nz}"));
    f.ins(format!("@{wrong} add.rn.f64 {r}, {r}, {step}"));
    let (ar, ay) = (f.reg(Class::F64), f.reg(Class::F64));
    f.ins(format!("abs.f64 {ar}, {r}"));
    f.ins(format!("abs.f64 {ay}, {y}"));
    let over = f.setp("ge", "f64", &ar, &ay);
    f.ins(format!("@{over} sub.rn.f64 {r}, {r}, {step}"));
    let out = f.reg(Class::F32);
    f.ins(format!("cvt.rn.f32.f64 {out}, {r}"));
    // A zero remainder keeps a's sign.
    let zero = f.setp("eq", "f32", &out, &k(0.0));
    let signed = copysign(f, &out, a);
    f.selp(Class::F32, &signed, &out, &zero)
}

/// floor_divide of float32 values as PyTorch computes it (through fmod, so
/// 1 // 0.1 is 9, not 10).
fn floor_divide(f: &mut Func, a: &str, b: &str) -> String {
    let m = fmod(f, a, b);
    let am = sub(f, a, &m);
    let div_ = div(f, &am, b);
    let mnz = f.setp("ne", "f32", &m, &k(0.0));
    let bn = f.setp("lt", "f32", b, &k(0.0));
    let mn = f.setp("lt", "f32", &m, &k(0.0));
    let fix = f.pred("xor", &bn, &mn);
    f.ins(format!("and.pred {fix}, {fix}, {mnz}"));
    let dm1 = sub(f, &div_, &k(1.0));
    let dv = f.selp(Class::F32, &dm1, &div_, &fix);
    let fl = op1(f, "cvt.rmi.f32", &dv);
    let frac = sub(f, &dv, &fl);
    let up = f.setp("gt", "f32", &frac, &k(0.5));
    let fl1 = add(f, &fl, &k(1.0));
    let fl = f.selp(Class::F32, &fl1, &fl, &up);
    // A zero quotient takes the sign of a / b.
    let q = div(f, a, b);
    let z = copysign(f, &k(0.0), &q);
    let dz = f.setp("eq", "f32", &dv, &k(0.0));
    let r = f.selp(Class::F32, &z, &fl, &dz);
    // Division by zero: a / b.
    let bz = f.setp("eq", "f32", b, &k(0.0));
    f.selp(Class::F32, &q, &r, &bz)
}

/// aᵇ for float32, computed in float64 (one rounding, like libm's powf).
pub(crate) fn pow(f: &mut Func, a: &str, b: &str) -> String {
    let (a64, b64, r) = (f.reg(Class::F64), f.reg(Class::F64), f.reg(Class::F32));
    f.ins(format!("cvt.f64.f32 {a64}, {a}"));
    f.ins(format!("cvt.f64.f32 {b64}, {b}"));
    let p = crate::math64::pow(f, &a64, &b64);
    f.ins(format!("cvt.rn.f32.f64 {r}, {p}"));
    r
}

fn nextafter(f: &mut Func, a: &str, b: &str) -> String {
    let bits = f.reg(Class::B32);
    f.ins(format!("mov.b32 {bits}, {a}"));
    let up = f.reg(Class::B32);
    let down = f.reg(Class::B32);
    f.ins(format!("add.s32 {up}, {bits}, 1"));
    f.ins(format!("sub.s32 {down}, {bits}, 1"));
    // Away from zero when b is further out on a's side.
    let lt = f.setp("lt", "f32", a, b);
    let pos = f.setp("gt", "f32", a, &k(0.0));
    let away = f.pred("xor", &lt, &pos);
    let moved = f.selp(Class::B32, &down, &up, &away);
    let r = f.reg(Class::F32);
    f.ins(format!("mov.b32 {r}, {moved}"));
    // From zero: the smallest subnormal with b's sign.
    let tiny = copysign(f, "0f00000001", b);
    let zero = f.setp("eq", "f32", a, &k(0.0));
    let r = f.selp(Class::F32, &tiny, &r, &zero);
    let same = f.setp("eq", "f32", a, b);
    let r = f.selp(Class::F32, b, &r, &same);
    let nan = f.setp("nan", "f32", a, b);
    f.selp(Class::F32, &k(f64::NAN), &r, &nan)
}

fn int_binary(f: &mut Func, em: &Emitter<'_>, op: BinaryOp, a: &str, b: &str) -> Result<String, PtxError> {
    let two = |f: &mut Func, ins: &str| {
        let r = f.reg(Class::S64);
        f.ins(format!("{ins} {r}, {a}, {b}"));
        r
    };
    Ok(match op {
        BinaryOp::Add => two(f, "add.s64"),
        BinaryOp::Sub => two(f, "sub.s64"),
        BinaryOp::Mul => two(f, "mul.lo.s64"),
        BinaryOp::Max | BinaryOp::Fmax => two(f, "max.s64"),
        BinaryOp::Min | BinaryOp::Fmin => two(f, "min.s64"),
        BinaryOp::BitAnd => two(f, "and.b64"),
        BinaryOp::BitOr => two(f, "or.b64"),
        BinaryOp::BitXor => two(f, "xor.b64"),
        BinaryOp::HashMix => crate::hash::hash_mix(f, a, b),
        BinaryOp::Shl | BinaryOp::Shr => {
            let amount = f.reg(Class::B32);
            f.ins(format!("cvt.u32.u64 {amount}, {b}"));
            let low = f.setp("lt", "s64", b, "0");
            let high = f.setp("gt", "s64", b, "63");
            let out = f.pred("or", &low, &high);
            let r = f.reg(Class::S64);
            if op == BinaryOp::Shl {
                f.ins(format!("shl.b64 {r}, {a}, {amount}"));
                f.selp(Class::S64, "0", &r, &out)
            } else {
                f.ins(format!("shr.s64 {r}, {a}, {amount}"));
                let sign = f.reg(Class::S64);
                f.ins(format!("shr.s64 {sign}, {a}, 63"));
                f.selp(Class::S64, &sign, &r, &out)
            }
        }
        BinaryOp::Div | BinaryOp::TruncDiv | BinaryOp::FloorDiv | BinaryOp::Rem | BinaryOp::Fmod => {
            // Division by zero sets the error flag under sync checks
            // (PyTorch raises on the CPU; its CUDA kernels do not).
            let zero = f.setp("eq", "s64", b, "0");
            em.raise_division(f, &zero)?;
            let d = f.selp(Class::S64, "1", b, &zero);
            let r = match op {
                BinaryOp::FloorDiv => f.floor_divmod(a, &d).0,
                BinaryOp::Rem => f.floor_divmod(a, &d).1,
                _ => {
                    let r = f.reg(Class::S64);
                    let ins = if op == BinaryOp::Fmod { "rem" } else { "div" };
                    f.ins(format!("{ins}.s64 {r}, {a}, {d}"));
                    r
                }
            };
            f.selp(Class::S64, "0", &r, &zero)
        }
        BinaryOp::Pow => int_pow(f, a, b),
        other => return Err(unsupported(other, DType::I64)),
    })
}

/// Integer power by squaring; negative exponents give 1, ±1 or 0 like the
/// CPU backend.
fn int_pow(f: &mut Func, a: &str, b: &str) -> String {
    let r = f.mov(Class::S64, "1");
    let base = f.mov(Class::S64, a);
    let e = f.mov(Class::S64, b);
    let (top, end) = (f.label("pow"), f.label("pow_end"));
    f.place(&top);
    let done = f.setp("le", "s64", &e, "0");
    f.ins(format!("@{done} bra {end}"));
    let bit = f.reg(Class::S64);
    f.ins(format!("and.b64 {bit}, {e}, 1"));
    let odd = f.setp("ne", "s64", &bit, "0");
    f.ins(format!("@{odd} mul.lo.s64 {r}, {r}, {base}"));
    f.ins(format!("mul.lo.s64 {base}, {base}, {base}"));
    f.ins(format!("shr.s64 {e}, {e}, 1"));
    f.ins(format!("bra {top}"));
    f.place(&end);
    // b < 0: 1 for a = 1, ±1 for a = −1, else 0.
    let bit = f.reg(Class::S64);
    f.ins(format!("and.b64 {bit}, {b}, 1"));
    let odd = f.setp("ne", "s64", &bit, "0");
    let m1 = f.selp(Class::S64, "-1", "1", &odd);
    let is_m1 = f.setp("eq", "s64", a, "-1");
    let is_1 = f.setp("eq", "s64", a, "1");
    let neg = f.selp(Class::S64, &m1, "0", &is_m1);
    let neg = f.selp(Class::S64, "1", &neg, &is_1);
    let negative = f.setp("lt", "s64", b, "0");
    f.selp(Class::S64, &neg, &r, &negative)
}
