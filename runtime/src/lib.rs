//! The runtime: compiled graphs, their guards and specializations, execution on
//! each device, and process-wide stats.
//!
//! A [`compiled::CompiledGraph`] keeps up to
//! [`compiled::MAX_SPECIALIZATIONS`] specializations keyed by the packed
//! metadata of a call ([`guard::GuardKey`]); past that, calls run the
//! shape-generic program (lowered once with symbolic sizes and strides,
//! planned per call). CUDA graphs have no generic program (PTX needs concrete
//! sizes): they keep specializing, up to
//! [`compiled::MAX_CUDA_SPECIALIZATIONS`], and calls with further shapes run
//! eagerly. Memory that PyTorch must own (outputs, tensors handed to
//! eager ops) and eager calls go through the [`compiled::Host`] trait, which
//! the Python frontend implements.
//!
//! Modules: `guard.rs` (the key), `compiled.rs` (specializations, the generic
//! program, CPU execution), `gpu.rs` (the wgpu device and mixed GPU/CPU
//! execution), `cuda.rs` (the CUDA driver through cudarc, and the PTX simulator
//! for `cuda-sim`), `cublas.rs` (GEMM steps through cuBLAS), `stats.rs`
//! (`rdyn.stats()`).

pub mod compiled;
pub mod cublas;
pub mod cuda;
pub mod gpu;
pub mod guard;
pub mod stats;

/// Why a call could not run.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The call's inputs do not fit the graph (a user error).
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Lower(#[from] rdyn_lowering::LowerError),
    #[error(transparent)]
    Codegen(#[from] rdyn_codegen_cpu::CodegenError),
    /// A kernel detected bad data (index out of range).
    #[error("{0}")]
    Kernel(String),
    /// A kernel's device-side check failed (it trapped).
    #[error("{0}")]
    DeviceCheck(String),
    /// The host (Python) raised; the message is its exception.
    #[error("{0}")]
    Host(String),
    /// The device is missing (no CUDA driver or GPU).
    #[error("{0}")]
    Unavailable(String),
    /// A kernel the device's code generator cannot express yet.
    #[error("{0}")]
    Unsupported(String),
    /// Memory the runtime needed could not be allocated.
    #[error("{0}")]
    OutOfMemory(String),
    #[error("a lock was poisoned by an earlier panic")]
    Poisoned,
    /// A compiler bug (e.g. generated WGSL that naga rejects).
    #[error("internal error: {0}")]
    Internal(String),
}
