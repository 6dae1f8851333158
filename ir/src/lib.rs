//! rdyn's intermediate representations. Every other crate depends on this one.
//!
//! - [`graph`]: the ATen graph as imported from PyTorch (ops, args, FakeTensor
//!   metadata). Values are [`graph::ValueId`]s; ops are the closed [`op::Op`].
//! - [`dtype`]: element types ([`DType`], [`Kind`]) and devices, as PyTorch names them.
//! - [`expr`]: the index algebra every size, stride, layout and loop bound is written in.
//! - [`sym`]: size symbols PyTorch derives from others (`Max(1, s0 - 2)`) and floats
//!   computed from sizes (`n / (n - 1)`), both evaluated once a call binds its symbols.
//! - [`op`]: the closed set of ATen ops rdyn knows by name, parsed once at import.
//! - [`ops`]: one table of what each op is to every crate: an ATen op's scalar form
//!   and whether it is a view; a scalar op's cost to lowering, the operands it takes,
//!   whether it yields a test, how compiled CPU stages run it.
//! - [`loops`]: the loop-level IR — buffers defined by index → value functions,
//!   grouped into kernels — that every backend generates code from; `loops/simplify.rs`
//!   is what `cast`, `binary` and `select` fold as they build nodes.
//! - `print`: the text form (`RDYN_LOG=ir`, the IR tests); [`parse`]: reading it
//!   back; [`verify`]: structural checks run after every lowering pass in debug builds.
//! - [`approx`]: approximation coefficients of the special functions (ndtri's, Temme's, Airy's).
//! - [`blas`]: which strided layouts a BLAS reads as matrices, shared by the GEMM
//!   lowering and the cuBLAS call.
//! - [`random`]: the counter-based random numbers every backend computes.
//! - [`special`]: special functions (Bessel I/K, Airy Ai, zeta, erfcx, some
//!   orthogonal polynomials, …) written once in a small scalar-function
//!   language with a reference evaluator, which the CPU backend compiles with
//!   Cranelift and the CUDA backend translates to PTX.
//!
//! Invariants: ids index into their arenas; scalar nodes are hash-consed so
//! structural equality is identity; expressions are canonical, so two indices
//! that address the same element compare equal; [`verify::verify`] holds after
//! every pass.
//!
//! # Text form
//!
//! A [`loops::Program`] prints one line per buffer
//! (`buf1: float32[8, 16] strides [16, 1] offset 0 (temp)`), then its steps: a
//! kernel (`kernel k0 outer [8]`) with, per stage, a header
//! (`buf1[16*i0 + i1] = stage inner [16]:`, `sum over [16]` before the colon
//! for a reduction), the scalar nodes the stage reaches, operands first
//! (`t3: float32 = exp t1`), and its value (`-> t3`); or an extern call
//! (`extern gemm (buf0, buf1) -> (buf2)`). `return (...)` ends it.
//! [`parse::program`] reads the text back with every id kept, so for any
//! program `p`, `program(&p.to_string())?.to_string() == p.to_string()`: IR
//! can be written by hand (lowering's filetests) and a logged program rebuilt.

pub mod approx;
pub mod blas;
pub mod dtype;
pub mod expr;
pub mod graph;
pub mod loops;
pub mod op;
pub mod ops;
pub mod parse;
mod print;
pub mod random;
pub mod special;
pub mod sym;
pub mod verify;

pub use dtype::{DType, Device, Kind};
pub use expr::{Atom, Ctx, Expr, Sym, Var};
