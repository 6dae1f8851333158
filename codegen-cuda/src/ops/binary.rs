//! Binary scalar ops as PTX: comparisons and logic, float32 and float64
//! arithmetic (exact fmod and floor division, pow, the two-argument special
//! functions), integer arithmetic with division checks.

use rdyn_ir::loops::BinaryOp;
use rdyn_ir::special::Special;
use rdyn_ir::{DType, Kind};

use crate::math::math32::pow;
use crate::math::{hash, math64, trig};
use crate::ptx::arith::{add, copysign, div, k, op1, sub};
use crate::ptx::checks::Checks;
use crate::ptx::convert::fit;
use crate::ptx::func::{imm, Class, Func};
use crate::types::{unsupported, PtxError};

/// A binary scalar op: operands of dtype `from`, result of dtype `to`.
pub fn binary(
    f: &mut Func,
    checks: &Checks,
    op: BinaryOp,
    a: &str,
    b: &str,
    from: DType,
    to: DType,
) -> Result<String, PtxError> {
    let class = Class::of(from.kind());
    let ty = class.ty();
    let logical = op.is_logical();
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
        Class::S64 => int_binary(f, checks, op, a, b)?,
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
        BinaryOp::Atan2 if class == Class::F32 => trig::atan2(f, a, b),
        BinaryOp::Pow if class == Class::F32 => pow(f, a, b),
        BinaryOp::Pow => math64::pow(f, a, b),
        BinaryOp::Nextafter if class == Class::F32 => nextafter(f, a, b),
        // The orthogonal polynomials, zeta and the incomplete gamma
        // functions: their one definition, in float64, rounded once.
        other if class == Class::F32 => match Special::of_binary(other) {
            Some(which) => crate::math::scalar::call_f32(f, which.body(), &[a, b]),
            None => return Err(unsupported(other, from)),
        },
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

fn int_binary(f: &mut Func, checks: &Checks, op: BinaryOp, a: &str, b: &str) -> Result<String, PtxError> {
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
        BinaryOp::HashMix => hash::hash_mix(f, a, b),
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
            checks.raise_division(f, &zero)?;
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
