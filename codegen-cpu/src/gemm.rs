//! Matrix products on strided views (no copies for transposed operands):
//! through torch's BLAS when one is registered and can read the layouts
//! ([`crate::blas`]), else through the `gemm` crate.

use gemm::Parallelism;
use rdyn_ir::loops::BufId;
use rdyn_ir::DType;

use crate::blas;
use crate::exec::Memory;
use crate::CodegenError;

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
    // A batch goes to BLAS as one call where it has a batched routine.
    if batch > 1 && batch <= i64::from(i32::MAX) {
        if let Some(call) = blas::plan_batch(&product) {
            macro_rules! with_batch {
                ($t:ty) => {{
                    if blas::batch_available::<$t>() {
                        let size = std::mem::size_of::<$t>() as i64;
                        let at = |ptr: usize, offset: i64, bs: i64, bi: i64| (ptr as i64 + (offset + bi * bs) * size);
                        let a: Vec<*const $t> =
                            (0..batch).map(|bi| at(ptr_a, pa.offset, a_bs, bi) as *const $t).collect();
                        let b: Vec<*const $t> =
                            (0..batch).map(|bi| at(ptr_b, pb.offset, b_bs, bi) as *const $t).collect();
                        let c: Vec<*mut $t> = (0..batch).map(|bi| at(ptr_o, po.offset, o_bs, bi) as *mut $t).collect();
                        // SAFETY: as for the single products below; the
                        // outputs of a batch are distinct products of one
                        // buffer the plan allocated for them.
                        unsafe { blas::run_batch::<$t>(&product, call, &a, &b, &c, scale as $t) };
                        return Ok(());
                    }
                }};
            }
            match po.dtype {
                DType::F32 => with_batch!(f32),
                DType::F64 => with_batch!(f64),
                _ => {}
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
                let at = |ptr: usize, offset: i64, bs: i64, bi: i64| (ptr as i64 + (offset + bi * bs) * size) as usize;
                for bi in 0..batch {
                    // SAFETY: pointers and strides describe live buffers of
                    // this call whose layouts the guards checked; `plan`
                    // checked that BLAS can read them.
                    unsafe {
                        blas::run::<$t>(
                            &product,
                            call,
                            at(ptr_a, pa.offset, a_bs, bi) as *const $t,
                            at(ptr_b, pb.offset, b_bs, bi) as *const $t,
                            at(ptr_o, po.offset, o_bs, bi) as *mut $t,
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
                let oa = (pa.offset + bi * a_bs + r0 * a_rs) * size;
                let ob = (pb.offset + bi * b_bs) * size;
                let oo = (po.offset + bi * o_bs + r0 * o_rs) * size;
                // SAFETY: pointers and strides describe live buffers of this
                // call whose layouts the guards checked; units write
                // disjoint rows of the output.
                unsafe {
                    gemm::gemm::<$t>(
                        rows as usize,
                        n as usize,
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
