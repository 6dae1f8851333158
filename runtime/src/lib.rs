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

/// What kind of failure an error is: what the caller should do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The caller's inputs are wrong (raised to the user).
    Input,
    /// A construct the device cannot express yet (run eagerly, counted).
    Unsupported,
    /// The device is missing on this machine.
    Unavailable,
    /// A kernel's check on the data failed (raised to the user).
    DeviceCheck,
    /// Memory could not be allocated (raised to the user).
    OutOfMemory,
    /// A bug in rdyn.
    Internal,
}

impl ErrorKind {
    /// The name Python's `rdyn._errors.BY_KIND` knows it by.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Input => "input",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::DeviceCheck => "device_check",
            ErrorKind::OutOfMemory => "out_of_memory",
            ErrorKind::Internal => "internal",
        }
    }
}

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

impl RuntimeError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        use rdyn_codegen_cpu::CodegenError;
        match self {
            RuntimeError::Input(_) => ErrorKind::Input,
            RuntimeError::Unsupported(_) => ErrorKind::Unsupported,
            RuntimeError::Unavailable(_) => ErrorKind::Unavailable,
            RuntimeError::Kernel(_) | RuntimeError::DeviceCheck(_) => ErrorKind::DeviceCheck,
            RuntimeError::OutOfMemory(_) | RuntimeError::Codegen(CodegenError::OutOfMemory(_)) => {
                ErrorKind::OutOfMemory
            }
            RuntimeError::Lower(_)
            | RuntimeError::Plan(_)
            | RuntimeError::Codegen(_)
            | RuntimeError::Host(_)
            | RuntimeError::Poisoned
            | RuntimeError::Internal(_) => ErrorKind::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_the_kind_python_branches_on() {
        let cases = [
            (RuntimeError::Input("x".into()), ErrorKind::Input),
            (RuntimeError::Unsupported("x".into()), ErrorKind::Unsupported),
            (RuntimeError::Unavailable("x".into()), ErrorKind::Unavailable),
            (RuntimeError::Kernel("x".into()), ErrorKind::DeviceCheck),
            (RuntimeError::DeviceCheck("x".into()), ErrorKind::DeviceCheck),
            (RuntimeError::OutOfMemory("x".into()), ErrorKind::OutOfMemory),
            (RuntimeError::Codegen(rdyn_codegen_cpu::CodegenError::OutOfMemory(8)), ErrorKind::OutOfMemory),
            (RuntimeError::Codegen(rdyn_codegen_cpu::CodegenError::Internal("x")), ErrorKind::Internal),
            (RuntimeError::Plan(rdyn_memplan::PlanError::Symbolic("x".into())), ErrorKind::Internal),
            (RuntimeError::Poisoned, ErrorKind::Internal),
            (RuntimeError::Internal("x".into()), ErrorKind::Internal),
        ];
        for (error, kind) in cases {
            assert_eq!(error.kind(), kind, "{error:?}");
        }
        let names: Vec<_> = [
            ErrorKind::Input,
            ErrorKind::Unsupported,
            ErrorKind::Unavailable,
            ErrorKind::DeviceCheck,
            ErrorKind::OutOfMemory,
            ErrorKind::Internal,
        ]
        .map(ErrorKind::name)
        .to_vec();
        assert_eq!(names, ["input", "unsupported", "unavailable", "device_check", "out_of_memory", "internal"]);
    }
}
