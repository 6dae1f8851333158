//! Why lowering a node or a graph failed.

use rdyn_ir::Expr;

/// Why a node or graph could not be lowered.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LowerError {
    /// rdyn has no lowering for this node (yet): it runs eagerly.
    #[error("{op}: {reason}")]
    Unsupported { op: String, reason: String },
    /// The graph itself is inconsistent (a bug in rdyn or in the import).
    #[error("invalid graph at {op}: {reason}")]
    Invalid { op: String, reason: String },
    /// A pass produced a program that fails verification.
    #[error("loop IR verification failed after {pass}: {error}")]
    Verify { pass: &'static str, error: rdyn_ir::verify::VerifyError },
}

/// A node rdyn does not lower (this way): it runs eagerly.
pub(crate) fn unsupported(op: &str, reason: impl Into<String>) -> LowerError {
    LowerError::Unsupported { op: op.to_string(), reason: reason.into() }
}

/// A graph that contradicts itself.
pub(crate) fn invalid(op: &str, reason: impl Into<String>) -> LowerError {
    LowerError::Invalid { op: op.to_string(), reason: reason.into() }
}

/// Whether metadata sizes `given` agree with `expected`, the sizes the
/// arguments give: the same rank, and equal where both are known.
pub(crate) fn agree(given: &[Expr], expected: &[Expr]) -> bool {
    let known_equal = |(a, b): (&Expr, &Expr)| match (a.as_const(), b.as_const()) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    };
    given.len() == expected.len() && given.iter().zip(expected).all(known_equal)
}

/// Sizes as an error message writes them: `[2, 3, s0]`.
pub(crate) fn shape(sizes: &[Expr]) -> String {
    let sizes: Vec<String> = sizes.iter().map(Expr::to_string).collect();
    format!("[{}]", sizes.join(", "))
}
