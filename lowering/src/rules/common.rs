//! What several rules read: argument readers (dims, int lists, GELU's
//! approximation), the dtypes reductions and rdyn's CPU kernels compute in,
//! and library calls.

use rdyn_ir::graph::{Arg, Node};
use rdyn_ir::loops::{ExternKind, ScalarId};
use rdyn_ir::{DType, Expr};

use crate::error::{invalid, shape, unsupported, LowerError};
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

/// A `dim` argument for a tensor of `ndim` dims, normalized, or an error
/// naming it (`what`) when it is out of range (`-ndim..ndim`).
pub(super) fn checked_dim(d: i64, ndim: usize, what: &str, op: &str) -> Result<usize, LowerError> {
    let n = ndim as i64;
    match (-n..n).contains(&d) {
        true => Ok(d.rem_euclid(n) as usize),
        false => Err(invalid(
            op,
            format!("{what} {d} is out of range for a rank-{ndim} input; expected {} to {}", -n, n - 1),
        )),
    }
}

/// An int argument (`what`, for the error), `default` when it is None; a
/// symbol is left to eager.
pub(super) fn int_arg(arg: &Arg, default: i64, what: &str, op: &str) -> Result<i64, LowerError> {
    match arg {
        Arg::None => Ok(default),
        Arg::Int(e) => e.as_const().ok_or_else(|| unsupported(op, format!("symbolic {what}"))),
        other => Err(invalid(op, format!("{what} is {other}; expected an int"))),
    }
}

/// An int list argument (`what`, for the error) as index expressions,
/// symbols included (one int counts as a list of one).
pub(super) fn expr_list(arg: &Arg, what: &str, op: &str) -> Result<Vec<Expr>, LowerError> {
    let items = match arg {
        Arg::List(items) => items.as_slice(),
        one => std::slice::from_ref(one),
    };
    let bad = || invalid(op, format!("{what} is {arg}; expected a list of ints"));
    items.iter().map(|a| a.as_expr().ok_or_else(bad)).collect()
}

/// The error for output metadata whose sizes `given` are not the
/// `expected` ones that `why` (the arguments) give.
pub(super) fn disagree(op: &str, given: &[Expr], why: String, expected: &[Expr]) -> LowerError {
    invalid(op, format!("output has sizes {}; {why} give {}", shape(given), shape(expected)))
}

/// `what` (an output) has dtype `given`, the `expected` one of `source`.
pub(super) fn check_dtype(op: &str, what: &str, given: DType, source: &str, expected: DType) -> Result<(), LowerError> {
    match given == expected {
        true => Ok(()),
        false => Err(invalid(op, format!("{what} is {given}; expected {source}'s {expected}"))),
    }
}

/// `what` (an index tensor) has an integer dtype.
pub(super) fn check_index_dtype(op: &str, what: &str, dtype: DType) -> Result<(), LowerError> {
    match dtype.is_int() {
        true => Ok(()),
        false => Err(invalid(op, format!("{what} is {dtype}; expected an integer dtype"))),
    }
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
