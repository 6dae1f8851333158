//! Unary scalar ops as PTX: float32 (hardware approximations with range
//! reduction, `math/`), float64 (software exp/log), integers.

use rdyn_ir::loops::UnaryOp;
use rdyn_ir::special::Special;
use rdyn_ir::{DType, Kind};

use crate::math::math32::{acos, cos_of_asin, exp, expm1, log, log1p, log2, LN2, LOG2E};
use crate::math::special;
use crate::math::trig::{atan2, trig, Trig};
use crate::ptx::arith::{add, copysign, div, fma, k, keep_nan, mul, op1, op2, sub};
use crate::ptx::convert::fit;
use crate::ptx::func::{imm, Class, Func};
use crate::types::{unsupported, PtxError};

/// float32 unary ops: the exp/log family, trigonometric and hyperbolic
/// functions, sigmoid; the rest in `float32_special_unary`.
fn float32_unary(f: &mut Func, op: UnaryOp, x: &str) -> Result<String, PtxError> {
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
        UnaryOp::Sin => trig(f, x, Trig::Sin),
        UnaryOp::Cos => trig(f, x, Trig::Cos),
        UnaryOp::Tan => trig(f, x, Trig::Tan),
        UnaryOp::Atan => {
            let one = f.mov(Class::F32, &k(1.0));
            atan2(f, x, &one)
        }
        UnaryOp::Asin => {
            let s = cos_of_asin(f, x);
            atan2(f, x, &s)
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
        other => return float32_special_unary(f, other, x),
    })
}

/// The float32 error-function family and special functions.
fn float32_special_unary(f: &mut Func, op: UnaryOp, x: &str) -> Result<String, PtxError> {
    if let Some(which) = Special::of_unary(op) {
        return Ok(scalar(f, which, x));
    }
    Ok(match op {
        UnaryOp::Erf | UnaryOp::Erfc => {
            let c = special::erfc_abs(f, x);
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
            let c = special::erfc_abs(f, &z);
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
        other => return float_common_unary(f, other, x, Class::F32),
    })
}

/// A function written once in `rdyn_ir::special`, of a float32 value.
fn scalar(f: &mut Func, which: Special, x: &str) -> String {
    crate::math::scalar::call_f32(f, which.body(), &[x])
}

fn float64_unary(f: &mut Func, op: UnaryOp, x: &str) -> Result<String, PtxError> {
    use crate::math::math64 as m;
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
    Ok(fit(f, r, op_result_kind(from, to, op.is_predicate()), to))
}

/// The kind the op's instructions produced: bool-valued ops give s64 0/1.
fn op_result_kind(from: DType, _to: DType, predicate: bool) -> Kind {
    if predicate {
        Kind::I64
    } else {
        from.kind()
    }
}
