//! The CUDA backend's code generator: loop IR → PTX text, emitted directly
//! (no CUDA C, no NVRTC), for sm_80 and newer.
//!
//! Leaf crate: depends on `ir` only, needs no GPU and no CUDA install. The
//! runtime (`runtime/src/devices/cuda.rs`) loads the modules with cudarc; the tests
//! check every module with `ptxas` where it is installed (every OpInfo graph is
//! assembled for sm_80 and sm_90), and the PTX simulator (`rdyn-ptx-sim`) runs
//! them on the CPU.
//!
//! Kernel shapes (`kernel/`):
//! - pointwise kernels: one thread per outer point in a grid-stride loop, or
//!   per group of 4 consecutive points with vector loads and stores
//!   (`kernel/pointwise.rs`) when the innermost dim allows and the bases are
//!   aligned;
//! - kernels with reductions or inner dims, by row length (`kernel/row.rs`): a
//!   thread per outer point for short or strided rows; a warp per row (eight
//!   rows per 256-thread block, butterfly shuffles only) for rows of at most
//!   1024 points; else a block per row, 256 threads (1024 when a stage's row
//!   holds at least 8192 points): a reduction folds a strided share per thread,
//!   then warp shuffles and shared memory; stages are separated by `bar.sync`.
//!   Rows are held in registers across stages where they fit (`cache.rs`);
//! - scatter kernels: one thread, in order.
//!
//! Every tensor element is loaded into a register of its dtype's kind
//! (`.f32` for float32, float16 and bfloat16, `.f64`, `.s64` for integers and
//! bool) and stored back in its own width; additions and products use `.rn` so
//! ptxas does not contract them into FMAs. A kernel the generator cannot
//! express (float64 transcendentals, symbolic sizes) is
//! [`PtxError::Unsupported`]: the graph runs eagerly.
//!
//! Floors, each importing only from those below it:
//! - `types.rs`: [`PtxError`], [`IndexChecks`], the PTX version and target;
//! - `ptx/`: `func.rs` (registers, labels, instructions, immediates),
//!   `arith.rs` (float32 arithmetic, polynomials, the series loop),
//!   `convert.rs` (casts), `memory.rs` (loads, stores), `checks.rs` (the
//!   error flag);
//! - `math/`: the function emitters: `math32.rs` (float32 exp/log family),
//!   `trig.rs`, `math64.rs` (float64 exp/log in software, pow), `special.rs`
//!   (the float32 erfc fit), `sincos64.rs` (float64 sine and
//!   cosine), `lib64.rs` (float64 erfc and ln Γ), `hash.rs`
//!   (random bits), and `scalar.rs`, the translator of the special
//!   functions written once in `rdyn_ir::special` (ln Γ, Bessel J/Y/I/K, Airy
//!   Ai, spherical j0, erfcx, ndtri, zeta, digamma, erfinv, incomplete
//!   gamma, Chebyshev, Hermite, Laguerre, Legendre; acos from sin and cos)
//!   to PTX, which `ops/unary.rs` and `ops/binary.rs` call for every op
//!   `Special::of_unary`/`of_binary` names;
//! - `ops/`: `unary.rs`, `binary.rs`: each scalar op to its emitter;
//! - `cache.rs` (registers holding loaded elements), `emitter.rs` (index
//!   arithmetic and a stage's scalar DAG);
//! - `kernel/`: `launch.rs`, `loops.rs`, `stage.rs`, `fold.rs`, then the
//!   templates `pointwise.rs` and `row.rs`, and [`kernel_ptx`] in `mod.rs`.
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

mod cache;
mod emitter;
pub mod gemm;
mod kernel;
mod math;
mod ops;
mod ptx;
mod types;

pub use kernel::launch::BLOCK;
pub use kernel::{kernel_ptx, PtxKernel};
pub use types::{IndexChecks, PtxError, PTX_TARGET, PTX_VERSION};
