//! The CUDA backend's code generator: loop IR → PTX text, emitted directly
//! (no CUDA C, no NVRTC), for sm_80 and newer.
//!
//! Leaf crate: depends on `ir` only, needs no GPU and no CUDA install. The
//! runtime (`runtime/src/cuda.rs`) loads the modules with cudarc; the tests
//! check every module with `ptxas` where it is installed.
//!
//! Kernel shapes follow the WGSL backend's:
//! - pointwise kernels: one thread per outer point, a grid-stride loop, or
//!   per group of 4 consecutive points with vector loads and stores
//!   (`vector.rs`) when the innermost dim allows and the bases are aligned;
//! - kernels with reductions or inner dims: one 256-thread block per outer
//!   point; a reduction folds a strided share per thread, then warp shuffles
//!   and shared memory; stages are separated by `bar.sync`;
//! - scatter kernels: one thread, in order.
//!
//! Every tensor element is loaded into a register of its dtype's kind
//! (`.f32` for float32, float16 and bfloat16, `.f64`, `.s64` for integers and
//! bool) and stored back in its own width.

mod bessel;
mod emit;
pub mod gemm;
mod hash;
mod igamma;
mod kernel;
mod math;
mod math64;
mod poly;
mod row;
pub mod sim;
mod special;
mod trig;
mod vector;

pub use kernel::{kernel_ptx, PtxKernel, BLOCK};

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
