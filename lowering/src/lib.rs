//! Lowering: ATen graph IR → loop-level IR, then the passes over it.
//!
//! Every graph value becomes a [`Lazy`] tensor: a scalar expression over its
//! own index variables (`i0..ndim`). Pointwise ops and views build new lazies
//! by substitution and never touch memory; a lazy is *realized* into a buffer
//! only where something needs memory (below). The [`schedule`] pass then groups
//! stages into kernels.
//!
//! Errors: [`LowerError::Unsupported`] for one node means "run this node
//! eagerly" and is handled here (the node becomes a fallback extern); any other
//! error is a compiler bug and fails the whole graph.
//!
//! # Where things are
//!
//! - `lower.rs`: the driver (node by node, then the graph outputs), when a value is
//!   stored rather than recomputed, [`LowerOptions`]; `lazy.rs`: [`Lazy`], `realize`.
//! - `pointwise.rs`: node dispatch, elementwise ops, Python scalar operands, GELU,
//!   clamps, casts. `reduce.rs`: reductions, variance, logsumexp, and scans (cumsum,
//!   cumprod, cummax, cummin, logcumsumexp). `sort.rs`: sort, topk, kthvalue,
//!   medians; searchsorted and bucketize.
//! - `shape.rs`: views, data movement, creation ops, `as_strided`, library calls.
//!   `index.rs`: indexing, scatter and index_put. `diagonal.rs`: `diagonal_scatter`.
//! - `gemm.rs`: mm/bmm/addmm as GEMM steps. `conv.rs`: depthwise kernel, convolutions
//!   as GEMMs, library convolutions. `norm.rs`: batch and layer norm. `pool.rs`:
//!   average pooling and its gradient.
//! - The passes, in the order `lower_with` runs them (each followed by
//!   `verify` in debug builds): `cse.rs` (repeated stores kept once),
//!   `permuted.rs` (permuted repeats of copies as views), `dce.rs` (dead stages),
//!   `piecewise.rs` (CPU only: a stage split where its sources change), `schedule.rs`
//!   (fusion), `forward.rs` (a stored value folded into its only reader), `reuse.rs`
//!   (a stored value read back where its kernel's other stages would recompute it).
//!   `passes.rs`: the same passes by name, on a program alone ([`run_pass`]).
//!
//! # Filetests
//!
//! `tests/filetests/*.loop` pin the passes' decisions without torch: loop IR
//! in the text form (`rdyn_ir::parse`), a `; run: cse, dce` line naming the
//! passes ([`Pass`]) to run on it, and `; check:` / `; not:` lines matched in
//! order against the printed result (`; error:` lines for a program the parser
//! or a pass must reject). `cargo test -p rdyn-lowering --test filetests` runs
//! them all (`RDYN_FILETESTS=word` those whose name contains `word`). To add
//! one, write the IR (print a program a pass's unit test builds, or start from
//! a file here) with its `; run:` line and a first comment saying what it
//! pins; run it without checks, and it fails printing the result: check that
//! the passes decided what they should, and write the checks from it.
//!
//! # When a lazy becomes a buffer
//!
//! A reduction's output; a graph output (with PyTorch's strides); an extern
//! call's input; a value with several users whose body costs more than
//! `RECOMPUTE_LIMIT` (12; a transcendental, a special binary op or a
//! bounds-checked index counts 12, any other op 1), stored with its metadata's
//! strides; a piece of a `cat` whose body costs more than `CAT_PIECE_LIMIT`
//! (ShuffleNet hands half of each block on through the next block's `cat` and
//! channel shuffle: fused, every block evaluated all earlier ones per element).
//! Each materialisation is a single-stage `Kernel` (`realize`), written in storage
//! order. Masked loads implement `cat` and padding; `Bounded` scalars check
//! data-dependent indices (`index.rs`).
//!
//! # Options per graph ([`LowerOptions`])
//!
//! `cublas`: CUDA GEMMs are GEMM steps run by cuBLAS (else ATen calls).
//! `cpu_kernels`: rdyn's CPU-only kernels exist (scans, sorts, searches) and
//! stages may be split piecewise; otherwise (GPU devices) scans are prefix
//! reductions, sorts rank (`sort.rs`) and searches unroll.
//! `piecewise_min`: the fewest elements per piece (`RDYN_PIECEWISE_MIN`).
//! `opmath_scalars`: how a Python float meets a half-precision tensor
//! (`pointwise.rs`).
//!
//! # What arrives
//!
//! AOTAutograd hands over graphs decomposed with `rdyn.DECOMPOSITIONS`
//! (`python/rdyn/backend.py`): PyTorch's table, minus `KEPT_WHOLE` (ops lowered
//! whole here because tracing each decomposed op costs capture time: clamps and
//! `hardtanh`, `silu`, `native_layer_norm`, `logsumexp`, `t`, `transpose`,
//! `_unsafe_view`, `squeeze`; exact `gelu_backward` too), plus rdyn's own:
//! `_decomp.py` (layouts as ATen's kernels give them, max pooling unrolled over
//! the window, `cdist`, adaptive pooling, `masked_scatter`, `_softmax` by a
//! reciprocal), `_decomp_index.py` (`nonzero_static`, `put`, `histc`, boolean
//! `index_put`, the embedding's gradient), `_random.py` (random ops from
//! `hash_mix`) and `_attention.py` (CPU flash attention and its backward as
//! batched GEMMs around fused softmax kernels). Each file's docstrings give the
//! details. A training graph is split by AOTAutograd's min-cut partitioner, so
//! backwards recompute cheap pointwise values rather than reading many saved ones.
//! `prims.convert_element_type`, the one prim decompositions leave, is a cast.

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
mod passes;
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
pub use passes::{run_pass, Pass, PassError};
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
