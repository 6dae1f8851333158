//! The CPU backend: loop IR → kernel plans, run as tile programs (or compiled
//! machine code) on ATen's OpenMP team or rayon ([`parallel`]).
//!
//! [`build::plan`] turns a program (with concrete sizes) and its memory plan
//! (`rdyn_memplan`) into a [`plan::CpuProgram`], once per specialization: each
//! kernel a set of register
//! programs over tiles of up to [`tile::TILE`] (1024) lanes, so every operation is
//! one tight, auto-vectorised loop and no dispatch happens per element.
//! [`exec::run_kernel`] runs a kernel on raw buffer addresses; [`gemm::run_gemm`]
//! runs matrix products.
//!
//! Modules, by floors (a file imports from its floor or below):
//! - bottom: `tile.rs` (the tile width and thresholds everything is sized by,
//!   the `Memory` a kernel runs over), `index.rs` (registers, indices);
//! - types: `plan.rs` (kernel plans, steps, their text) and `jit/stage.rs`
//!   (what a compiled stage is);
//! - `lower_kernel.rs` (one kernel → one plan: collapsed dims, tile mode and
//!   width, columns, serial scatters); `split.rs` (dimensions that indices
//!   divide, split); `transpose.rs` (copies into the transposed layout as
//!   blocked transposes);
//! - top: `build.rs` (a program's steps through `lower_kernel.rs` and the JIT;
//!   counts kernels planned and stages compiled or interpreted).
//! - `exec/`: the tile executor (work items, tiles, reductions in `reduce.rs`;
//!   `regs.rs` registers and per-thread scratch;
//!   `convert.rs` loads, stores, casts; `rows.rs` compiled stages over several
//!   rows per call; `calls.rs` a compiled stage's call and its load addresses;
//!   `indirect.rs` the row ids of compiled gathers and scatters; `spare.rs` tiles
//!   kept per thread between kernels).
//! - `jit/`: Cranelift machine code for float32 and bool stages (`analysis.rs`
//!   what compiles, `lower.rs` the function and its invariants, `lanes.rs`
//!   its loops, `memory.rs` loads and stores, `phases.rs` transcendentals
//!   between loops, `long.rs` int64 comparisons, `emit.rs` lane arithmetic,
//!   `target.rs` the host ISA, which `special/native.rs` shares).
//! - `ops.rs`, `fastmath.rs`, `fastmath64.rs` and `binary64.rs`: the op
//!   tables and branch-free float32 transcendentals and binary ops (the
//!   last two files' evaluated in float64 lanes); `special/`: float64 special functions (Bessel I/K/J/Y, Airy
//!   Ai, erfcx, ndtri, zeta, incomplete gamma, digamma, erfinv, ln|Γ|,
//!   orthogonal polynomials), each its one definition in `rdyn_ir::special`
//!   compiled by Cranelift (`native.rs`).
//! - rdyn's own kernels: `gemm.rs` (with `blas.rs`, torch's BLAS, and
//!   `gemm/choice.rs`, which of the two runs each product shape),
//!   `depthwise.rs` (and its weight gradient, `depthwise_grad.rs`), `scan.rs`,
//!   `sort.rs`, `search.rs`.
//! - `parallel.rs`: the thread pool.
//!
//! Invariant: a plan is only run on buffers whose sizes and strides match the
//! ones it was built for (the runtime's guards ensure it).

mod binary64;
pub mod blas;
pub mod build;
pub mod depthwise;
pub mod depthwise_grad;
mod disjoint;
pub mod exec;
mod fastmath;
mod fastmath64;
pub mod gemm;
mod index;
pub mod jit;
mod lower_kernel;
mod ops;
pub mod parallel;
pub mod plan;
pub mod scan;
pub mod search;
pub mod sort;
pub mod special;
mod split;
pub mod tile;
mod transpose;

/// Why a CPU plan could not be built or run.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CodegenError {
    /// A size the plan needs is still symbolic.
    #[error("CPU plan needs a concrete {0}")]
    Symbolic(String),
    #[error("internal CPU codegen error: {0}")]
    Internal(&'static str),
    /// Scratch memory a kernel needs could not be allocated.
    #[error("cannot allocate {0} bytes of scratch memory for a kernel; free memory or use smaller inputs")]
    OutOfMemory(usize),
}
