//! A PTX simulator for the subset rdyn's CUDA generator (`rdyn-codegen-cuda`)
//! emits: runs a kernel's blocks and threads on the CPU, on host memory, so the
//! generator's numbers can be tested without a GPU (the `cuda-sim` device:
//! `options={"device": "cuda-sim"}` or `RDYN_DEVICE=cuda-sim` lowers a
//! CPU-tensor graph exactly as for CUDA, its values relabelled `cuda:0`, then
//! runs each PTX kernel here on the CPU tensors; library and eager steps run on
//! the CPU, GEMM steps through `GemmCall::emulate`). It owns PTX decoding and
//! execution only and depends on no other rdyn crate: it reads the PTX text.
//!
//! `parse.rs` decodes the PTX into instructions with typed operands; `exec.rs`
//! gives each its PTX meaning (IEEE arithmetic in the instruction's type, `cvt`
//! saturation and rounding modes, `min`/`max` NaN rules, shuffle lane rules);
//! `launch.rs` holds a launch's memory and threads and schedules them; errors
//! are in `error.rs`. Blocks run one after another. Within a block, each thread runs until it
//! reaches a `bar.sync`, a warp-wide instruction (`shfl.sync`,
//! `bar.warp.sync`) or its end; a warp-wide instruction executes once every
//! lane of its warp has reached it, a barrier once every live thread of the
//! block has. Lanes that disagree (one warp split between a shuffle and a
//! barrier, or between two shuffles) are reported as errors, as are an endless
//! loop, global accesses outside the memory a launch is given, a misaligned
//! access, or a `.vN` access naming another number of registers (as ptxas and
//! the GPU would reject them); each error names the kernel, block, thread and
//! instruction. A kernel's `trap` is reported at once, as a `KernelCheckError`.
//!
//! Arithmetic is IEEE in the instruction's type; `.approx` instructions
//! (`ex2`, `lg2`, `sin`, `cos`, `rcp`, `rsqrt`) are computed to full
//! precision, so a result within tolerance here can still be off by the
//! hardware approximation's error on a GPU: the simulator checks algorithms and
//! index arithmetic, not the hardware's approximation error, nor speed. It counts
//! the bytes global loads and stores move and the instructions executed
//! (`rdyn.stats()`: `cuda_sim_bytes_loaded`, `cuda_sim_bytes_stored`,
//! `cuda_sim_instructions`; `benches/cuda_sim_traffic.py`), which shows a kernel
//! change's traffic before a GPU times it. The OpInfo suite (float32, float16,
//! bfloat16), the model tests and the fuzzer run on it in CI.

mod error;
mod exec;
mod launch;
mod parse;

pub use error::SimError;
pub use launch::{Memory, Traffic};
pub use parse::{parse, Kernel};

#[cfg(test)]
mod tests;
