//! Elementwise ops of one operand. Most are one scalar op, the one
//! `Op::unary_op` names (`rdyn_ir::ops`); the others are short expressions
//! of their operand ([`expression`]): ReLU, SiLU, `frac`, `sinc`, the
//! infinity tests, `round` to decimals, tanh-approximated GELU.
//!
//! Result dtypes come from PyTorch's FakeTensor metadata, and an op computes
//! in its result's dtype, except the tests (`isnan`, `isfinite`, `signbit`, ...),
//! which read their operand in its own. An op the table marks float-only runs
//! eagerly on integers; float64 Bessel J and Y run eagerly too (eager's own
//! numerics).
//!
//! Exact GELU is one scalar op (`UnaryOp::Gelu`), not its decomposition
//! `x/2 · (1 + erf(x/√2))`, whose compiled CPU loop spilled tiles around the erf
//! call; the tanh approximation is lowered as its expression.

use rdyn_ir::graph::Node;
use rdyn_ir::loops::{BinaryOp, ScalarId, Scalars, UnaryOp};
use rdyn_ir::op::Op;
use rdyn_ir::ops::Operands;
use rdyn_ir::DType;

use super::common::{gelu_is_tanh, native};
use crate::error::{unsupported, LowerError};
use crate::lowerer::{Lowerer, Res};

/// The rule of every one-operand elementwise op but `angle`.
pub(super) fn unary(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let input = lw.tensor_arg(node, 0, "self")?;
    let x_dtype = input.dtype;
    let compute = if tests_its_operand(node.op) { x_dtype } else { out };
    let x = lw.operand(node.arg(0, "self"), &sizes, compute, &node.target)?;
    let gelu_tanh = node.op == Op::Gelu && gelu_is_tanh(node, 1)?;
    let Some(op) = scalar_op(node, out, gelu_tanh) else {
        let value = expression(lw, node, x, x_dtype, out)?;
        return native(sizes, value, out);
    };
    if out == DType::F64 && matches!(op, UnaryOp::BesselJ0 | UnaryOp::BesselJ1 | UnaryOp::BesselY0 | UnaryOp::BesselY1)
    {
        // PyTorch's float64 Bessel J/Y differ from the accurate
        // (libm) values by up to 1e-5 near zeros: keep eager's.
        return Err(unsupported(&node.target, "float64 Bessel J/Y (eager's own numerics)"));
    }
    if !out.is_float() && op.info().operands == Operands::Float {
        return Err(unsupported(&node.target, format!("{op} on {out}")));
    }
    let v = lw.prog.scalars.unary(op, x, out);
    native(sizes, v, out)
}

/// The ops that test their operand, read in its own dtype, for a bool.
fn tests_its_operand(op: Op) -> bool {
    matches!(op, Op::IsNan | Op::IsInf | Op::IsFinite | Op::IsPosInf | Op::IsNegInf | Op::Signbit)
}

/// The scalar op `node` is: its op's, refined by its arguments and
/// result; None where it is an expression.
fn scalar_op(node: &Node, out: DType, gelu_tanh: bool) -> Option<UnaryOp> {
    match node.op {
        Op::Gelu if gelu_tanh => None,
        Op::Round if decimals(node) != 0 => None,
        // ATen's bitwise not of bools is the logical one.
        Op::BitwiseNot if out == DType::Bool => Some(UnaryOp::Not),
        op => op.unary_op(),
    }
}

/// `round`'s `decimals` (0 unless given).
fn decimals(node: &Node) -> i64 {
    node.kwarg("decimals").as_int().unwrap_or(0)
}

/// The ops that are an expression of their operand `x` (read in
/// `x_dtype`, cast to `out` unless a test).
fn expression(
    lw: &mut Lowerer<'_>,
    node: &Node,
    x: ScalarId,
    x_dtype: DType,
    out: DType,
) -> Result<ScalarId, LowerError> {
    let s = &mut lw.prog.scalars;
    Ok(match node.op {
        Op::Positive => x,
        Op::Relu => {
            let zero = s.constant(0.0, out);
            s.binary(BinaryOp::Max, x, zero, out)
        }
        Op::Square => s.binary(BinaryOp::Mul, x, x, out),
        Op::Silu => {
            // x · sigmoid(x), as PyTorch's reference writes it.
            let sg = s.unary(UnaryOp::Sigmoid, x, out);
            s.binary(BinaryOp::Mul, x, sg, out)
        }
        Op::Gelu => gelu_tanh(s, x, out),
        Op::Frac => {
            let t = s.unary(UnaryOp::Trunc, x, out);
            s.binary(BinaryOp::Sub, x, t, out)
        }
        Op::Deg2Rad | Op::Rad2Deg => {
            let k = if node.op == Op::Deg2Rad { std::f64::consts::PI / 180.0 } else { 180.0 / std::f64::consts::PI };
            let k = s.constant(k, out);
            s.binary(BinaryOp::Mul, x, k, out)
        }
        Op::IsFinite | Op::IsPosInf | Op::IsNegInf => infinity_test(s, node.op, x, x_dtype),
        Op::Round => round_to(s, x, decimals(node), out),
        Op::Sinc => {
            // sin(pi x) / (pi x), 1 at 0.
            let pi = s.constant(std::f64::consts::PI, out);
            let px = s.binary(BinaryOp::Mul, x, pi, out);
            let sin = s.unary(UnaryOp::Sin, px, out);
            let q = s.binary(BinaryOp::Div, sin, px, out);
            let zero = s.constant(0.0, out);
            let one = s.constant(1.0, out);
            let is_zero = s.binary(BinaryOp::Eq, x, zero, DType::Bool);
            s.select(is_zero, one, q, out)
        }
        _ => return Err(unsupported(&node.target, "no lowering for this op")),
    })
}

/// GELU with approximate="tanh", as ATen writes it:
/// x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³))).
fn gelu_tanh(s: &mut Scalars, x: ScalarId, out: DType) -> ScalarId {
    let cube = s.binary(BinaryOp::Mul, x, x, out);
    let cube = s.binary(BinaryOp::Mul, cube, x, out);
    let kappa = s.constant(0.044715, out);
    let t = s.binary(BinaryOp::Mul, kappa, cube, out);
    let t = s.binary(BinaryOp::Add, x, t, out);
    let beta = s.constant((2.0 / std::f64::consts::PI).sqrt(), out);
    let t = s.binary(BinaryOp::Mul, beta, t, out);
    let t = s.unary(UnaryOp::Tanh, t, out);
    let one = s.constant(1.0, out);
    let t = s.binary(BinaryOp::Add, one, t, out);
    let half = s.constant(0.5, out);
    let h = s.binary(BinaryOp::Mul, half, x, out);
    s.binary(BinaryOp::Mul, h, t, out)
}

/// `isfinite`, `isposinf`, `isneginf` of `x` (of `x_dtype`): constants for
/// integers.
fn infinity_test(s: &mut Scalars, op: Op, x: ScalarId, x_dtype: DType) -> ScalarId {
    if !x_dtype.is_float() {
        let v = (op == Op::IsFinite) as i64;
        return s.int_constant(v, DType::Bool);
    }
    let target = match op {
        Op::IsPosInf => f64::INFINITY,
        Op::IsNegInf => f64::NEG_INFINITY,
        _ => f64::NAN,
    };
    if op == Op::IsFinite {
        let nan = s.unary(UnaryOp::IsNan, x, DType::Bool);
        let inf = s.unary(UnaryOp::IsInf, x, DType::Bool);
        let bad = s.binary(BinaryOp::Or, nan, inf, DType::Bool);
        s.unary(UnaryOp::Not, bad, DType::Bool)
    } else {
        let t = s.constant(target, x_dtype);
        s.binary(BinaryOp::Eq, x, t, DType::Bool)
    }
}

/// round(x, d) = round(x·10^d) / 10^d, as PyTorch computes it.
fn round_to(s: &mut Scalars, x: ScalarId, decimals: i64, out: DType) -> ScalarId {
    if decimals == 0 {
        return s.unary(UnaryOp::Round, x, out);
    }
    let (op_in, op_out) = if decimals > 0 { (BinaryOp::Mul, BinaryOp::Div) } else { (BinaryOp::Div, BinaryOp::Mul) };
    let k = s.constant(10f64.powi(decimals.unsigned_abs() as i32), out);
    let scaled = s.binary(op_in, x, k, out);
    let r = s.unary(UnaryOp::Round, scaled, out);
    s.binary(op_out, r, k, out)
}

/// angle of a real tensor: 0 for x >= 0, pi for x < 0, NaN stays NaN.
pub(super) fn angle(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let x = lw.operand(node.arg(0, "self"), &sizes, out, &node.target)?;
    let s = &mut lw.prog.scalars;
    let zero = s.constant(0.0, out);
    let pi = s.constant(std::f64::consts::PI, out);
    let neg = s.binary(BinaryOp::Lt, x, zero, DType::Bool);
    let a = s.select(neg, pi, zero, out);
    let nan = s.unary(UnaryOp::IsNan, x, DType::Bool);
    let v = s.select(nan, x, a, out);
    native(sizes, v, out)
}
