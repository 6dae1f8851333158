//! The CPU backend: loop IR → tile kernels run with rayon.
//!
//! [`plan::plan`] turns a program (with concrete sizes) into a
//! [`plan::CpuProgram`]: each kernel a set of register programs over tiles of
//! up to 256 lanes, so every operation is one tight, auto-vectorised loop and
//! no dispatch happens per element. [`exec::run_kernel`] runs a kernel on raw
//! buffer addresses; [`gemm::run_gemm`] runs matrix products.
//!
//! Invariant: a plan is only run on buffers whose sizes and strides match the
//! ones it was built for (the runtime's guards ensure it).

pub mod blas;
pub mod depthwise;
pub mod exec;
mod fastmath;
pub mod gemm;
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
mod transpose;

/// Why a CPU plan could not be built or run.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CodegenError {
    /// A size the plan needs is still symbolic.
    #[error("CPU plan needs a concrete {0}")]
    Symbolic(String),
    #[error("internal CPU codegen error: {0}")]
    Internal(&'static str),
}
