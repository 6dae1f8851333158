//! rdyn's intermediate representations. Every other crate depends on this one.
//!
//! - [`graph`]: the ATen graph as imported from PyTorch (ops, args, FakeTensor
//!   metadata). Values are [`graph::ValueId`]s; ops are the closed [`op::Op`].
//! - [`dtype`]: element types ([`DType`], [`Kind`]) and devices, as PyTorch names them.
//! - [`expr`]: the index algebra every size, stride, layout and loop bound is written in.
//! - [`sym`]: size symbols PyTorch derives from others (`Max(1, s0 - 2)`) and floats
//!   computed from sizes (`n / (n - 1)`), both evaluated once a call binds its symbols.
//! - [`op`]: the closed set of ATen ops rdyn knows by name, parsed once at import.
//! - [`loops`]: the loop-level IR — buffers defined by index → value functions,
//!   grouped into kernels — that every backend generates code from; `loops/simplify.rs`
//!   is what `cast`, `binary` and `select` fold as they build nodes.
//! - `print`: the text form (`RDYN_LOG=ir`, the IR tests); [`verify`]: structural
//!   checks run after every lowering pass in debug builds.
//! - [`approx`]: approximation coefficients several backends evaluate (ndtri's).
//! - [`blas`]: which strided layouts a BLAS reads as matrices, shared by the GEMM
//!   lowering and the cuBLAS call.
//! - [`random`]: the counter-based random numbers every backend computes.
//!
//! Invariants: ids index into their arenas; scalar nodes are hash-consed so
//! structural equality is identity; expressions are canonical, so two indices
//! that address the same element compare equal; [`verify::verify`] holds after
//! every pass.

pub mod approx;
pub mod blas;
pub mod dtype;
pub mod expr;
pub mod graph;
pub mod loops;
pub mod op;
mod print;
pub mod random;
pub mod sym;
pub mod verify;

pub use dtype::{DType, Device, Kind};
pub use expr::{Atom, Ctx, Expr, Sym, Var};
