//! Matrix products through the BLAS that torch itself links (MKL's
//! `sgemm_`/`dgemm_` in the PyPI wheels), when the host registers it.
//!
//! The `gemm` crate is rdyn's own path and runs everywhere; torch's MKL is
//! tuned per CPU and threads on the same OpenMP team as ATen. `rdyn`'s
//! Python side (`python/rdyn/_aten_libs.py`; `RDYN_BLAS=0` keeps products on
//! the crate) finds the Fortran entry points in `libtorch_cpu.so` and hands
//! their addresses over; products whose operand layouts BLAS can read
//! (each operand with a unit stride along one of its dimensions) go there
//! when the product has at least `BLAS_MIN_SIDE` (64) result columns and terms
//! per dot product: below that the crate was faster (a 1x1 convolution over 3x3
//! pixels is 9 columns). A batched product (attention heads) is one call of MKL's
//! `sgemm_batch_`/`dgemm_batch_` at any size where the layouts allow, unless its
//! products are large and skinny (the single calls' rule), else per-product calls
//! as above; `rdyn._rdyn.blas_batched()` says whether the batched routine was
//! found. These rules say where BLAS *may* run a product; whether it does is
//! timed per shape against the crate ([`crate::gemm::choice`]).

use std::ffi::c_char;
use std::sync::OnceLock;

/// Fortran `?gemm_` (LP64: 32-bit integers, everything by reference).
pub(crate) type Gemm<T> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const i32,
    *const i32,
    *const i32,
    *const T,
    *const T,
    *const i32,
    *const T,
    *const i32,
    *const T,
    *mut T,
    *const i32,
);

/// MKL's Fortran `?gemm_batch_` with one group: `?gemm_`'s arguments by
/// reference, the operands as arrays of `group_size` pointers, then the
/// group count and size.
pub(crate) type GemmBatch<T> = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const i32,
    *const i32,
    *const i32,
    *const T,
    *const *const T,
    *const i32,
    *const *const T,
    *const i32,
    *const T,
    *const *mut T,
    *const i32,
    *const i32,
    *const i32,
);

pub(crate) struct Blas {
    sgemm: Gemm<f32>,
    dgemm: Gemm<f64>,
    sgemm_batch: Option<GemmBatch<f32>>,
    dgemm_batch: Option<GemmBatch<f64>>,
}

/// The addresses of a BLAS's routines (0: absent).
#[derive(Clone, Copy, Debug, Default)]
pub struct BlasEntries {
    /// Fortran `sgemm_`.
    pub sgemm: usize,
    /// Fortran `dgemm_`.
    pub dgemm: usize,
    /// MKL's `sgemm_batch_` (optional).
    pub sgemm_batch: usize,
    /// MKL's `dgemm_batch_` (optional).
    pub dgemm_batch: usize,
}

static BLAS: OnceLock<Blas> = OnceLock::new();

/// Use the Fortran routines at these addresses (the first registration
/// wins). Returns whether a BLAS is now in use.
///
/// # Safety
/// The addresses must be LP64 `sgemm_`, `dgemm_` (and, where not 0, MKL's
/// `sgemm_batch_` and `dgemm_batch_`) of a library loaded for the rest of
/// the process's life.
pub unsafe fn use_blas(entries: BlasEntries) -> bool {
    let BlasEntries { sgemm, dgemm, sgemm_batch, dgemm_batch } = entries;
    if sgemm == 0 || dgemm == 0 {
        return false;
    }
    // SAFETY: the caller guarantees the addresses and signatures.
    let blas = unsafe {
        Blas {
            sgemm: std::mem::transmute::<usize, Gemm<f32>>(sgemm),
            dgemm: std::mem::transmute::<usize, Gemm<f64>>(dgemm),
            sgemm_batch: (sgemm_batch != 0).then(|| std::mem::transmute::<usize, GemmBatch<f32>>(sgemm_batch)),
            dgemm_batch: (dgemm_batch != 0).then(|| std::mem::transmute::<usize, GemmBatch<f64>>(dgemm_batch)),
        }
    };
    // A second registration keeps the first.
    let _ = BLAS.set(blas);
    true
}

/// Whether a BLAS is registered.
pub fn available() -> bool {
    BLAS.get().is_some()
}

/// One row-major product `c (+)= alpha · a @ b` with element strides
/// (row, column) per operand, in elements. `a` is m×k, `b` k×n, `c` m×n.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Product {
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub a: (i64, i64),
    pub b: (i64, i64),
    pub c: (i64, i64),
}

/// A column-major operand as BLAS reads it: transposed or not, and its
/// leading dimension. `rows × cols` is the matrix BLAS multiplies, whose
/// element (r, c) is at `r·rs + c·cs`.
fn operand(rows: i64, cols: i64, rs: i64, cs: i64) -> Option<(u8, i64)> {
    // A stride along a dimension of size 1 is never used.
    let rs = if rows == 1 { 1 } else { rs };
    let cs = if cols == 1 { rows.max(1) } else { cs };
    if rs == 1 && cs >= rows.max(1) {
        Some((b'N', cs))
    } else if cs == 1 && rs >= cols.max(1) {
        Some((b'T', rs))
    } else {
        None
    }
}

/// Below this many columns of the result or terms per dot product, the
/// `gemm` crate is faster than MKL's sgemm, measured on Zen 4 (torch 2.15):
/// a 1152×192 by 192×9 product (a 1x1 convolution over 3x3 pixels) takes
/// MKL 170–270 µs and the crate 45–55 µs; with one column 42 against
/// 18 µs; 96×16 by 16×2304 84–96 against 45–64 µs. From 64 on, which one
/// wins depends on the CPU and the shape, and [`crate::gemm::choice`] times
/// both.
const BLAS_MIN_SIDE: i64 = 64;

/// The BLAS call for a product, when its layouts and sizes allow one and
/// BLAS is the faster library for it: `c` row-major is `cᵀ` column-major,
/// and `cᵀ = bᵀ · aᵀ`.
pub(crate) fn plan(p: &Product) -> Option<[(u8, i64); 3]> {
    if p.n.min(p.k) < BLAS_MIN_SIDE {
        return None;
    }
    layout(p)
}

/// The call for one product of a batch run through `?gemm_batch_`: one
/// call for all products, so none pays a call of its own (on Sapphire
/// Rapids, 16 attention heads of 64×32 by 32×64 take MKL's batch 20 µs
/// against 32 µs in the `gemm` crate, one head per thread; 17×17 by 17×32
/// heads 4 against 6 µs). Products as large as [`BLAS_MIN_SIDE`]³ keep the
/// single calls' rule: skinny ones stay with the crate.
pub(crate) fn plan_batch(p: &Product) -> Option<[(u8, i64); 3]> {
    let large = p.m.saturating_mul(p.n).saturating_mul(p.k) >= BLAS_MIN_SIDE.pow(3);
    if large && p.n.min(p.k) < BLAS_MIN_SIDE {
        return None;
    }
    layout(p)
}

/// The call's operands as BLAS reads them, when it can.
fn layout(p: &Product) -> Option<[(u8, i64); 3]> {
    let fits = |v: i64| (0..=i64::from(i32::MAX)).contains(&v);
    if ![p.m, p.n, p.k].into_iter().all(fits) || p.m == 0 || p.n == 0 || p.k == 0 {
        return None;
    }
    // cᵀ: n×m, element (j, i) at j·c_cs + i·c_rs; must not be transposed.
    let c = operand(p.n, p.m, p.c.1, p.c.0).filter(|(t, _)| *t == b'N')?;
    let b = operand(p.n, p.k, p.b.1, p.b.0)?;
    let a = operand(p.k, p.m, p.a.1, p.a.0)?;
    [b.1, a.1, c.1].into_iter().all(fits).then_some([b, a, c])
}

/// A planned call's scalar arguments as the Fortran routines take them
/// (`b` first: the call computes `cᵀ = bᵀ · aᵀ`).
struct Args {
    tb: c_char,
    ta: c_char,
    m: i32,
    n: i32,
    k: i32,
    lda: i32,
    ldb: i32,
    ldc: i32,
}

impl Args {
    /// `plan`/`plan_batch` checked that every value fits 32 bits.
    fn new(p: &Product, call: [(u8, i64); 3]) -> Args {
        let [(tb, ldb), (ta, lda), (_, ldc)] = call;
        Args {
            tb: tb as c_char,
            ta: ta as c_char,
            m: p.m as i32,
            n: p.n as i32,
            k: p.k as i32,
            lda: lda as i32,
            ldb: ldb as i32,
            ldc: ldc as i32,
        }
    }
}

/// Run `plan`'s call on raw pointers to the first elements (nothing when
/// no BLAS is registered).
///
/// # Safety
/// The pointers and strides must describe live buffers that hold the
/// product's operands.
pub(crate) unsafe fn run<T: Element>(
    p: &Product,
    call: [(u8, i64); 3],
    a: *const T,
    b: *const T,
    c: *mut T,
    alpha: T,
    beta: T,
) {
    let Some(gemm) = BLAS.get().map(T::routine) else { return };
    let Args { tb, ta, m, n, k, lda, ldb, ldc } = Args::new(p, call);
    // SAFETY: the caller guarantees the buffers; BLAS reads `n×k`, `k×m`
    // and writes `n×m` through the leading dimensions `plan` checked.
    unsafe { gemm(&tb, &ta, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &ldc) };
}

/// Whether a batched routine is registered for `dtype`'s products.
pub(crate) fn batch_available<T: Element>() -> bool {
    BLAS.get().and_then(T::batch_routine).is_some()
}

/// Whether float32 batches run as one call of a batched routine.
pub fn batched() -> bool {
    batch_available::<f32>()
}

/// Run `plan_batch`'s call for every product whose first elements are at
/// `a[i]`, `b[i]`, `c[i]`, as one batch (nothing when no batched routine is
/// registered or the batch does not fit a 32-bit count: the caller checks
/// both).
///
/// # Safety
/// Every pointer triple must describe live buffers that hold one product's
/// operands with the strides of `p`; the outputs must not overlap.
pub(crate) unsafe fn run_batch<T: Element>(
    p: &Product,
    call: [(u8, i64); 3],
    a: &[*const T],
    b: &[*const T],
    c: &[*mut T],
    alpha: T,
) {
    let Some(gemm) = BLAS.get().and_then(T::batch_routine) else { return };
    let Args { tb, ta, m, n, k, lda, ldb, ldc } = Args::new(p, call);
    debug_assert!(a.len() == c.len() && b.len() == c.len());
    let Ok(size) = i32::try_from(c.len().min(a.len()).min(b.len())) else { return };
    let groups = 1i32;
    let beta = T::ZERO;
    // SAFETY: as for `run`, per product; the arrays hold `size` pointers.
    unsafe {
        gemm(&tb, &ta, &n, &m, &k, &alpha, b.as_ptr(), &ldb, a.as_ptr(), &lda, &beta, c.as_ptr(), &ldc, &groups, &size)
    };
}

/// float32 and float64, the types BLAS (and the `gemm` crate, for rdyn)
/// multiplies.
pub(crate) trait Element: Copy + Send + Sync + 'static {
    const ZERO: Self;
    /// The plan's float64 scale in this type.
    fn from_f64(s: f64) -> Self;
    /// The registered routine for this type.
    fn routine(blas: &Blas) -> Gemm<Self>;
    /// The registered batched routine for this type, if any.
    fn batch_routine(blas: &Blas) -> Option<GemmBatch<Self>>;
}

impl Element for f32 {
    const ZERO: f32 = 0.0;
    fn from_f64(s: f64) -> f32 {
        s as f32
    }
    fn routine(blas: &Blas) -> Gemm<f32> {
        blas.sgemm
    }
    fn batch_routine(blas: &Blas) -> Option<GemmBatch<f32>> {
        blas.sgemm_batch
    }
}

impl Element for f64 {
    const ZERO: f64 = 0.0;
    fn from_f64(s: f64) -> f64 {
        s
    }
    fn routine(blas: &Blas) -> Gemm<f64> {
        blas.dgemm
    }
    fn batch_routine(blas: &Blas) -> Option<GemmBatch<f64>> {
        blas.dgemm_batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// a 96×72, b 72×80, c 96×80, with these (row, column) strides.
    fn product(a: (i64, i64), b: (i64, i64), c: (i64, i64)) -> Product {
        Product { m: 96, n: 80, k: 72, a, b, c }
    }

    #[test]
    fn row_major_operands() {
        let call = plan(&product((72, 1), (80, 1), (80, 1))).expect("BLAS can read this layout");
        assert_eq!(call, [(b'N', 80), (b'N', 72), (b'N', 80)]);
    }

    #[test]
    fn transposed_operands() {
        // b given as the transpose of an 80×72 row-major matrix (a linear's weight).
        let call = plan(&product((72, 1), (1, 72), (80, 1))).expect("BLAS can read this layout");
        assert_eq!(call[0], (b'T', 72));
        // a given as the transpose of a 72×96 row-major matrix.
        let call = plan(&product((1, 96), (80, 1), (80, 1))).expect("BLAS can read this layout");
        assert_eq!(call[1], (b'T', 96));
    }

    #[test]
    fn unreadable_layouts_stay_with_the_gemm_crate() {
        // No unit stride in `a`.
        assert!(plan(&product((144, 2), (80, 1), (80, 1))).is_none());
        // Column-major output.
        assert!(plan(&product((72, 1), (80, 1), (1, 96))).is_none());
        // Overlapping rows (a broadcast).
        assert!(plan(&product((0, 1), (80, 1), (80, 1))).is_none());
    }

    #[test]
    fn batches_go_to_blas_at_any_size() {
        // One attention head: 17×8 by 8×17, too skinny for a call of its own.
        let head = Product { m: 17, n: 17, k: 8, a: (8, 1), b: (1, 8), c: (17, 1) };
        assert!(plan(&head).is_none());
        assert_eq!(plan_batch(&head), Some([(b'T', 8), (b'N', 8), (b'N', 17)]));
        // Large skinny products keep the single calls' rule.
        let column = Product { m: 4096, n: 1, k: 512, a: (512, 1), b: (1, 1), c: (1, 1) };
        assert!(plan_batch(&column).is_none());
        // Empty products and unreadable layouts never do.
        assert!(plan_batch(&Product { k: 0, ..head }).is_none());
        assert!(plan_batch(&Product { a: (16, 2), ..head }).is_none());
    }

    #[test]
    fn skinny_products_stay_with_the_gemm_crate() {
        let row_major = product((72, 1), (80, 1), (80, 1));
        // Few result columns (a 1x1 convolution over few pixels, a matrix-vector product).
        assert!(plan(&Product { n: 9, b: (9, 1), c: (9, 1), ..row_major }).is_none());
        // Few terms per dot product.
        assert!(plan(&Product { k: 16, a: (16, 1), ..row_major }).is_none());
        // Few rows are fine.
        assert!(plan(&Product { m: 1, ..row_major }).is_some());
    }
}
