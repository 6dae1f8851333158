//! Scans along one dim: cumsum, cumprod, cummax, cummin, logcumsumexp. On
//! the CPU one extern step, rdyn's scan kernel (`ExternKind::Scan`,
//! `codegen-cpu/src/scan.rs`); on GPU devices reductions over each element's
//! prefix (`prefix_scan`, parallel over every output, quadratic in the line),
//! for lines up to 4096 long; longer ones run eagerly.

use rdyn_ir::graph::Node;
use rdyn_ir::loops::{contiguous_strides, BinaryOp, Extern, ExternKind, ReduceOp, ScanOp, Step, UnaryOp};
use rdyn_ir::op::Op;
use rdyn_ir::{DType, Expr};

use super::common::kernel_dtype;
use crate::error::{invalid, unsupported, LowerError};
use crate::lazy::Lazy;
use crate::lowerer::{Handled, Lowerer, Res};

/// Scans along one dim: cumsum, cumprod, cummax, cummin, logcumsumexp.
/// On the CPU, rdyn's scan kernel (one pass per line); on GPU devices,
/// reductions over each element's prefix (`prefix_scan`).
pub(super) fn scan(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let (sizes, out) = lw.out_meta(node)?;
    let x = lw.tensor_arg(node, 0, "self")?;
    let extreme = matches!(node.op, Op::Cummax | Op::Cummin);
    if (extreme && out == DType::Bool) || (node.op == Op::Logcumsumexp && !out.is_float()) {
        return Err(unsupported(&node.target, format!("a scan of {out}")));
    }
    // Values are computed in float32, float64 or int64.
    let acc = kernel_dtype(out);
    let x = lw.cast_lazy(x, acc);
    let r = x.ndim();
    if r == 0 {
        let value = lw.cast_lazy(x, out);
        return Ok(Handled::Native(if extreme {
            let zero = lw.prog.scalars.int_constant(0, DType::I64);
            vec![value, Lazy { sizes, value: zero, dtype: DType::I64 }]
        } else {
            vec![value]
        }));
    }
    let dim = node.arg(1, "dim").as_int().ok_or_else(|| invalid(&node.target, "dim must be an int"))?;
    let d = if dim < 0 { dim + r as i64 } else { dim };
    if !(0..r as i64).contains(&d) {
        return Err(invalid(&node.target, format!("dim {dim} out of range for {r} dims")));
    }
    let d = d as usize;
    let op = match node.op {
        Op::Cumsum => ScanOp::Sum,
        Op::Cumprod => ScanOp::Prod,
        Op::Cummax => ScanOp::Max,
        Op::Cummin => ScanOp::Min,
        _ => ScanOp::LogSumExp,
    };
    let mut outs = if lw.options.cpu_kernels {
        let input = lw.buffer_for_extern(&x);
        let strides = contiguous_strides(&x.sizes);
        let mut bufs = vec![lw.temp_buffer(acc, x.sizes.clone(), strides.clone())];
        if extreme {
            bufs.push(lw.temp_buffer(DType::I64, x.sizes.clone(), strides));
        }
        lw.prog.steps.push(Step::Extern(Extern {
            kind: ExternKind::Scan { op, dim: d },
            inputs: vec![input],
            outputs: bufs.clone(),
        }));
        bufs.into_iter().map(|b| lw.load_buffer(b)).collect()
    } else {
        lw.prefix_scan(node, op, &x, d)?
    };
    outs[0] = lw.cast_lazy(outs[0].clone(), out);
    Ok(Handled::Native(outs))
}

impl Lowerer<'_> {
    /// A scan as reductions over each element's prefix: the element at j
    /// reduces the inputs at k ≤ j, the rest masked to the identity (sum,
    /// product) or to x_j itself (always in the prefix, so the extreme is
    /// unchanged). Quadratic in the line's length, so long scans run
    /// eagerly.
    fn prefix_scan(&mut self, node: &Node, op: ScanOp, x: &Lazy, d: usize) -> Result<Vec<Lazy>, LowerError> {
        const MAX_SCAN: i64 = 4096;
        if self.constant(&x.sizes[d]).is_none_or(|n| n > MAX_SCAN) {
            return Err(unsupported(&node.target, format!("a scan longer than {MAX_SCAN} (or symbolic)")));
        }
        let r = x.ndim();
        // The prefix dim k is variable r of the extended space.
        let mut ext = x.sizes.clone();
        ext.push(x.sizes[d].clone());
        let map: Vec<Expr> = (0..r).map(|m| Expr::v(if m == d { r as u32 } else { m as u32 })).collect();
        let xk = self.view(x, ext.clone(), &map);
        let dtype = xk.dtype;
        let s = &mut self.prog.scalars;
        let k = s.index(Expr::v(r as u32));
        let j = s.index(Expr::v(d as u32));
        let upto = s.binary(BinaryOp::Le, k, j, DType::Bool);
        let prefix = |value, dtype| Lazy { sizes: ext.clone(), value, dtype };
        Ok(match op {
            ScanOp::Sum | ScanOp::Prod => {
                let (reduce, identity) = if op == ScanOp::Sum { (ReduceOp::Sum, 0.0) } else { (ReduceOp::Prod, 1.0) };
                let id = s.constant(identity, dtype);
                let value = s.select(upto, xk.value, id, dtype);
                vec![self.reduce(&prefix(value, dtype), &[r], false, reduce, dtype)]
            }
            ScanOp::LogSumExp => {
                // m + log Σ exp(x_k - m) with m the prefix max, taken as 0
                // where infinite (all -inf: log 0 = -inf; +inf: inf).
                let masked = s.select(upto, xk.value, x.value, dtype);
                let m = self.reduce(&prefix(masked, dtype), &[r], false, ReduceOp::Max, dtype);
                let s = &mut self.prog.scalars;
                let inf = s.unary(UnaryOp::IsInf, m.value, DType::Bool);
                let zero = s.constant(0.0, dtype);
                let shift = s.select(inf, zero, m.value, dtype);
                let diff = s.binary(BinaryOp::Sub, xk.value, shift, dtype);
                let e = s.unary(UnaryOp::Exp, diff, dtype);
                let value = s.select(upto, e, zero, dtype);
                let total = self.reduce(&prefix(value, dtype), &[r], false, ReduceOp::Sum, dtype);
                let s = &mut self.prog.scalars;
                let log = s.unary(UnaryOp::Log, total.value, dtype);
                let value = s.binary(BinaryOp::Add, shift, log, dtype);
                vec![Lazy { sizes: x.sizes.clone(), value, dtype }]
            }
            ScanOp::Max | ScanOp::Min => {
                // The extreme of the prefix, and the last k holding it (the
                // last NaN once there is one), as ATen's kernels update on ties.
                let reduce = if op == ScanOp::Max { ReduceOp::Max } else { ReduceOp::Min };
                let masked = s.select(upto, xk.value, x.value, dtype);
                let m = self.reduce(&prefix(masked, dtype), &[r], false, reduce, dtype);
                let s = &mut self.prog.scalars;
                let mut hit = s.binary(BinaryOp::Eq, xk.value, m.value, DType::Bool);
                if dtype.is_float() {
                    let a = s.unary(UnaryOp::IsNan, xk.value, DType::Bool);
                    let b = s.unary(UnaryOp::IsNan, m.value, DType::Bool);
                    let both = s.binary(BinaryOp::And, a, b, DType::Bool);
                    hit = s.binary(BinaryOp::Or, hit, both, DType::Bool);
                }
                let hit = s.binary(BinaryOp::And, hit, upto, DType::Bool);
                let k64 = s.cast(k, DType::I64);
                let zero = s.int_constant(0, DType::I64);
                let value = s.select(hit, k64, zero, DType::I64);
                let index = self.reduce(&prefix(value, DType::I64), &[r], false, ReduceOp::Max, DType::I64);
                vec![m, index]
            }
        })
    }
}
