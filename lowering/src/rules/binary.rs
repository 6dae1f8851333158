//! Elementwise ops of two operands. Most are one scalar op, the one
//! `Op::binary_op` names (`rdyn_ir::ops`), refined by the node's arguments
//! (a division's `rounding_mode`, bitwise ops of bools); `xlogy`, `heaviside`
//! and `logaddexp` are expressions ([`expression`]).
//!
//! An op computes in the result dtype, except comparisons, which compute in
//! the promoted dtype of their operands ([`promote_args`]), and logical ops,
//! which compute in bool. Python scalar operands follow ATen's conversions:
//! - on integers, a Python scalar is converted to the compute dtype first, wrapping
//!   (`DType::wrap_int`): `x % -3` of a uint8 `x` is `x % 253`, `x < 300` of an
//!   int8 `x` is `x < 44`; clamp's bounds are not converted, as in ATen;
//! - a Python float meeting a float16/bfloat16 tensor is rounded to its dtype on
//!   the CPU (TensorIterator converts the wrapped scalar), except by mul and div,
//!   which read it in float32; on CUDA every op reads it in float32
//!   (`LowerOptions::opmath_scalars`). A true division of a half-precision tensor
//!   by a Python float is a multiplication by its float32 reciprocal, as ATen's.
//!
//! `x ** 2` and `x ** 3` (float32/float64) are multiplications, `x ** 0.5`,
//! `x ** -0.5`, `x ** -1`, `x ** -2` square roots and reciprocals, `x ** 1` is `x`,
//! as ATen computes them. An op the table marks float-only runs eagerly on
//! integers.

use rdyn_ir::graph::{Arg, Node};
use rdyn_ir::loops::{BinaryOp, ScalarId, Scalars, UnaryOp};
use rdyn_ir::op::Op;
use rdyn_ir::ops::Operands;
use rdyn_ir::{DType, Expr};

use super::common::native;
use crate::error::{unsupported, LowerError};
use crate::lowerer::{Lowerer, Res};

/// The rule of every two-operand elementwise op but `polygamma`.
pub(super) fn binary(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let p = pair(lw, node)?;
    if let Some(v) = shortcut(&mut lw.prog.scalars, node, &p) {
        return native(p.sizes, v, p.out);
    }
    let Pair { sizes, out, compute, a, b, is_cmp, is_logical, .. } = p;
    let s = &mut lw.prog.scalars;
    let Some(op) = scalar_op(node, out) else {
        let v =
            expression(s, node.op, a, b, out).ok_or_else(|| unsupported(&node.target, "no lowering for this op"))?;
        return native(sizes, v, out);
    };
    if !compute.is_float() && op.info().operands == Operands::Float {
        return Err(unsupported(&node.target, format!("{op} on {compute}")));
    }
    let result_dtype = if is_cmp || is_logical { DType::Bool } else { out };
    let v = s.binary(op, a, b, result_dtype);
    let v = s.cast(v, out);
    native(sizes, v, out)
}

/// A binary node's operands at the output index, read as ATen reads them:
/// `b` scaled by `alpha`, the two swapped for `rsub`.
struct Pair {
    sizes: Vec<Expr>,
    out: DType,
    /// The dtype the op computes in.
    compute: DType,
    a: ScalarId,
    b: ScalarId,
    /// The second argument, as given.
    b_arg: Arg,
    b_dtype: DType,
    /// The dtype a Python number is read in.
    number: DType,
    /// A half-precision op reading a Python number in float32.
    opmath: bool,
    is_cmp: bool,
    is_logical: bool,
}

fn pair(lw: &mut Lowerer<'_>, node: &Node) -> Result<Pair, LowerError> {
    let (sizes, out) = lw.out_meta(node)?;
    let a_arg = node.arg(0, "self").clone();
    let b_arg = node.arg(1, "other").clone();
    let scalar = node.op.binary_op();
    let is_cmp = scalar.is_some_and(BinaryOp::is_comparison);
    let is_logical = scalar.is_some_and(BinaryOp::is_logical);
    let compute = if is_cmp {
        promote_args(lw, &[&a_arg, &b_arg])
    } else if is_logical {
        DType::Bool
    } else {
        out
    };
    // A Python scalar meets an integer tensor converted to the compute
    // dtype, wrapping as ATen converts it: `x % -3` of a uint8 `x` is
    // `x % 253`, `x < 300` of an int8 `x` is `x < 44`. (clamp's bounds
    // are not converted: its lowering is not this one.)
    // A Python number meets a float16/bfloat16 tensor converted to its
    // dtype (the cast rounds it), except where ATen reads it in
    // float32: mul and div on the CPU, every op on CUDA
    // (`LowerOptions::opmath_scalars`).
    let opmath = matches!(compute, DType::F16 | DType::BF16)
        && (lw.options.opmath_scalars || matches!(node.op, Op::Mul | Op::Div | Op::TrueDivide | Op::FloorDivide));
    let number = if opmath { DType::F32 } else { compute };
    let wrapped = |arg: Arg| match arg {
        Arg::Int(e) if compute.is_int() => Arg::Int(e.as_const().map_or(e, |n| Expr::c(compute.wrap_int(n)))),
        other => other,
    };
    let (a_arg, b_arg) = (wrapped(a_arg), wrapped(b_arg));
    // A 0-dim tensor is a scalar to ATen too (a float Dynamo passes in
    // as an input arrives as one).
    let graph = lw.graph;
    let dtype_of = |arg: &Arg| match arg {
        Arg::Tensor(v) if !graph.meta(*v).sizes.is_empty() => compute,
        _ => number,
    };
    let (a_dtype, b_dtype) = (dtype_of(&a_arg), dtype_of(&b_arg));
    let mut a = lw.operand(&a_arg, &sizes, a_dtype, &node.target)?;
    let mut b = lw.operand(&b_arg, &sizes, b_dtype, &node.target)?;
    let s = &mut lw.prog.scalars;
    // add/sub take an `alpha` multiplier for the second operand.
    if let Some(alpha) = node.kwarg("alpha").as_float().or_else(|| node.args.get(2).and_then(|a| a.as_float())) {
        if matches!(node.op, Op::Add | Op::Sub | Op::Rsub) && alpha != 1.0 {
            let k = s.constant(number.round_float(alpha), number);
            b = s.binary(BinaryOp::Mul, b, k, compute);
        }
    }
    if node.op == Op::Rsub {
        std::mem::swap(&mut a, &mut b);
    }
    Ok(Pair { sizes, out, compute, a, b, b_arg, b_dtype, number, opmath, is_cmp, is_logical })
}

/// What ATen computes otherwise than by the op itself: powers 1, 2, 3, 0.5,
/// -0.5, -1 and -2 of a float, and a half-precision tensor divided by a
/// Python number.
fn shortcut(s: &mut Scalars, node: &Node, p: &Pair) -> Option<ScalarId> {
    let (a, b, out) = (p.a, p.b, p.out);
    // ATen's pow by a scalar exponent (CPU and CUDA) computes `x ** 2`
    // and `x ** 3` by multiplication, `x ** 0.5` as `sqrt`, `x ** -0.5`
    // as `rsqrt`, `x ** -1` and `x ** -2` as reciprocals (as exact, and
    // far cheaper than powf: weight norm's `norm ** 0.5`), and `x ** 1` is
    // `x` (the derivative of a square is `2 * x ** 1`); so does rdyn, for
    // float32 and float64.
    if node.op == Op::Pow && matches!(out, DType::F32 | DType::F64) {
        let reciprocal = |s: &mut Scalars, x| {
            let one = s.constant(1.0, out);
            s.binary(BinaryOp::Div, one, x, out)
        };
        let v = match p.b_arg.as_float() {
            Some(1.0) => a,
            Some(2.0) => s.binary(BinaryOp::Mul, a, a, out),
            Some(3.0) => {
                let square = s.binary(BinaryOp::Mul, a, a, out);
                s.binary(BinaryOp::Mul, square, a, out)
            }
            Some(0.5) => s.unary(UnaryOp::Sqrt, a, out),
            Some(-0.5) => s.unary(UnaryOp::Rsqrt, a, out),
            Some(-1.0) => reciprocal(s, a),
            Some(-2.0) => {
                let square = s.binary(BinaryOp::Mul, a, a, out);
                reciprocal(s, square)
            }
            _ => return None,
        };
        return Some(v);
    }
    // ATen divides a float16/bfloat16 tensor by a Python float as a
    // multiplication by its float32 reciprocal (CPU and CUDA alike).
    let true_div = matches!(node.op, Op::Div | Op::TrueDivide) && matches!(node.kwarg("rounding_mode"), Arg::None);
    if true_div && p.opmath && p.b_dtype == p.number {
        let inverse = match p.b_arg.as_float() {
            Some(d) => s.constant((1.0 / d as f32) as f64, DType::F32),
            None => {
                let one = s.constant(1.0, DType::F32);
                s.binary(BinaryOp::Div, one, b, DType::F32)
            }
        };
        return Some(s.binary(BinaryOp::Mul, a, inverse, out));
    }
    None
}

/// The scalar op `node` is: its op's, refined by its arguments and result;
/// None where it is an expression.
fn scalar_op(node: &Node, out: DType) -> Option<BinaryOp> {
    match node.op {
        Op::Div | Op::TrueDivide => Some(match node.kwarg("rounding_mode") {
            Arg::Str(mode) if mode == "trunc" => BinaryOp::TruncDiv,
            Arg::Str(mode) if mode == "floor" => BinaryOp::FloorDiv,
            _ => BinaryOp::Div,
        }),
        // ATen's bitwise ops of bools are the logical ones.
        op => op.binary_op().map(|b| match b {
            BinaryOp::BitAnd if out == DType::Bool => BinaryOp::And,
            BinaryOp::BitOr if out == DType::Bool => BinaryOp::Or,
            BinaryOp::BitXor if out == DType::Bool => BinaryOp::Xor,
            b => b,
        }),
    }
}

/// The ops that are an expression of their operands `a` and `b`.
fn expression(s: &mut Scalars, op: Op, a: ScalarId, b: ScalarId, out: DType) -> Option<ScalarId> {
    Some(match op {
        Op::Xlogy => {
            // x * log(y), 0 where x == 0, nan where y is nan.
            let log = s.unary(UnaryOp::Log, b, out);
            let prod = s.binary(BinaryOp::Mul, a, log, out);
            let zero = s.constant(0.0, out);
            let x_zero = s.binary(BinaryOp::Eq, a, zero, DType::Bool);
            let y_nan = s.unary(UnaryOp::IsNan, b, DType::Bool);
            let nan = s.constant(f64::NAN, out);
            let z = s.select(x_zero, zero, prod, out);
            s.select(y_nan, nan, z, out)
        }
        Op::Heaviside => {
            let zero = s.constant(0.0, out);
            let one = s.constant(1.0, out);
            let is_zero = s.binary(BinaryOp::Eq, a, zero, DType::Bool);
            let pos = s.binary(BinaryOp::Gt, a, zero, DType::Bool);
            let step = s.select(pos, one, zero, out);
            s.select(is_zero, b, step, out)
        }
        Op::LogAddExp => {
            // max + log1p(exp(-|a - b|)), exact for equal infinities.
            let mx = s.binary(BinaryOp::Max, a, b, out);
            let mn = s.binary(BinaryOp::Min, a, b, out);
            let d = s.binary(BinaryOp::Sub, mn, mx, out);
            let e = s.unary(UnaryOp::Exp, d, out);
            let l = s.unary(UnaryOp::Log1p, e, out);
            let sum = s.binary(BinaryOp::Add, mx, l, out);
            let same = s.binary(BinaryOp::Eq, a, b, DType::Bool);
            let inf = s.unary(UnaryOp::IsInf, a, DType::Bool);
            let both = s.binary(BinaryOp::And, same, inf, DType::Bool);
            s.select(both, a, sum, out)
        }
        _ => return None,
    })
}

/// The promoted dtype of the operands (PyTorch's category rules: tensors
/// with dimensions win over zero-dim tensors, which win over numbers).
fn promote_args(lw: &Lowerer<'_>, args: &[&Arg]) -> DType {
    let mut dims: Option<DType> = None;
    let mut zero_dim: Option<DType> = None;
    let mut number: Option<DType> = None;
    for arg in args {
        let (slot, dt) = match arg {
            Arg::Tensor(v) => {
                let meta = lw.graph.meta(*v);
                if meta.ndim() == 0 {
                    (&mut zero_dim, meta.dtype)
                } else {
                    (&mut dims, meta.dtype)
                }
            }
            Arg::Float(_) | Arg::SymFloat(_) => (&mut number, DType::F32),
            Arg::Int(_) => (&mut number, DType::I64),
            Arg::Bool(_) => (&mut number, DType::Bool),
            _ => continue,
        };
        *slot = Some(slot.map_or(dt, |d| DType::promote(d, dt)));
    }
    let category = |d: DType| {
        if d.is_float() {
            2
        } else if d == DType::Bool {
            0
        } else {
            1
        }
    };
    let mut result = dims;
    for candidate in [zero_dim, number].into_iter().flatten() {
        match result {
            Some(r) if category(candidate) <= category(r) => {}
            _ => result = Some(candidate),
        }
    }
    result.unwrap_or(DType::F32)
}

/// polygamma(n, x) = (-1)^(n+1) n!·zeta(n+1, x) for n ≥ 1 (n! and the sign
/// a constant: n is a Python int); digamma for n = 0. A negative n goes to
/// eager, which raises.
pub(super) fn polygamma(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    if !out.is_float() {
        return Err(unsupported(&node.target, "integer output"));
    }
    let n = node.arg(0, "n").as_int().ok_or_else(|| unsupported(&node.target, "n"))?;
    let x = lw.operand(node.arg(1, "self"), &sizes, out, &node.target)?;
    let s = &mut lw.prog.scalars;
    let v = match n {
        0 => s.unary(UnaryOp::Digamma, x, out),
        1.. => {
            let order = s.constant(n as f64 + 1.0, out);
            let z = s.binary(BinaryOp::Zeta, order, x, out);
            // n! is +inf in float64 past 170 (and n may be any int).
            let factorial: f64 = (1..=n.min(171)).map(|k| k as f64).product();
            let sign = if n % 2 == 1 { 1.0 } else { -1.0 };
            let scale = s.constant(sign * factorial, out);
            s.binary(BinaryOp::Mul, scale, z, out)
        }
        _ => return Err(unsupported(&node.target, "negative n")),
    };
    native(sizes, v, out)
}
