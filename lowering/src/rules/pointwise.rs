//! The other elementwise ops: `where`, clamps, `lerp`, `addcmul`/`addcdiv`,
//! exact GELU's backward, and copies and casts.
//!
//! Clamps, `clamp_min`/`clamp_max` and `hardtanh` (ReLU6) are not decomposed:
//! each is `max(lo, x)` then `min(hi, x)`, the bound first, which in
//! `BinaryOp::Max`'s semantics (the first operand if NaN or strictly greater)
//! keeps x's NaN and the sign of its zero exactly as ATen's kernel and makes a NaN
//! bound NaN. Exact `gelu_backward` is the gradient times one op,
//! `UnaryOp::GeluGrad` = `Φ(x) + x·φ(x)`, where the decomposition took erf, exp
//! and eight more ops.
//!
//! Half precision: backends compute float16/bfloat16 values in float32 and round
//! them where they store or convert them (`Scalars::rounded` for a GEMM operand
//! that a fused producer computes in half precision, as eager's stored operand is;
//! other fused readers, such as a float32 sum, read the float32 value, as
//! Inductor's fused kernels do).

use rdyn_ir::graph::{Arg, Node};
use rdyn_ir::loops::{BinaryOp, UnaryOp};
use rdyn_ir::op::Op;
use rdyn_ir::DType;

use super::common::{gelu_is_tanh, native};
use crate::error::unsupported;
use crate::lowerer::{Lowerer, Res};

pub(super) fn where_(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let c = lw.operand(node.arg(0, "condition"), &sizes, DType::Bool, &node.target)?;
    let a = lw.operand(node.arg(1, "self"), &sizes, out, &node.target)?;
    let b = lw.operand(node.arg(2, "other"), &sizes, out, &node.target)?;
    let v = lw.prog.scalars.select(c, a, b, out);
    native(sizes, v, out)
}

pub(super) fn clamp(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let mut x = lw.operand(node.arg(0, "self"), &sizes, out, &node.target)?;
    let (lo, hi) = match node.op {
        Op::ClampMin => (node.arg(1, "min").clone(), Arg::None),
        Op::ClampMax => (Arg::None, node.arg(1, "max").clone()),
        Op::HardTanh => {
            let bound = |pos, name, default| match node.arg(pos, name) {
                Arg::None => Arg::Float(default),
                a => a.clone(),
            };
            (bound(1, "min_val", -1.0), bound(2, "max_val", 1.0))
        }
        _ => (node.arg(1, "min").clone(), node.arg(2, "max").clone()),
    };
    // The bound first: `max(lo, x)` is `lo` only when `lo` is NaN or
    // strictly above `x`, so x's NaN and its zero's sign survive as in
    // ATen (`clamp(-0.0, min=0.0)` is -0.0) and a NaN bound gives NaN.
    if !lo.is_none() {
        let lo = lw.operand(&lo, &sizes, out, &node.target)?;
        x = lw.prog.scalars.binary(BinaryOp::Max, lo, x, out);
    }
    if !hi.is_none() {
        let hi = lw.operand(&hi, &sizes, out, &node.target)?;
        x = lw.prog.scalars.binary(BinaryOp::Min, hi, x, out);
    }
    native(sizes, x, out)
}

pub(super) fn lerp(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let a = lw.operand(node.arg(0, "self"), &sizes, out, &node.target)?;
    let b = lw.operand(node.arg(1, "end"), &sizes, out, &node.target)?;
    let w = lw.operand(node.arg(2, "weight"), &sizes, out, &node.target)?;
    let s = &mut lw.prog.scalars;
    let d = s.binary(BinaryOp::Sub, b, a, out);
    let wd = s.binary(BinaryOp::Mul, w, d, out);
    let v = s.binary(BinaryOp::Add, a, wd, out);
    native(sizes, v, out)
}

/// Exact GELU's backward, `grad · (Φ(x) + x·φ(x))` with the factor one
/// op ([`UnaryOp::GeluGrad`]); the tanh form is decomposed before it
/// gets here (`python/rdyn/backend.py`).
pub(super) fn gelu_backward(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    if gelu_is_tanh(node, 2)? {
        return Err(unsupported(&node.target, "approximate='tanh' (decomposed before lowering)"));
    }
    let (sizes, out) = lw.out_meta(node)?;
    let grad = lw.operand(node.arg(0, "grad_output"), &sizes, out, &node.target)?;
    let x = lw.operand(node.arg(1, "self"), &sizes, out, &node.target)?;
    let s = &mut lw.prog.scalars;
    let factor = s.unary(UnaryOp::GeluGrad, x, out);
    let v = s.binary(BinaryOp::Mul, grad, factor, out);
    native(sizes, v, out)
}

pub(super) fn addc(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let x = lw.operand(node.arg(0, "self"), &sizes, out, &node.target)?;
    let t1 = lw.operand(node.arg(1, "tensor1"), &sizes, out, &node.target)?;
    let t2 = lw.operand(node.arg(2, "tensor2"), &sizes, out, &node.target)?;
    let value = node.arg(3, "value").as_float().unwrap_or(1.0);
    let s = &mut lw.prog.scalars;
    let op = if node.op == Op::Addcmul { BinaryOp::Mul } else { BinaryOp::Div };
    let p = s.binary(op, t1, t2, out);
    let k = s.constant(value, out);
    let p = s.binary(BinaryOp::Mul, p, k, out);
    let v = s.binary(BinaryOp::Add, x, p, out);
    native(sizes, v, out)
}

/// clone, _to_copy and prims.convert_element_type (dtype casts on the
/// same device), alias, detach.
pub(super) fn copy(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let src = if node.op == Op::Copy { node.arg(1, "src") } else { node.arg(0, "self") };
    let in_meta = src.as_tensor().map(|v| lw.graph.meta(v).device);
    let out_device = node.outputs.first().map(|v| lw.graph.meta(*v).device);
    if in_meta != out_device {
        return Err(unsupported(&node.target, "copy across devices"));
    }
    let x = lw.operand(src, &sizes, out, &node.target)?;
    native(sizes, x, out)
}
