//! Matrix products through the `gemm` crate, on strided views (no copies for
//! transposed operands).

use gemm::Parallelism;
use rdyn_ir::loops::BufId;
use rdyn_ir::DType;

use crate::exec::Memory;
use crate::CodegenError;

/// `out (+)= a @ b`; 2-D, or 3-D batched with matching batch sizes.
pub fn run_gemm(
    a: BufId,
    b: BufId,
    out: BufId,
    accumulate: bool,
    scale: f64,
    mem: &Memory,
) -> Result<(), CodegenError> {
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
    let threads = rayon::current_num_threads();
    let par = if m * n * k > 64 * 64 * 64 { Parallelism::Rayon(threads) } else { Parallelism::None };
    let (ptr_a, ptr_b, ptr_o) = (mem.ptrs[a.0 as usize], mem.ptrs[b.0 as usize], mem.ptrs[out.0 as usize]);
    macro_rules! go {
        ($t:ty, $one:expr, $zero:expr) => {{
            let size = std::mem::size_of::<$t>() as i64;
            for bi in 0..batch {
                let oa = (pa.offset + bi * a_bs) * size;
                let ob = (pb.offset + bi * b_bs) * size;
                let oo = (po.offset + bi * o_bs) * size;
                // SAFETY: pointers and strides describe live buffers of this
                // call whose layouts the guards checked.
                unsafe {
                    gemm::gemm::<$t>(
                        m as usize,
                        n as usize,
                        k as usize,
                        (ptr_o as i64 + oo) as *mut $t,
                        o_cs as isize,
                        o_rs as isize,
                        accumulate,
                        (ptr_a as i64 + oa) as *const $t,
                        a_cs as isize,
                        a_rs as isize,
                        (ptr_b as i64 + ob) as *const $t,
                        b_cs as isize,
                        b_rs as isize,
                        if accumulate { $one } else { $zero },
                        scale as $t,
                        false,
                        false,
                        false,
                        par,
                    );
                }
            }
        }};
    }
    match po.dtype {
        DType::F32 => go!(f32, 1.0f32, 0.0f32),
        DType::F64 => go!(f64, 1.0f64, 0.0f64),
        _ => return Err(CodegenError::Internal("gemm dtype")),
    }
    Ok(())
}
