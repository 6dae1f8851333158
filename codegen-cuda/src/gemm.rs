//! A GEMM step on CUDA as one cuBLAS call (`cublasGemmStridedBatchedEx`).
//!
//! rdyn's GEMM steps compute `c = alpha · a @ b` over row-major indexed
//! buffers of any strides: `a` is `[m, k]`, `b` is `[k, n]`, `c` is `[m, n]`,
//! each with a leading batch dim when batched (a batch stride of 0
//! broadcasts an operand). cuBLAS multiplies column-major matrices: a
//! matrix `X` of `rows × cols` with leading dimension `ld` holds `X(i, j)`
//! at element `i + j·ld`, and an operand may be read transposed (`T`).
//!
//! A buffer of strides `(sr, sc)` is a column-major matrix (`N`, `ld = sc`)
//! when `sr = 1`, and the transpose of one (`T`, `ld = sr`) when `sc = 1`.
//! `c` itself cannot be transposed: when it is row-major (`sc = 1`), the
//! call computes `cᵀ = bᵀ @ aᵀ` instead, so `bᵀ` is cuBLAS's first operand.
//! [`GemmCall::new`] makes that choice from the concrete layouts and says
//! when no call fits (an operand with no unit stride: lowering copies such
//! operands first). [`GemmCall::emulate`] runs the call as cuBLAS defines
//! it, on host memory, for the PTX simulator: it checks the mapping that a
//! GPU would run.
//!
//! Lowering (`lowering/src/rules/gemm.rs`) decides what reaches a call: a product over
//! an empty sum is zeros with no call, a size over cuBLAS's 32-bit limit is an
//! ATen library call, and half-precision operands are read as they are and
//! accumulate in float32 (`CUBLAS_COMPUTE_32F` for float32: no TF32 whatever
//! `torch.backends.cuda.matmul.allow_tf32` says, more exact than eager's TF32
//! when that is on, and slower). `options={"cuda_gemm": "aten"}`
//! (`RDYN_CUDA_GEMM=aten`) makes GEMMs ATen library calls instead. Because the
//! simulator runs each call through `emulate`, `cuda-sim` checks the mapping
//! against eager for every GEMM the tests lower.

use rdyn_ir::blas::{split, Matrix};
use rdyn_ir::DType;

/// cuBLAS's operation on an operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trans {
    N,
    T,
}

/// A buffer's concrete layout, as a GEMM operand or result.
#[derive(Clone, Copy, Debug)]
pub struct Layout<'a> {
    pub dtype: DType,
    /// `[rows, cols]`, or `[batch, rows, cols]`.
    pub sizes: &'a [i64],
    pub strides: &'a [i64],
}

/// One operand as cuBLAS reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operand {
    /// Which of the step's inputs: 0 for `a`, 1 for `b`.
    pub input: usize,
    pub trans: Trans,
    pub ld: i64,
    pub batch_stride: i64,
    pub dtype: DType,
}

/// The arguments of one `cublasGemmStridedBatchedEx` call (beta is 0).
#[derive(Clone, Debug, PartialEq)]
pub struct GemmCall {
    /// cuBLAS's sizes: `c` (as cuBLAS sees it) is `m × n`, the sum runs over `k`.
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub batch: i64,
    pub a: Operand,
    pub b: Operand,
    pub ldc: i64,
    pub c_batch_stride: i64,
    pub c_dtype: DType,
    pub alpha: f64,
}

/// How cuBLAS reads a matrix: `N` over itself, or `T` over its transpose.
fn operand(m: Matrix) -> Option<(Trans, i64)> {
    match m.column_major_ld() {
        Some(ld) => Some((Trans::N, ld)),
        None => m.t().column_major_ld().map(|ld| (Trans::T, ld)),
    }
}

impl GemmCall {
    /// The call computing `c = alpha · a @ b`, or why none fits.
    pub fn new(a: Layout<'_>, b: Layout<'_>, c: Layout<'_>, alpha: f64) -> Result<GemmCall, String> {
        let (ma, batch_a, sa) = split(a.sizes, a.strides).ok_or("a GEMM operand that is not 2-D or 3-D")?;
        let (mb, batch_b, sb) = split(b.sizes, b.strides).ok_or("a GEMM operand that is not 2-D or 3-D")?;
        let (mc, batch, sc) = split(c.sizes, c.strides).ok_or("a GEMM result that is not 2-D or 3-D")?;
        let (m, k, n) = (ma.rows, ma.cols, mb.cols);
        if mb.rows != k || mc.rows != m || mc.cols != n {
            return Err(format!(
                "GEMM sizes do not match: [{m}, {k}] @ [{}, {n}] into [{}, {}]",
                mb.rows, mc.rows, mc.cols
            ));
        }
        if (batch_a != batch && batch_a != 1) || (batch_b != batch && batch_b != 1) {
            return Err("GEMM batch sizes do not match".into());
        }
        if [m, n, k, batch].iter().any(|&d| d <= 0) {
            return Err("an empty GEMM".into());
        }
        let (sa, sb) = (if batch_a == 1 { 0 } else { sa }, if batch_b == 1 { 0 } else { sb });
        // c column-major: c = a @ b. c row-major: cᵀ = bᵀ @ aᵀ.
        let (ldc, first, second, swapped) = match (mc.column_major_ld(), mc.t().column_major_ld()) {
            (Some(ldc), _) => (ldc, ma, mb, false),
            (None, Some(ldc)) => (ldc, mb.t(), ma.t(), true),
            (None, None) => return Err("a GEMM result with no unit stride (or a row stride over 32 bits)".into()),
        };
        let (ta, lda) = operand(first).ok_or("a GEMM operand with no unit stride")?;
        let (tb, ldb) = operand(second).ok_or("a GEMM operand with no unit stride")?;
        let (ia, ib) = if swapped { (1, 0) } else { (0, 1) };
        let (dta, dtb, stride_first, stride_second) =
            if swapped { (b.dtype, a.dtype, sb, sa) } else { (a.dtype, b.dtype, sa, sb) };
        let call = GemmCall {
            m: first.rows,
            n: second.cols,
            k,
            batch,
            a: Operand { input: ia, trans: ta, ld: lda, batch_stride: stride_first, dtype: dta },
            b: Operand { input: ib, trans: tb, ld: ldb, batch_stride: stride_second, dtype: dtb },
            ldc,
            c_batch_stride: sc,
            c_dtype: c.dtype,
            alpha,
        };
        call.types()?;
        let limit = i32::MAX as i64;
        if [call.m, call.n, call.k, call.batch].iter().any(|&d| d > limit) {
            return Err("a GEMM dimension over cuBLAS's 32-bit limit".into());
        }
        Ok(call)
    }

    /// The compute precision: `F32` (float32 and half-precision operands,
    /// float32 accumulation, a float32 or same-precision result) or `F64`;
    /// errors for dtypes cuBLAS does not take.
    pub fn types(&self) -> Result<DType, String> {
        match (self.a.dtype, self.b.dtype, self.c_dtype) {
            (DType::F64, DType::F64, DType::F64) => Ok(DType::F64),
            (x, y, DType::F32) if x == y && matches!(x, DType::F32 | DType::F16 | DType::BF16) => Ok(DType::F32),
            (x, y, z) if x == y && y == z && matches!(x, DType::F16 | DType::BF16) => Ok(DType::F32),
            (x, y, z) => Err(format!("a GEMM of {x} and {y} into {z}")),
        }
    }

    /// Run the call as cuBLAS defines it, on host memory: `inputs[0]` and
    /// `inputs[1]` the addresses of the step's `a` and `b` (at their first
    /// elements), `c` that of the result.
    ///
    /// # Safety
    /// The addresses must hold buffers of the layouts the call was made
    /// from, and nothing else may touch them during the call.
    pub unsafe fn emulate(&self, inputs: [usize; 2], c: usize) {
        let f64_compute = self.types() == Ok(DType::F64);
        let read = |op: &Operand, batch: i64, i: i64, j: i64| -> f64 {
            // op(X)(i, j): X(i, j) for N, X(j, i) for T.
            let at = match op.trans {
                Trans::N => i + j * op.ld,
                Trans::T => j + i * op.ld,
            } + batch * op.batch_stride;
            // SAFETY: the caller's buffers hold every element the call reads.
            unsafe { load(inputs[op.input], at, op.dtype) }
        };
        for batch in 0..self.batch {
            for j in 0..self.n {
                for i in 0..self.m {
                    let value = if f64_compute {
                        let mut acc = 0.0f64;
                        for p in 0..self.k {
                            acc += read(&self.a, batch, i, p) * read(&self.b, batch, p, j);
                        }
                        self.alpha * acc
                    } else {
                        let mut acc = 0.0f32;
                        for p in 0..self.k {
                            acc += read(&self.a, batch, i, p) as f32 * read(&self.b, batch, p, j) as f32;
                        }
                        (self.alpha as f32 * acc) as f64
                    };
                    // SAFETY: as above, for the result.
                    unsafe { store(c, i + j * self.ldc + batch * self.c_batch_stride, self.c_dtype, value) };
                }
            }
        }
    }
}

impl std::fmt::Display for GemmCall {
    /// The call's arguments, one line (its `explain` text).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let operand = |o: &Operand| {
            let name = if o.input == 0 { "a" } else { "b" };
            format!("{name} {:?} {} ld {} batch stride {}", o.trans, o.dtype, o.ld, o.batch_stride)
        };
        writeln!(
            f,
            "cublasGemmStridedBatchedEx m {} n {} k {} batch {} alpha {}: {}; {}; c {} ld {} batch stride {}",
            self.m,
            self.n,
            self.k,
            self.batch,
            self.alpha,
            operand(&self.a),
            operand(&self.b),
            self.c_dtype,
            self.ldc,
            self.c_batch_stride
        )
    }
}

/// Element `at` of a buffer of `dtype` at `base`, as f64.
unsafe fn load(base: usize, at: i64, dtype: DType) -> f64 {
    let p = base as isize + at as isize * dtype.itemsize() as isize;
    // SAFETY: the caller guarantees `p` is an element of a live buffer.
    unsafe {
        match dtype {
            DType::F32 => *(p as *const f32) as f64,
            DType::F64 => *(p as *const f64),
            DType::F16 => half::f16::from_bits(*(p as *const u16)).to_f64(),
            DType::BF16 => half::bf16::from_bits(*(p as *const u16)).to_f64(),
            _ => f64::NAN,
        }
    }
}

/// Store `value` as element `at` of a buffer of `dtype` at `base`.
unsafe fn store(base: usize, at: i64, dtype: DType, value: f64) {
    let p = base as isize + at as isize * dtype.itemsize() as isize;
    // SAFETY: the caller guarantees `p` is an element of a live buffer.
    unsafe {
        match dtype {
            DType::F32 => *(p as *mut f32) = value as f32,
            DType::F64 => *(p as *mut f64) = value,
            // One rounding of the float32 sum, as cuBLAS does.
            DType::F16 => *(p as *mut u16) = half::f16::from_f32(value as f32).to_bits(),
            DType::BF16 => *(p as *mut u16) = half::bf16::from_f32(value as f32).to_bits(),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `a @ b` by definition, over row-major indexed strided views.
    fn reference(a: (&[f64], &[i64]), b: (&[f64], &[i64]), m: i64, k: i64, n: i64) -> Vec<f64> {
        let mut out = vec![0.0; (m * n) as usize];
        for i in 0..m {
            for j in 0..n {
                out[(i * n + j) as usize] = (0..k)
                    .map(|p| a.0[(i * a.1[0] + p * a.1[1]) as usize] * b.0[(p * b.1[0] + j * b.1[1]) as usize])
                    .sum();
            }
        }
        out
    }

    fn check(m: i64, k: i64, n: i64, sa: [i64; 2], sb: [i64; 2], sc: [i64; 2]) {
        let span = |s: [i64; 2], r: i64, c: i64| ((r - 1) * s[0] + (c - 1) * s[1] + 1) as usize;
        let a: Vec<f64> = (0..span(sa, m, k)).map(|x| (x % 7) as f64 - 3.0).collect();
        let b: Vec<f64> = (0..span(sb, k, n)).map(|x| (x % 5) as f64 * 0.5 - 1.0).collect();
        let mut c = vec![f64::NAN; span(sc, m, n)];
        let lay = |sizes: &'static [i64], strides: &'static [i64]| Layout { dtype: DType::F64, sizes, strides };
        let leak = |v: Vec<i64>| -> &'static [i64] { v.leak() };
        let call = GemmCall::new(
            lay(leak(vec![m, k]), leak(sa.to_vec())),
            lay(leak(vec![k, n]), leak(sb.to_vec())),
            lay(leak(vec![m, n]), leak(sc.to_vec())),
            1.0,
        )
        .expect("a call fits every layout with a unit stride");
        // SAFETY: the vectors hold every element of their layouts.
        unsafe { call.emulate([a.as_ptr() as usize, b.as_ptr() as usize], c.as_mut_ptr() as usize) };
        let want = reference((&a, &sa), (&b, &sb), m, k, n);
        for i in 0..m {
            for j in 0..n {
                assert_eq!(c[(i * sc[0] + j * sc[1]) as usize], want[(i * n + j) as usize], "{call:?}");
            }
        }
    }

    #[test]
    fn every_operand_order_maps_to_one_call() {
        let (m, k, n) = (3, 4, 5);
        for sa in [[k, 1], [1, m], [k + 2, 1], [1, m + 1]] {
            for sb in [[n, 1], [1, k], [n + 3, 1], [1, k + 2]] {
                for sc in [[n, 1], [1, m], [n + 1, 1], [1, m + 4]] {
                    check(m, k, n, sa, sb, sc);
                }
            }
        }
        // Vectors: a row, a column, a dot product.
        check(1, 4, 5, [9, 1], [5, 1], [7, 1]);
        check(3, 4, 1, [4, 1], [3, 9], [1, 9]);
        check(1, 4, 1, [1, 1], [1, 1], [1, 1]);
    }

    #[test]
    fn no_call_without_a_unit_stride() {
        let l = |s: &'static [i64]| Layout { dtype: DType::F32, sizes: &[4, 4], strides: s };
        assert!(GemmCall::new(l(&[8, 2]), l(&[4, 1]), l(&[4, 1]), 1.0).is_err());
        assert!(GemmCall::new(l(&[4, 1]), l(&[4, 1]), l(&[8, 2]), 1.0).is_err());
        // Overlapping rows (a stride below the row length) are no matrix either.
        assert!(GemmCall::new(l(&[2, 1]), l(&[4, 1]), l(&[4, 1]), 1.0).is_err());
    }

    #[test]
    fn half_operands_accumulate_into_float32() {
        let l = |d: DType| Layout { dtype: d, sizes: &[2, 2], strides: &[2, 1] };
        assert_eq!(
            GemmCall::new(l(DType::F16), l(DType::F16), l(DType::F32), 1.0).map(|c| c.types()),
            Ok(Ok(DType::F32))
        );
        assert_eq!(
            GemmCall::new(l(DType::F16), l(DType::F16), l(DType::F16), 1.0).map(|c| c.types()),
            Ok(Ok(DType::F32))
        );
        assert!(GemmCall::new(l(DType::F16), l(DType::BF16), l(DType::F32), 1.0).is_err());
        assert!(GemmCall::new(l(DType::I64), l(DType::I64), l(DType::I64), 1.0).is_err());
    }
}
