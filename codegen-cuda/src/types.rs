//! What every floor shares: the PTX version and target every module
//! declares, how kernels report an index out of range, and why a kernel has
//! no PTX form.

use rdyn_ir::DType;

/// The PTX ISA version and target every module declares. Modules for
/// `sm_80` load on any newer GPU (the driver compiles them for it).
pub const PTX_VERSION: &str = "7.8";
pub const PTX_TARGET: &str = "sm_80";

/// How kernels report an index out of range.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum IndexChecks {
    /// A device-side check, as eager's and Inductor's CUDA kernels do: the
    /// kernel executes `trap`, the CUDA context fails, and the error
    /// surfaces at the next synchronisation. No call waits for the GPU.
    /// Integer division by zero is not checked (eager's CUDA kernels do not
    /// raise either).
    #[default]
    Device,
    /// An error flag read back after every call of a graph whose kernels
    /// can set it (one stream synchronisation per call): an `IndexError`
    /// naming the failure at the call itself, and division by zero too.
    Sync,
}

/// Why a kernel has no PTX form.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PtxError {
    /// Not expressible yet (symbolic sizes, float64 transcendentals, some
    /// special functions): the graph runs eagerly on the GPU instead.
    #[error("not supported by the CUDA code generator: {0}")]
    Unsupported(String),
    #[error("internal PTX codegen error: {0}")]
    Internal(&'static str),
}

/// An op the generator has no PTX form for on `dtype`.
pub(crate) fn unsupported(op: impl std::fmt::Display, dtype: DType) -> PtxError {
    PtxError::Unsupported(format!("{op} on {dtype}"))
}
