//! The bottom floor: PTX function bodies and the primitives every emitter
//! uses. Nothing here imports from above.

pub mod arith;
pub mod checks;
pub mod convert;
pub mod func;
pub mod memory;
