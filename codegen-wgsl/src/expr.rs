//! Scalar expressions and index expressions as WGSL source.
//!
//! On the device every tensor element is 32-bit: `f32` for floating dtypes,
//! `i32` for integers and bool (int64 values are checked to fit when they
//! are uploaded). Index arithmetic is `i32` with floor division helpers.
//! Exact GELU computes Φ through erfc, the tail taken directly for negative x.

use std::fmt::Write;

use rdyn_ir::loops::{BinaryOp, Negatives, Program, ScalarId, ScalarOp, UnaryOp};
use rdyn_ir::random::{FMIX, GOLDEN};
use rdyn_ir::{Atom, DType, Expr, Kind};

use crate::lit::{float_lit, int_lit};
use crate::special;
use crate::WgslError;

/// The WGSL element type of a dtype on the device.
pub fn elem(dtype: DType) -> Result<&'static str, WgslError> {
    match dtype.kind() {
        Kind::F32 => Ok("f32"),
        Kind::I64 => Ok("i32"),
        Kind::F64 => Err(WgslError::Unsupported(format!("{dtype} has no WGSL type"))),
    }
}

/// An index expression over the variables `v0..` (concrete sizes only).
pub fn index(e: &Expr) -> Result<String, WgslError> {
    let mut out = String::new();
    for (atom, coef) in e.terms() {
        let a = atom_src(atom)?;
        if !out.is_empty() {
            out.push_str(" + ");
        }
        if *coef == 1 {
            out.push_str(&a);
        } else {
            let _ = write!(out, "{}*{a}", int_lit(*coef));
        }
    }
    if out.is_empty() || e.constant() != 0 {
        if !out.is_empty() {
            out.push_str(" + ");
        }
        out.push_str(&int_lit(e.constant()));
    }
    Ok(format!("({out})"))
}

fn atom_src(atom: &Atom) -> Result<String, WgslError> {
    Ok(match atom {
        Atom::Var(v) => format!("v{}", v.0),
        Atom::Sym(s) => return Err(WgslError::Unsupported(format!("symbolic size {s}"))),
        Atom::Prod(fs) => fs.iter().map(atom_src).collect::<Result<Vec<_>, _>>()?.join("*"),
        Atom::FloorDiv(a, b) => format!("fdiv({}, {})", index(a)?, index(b)?),
        Atom::Mod(a, b) => format!("fmodi({}, {})", index(a)?, index(b)?),
    })
}

/// Helper functions every module includes.
pub const PRELUDE: &str = r#"
fn fdiv(a: i32, b: i32) -> i32 {
    if (b == 0i) { return 0i; }
    let q = a / b;
    return select(q, q - 1i, (a % b != 0i) && ((a < 0i) != (b < 0i)));
}
fn fmodi(a: i32, b: i32) -> i32 {
    if (b == 0i) { return 0i; }
    let r = a % b;
    return select(r, r + b, (r != 0i) && ((r < 0i) != (b < 0i)));
}
fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn is_inf(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }
fn nan() -> f32 { return bitcast<f32>(0x7fc00000u); }
fn maxf(a: f32, b: f32) -> f32 { return select(select(b, a, a > b), a, is_nan(a)); }
fn minf(a: f32, b: f32) -> f32 { return select(select(b, a, a < b), a, is_nan(a)); }
fn powf(a: f32, b: f32) -> f32 {
    if (b == 0.0f) { return 1.0f; }
    let r = pow(abs(a), b);
    if (a >= 0.0f || is_nan(a)) { return select(r, 0.0f, a == 0.0f && b > 0.0f); }
    if (b != floor(b)) { return nan(); }
    let odd = abs(b - 2.0f * floor(b * 0.5f)) == 1.0f;
    return select(r, -r, odd);
}
fn powi(a: i32, b: i32) -> i32 {
    if (b < 0i) { return select(0i, select(select(-1i, 1i, (b & 1i) == 0i), 1i, a == 1i), a == 1i || a == -1i); }
    var r = 1i; var base = a; var e = b;
    loop { if (e == 0i) { break; } if ((e & 1i) == 1i) { r = r * base; } base = base * base; e = e >> 1u; }
    return r;
}
fn erfc_abs(z: f32) -> f32 {
    let t = 1.0f / (1.0f + 0.5f * z);
    let p = -z * z - 1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f + t * (-0.18628806f
        + t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
    return t * exp(p);
}
fn erff(x: f32) -> f32 { return sign(x) * (1.0f - erfc_abs(abs(x))); }
fn erfcf(x: f32) -> f32 { return select(2.0f - erfc_abs(-x), erfc_abs(x), x >= 0.0f); }
fn geluf(x: f32) -> f32 {
    let tail = 0.5f * erfc_abs(abs(x) * 0.70710678f);
    return x * select(1.0f - tail, tail, x < 0.0f);
}
fn gelugradf(x: f32) -> f32 {
    let tail = 0.5f * erfc_abs(abs(x) * 0.70710678f);
    return select(1.0f - tail, tail, x < 0.0f) + x * exp(-0.5f * x * x) * 0.39894228f;
}
fn expm1f(x: f32) -> f32 { return select(exp(x) - 1.0f, x + 0.5f * x * x + x * x * x / 6.0f, abs(x) < 1e-3f); }
// ln(1 + x): for |x| < ½ as 2·atanh(s), s = x/(2 + x), |s| ≤ ⅓, by its
// series to s^17 (the next term is below 1e-9 relative), which keeps
// relative accuracy for small x whatever the driver reassociates;
// log(1 + x) beyond.
fn log1pf(x: f32) -> f32 {
    let s = x / (2.0f + x);
    let s2 = s * s;
    var p = 0.0588235294f;
    p = fma(p, s2, 0.0666666667f); p = fma(p, s2, 0.0769230769f); p = fma(p, s2, 0.0909090909f);
    p = fma(p, s2, 0.111111111f); p = fma(p, s2, 0.142857143f); p = fma(p, s2, 0.2f);
    p = fma(p, s2, 0.333333333f); p = fma(p, s2, 1.0f);
    return select(log(1.0f + x), 2.0f * s * p, abs(x) < 0.5f);
}
fn floordivi(a: i32, b: i32) -> i32 { return fdiv(a, b); }
fn remi(a: i32, b: i32) -> i32 { return fmodi(a, b); }
fn truncdivi(a: i32, b: i32) -> i32 { if (b == 0i) { return 0i; } return a / b; }
fn fmodi_c(a: i32, b: i32) -> i32 { if (b == 0i) { return 0i; } return a % b; }
fn round_bf16(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    let b = bitcast<u32>(x);
    let r = b + 0x7fffu + ((b >> 16u) & 1u);
    return bitcast<f32>(r & 0xffff0000u);
}
fn b2i(c: bool) -> i32 { return select(0i, 1i, c); }
fn round_f16(x: f32) -> f32 {
    if (is_nan(x) || is_inf(x)) { return x; }
    let a = abs(x);
    if (a >= 65520.0f) { return select(bitcast<f32>(0xff800000u), bitcast<f32>(0x7f800000u), x > 0.0f); }
    if (a < 6.103515625e-05f) { return round(x * 16777216.0f) / 16777216.0f; }
    let b = bitcast<u32>(x);
    let r = b + 0xfffu + ((b >> 13u) & 1u);
    return bitcast<f32>(r & 0xffffe000u);
}
"#;

/// rdyn's random bits (`rdyn_ir::random::hash_mix`, whose constants
/// these are) on 32-bit words, included in a module only when its body
/// calls `hash_mix`.
pub fn hash_source() -> String {
    let [m0, m1] = FMIX;
    format!(
        "
fn fmix32(x: u32) -> u32 {{
    var h = x ^ (x >> 16u); h = h * {m0:#x}u; h = h ^ (h >> 13u); h = h * {m1:#x}u;
    return h ^ (h >> 16u);
}}
fn hash_mix(position: i32, key: i32) -> i32 {{
    let k = fmix32(bitcast<u32>(key) ^ {GOLDEN:#x}u);
    let h = fmix32(bitcast<u32>(position) * {GOLDEN:#x}u + k);
    return i32(fmix32(h ^ k) >> 8u);
}}
"
    )
}

/// float32 arithmetic the CPU backend defines exactly (fmod, remainder,
/// floor division, nextafter), included in a module only when its body
/// calls one (every name starts with `special_`). Special functions are
/// translated from their definitions instead (`special.rs`).
pub const SPECIAL: &str = r#"
// fmod, exact: subtract the largest b·2^k that fits, each step exact
// (Sterbenz); at most ~280 steps.
fn special_fmod(a: f32, b: f32) -> f32 {
    if (is_nan(a) || is_nan(b) || is_inf(a) || b == 0.0f) { return nan(); }
    if (is_inf(b)) { return a; }
    let m = abs(b);
    var r = abs(a);
    var steps = 0;
    loop {
        // (The cap guards against drivers that flush subnormal b to zero.)
        if (r < m || steps > 300) { break; }
        steps = steps + 1;
        var t = ldexp(m, frexp(r).exp - frexp(m).exp);
        if (t > r) { t = t * 0.5f; }
        r = r - t;
    }
    return select(r, -r, a < 0.0f || (a == 0.0f && (bitcast<u32>(a) >> 31u) == 1u));
}
fn special_rem(a: f32, b: f32) -> f32 {
    let r = special_fmod(a, b);
    return select(r, r + b, r != 0.0f && ((r < 0.0f) != (b < 0.0f)));
}
// floor_divide as PyTorch computes it (through fmod: 1 // 0.1 is 9).
fn special_floordiv(a: f32, b: f32) -> f32 {
    if (b == 0.0f) { return a / b; }
    let m = special_fmod(a, b);
    var d = (a - m) / b;
    if (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) { d = d - 1.0f; }
    if (d == 0.0f) { return select(0.0f, -0.0f, (a / b) < 0.0f || (bitcast<u32>(a / b) >> 31u) == 1u); }
    var fl = floor(d);
    if (d - fl > 0.5f) { fl = fl + 1.0f; }
    return fl;
}
fn special_nextafter(a: f32, b: f32) -> f32 {
    if (is_nan(a) || is_nan(b)) { return nan(); }
    if (a == b) { return b; }
    if (a == 0.0f) { return select(bitcast<f32>(0x80000001u), bitcast<f32>(1u), b > 0.0f); }
    let bits = bitcast<u32>(a);
    return bitcast<f32>(select(bits - 1u, bits + 1u, (a < b) == (a > 0.0f)));
}
"#;

fn wrap(expr: String, dtype: DType) -> String {
    match dtype {
        DType::Bool => format!("b2i({expr} != 0i)"),
        DType::U8 => format!("(({expr}) & 255i)"),
        DType::I8 => format!("((({expr}) << 24u) >> 24u)"),
        DType::I16 => format!("((({expr}) << 16u) >> 16u)"),
        _ => expr,
    }
}

/// Emits one scalar DAG as `let` statements.
pub struct BodyWriter<'a> {
    pub program: &'a Program,
    /// WGSL name of each buffer's binding.
    pub binding_name: &'a dyn Fn(rdyn_ir::loops::BufId) -> Option<String>,
    /// Rewrites an index expression into the kernel's variables.
    pub index_of: &'a dyn Fn(&Expr) -> Result<String, WgslError>,
    pub uses_error_flag: bool,
}

impl BodyWriter<'_> {
    /// Write the nodes under `roots` (those not yet in `done`) into `out`.
    pub fn write(&mut self, roots: &[ScalarId], out: &mut String, indent: &str) -> Result<(), WgslError> {
        let scalars = &self.program.scalars;
        for id in scalars.topo(roots) {
            let node = scalars.get(id);
            let ty = elem(node.dtype)?;
            let t = |s: &ScalarId| format!("t{}", s.0);
            let is_f = node.dtype.kind() == Kind::F32;
            let expr = match &node.op {
                ScalarOp::Load { buf, index, indirect, mask } => {
                    let name = (self.binding_name)(*buf).ok_or(WgslError::Internal("load from unbound buffer"))?;
                    let mut idx = (self.index_of)(index)?;
                    for (s, stride) in indirect {
                        idx = format!("{idx} + {} * {}", t(s), (self.index_of)(stride)?);
                    }
                    match mask {
                        Some(m) => {
                            format!("select({ty}(0), {name}[select(0i, {idx}, {} != 0i)], {} != 0i)", t(m), t(m))
                        }
                        None => format!("{name}[{idx}]"),
                    }
                }
                ScalarOp::Const { bits } => {
                    if is_f {
                        float_lit(f64::from_bits(*bits))
                    } else {
                        int_lit(*bits as i64)
                    }
                }
                ScalarOp::Index(e) => (self.index_of)(e)?,
                ScalarOp::Unary(op, x) => self.unary(*op, &t(x), scalars.dtype(*x), node.dtype)?,
                ScalarOp::Binary(op, a, b) => self.binary(*op, &t(a), &t(b), scalars.dtype(*a), node.dtype)?,
                ScalarOp::Where(c, a, b) => format!("select({}, {}, {} != 0i)", t(b), t(a), t(c)),
                ScalarOp::Cast(x) => cast(&t(x), scalars.dtype(*x), node.dtype)?,
                ScalarOp::Bounded(x, size, negatives) => {
                    self.uses_error_flag = true;
                    let n = (self.index_of)(size)?;
                    match negatives {
                        Negatives::Wrap => format!("bounded({}, {n})", t(x)),
                        // Out of range below zero too: `bounded` then rejects it.
                        Negatives::Reject => format!("bounded(select({x}, {n}, {x} < 0i), {n})", x = t(x)),
                    }
                }
            };
            let _ = writeln!(out, "{indent}let t{}: {ty} = {expr};", id.0);
        }
        Ok(())
    }

    fn unary(&self, op: UnaryOp, x: &str, from: DType, to: DType) -> Result<String, WgslError> {
        let float = from.kind() == Kind::F32;
        let bool_out = to == DType::Bool || op.is_test();
        if !float {
            let e = match op {
                UnaryOp::Neg => format!("-{x}"),
                UnaryOp::Abs => format!("abs({x})"),
                UnaryOp::Sign => format!("sign({x})"),
                UnaryOp::Not => format!("b2i({x} == 0i)"),
                UnaryOp::BitNot => format!("~{x}"),
                UnaryOp::IsNan | UnaryOp::IsInf => "0i".to_string(),
                UnaryOp::Signbit => format!("b2i({x} < 0i)"),
                UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc => x.to_string(),
                other => return Err(WgslError::Unsupported(format!("{other} on integers"))),
            };
            return Ok(wrap(e, to));
        }
        // ψ, erfinv, ln|Γ|: their definitions, translated (`special.rs`).
        if let Some(which) = special::in_f32(op) {
            return Ok(format!("{}({x})", special::name(which)));
        }
        let e = match op {
            UnaryOp::Neg => format!("-{x}"),
            UnaryOp::Abs => format!("abs({x})"),
            UnaryOp::Exp => format!("exp({x})"),
            UnaryOp::Exp2 => format!("exp2({x})"),
            UnaryOp::Expm1 => format!("expm1f({x})"),
            UnaryOp::Log => format!("log({x})"),
            UnaryOp::Log2 => format!("log2({x})"),
            UnaryOp::Log10 => format!("(log({x}) * 0.43429448190325176f)"),
            UnaryOp::Log1p => format!("log1pf({x})"),
            UnaryOp::Sqrt => format!("sqrt({x})"),
            UnaryOp::Rsqrt => format!("inverseSqrt({x})"),
            UnaryOp::Sin => format!("sin({x})"),
            UnaryOp::Cos => format!("cos({x})"),
            UnaryOp::Tan => format!("tan({x})"),
            // Through atan2: drivers' asin/acos lose precision near ±1.
            UnaryOp::Asin => format!("atan2({x}, sqrt((1.0f - {x}) * (1.0f + {x})))"),
            UnaryOp::Acos => format!("atan2(sqrt((1.0f - {x}) * (1.0f + {x})), {x})"),
            UnaryOp::Atan => format!("atan({x})"),
            UnaryOp::Sinh => format!("sinh({x})"),
            UnaryOp::Cosh => format!("cosh({x})"),
            UnaryOp::Tanh => format!("tanh({x})"),
            UnaryOp::Asinh => format!("asinh({x})"),
            UnaryOp::Acosh => format!("acosh({x})"),
            UnaryOp::Atanh => format!("atanh({x})"),
            UnaryOp::Sigmoid => format!("(1.0f / (1.0f + exp(-{x})))"),
            UnaryOp::Erf => format!("erff({x})"),
            UnaryOp::Gelu => format!("geluf({x})"),
            UnaryOp::GeluGrad => format!("gelugradf({x})"),
            UnaryOp::Erfc => format!("erfcf({x})"),
            UnaryOp::Floor => format!("floor({x})"),
            UnaryOp::Ceil => format!("ceil({x})"),
            UnaryOp::Round => format!("round({x})"),
            UnaryOp::Trunc => format!("trunc({x})"),
            // ATen's `(0 < x) - (x < 0)`: NaN gives 0 (WGSL's `sign` leaves it open).
            UnaryOp::Sign => format!("(f32({x} > 0.0f) - f32({x} < 0.0f))"),
            UnaryOp::Reciprocal => format!("(1.0f / {x})"),
            UnaryOp::Not => format!("b2i({x} == 0.0f)"),
            UnaryOp::IsNan => format!("b2i(is_nan({x}))"),
            UnaryOp::IsInf => format!("b2i(is_inf({x}))"),
            UnaryOp::Signbit => format!("b2i((bitcast<u32>({x}) >> 31u) == 1u)"),
            UnaryOp::BitNot
            | UnaryOp::Erfinv
            | UnaryOp::Lgamma
            | UnaryOp::Digamma
            | UnaryOp::I0
            | UnaryOp::I0e
            | UnaryOp::I1
            | UnaryOp::I1e
            | UnaryOp::K0
            | UnaryOp::K1
            | UnaryOp::K0e
            | UnaryOp::K1e
            | UnaryOp::BesselJ0
            | UnaryOp::BesselJ1
            | UnaryOp::BesselY0
            | UnaryOp::BesselY1
            | UnaryOp::SphericalJ0
            | UnaryOp::AiryAi
            | UnaryOp::Erfcx
            | UnaryOp::Ndtri => return Err(WgslError::Unsupported(format!("{op} in WGSL"))),
        };
        Ok(if bool_out && to.kind() == Kind::F32 { format!("f32({e})") } else { e })
    }

    fn binary(&self, op: BinaryOp, a: &str, b: &str, from: DType, to: DType) -> Result<String, WgslError> {
        let float = from.kind() == Kind::F32;
        let cmp = |sym: &str| format!("b2i(({a}) {sym} ({b}))");
        let e = match op {
            BinaryOp::Add => format!("({a} + {b})"),
            BinaryOp::Sub => format!("({a} - {b})"),
            BinaryOp::Mul => format!("({a} * {b})"),
            BinaryOp::Div if float => format!("({a} / {b})"),
            BinaryOp::Div | BinaryOp::TruncDiv if !float => format!("truncdivi({a}, {b})"),
            BinaryOp::TruncDiv => format!("trunc({a} / {b})"),
            BinaryOp::FloorDiv if float => format!("special_floordiv({a}, {b})"),
            BinaryOp::FloorDiv => format!("floordivi({a}, {b})"),
            BinaryOp::Rem if float => format!("special_rem({a}, {b})"),
            BinaryOp::Rem => format!("remi({a}, {b})"),
            BinaryOp::Fmod if float => format!("special_fmod({a}, {b})"),
            BinaryOp::Fmod => format!("fmodi_c({a}, {b})"),
            BinaryOp::Pow if float => format!("powf({a}, {b})"),
            BinaryOp::Pow => format!("powi({a}, {b})"),
            BinaryOp::Max if float => format!("maxf({a}, {b})"),
            BinaryOp::Min if float => format!("minf({a}, {b})"),
            BinaryOp::Max | BinaryOp::Fmax => format!("max({a}, {b})"),
            BinaryOp::Min | BinaryOp::Fmin => format!("min({a}, {b})"),
            BinaryOp::Atan2 if float => format!("atan2({a}, {b})"),
            BinaryOp::Nextafter if float => format!("special_nextafter({a}, {b})"),
            BinaryOp::Hypot if float => format!("sqrt({a} * {a} + {b} * {b})"),
            BinaryOp::Copysign if float => {
                format!("bitcast<f32>((bitcast<u32>({a}) & 0x7fffffffu) | (bitcast<u32>({b}) & 0x80000000u))")
            }
            BinaryOp::Eq => cmp("=="),
            BinaryOp::Ne => cmp("!="),
            BinaryOp::Lt => cmp("<"),
            BinaryOp::Le => cmp("<="),
            BinaryOp::Gt => cmp(">"),
            BinaryOp::Ge => cmp(">="),
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => {
                let zero = if float { "0.0f" } else { "0i" };
                let sym = match op {
                    BinaryOp::And => "&&",
                    BinaryOp::Or => "||",
                    _ => "!=",
                };
                format!("b2i(({a} != {zero}) {sym} ({b} != {zero}))")
            }
            BinaryOp::BitAnd if !float => format!("({a} & {b})"),
            BinaryOp::BitOr if !float => format!("({a} | {b})"),
            BinaryOp::BitXor if !float => format!("({a} ^ {b})"),
            BinaryOp::HashMix if !float => format!("hash_mix({a}, {b})"),
            BinaryOp::Shl if !float => format!("select(0i, {a} << u32({b}), {b} >= 0i && {b} < 32i)"),
            BinaryOp::Shr if !float => format!("({a} >> u32(clamp({b}, 0i, 31i)))"),
            other => return Err(WgslError::Unsupported(format!("{other} on {from}"))),
        };
        let comparison = op.is_comparison() || op.is_logical();
        Ok(if comparison {
            if to.kind() == Kind::F32 {
                format!("f32({e})")
            } else {
                e
            }
        } else if to.kind() == Kind::I64 {
            wrap(e, to)
        } else {
            e
        })
    }
}

fn cast(x: &str, from: DType, to: DType) -> Result<String, WgslError> {
    Ok(match (from.kind(), to.kind()) {
        (Kind::F32, Kind::F32) => match to {
            DType::F16 => format!("round_f16({x})"),
            DType::BF16 => format!("round_bf16({x})"),
            _ => x.to_string(),
        },
        (Kind::I64, Kind::F32) => match to {
            DType::F16 => format!("round_f16(f32({x}))"),
            DType::BF16 => format!("round_bf16(f32({x}))"),
            _ => format!("f32({x})"),
        },
        (Kind::F32, Kind::I64) => match to {
            DType::Bool => format!("b2i({x} != 0.0f)"),
            _ => wrap(format!("i32({x})"), to),
        },
        (Kind::I64, Kind::I64) => wrap(x.to_string(), to),
        _ => return Err(WgslError::Unsupported(format!("cast {from} -> {to}"))),
    })
}
