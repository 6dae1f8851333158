//! Dispatch: each scalar op, by operand kind, to the instructions or the
//! function emitter (`math/`) that computes it.

pub mod binary;
pub mod unary;
