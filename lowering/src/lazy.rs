//! Lazy tensors: a value defined by a scalar expression over its index.
//!
//! A [`Lazy`] is sizes plus a scalar expression (in the hash-consed `Scalars`
//! arena) giving the element at index `(i0..iN)`. Pointwise ops build new
//! expressions; views substitute index expressions (`permute` swaps variables,
//! `view` uses floordiv/mod, `expand` uses 0). The index algebra folds a quotient
//! and remainder of the same value back, so a view of a view (a 4-D weight viewed
//! as a matrix, then transposed) stays an affine strided view. A size symbol may be
//! a value too: `scalar_tensor(s0)` and `full` of a size (dynamic upsampling's
//! scale) read it as an `Index` expression, and a float computed from sizes is a
//! `SymFloat` (`sym_float`: a constant where the symbols are bound, float64
//! arithmetic on `Index` values in a shape-generic program).
//!
//! Building lazies is `lowerer.rs`'s; storing one in a buffer, `store.rs`'s.

use rdyn_ir::loops::ScalarId;
use rdyn_ir::{DType, Expr};

/// A tensor not (necessarily) in memory: `value` is its element at index
/// `(i0, …, i{ndim-1})`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Lazy {
    pub sizes: Vec<Expr>,
    pub value: ScalarId,
    pub dtype: DType,
}

impl Lazy {
    pub fn ndim(&self) -> usize {
        self.sizes.len()
    }
}

/// The index variables `i0..n` as expressions.
pub(crate) fn vars(n: usize) -> Vec<Expr> {
    (0..n as u32).map(Expr::v).collect()
}
