//! The CUDA backend's code generator: loop IR → PTX text, emitted directly
//! (no CUDA C, no NVRTC), for sm_80 and newer.
//!
//! Leaf crate: depends on `ir` only, needs no GPU and no CUDA install. The
//! runtime (`runtime/src/cuda.rs`) loads the modules with cudarc; the tests
//! check every module with `ptxas` where it is installed (every OpInfo graph is
//! assembled for sm_80 and sm_90), and [`sim`] runs them on the CPU.
//!
//! Kernel shapes (`kernel.rs`):
//! - pointwise kernels: one thread per outer point in a grid-stride loop, or
//!   per group of 4 consecutive points with vector loads and stores
//!   (`vector.rs`) when the innermost dim allows and the bases are aligned;
//! - kernels with reductions or inner dims, by row length: a thread per outer
//!   point for short or strided rows; a warp per row (eight rows per 256-thread
//!   block, butterfly shuffles only) for rows of at most 1024 points; else a
//!   block per row, 256 threads (1024 when a stage's row holds at least 8192
//!   points): a reduction folds a strided share per thread, then warp shuffles
//!   and shared memory; stages are separated by `bar.sync`. Rows are held in
//!   registers across stages where they fit (`row.rs`);
//! - scatter kernels: one thread, in order.
//!
//! Every tensor element is loaded into a register of its dtype's kind
//! (`.f32` for float32, float16 and bfloat16, `.f64`, `.s64` for integers and
//! bool) and stored back in its own width; additions and products use `.rn` so
//! ptxas does not contract them into FMAs. Math: `math.rs` (scalar ops, float32
//! exp/log/erf family, exact float32 fmod), `trig.rs`, `math64.rs` (float64
//! exp/log in software, pow), `special.rs`, `bessel.rs`, `igamma.rs`, `poly.rs`,
//! `hash.rs` (random bits); `emit.rs` registers, index arithmetic, loads/stores,
//! casts. A kernel the generator cannot express (float64 transcendentals,
//! symbolic sizes) is [`PtxError::Unsupported`]: the graph runs eagerly.
//!
//! GEMM steps are not kernels: `gemm.rs` plans each as one cuBLAS call.
//! Index checks are device-side traps by default, or an error flag read back
//! after the call ([`IndexChecks`]).
//!
//! GPU checks run on a machine with a GPU and PyTorch but no Rust toolchain:
//! `tools/device_check.sh` installs a prebuilt abi3 wheel (`maturin build`) and
//! runs stages (`smoke` = `tools/cuda_smoke.py`, many graphs and gradients
//! against float64; `cuda` = the GPU tests and CUDA model tests; `opinfo`,
//! `half`, `bandwidth`, `suite`); `benches/gpu/NOTES.md` records the runs and
//! how to repeat them.

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
