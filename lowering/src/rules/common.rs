//! What several rules read: argument readers (dims, int lists, GELU's
//! approximation), the dtypes reductions and rdyn's CPU kernels compute in,
//! and library calls.

use rdyn_ir::graph::{Arg, Node};
use rdyn_ir::loops::{ExternKind, ScalarId};
use rdyn_ir::{DType, Expr};

use crate::error::{invalid, unsupported, LowerError};
use crate::lazy::Lazy;
use crate::lowerer::{Handled, Lowerer, Res};

/// One output of `sizes` whose element is `value`.
pub(super) fn native(sizes: Vec<Expr>, value: ScalarId, dtype: DType) -> Res {
    Ok(Handled::Native(vec![Lazy { sizes, value, dtype }]))
}

/// A `dim` argument as a dim of a tensor of `ndim` dims (a 0-dim tensor
/// counts as one dim).
pub(super) fn norm_dim(d: i64, ndim: usize) -> usize {
    let n = ndim.max(1) as i64;
    (if d < 0 { d + n } else { d }).clamp(0, n - 1) as usize
}

/// An int list argument (one int counts as a list of one).
pub(super) fn int_list(arg: &Arg, op: &str) -> Result<Vec<i64>, LowerError> {
    match arg {
        Arg::List(items) => {
            items.iter().map(|a| a.as_int().ok_or_else(|| unsupported(op, "symbolic int in list"))).collect()
        }
        other => other.as_int().map(|v| vec![v]).ok_or_else(|| unsupported(op, format!("expected ints, got {other}"))),
    }
}

/// Normalise a `dim` argument (int, list, or None/empty = all dims).
pub(super) fn reduce_dims(arg: &Arg, ndim: usize, op: &str) -> Result<Vec<usize>, LowerError> {
    let raw: Vec<i64> = match arg {
        Arg::None => return Ok((0..ndim).collect()),
        Arg::List(items) if items.is_empty() => return Ok((0..ndim).collect()),
        Arg::List(items) => items
            .iter()
            .map(|a| a.as_int().ok_or_else(|| unsupported(op, "symbolic reduction dim")))
            .collect::<Result<_, _>>()?,
        other => vec![other.as_int().ok_or_else(|| unsupported(op, format!("dim {other}")))?],
    };
    let mut dims = Vec::new();
    for d in raw {
        let n = ndim.max(1) as i64;
        let d = if d < 0 { d + n } else { d };
        if d < 0 || d >= n {
            return Err(invalid(op, format!("dim {d} out of range for {ndim}-d input")));
        }
        if ndim > 0 && !dims.contains(&(d as usize)) {
            dims.push(d as usize);
        }
    }
    dims.sort_unstable();
    Ok(dims)
}

/// Whether a GELU node (or its backward) asks for the tanh approximation
/// (else the exact one), `approximate` being argument `pos`.
pub(super) fn gelu_is_tanh(node: &Node, pos: usize) -> Result<bool, LowerError> {
    match node.arg(pos, "approximate") {
        Arg::None => Ok(false),
        Arg::Str(mode) if mode == "none" => Ok(false),
        Arg::Str(mode) if mode == "tanh" => Ok(true),
        other => Err(unsupported(&node.target, format!("approximate={other:?}"))),
    }
}

/// The dtype a reduction or a GEMM accumulates `dtype` in: float32 for
/// half precision.
pub(super) fn acc_dtype(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        other => other,
    }
}

/// The dtype rdyn's CPU kernels (scan, sort, search) compute `dtype` in:
/// float32 or float64, every integer and bool as int64 (exact for all).
pub(super) fn kernel_dtype(dtype: DType) -> DType {
    match acc_dtype(dtype) {
        DType::F32 => DType::F32,
        DType::F64 => DType::F64,
        _ => DType::I64,
    }
}

/// Library kernels run through ATen (convolution).
pub(super) fn library(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let kind = ExternKind::Library { node: node.index, target: node.target.clone() };
    Ok(Handled::Extern(lw.extern_call(node, kind)?))
}
