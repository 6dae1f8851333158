//! mm, bmm and addmm: a GEMM step, and `addmm`'s bias added by the
//! product's consumers.
//!
//! On the CPU the step runs rdyn's GEMM (torch's BLAS or the `gemm` crate)
//! on float32 or float64 operands; half-precision operands are converted
//! first and the product is rounded once (ATen's numerics). On CUDA, with
//! [`LowerOptions::cublas`](crate::LowerOptions), the
//! step is one cuBLAS call (`codegen-cuda/src/gemm.rs`): half-precision
//! operands are read as they are and accumulated in float32 (into a
//! float32 product when an `addmm` bias is still to be added, else rounded
//! to their precision by cuBLAS), and an operand whose last two dims have
//! no unit stride, or a row stride over 32 bits (no matrix cuBLAS can
//! read), is copied contiguous first. Without it, CUDA
//! GEMMs are ATen library calls.
//!
//! Operands are strided views where they can be (no copies for transposes). A
//! computed operand is stored in the order its reads walk (`gemm_operand`): a
//! transposed pointwise value (a weight gradient's `grad_out.t()` after a ReLU's
//! backward) is stored untransposed and handed over as a transposed view, rather
//! than stored transposed by a kernel that gathers its sources by columns; loads
//! the same along the last dim (a softmax's row max and sum) do not count as
//! transposed reads. `passes/cse.rs` then keeps one stage for it and for the
//! untransposed operand of the input gradient's product.
//!
//! `addmm` multiplies only; its bias is a lazy `load(product) + bias` that fuses
//! into the product's consumers (GELU, a residual add, the per-head copies of
//! attention's q, k and v), so no kernel writes the bias into the output before
//! the product.

use super::common::{acc_dtype, library};
use crate::error::{agree, invalid, shape, unsupported};
use crate::lazy::Lazy;
use crate::lowerer::{Handled, Lowerer, Res};
use rdyn_ir::blas::split;
use rdyn_ir::graph::Node;
use rdyn_ir::loops::{contiguous_strides, BinaryOp, BufId, ExternKind, ScalarOp, Step};
use rdyn_ir::op::Op;
use rdyn_ir::{DType, Device, Expr};

/// mm, bmm, addmm through the GEMM library.
pub(super) fn gemm(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let op = node.target.as_str();
    let cuda = node.outputs.first().is_some_and(|v| matches!(lw.graph.meta(*v).device, Device::Cuda(_)));
    if cuda && !lw.options.cublas {
        return library(lw, node);
    }
    let (sizes, out) = lw.out_meta(node)?;
    let (a_pos, b_pos) = if node.op == Op::Addmm { (1, 2) } else { (0, 1) };
    let a = lw.tensor_arg(node, a_pos, "mat1")?;
    let b = lw.tensor_arg(node, b_pos, "mat2")?;
    if !out.is_float() || a.dtype != out || b.dtype != out {
        if cuda {
            // ATen's kernel, or its error message.
            return library(lw, node);
        }
        return Err(unsupported(op, format!("GEMM of {} and {} into {out}", a.dtype, b.dtype)));
    }
    if !gemm_sizes(&a.sizes, &b.sizes).is_some_and(|expected| agree(&sizes, &expected)) {
        let why = format!("operands of sizes {} and {}", shape(&a.sizes), shape(&b.sizes));
        return Err(invalid(op, format!("output has sizes {}; expected the product of {why}", shape(&sizes))));
    }
    // Half precision multiplies in float32, as ATen does: float32
    // accumulation, one rounding of the result.
    let acc = acc_dtype(out);
    let alpha = node.kwarg("alpha").as_float().unwrap_or(1.0);
    let beta = node.kwarg("beta").as_float().unwrap_or(1.0);
    let out_v = node.outputs.first().copied().ok_or_else(|| invalid(op, "no output"))?;
    let strides = lw.meta_strides(out_v);
    let biased = node.op == Op::Addmm && beta != 0.0;
    let mut result = if cuda {
        // Without a bias, cuBLAS rounds the float32 sum to a half
        // precision result itself (once, as ATen's call does), so the
        // product moves half the bytes.
        let product = if biased { acc } else { out };
        match lw.cuda_gemm(a, b, product, sizes.clone(), strides, alpha) {
            Some(product) => product,
            None => return library(lw, node),
        }
    } else {
        let buf = lw.gemm_into(a, b, acc, sizes.clone(), strides, alpha);
        lw.load_buffer(buf)
    };
    // addmm's bias is added after the product, as a lazy pointwise value
    // that fuses into the product's consumers (a GELU, a residual add)
    // instead of being written into the output before the product.
    if biased {
        let bias = lw.tensor_arg(node, 0, "self")?;
        let bias = lw.broadcast_to(&bias, &sizes);
        let bias = lw.cast_lazy(bias, acc);
        let scaled = if beta != 1.0 {
            let k = lw.prog.scalars.constant(beta, acc);
            lw.prog.scalars.binary(BinaryOp::Mul, bias.value, k, acc)
        } else {
            bias.value
        };
        result.value = lw.prog.scalars.binary(BinaryOp::Add, scaled, result.value, acc);
    }
    Ok(Handled::Extern(vec![lw.cast_lazy(result, out)]))
}

impl Lowerer<'_> {
    /// `x` as eager's GEMM reads it: a half-precision operand computed in
    /// float32 by a fused producer (an fp16 `y + 1`), rounded to its dtype
    /// as eager's stored tensor is.
    fn stored(&mut self, x: Lazy) -> Lazy {
        let value = self.prog.scalars.rounded(x.value);
        Lazy { value, ..x }
    }

    /// `scale · (a @ b)` through the GEMM library (2-D, or 3-D batched),
    /// the operands cast to `acc`, into a new buffer of `sizes` and
    /// `strides`.
    pub(super) fn gemm_into(
        &mut self,
        a: Lazy,
        b: Lazy,
        acc: DType,
        sizes: Vec<Expr>,
        strides: Vec<Expr>,
        scale: f64,
    ) -> BufId {
        let (a, b) = (self.stored(a), self.stored(b));
        let (a, b) = (self.cast_lazy(a, acc), self.cast_lazy(b, acc));
        let a_buf = self.gemm_operand(&a);
        let b_buf = self.gemm_operand(&b);
        let out_buf = self.temp_buffer(acc, sizes, strides);
        self.push_gemm(a_buf, b_buf, out_buf, scale);
        out_buf
    }

    /// `scale · (a @ b)` as one cuBLAS call into a new buffer of `acc`
    /// (the product's dtype: float32, or the operands' half precision) and
    /// `sizes` (with `strides` when cuBLAS can write them), summed in
    /// float32 (float64 for float64); the operands keep their dtype. A
    /// product over an empty sum is zeros, with no call. None when a size
    /// is not known or over cuBLAS's 32-bit limit.
    fn cuda_gemm(
        &mut self,
        a: Lazy,
        b: Lazy,
        acc: DType,
        sizes: Vec<Expr>,
        strides: Vec<Expr>,
        scale: f64,
    ) -> Option<Lazy> {
        let dims: Vec<i64> = self.concrete(&[a.sizes.as_slice(), b.sizes.as_slice()].concat())?;
        if dims.iter().any(|&d| d > i64::from(i32::MAX)) || !(2..=3).contains(&a.sizes.len()) {
            return None;
        }
        if dims.contains(&0) {
            let zero = self.prog.scalars.constant(0.0, acc);
            return Some(Lazy { sizes, value: zero, dtype: acc });
        }
        let a_buf = self.blas_operand(&a);
        let b_buf = self.blas_operand(&b);
        let writable = self.concrete(&sizes).zip(self.concrete(&strides)).is_some_and(|(n, s)| blas_matrix(&n, &s));
        let strides = if writable { strides } else { contiguous_strides(&sizes) };
        let out_buf = self.temp_buffer(acc, sizes, strides);
        self.push_gemm(a_buf, b_buf, out_buf, scale);
        Some(self.load_buffer(out_buf))
    }

    /// A buffer holding `x` that cuBLAS can read as a matrix: `x`'s own
    /// storage when it is a view with a unit stride in its last two dims,
    /// else a contiguous copy.
    fn blas_operand(&mut self, x: &Lazy) -> BufId {
        if let Some(buf) = self.as_view(x) {
            let layout = self.prog.buffer(buf).clone();
            let (sizes, strides) = (self.concrete(&layout.sizes), self.concrete(&layout.strides));
            if sizes.zip(strides).is_some_and(|(n, s)| blas_matrix(&n, &s)) {
                return buf;
            }
        }
        self.realize(x, None)
    }

    /// A buffer holding `x` for the CPU's GEMM, which reads transposed
    /// operands as they are: `x`'s own storage when it is a view, else `x`
    /// stored. A transposed pointwise value (a weight gradient's
    /// `grad.t()`) is stored untransposed, each source read along its
    /// rows instead of gathered by columns, and passed as a transposed
    /// view; the stored value is then the same stage as the untransposed
    /// operand of the other product, which `passes/cse.rs` keeps once.
    fn gemm_operand(&mut self, x: &Lazy) -> BufId {
        if let Some(buf) = self.as_view(x) {
            return buf;
        }
        if !self.transposed_reads(x) {
            return self.realize(x, None);
        }
        let n = x.sizes.len();
        let mut swap: Vec<Expr> = (0..n as u32).map(Expr::v).collect();
        swap.swap(n - 2, n - 1);
        let mut sizes = x.sizes.clone();
        sizes.swap(n - 2, n - 1);
        let untransposed = self.view(x, sizes, &swap);
        let stored = self.realize(&untransposed, None);
        let stored = self.load_buffer(stored);
        let transposed = self.view(&stored, x.sizes.clone(), &swap);
        match self.as_view(&transposed) {
            Some(view) => view,
            None => self.realize(x, None),
        }
    }

    /// Whether more of `x`'s loads move by one element along its
    /// second-to-last dim than along its last. A load the same along the
    /// last dim (a softmax's row max or sum) reads one value per row in
    /// either order and does not count: it had stored BERT's attention
    /// probabilities transposed, read across the rows of the exponentials.
    fn transposed_reads(&self, x: &Lazy) -> bool {
        let n = x.sizes.len();
        if n < 2 {
            return false;
        }
        let (rows, cols) = (rdyn_ir::Var(n as u32 - 2), rdyn_ir::Var(n as u32 - 1));
        let scalars = &self.prog.scalars;
        let (mut along_rows, mut along_cols) = (0, 0);
        for id in scalars.topo(&[x.value]) {
            if let ScalarOp::Load { index, indirect, .. } = &scalars.get(id).op {
                if !indirect.is_empty() {
                    continue;
                }
                let col = index.linear_coef(cols);
                along_rows += usize::from(index.linear_coef(rows) == Some(1) && col != Some(1) && col != Some(0));
                along_cols += usize::from(col == Some(1));
            }
        }
        along_rows > along_cols
    }

    fn push_gemm(&mut self, a: BufId, b: BufId, out: BufId, scale: f64) {
        self.prog.steps.push(Step::Extern(rdyn_ir::loops::Extern {
            kind: ExternKind::Gemm { scale_bits: scale.to_bits() },
            inputs: vec![a, b],
            outputs: vec![out],
        }));
    }
}

/// The sizes of the product of matrices (or batches of them, 3-D) of
/// sizes `a` and `b`, if they multiply (the same rank, and sizes that
/// agree where known).
fn gemm_sizes(a: &[Expr], b: &[Expr]) -> Option<Vec<Expr>> {
    let r = a.len();
    let fits =
        (2..=3).contains(&r) && b.len() == r && agree(&a[r - 1..], &b[r - 2..r - 1]) && agree(&a[..r - 2], &b[..r - 2]);
    fits.then(|| [&a[..r - 1], &b[r - 1..]].concat())
}

/// Whether a 2-D or 3-D layout's last two dims form a matrix cuBLAS reads
/// (`rdyn_ir::blas`: one dim moves by one element, the other past a whole
/// run of it, by at most 2³¹ - 1), with no negative stride.
fn blas_matrix(sizes: &[i64], strides: &[i64]) -> bool {
    strides.iter().all(|&s| s >= 0) && split(sizes, strides).is_some_and(|(m, _, _)| m.readable())
}

#[cfg(test)]
mod tests {
    use super::blas_matrix;

    #[test]
    fn blas_matrices_need_a_unit_stride_and_a_32_bit_row_stride() {
        assert!(blas_matrix(&[4, 8], &[8, 1]));
        assert!(blas_matrix(&[4, 8], &[1, 4]));
        assert!(blas_matrix(&[3, 4, 8], &[0, 8, 1]));
        assert!(!blas_matrix(&[4, 8], &[16, 2]));
        assert!(!blas_matrix(&[4, 8], &[4, 1]), "rows overlap");
        assert!(!blas_matrix(&[4, 8], &[1 << 31, 1]), "a leading dimension over cuBLAS's int");
        assert!(blas_matrix(&[2, 4, 8], &[1 << 40, 8, 1]), "batch strides are 64-bit");
        assert!(!blas_matrix(&[8], &[1]));
    }
}
