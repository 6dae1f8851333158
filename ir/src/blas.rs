//! Which strided layouts a BLAS reads as matrices: the rule the lowering
//! (whether an operand needs a contiguous copy) and the CUDA generator (the
//! cuBLAS call's transposes and leading dimensions) share.

/// The largest leading dimension cuBLAS takes (its `int`).
const MAX_LD: i64 = i32::MAX as i64;

/// A logical `rows × cols` matrix with strides `(sr, sc)`, in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Matrix {
    pub rows: i64,
    pub cols: i64,
    pub sr: i64,
    pub sc: i64,
}

impl Matrix {
    /// The transpose (the same memory).
    pub fn t(self) -> Matrix {
        Matrix { rows: self.cols, cols: self.rows, sr: self.sc, sc: self.sr }
    }

    /// Its leading dimension as a column-major matrix (element `(i, j)` at
    /// `i + j·ld`, `rows ≤ ld ≤ 2³¹ - 1`), when its rows are adjacent. A
    /// single column's stride is never used, so it takes `ld = rows`.
    pub fn column_major_ld(self) -> Option<i64> {
        let ld = if self.cols == 1 { self.rows.max(1) } else { self.sc };
        ((self.rows == 1 || self.sr == 1) && ld >= self.rows.max(1) && ld <= MAX_LD).then_some(ld)
    }

    /// Whether a BLAS reads it, as itself or as a transpose.
    pub fn readable(self) -> bool {
        self.column_major_ld().is_some() || self.t().column_major_ld().is_some()
    }
}

/// The last two dims of a 2-D or 3-D layout as a matrix, with the batch
/// size and the batch stride (0 for a batch of one).
pub fn split(sizes: &[i64], strides: &[i64]) -> Option<(Matrix, i64, i64)> {
    let (batch, batch_stride) = match sizes.len() {
        2 => (1, 0),
        3 => (sizes[0], if sizes[0] == 1 { 0 } else { strides[0] }),
        _ => return None,
    };
    let r = sizes.len() - 2;
    Some((Matrix { rows: sizes[r], cols: sizes[r + 1], sr: strides[r], sc: strides[r + 1] }, batch, batch_stride))
}
