//! Why lowering a node or a graph failed.

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
