//! Matrix products on strided views (no copies for transposed operands):
//! through torch's BLAS when one is registered and can read the layouts
//! ([`crate::blas`]), else through the `gemm` crate.
//!
//! In the crate, products over 64³ multiply-adds run in parallel: on the OpenMP
//! team each thread runs whole products on a block of rows (or of batches); on
//! rayon the crate splits each product itself. Half-precision operands never get
//! here: lowering converts them to float32 and rounds the product once.
//!
//! The crate packs its operands into buffers it allocates itself, and an
//! allocation that fails there aborts the process. Its left-hand buffers are
//! bounded by its cache blocking, but with rayon it packs the right-hand side
//! for all `n` columns at once (`kc · n` elements). So products go to it at
//! most [`GEMM_COLS`] columns at a time: every buffer it allocates is then a
//! few MiB whatever the data's size (data-sized memory is rdyn's arena, which
//! is reserved fallibly).

use gemm::Parallelism;
use rdyn_ir::loops::BufId;
use rdyn_ir::DType;

use crate::blas;
use crate::tile::Memory;
use crate::CodegenError;

/// The most columns of one `gemm` crate call: its right-hand packing is then
/// at most `kc · GEMM_COLS` elements (`kc` ≤ 512: 8 MiB of float64). A
/// block this wide is still 2048 multiply-adds per element of the left
/// operand, so splitting wider products costs nothing measurable.
const GEMM_COLS: i64 = 2048;

/// `out = scale · (a @ b)`; 2-D, or 3-D batched with matching batch sizes.
pub fn run_gemm(a: BufId, b: BufId, out: BufId, scale: f64, mem: &Memory) -> Result<(), CodegenError> {
    let (pa, pb, po) = (&mem.bufs[a.0 as usize], &mem.bufs[b.0 as usize], &mem.bufs[out.0 as usize]);
    let batched = po.sizes.len() == 3;
    let dims = |p: &crate::plan::BufPlan| -> (i64, i64, i64, i64, i64, i64) {
        if batched {
            (p.sizes[0], p.sizes[1], p.sizes[2], p.strides[0], p.strides[1], p.strides[2])
        } else {
            (1, p.sizes[0], p.sizes[1], 0, p.strides[0], p.strides[1])
        }
    };
    let (batch, m, k, a_bs, a_rs, a_cs) = dims(pa);
    let (_, _, n, b_bs, b_rs, b_cs) = dims(pb);
    let (_, _, _, o_bs, o_rs, o_cs) = dims(po);
    if po.sizes.len() != pa.sizes.len() || po.sizes.len() < 2 {
        return Err(CodegenError::Internal("gemm operands of unexpected rank"));
    }
    let (ptr_a, ptr_b, ptr_o) = (mem.ptrs[a.0 as usize], mem.ptrs[b.0 as usize], mem.ptrs[out.0 as usize]);
    let product = blas::Product { m, n, k, a: (a_rs, a_cs), b: (b_rs, b_cs), c: (o_rs, o_cs) };
    let ops = [(ptr_a, pa.offset, a_bs), (ptr_b, pb.offset, b_bs), (ptr_o, po.offset, o_bs)];
    // A batch goes to BLAS as one call where it has a batched routine.
    if batch > 1 && batch <= i64::from(i32::MAX) {
        if let Some(call) = blas::plan_batch(&product) {
            let done = match po.dtype {
                DType::F32 => blas_batch::<f32>(&product, call, batch, ops, scale as f32),
                DType::F64 => blas_batch::<f64>(&product, call, batch, ops, scale),
                _ => false,
            };
            if done {
                return Ok(());
            }
        }
    }
    // Many small products (attention heads) go to the gemm crate, one per
    // thread: a BLAS call per head costs more than it computes.
    let to_blas = blas::available() && (batch == 1 || m * n * k >= 64 * 64 * 64);
    if let Some(call) = to_blas.then(|| blas::plan(&product)).flatten() {
        macro_rules! with_blas {
            ($t:ty) => {{
                let size = std::mem::size_of::<$t>() as i64;
                let at = |(ptr, offset, bs): (usize, i64, i64), bi: i64| element(ptr, offset + bi * bs, size);
                for bi in 0..batch {
                    // SAFETY: pointers and strides describe live buffers of
                    // this call whose layouts the guards checked; `plan`
                    // checked that BLAS can read them.
                    unsafe {
                        blas::run::<$t>(
                            &product,
                            call,
                            at(ops[0], bi) as *const $t,
                            at(ops[1], bi) as *const $t,
                            at(ops[2], bi) as *mut $t,
                            scale as $t,
                            0.0,
                        )
                    };
                }
                return Ok(());
            }};
        }
        match po.dtype {
            DType::F32 => with_blas!(f32),
            DType::F64 => with_blas!(f64),
            _ => {}
        }
    }
    let big = m * n * k > 64 * 64 * 64;
    // On the OpenMP team, each thread runs whole products on a block of
    // rows (or of batches); on rayon, the gemm crate splits each product.
    let threads = crate::parallel::threads() as i64;
    let on_team = batch * m * n * k > 64 * 64 * 64 && threads > 1 && crate::parallel::on_openmp();
    let par = if big && !on_team { Parallelism::Rayon(threads as usize) } else { Parallelism::None };
    let row_blocks = if on_team && batch < threads { threads.min(m.max(1)) } else { 1 };
    let rows_per = (m + row_blocks - 1) / row_blocks.max(1);
    macro_rules! go {
        ($t:ty) => {{
            let size = std::mem::size_of::<$t>() as i64;
            let unit = |u: usize| {
                let (bi, block) = (u as i64 / row_blocks, u as i64 % row_blocks);
                let r0 = block * rows_per;
                let rows = (m - r0).min(rows_per);
                if rows <= 0 {
                    return;
                }
                for c0 in (0..n).step_by(GEMM_COLS as usize) {
                    let cols = (n - c0).min(GEMM_COLS);
                    let oa = (pa.offset + bi * a_bs + r0 * a_rs) * size;
                    let ob = (pb.offset + bi * b_bs + c0 * b_cs) * size;
                    let oo = (po.offset + bi * o_bs + r0 * o_rs + c0 * o_cs) * size;
                    // SAFETY: pointers and strides describe live buffers of this
                    // call whose layouts the guards checked; units write
                    // disjoint rows of the output, calls disjoint columns.
                    unsafe {
                        gemm::gemm::<$t>(
                            rows as usize,
                            cols as usize,
                            k as usize,
                            (ptr_o as i64 + oo) as *mut $t,
                            o_cs as isize,
                            o_rs as isize,
                            false,
                            (ptr_a as i64 + oa) as *const $t,
                            a_cs as isize,
                            a_rs as isize,
                            (ptr_b as i64 + ob) as *const $t,
                            b_cs as isize,
                            b_rs as isize,
                            0.0,
                            scale as $t,
                            false,
                            false,
                            false,
                            par,
                        );
                    }
                }
            };
            let units = (batch * row_blocks) as usize;
            if on_team {
                crate::parallel::for_each(units, &unit);
            } else {
                (0..units).for_each(unit);
            }
        }};
    }
    match po.dtype {
        DType::F32 => go!(f32),
        DType::F64 => go!(f64),
        _ => return Err(CodegenError::Internal("gemm dtype")),
    }
    Ok(())
}

/// The address of the element `index` elements of `size` bytes from `ptr`.
fn element(ptr: usize, index: i64, size: i64) -> usize {
    (ptr as i64 + index * size) as usize
}

/// One call of BLAS's batched routine for `batch` products whose operands
/// `a`, `b` and the output (address, element offset, batch stride) start
/// at `ops`; false (nothing run) when no batched routine is registered.
fn blas_batch<T: blas::Element>(
    product: &blas::Product,
    call: [(u8, i64); 3],
    batch: i64,
    ops: [(usize, i64, i64); 3],
    alpha: T,
) -> bool {
    if !blas::batch_available::<T>() {
        return false;
    }
    let size = std::mem::size_of::<T>() as i64;
    let at = |k: usize| (0..batch).map(move |bi| element(ops[k].0, ops[k].1 + bi * ops[k].2, size));
    let a: Vec<*const T> = at(0).map(|p| p as *const T).collect();
    let b: Vec<*const T> = at(1).map(|p| p as *const T).collect();
    let c: Vec<*mut T> = at(2).map(|p| p as *mut T).collect();
    // SAFETY: pointers and strides describe live buffers of this call whose
    // layouts the guards checked; `plan_batch` checked that BLAS can read
    // them; the outputs are distinct products of one buffer the plan
    // allocated for them.
    unsafe { blas::run_batch::<T>(product, call, &a, &b, &c, alpha) };
    true
}
