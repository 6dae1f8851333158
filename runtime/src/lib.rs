//! The runtime: compiled graphs, their guards and specializations, the
//! device layer, and process-wide stats.
//!
//! A [`compiled::CompiledGraph`] keeps up to
//! [`compiled::MAX_SPECIALIZATIONS`] specializations keyed by the packed
//! metadata of a call ([`guard::GuardKey`]); past that, calls run the
//! shape-generic program (lowered once with symbolic sizes and strides,
//! planned per call, on the CPU). Devices whose kernels need concrete sizes
//! (CUDA: PTX) have no generic program: they keep specializing, up to
//! [`compiled::MAX_CUDA_SPECIALIZATIONS`], and calls with further shapes run
//! eagerly. Memory that PyTorch must own (outputs, tensors handed to eager
//! ops) and eager calls go through the [`host::Host`] trait, which the Python
//! frontend implements.
//!
//! Modules, top down: `compiled.rs` (specializations, the generic program,
//! placing a call's buffers), `devices/` (one module per device behind the
//! [`device::Device`] and [`device::DevicePlan`] traits: `cpu.rs`, `wgpu.rs`,
//! `cuda.rs` with cuBLAS, `cuda_sim.rs`; `devices::by_name` is the one place a
//! device name is matched), `device.rs` (the traits, [`device::Caps`], step
//! text), `host.rs`, `guard.rs` (the key), `stats.rs` (`rdyn.stats()`).
//! Memory plans come from `rdyn_memplan`, shared by every device.

pub mod compiled;
pub mod device;
pub mod devices;
pub mod guard;
pub mod host;
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
    Plan(#[from] rdyn_memplan::PlanError),
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
