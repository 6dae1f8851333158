//! Lowering: ATen graph IR → loop-level IR, then fusion.
//!
//! Every graph value becomes a [`Lazy`] tensor: a scalar expression over its
//! own index variables (`i0..ndim`). Pointwise ops and views build new lazies
//! by substitution and never touch memory; a lazy is *realized* into a buffer
//! only where something needs memory: a reduction's output, a graph output, an
//! extern call's input, or a value with several expensive consumers. The
//! [`schedule`] pass then groups stages into kernels.
//!
//! Errors: [`LowerError::Unsupported`] for one node means "run this node
//! eagerly" and is handled here (the node becomes a fallback extern); any other
//! error is a compiler bug and fails the whole graph.

mod conv;
mod cse;
mod dce;
mod diagonal;
mod forward;
mod gemm;
mod index;
mod lazy;
mod lower;
mod norm;
mod permuted;
mod piecewise;
mod pointwise;
mod pool;
mod reduce;
mod reuse;
pub mod schedule;
mod shape;
mod sort;
#[cfg(test)]
mod testing;

pub use lower::{lower, lower_with, InputLayout, LowerOptions, Lowered, NodeCounts};
pub use piecewise::PIECEWISE_MIN_ELEMENTS;

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
    Verify { pass: &'static str, error: ir::verify::VerifyError },
}

pub(crate) use rdyn_ir as ir;

pub(crate) fn unsupported(op: &str, reason: impl Into<String>) -> LowerError {
    LowerError::Unsupported { op: op.to_string(), reason: reason.into() }
}

pub(crate) fn invalid(op: &str, reason: impl Into<String>) -> LowerError {
    LowerError::Invalid { op: op.to_string(), reason: reason.into() }
}
