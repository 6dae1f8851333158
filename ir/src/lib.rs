//! rdyn's intermediate representations.
//!
//! - [`graph`]: the ATen graph as imported from PyTorch (ops, args, FakeTensor
//!   metadata). Values are [`graph::ValueId`]s; ops are the closed [`op::Op`].
//! - [`expr`]: the index algebra every layout and loop bound is written in.
//! - [`loops`]: the loop-level IR — buffers defined by index → value
//!   functions, grouped into kernels — that every backend generates code from.
//! - [`approx`]: approximation coefficients several backends share.
//! - [`random`]: the counter-based random numbers every backend computes.
//!
//! Invariants: ids index into their arenas; scalar nodes are hash-consed so
//! structural equality is identity; [`verify::verify`] holds after every pass.

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
