//! Searches of a sorted sequence. `searchsorted` and `bucketize` are ATen's
//! binary search: the same midpoints and comparisons (`!(mid >= v)` moves
//! right, `!(mid > v)` for the right side), so NaN in the sequence or among the
//! values lands where eager's does. On the CPU rdyn's search kernel
//! (`ExternKind::Search`, `codegen-cpu/src/search.rs`); on GPU devices the
//! search is unrolled into each element's expression, one fused kernel.

use rdyn_ir::graph::{Arg, Node};
use rdyn_ir::loops::{contiguous_strides, BinaryOp, Extern, ExternKind, Negatives, Step, UnaryOp};
use rdyn_ir::op::Op;
use rdyn_ir::{DType, Expr};

use super::common::kernel_dtype;
use crate::error::unsupported;
use crate::lazy::Lazy;
use crate::lowerer::{Handled, Lowerer, Res};

/// searchsorted and bucketize: ATen's binary search, on the CPU rdyn's
/// search kernel, on GPU devices unrolled into one scalar expression per
/// element (a fused kernel, no stored intermediates). Each step takes the same midpoint and the
/// same comparison as ATen's: `!(mid >= v)` (`!(mid > v)` for the
/// right side) moves right, so NaN in the sequence or among the values
/// lands where ATen's puts it.
pub(super) fn search_sorted(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let op = node.target.as_str();
    let (sizes, out) = lw.out_meta(node)?;
    let (seq, v) = match node.op {
        Op::Searchsorted if node.overload() == "Tensor" => {
            (lw.tensor_arg(node, 0, "sorted_sequence")?, lw.tensor_arg(node, 1, "self")?)
        }
        Op::Bucketize if node.overload() == "Tensor" => {
            (lw.tensor_arg(node, 1, "boundaries")?, lw.tensor_arg(node, 0, "self")?)
        }
        _ => return Err(unsupported(op, format!("overload {}", node.overload()))),
    };
    let right =
        node.kwarg("right").as_bool().unwrap_or(false) || matches!(node.kwarg("side"), Arg::Str(s) if s == "right");
    if seq.dtype != v.dtype || v.sizes != sizes {
        return Err(unsupported(op, "a sequence and values of different dtypes"));
    }
    let batched = seq.ndim() > 1;
    if seq.ndim() == 0
        || (batched && (seq.ndim() != v.ndim() || seq.sizes[..seq.ndim() - 1] != v.sizes[..v.ndim() - 1]))
    {
        return Err(unsupported(op, "a sequence whose leading dims differ from the values'"));
    }
    let last = seq.ndim() - 1;
    // Each value's row of the sequence: the values' leading dims, then
    // a position along the last.
    let row: Vec<Option<Expr>> = (0..last).map(|d| Some(Expr::v(d as u32))).chain([None]).collect();
    let m = lw.constant(&seq.sizes[last]).ok_or_else(|| unsupported(op, "a sequence of symbolic length"))?;
    // With a sorter, the sequence is read through it: seq[..., sorter[..., j]].
    let seq = match node.kwarg("sorter") {
        Arg::Tensor(s) => {
            let sorter = lw.value(*s, op)?;
            let value = lw.gather_load(&seq, &row, &[(last, sorter.value)], &seq.sizes.clone(), Negatives::Wrap);
            Lazy { value, ..seq }
        }
        _ => seq,
    };
    if lw.options.cpu_kernels {
        let acc = kernel_dtype(v.dtype);
        let (seq, v) = (lw.cast_lazy(seq, acc), lw.cast_lazy(v, acc));
        let inputs = vec![lw.buffer_for_extern(&seq), lw.buffer_for_extern(&v)];
        let buf = lw.temp_buffer(DType::I64, sizes.clone(), contiguous_strides(&sizes));
        lw.prog.steps.push(Step::Extern(Extern { kind: ExternKind::Search { right }, inputs, outputs: vec![buf] }));
        let positions = lw.load_buffer(buf);
        return Ok(Handled::Native(vec![lw.cast_lazy(positions, out)]));
    }
    let s = &mut lw.prog.scalars;
    let (zero, one, two) =
        (s.int_constant(0, DType::I64), s.int_constant(1, DType::I64), s.int_constant(2, DType::I64));
    let (mut start, mut end) = (zero, s.int_constant(m, DType::I64));
    for _ in 0..u64::BITS - (m as u64).leading_zeros() {
        let s = &mut lw.prog.scalars;
        let active = s.binary(BinaryOp::Lt, start, end, DType::Bool);
        let width = s.binary(BinaryOp::Sub, end, start, DType::I64);
        let half = s.binary(BinaryOp::FloorDiv, width, two, DType::I64);
        let centre = s.binary(BinaryOp::Add, start, half, DType::I64);
        let mid = s.select(active, centre, zero, DType::I64);
        let mid_val = lw.gather_load(&seq, &row, &[(last, mid)], &sizes, Negatives::Wrap);
        let s = &mut lw.prog.scalars;
        let stop = s.binary(if right { BinaryOp::Gt } else { BinaryOp::Ge }, mid_val, v.value, DType::Bool);
        let go = s.unary(UnaryOp::Not, stop, DType::Bool);
        let (moves_up, moves_down) =
            (s.binary(BinaryOp::And, active, go, DType::Bool), s.binary(BinaryOp::And, active, stop, DType::Bool));
        let next = s.binary(BinaryOp::Add, mid, one, DType::I64);
        start = s.select(moves_up, next, start, DType::I64);
        end = s.select(moves_down, mid, end, DType::I64);
    }
    let value = lw.prog.scalars.cast(start, out);
    Ok(Handled::Native(vec![Lazy { sizes, value, dtype: out }]))
}
