//! Matrix products on strided views (no copies for transposed operands):
//! through torch's BLAS when one is registered and can read the layouts
//! ([`crate::blas`]), else through the `gemm` crate. Where both can, the
//! faster of the two on this CPU runs it, measured on the first call of each
//! product shape ([`choice`]).
//!
//! In the crate, products over 64³ multiply-adds run in parallel: on the OpenMP
//! team each thread runs whole products of a batch, or a block of the longer
//! side (rows or columns) of one; on rayon the crate splits each product itself. Half-precision operands never get
//! here: lowering converts them to float32 and rounds the product once.
//!
//! The crate packs its operands into buffers it allocates itself, and an
//! allocation that fails there aborts the process. Its left-hand buffers are
//! bounded by its cache blocking, but with rayon it packs the right-hand side
//! for all `n` columns at once (`kc · n` elements). So products go to it at
//! most `GEMM_COLS` columns at a time: every buffer it allocates is then a
//! few MiB whatever the data's size (data-sized memory is rdyn's arena, which
//! is reserved fallibly).

pub mod choice;

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
    let call = Call::new(a, b, out, scale, mem)?;
    if !matches!(call.dtype, DType::F32 | DType::F64) {
        return Err(CodegenError::Internal("gemm dtype"));
    }
    match call.blas_route() {
        Some(route) if choice::library(&call, route) == Library::Blas => call.run_blas(route),
        _ => call.run_crate(),
    }
    Ok(())
}

/// How torch's BLAS runs a product the rules give it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum BlasRoute {
    /// One call of the batched routine for the whole batch.
    Batch([(u8, i64); 3]),
    /// One `?gemm_` call per product of the batch.
    Each([(u8, i64); 3]),
}

/// The library that runs a product both can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Library {
    Blas,
    Crate,
}

/// One `run_gemm` call: the product's shape and strides, its batch, and
/// each operand's (address, element offset, batch stride).
#[derive(Clone, Copy)]
pub(crate) struct Call {
    pub product: blas::Product,
    pub batch: i64,
    ops: [(usize, i64, i64); 3],
    pub dtype: DType,
    scale: f64,
}

impl Call {
    fn new(a: BufId, b: BufId, out: BufId, scale: f64, mem: &Memory) -> Result<Call, CodegenError> {
        let (pa, pb, po) = (&mem.bufs[a.0 as usize], &mem.bufs[b.0 as usize], &mem.bufs[out.0 as usize]);
        if po.sizes.len() != pa.sizes.len() || po.sizes.len() < 2 {
            return Err(CodegenError::Internal("gemm operands of unexpected rank"));
        }
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
        let ptr = |id: BufId| mem.ptrs[id.0 as usize];
        let call = Call {
            product: blas::Product { m, n, k, a: (a_rs, a_cs), b: (b_rs, b_cs), c: (o_rs, o_cs) },
            batch,
            ops: [(ptr(a), pa.offset, a_bs), (ptr(b), pb.offset, b_bs), (ptr(out), po.offset, o_bs)],
            dtype: po.dtype,
            scale,
        };
        Ok(call.collapsed())
    }

    /// A batch whose products share their right-hand operand, as one product
    /// where the left operand's and the output's batches continue their
    /// rows: `[B, m, k] @ [k, n]` broadcast over the batch is one
    /// `[B·m, k] @ [k, n]` (a linear layer over a batch of sequences, a
    /// patch convolution over a batch of images). One taller product packs
    /// the shared operand once instead of once per product.
    fn collapsed(self) -> Call {
        let (p, [(_, _, a_bs), (_, _, b_bs), (_, _, o_bs)]) = (self.product, self.ops);
        if self.batch <= 1 {
            return self;
        }
        if b_bs != 0 || a_bs != p.m * p.a.0 || o_bs != p.m * p.c.0 {
            return self;
        }
        let mut call = self;
        call.product.m = p.m * self.batch;
        call.batch = 1;
        call
    }

    /// The BLAS route the rules give this product, if any: a batch as one
    /// call where a batched routine is registered; single products when BLAS
    /// is the faster library for their sizes ([`blas::plan`]). Many small
    /// products (attention heads) stay with the crate, one per thread: a
    /// BLAS call per head costs more than it computes.
    pub(crate) fn blas_route(&self) -> Option<BlasRoute> {
        let (p, batch) = (&self.product, self.batch);
        let batch_routine = match self.dtype {
            DType::F32 => blas::batch_available::<f32>(),
            DType::F64 => blas::batch_available::<f64>(),
            _ => false,
        };
        if batch > 1 && batch <= i64::from(i32::MAX) && batch_routine {
            if let Some(call) = blas::plan_batch(p) {
                return Some(BlasRoute::Batch(call));
            }
        }
        let to_blas = blas::available() && (batch == 1 || p.m * p.n * p.k >= 64 * 64 * 64);
        to_blas.then(|| blas::plan(p)).flatten().map(BlasRoute::Each)
    }

    /// Run the product through BLAS along `route`.
    pub(crate) fn run_blas(&self, route: BlasRoute) {
        match self.dtype {
            DType::F32 => self.blas::<f32>(route),
            DType::F64 => self.blas::<f64>(route),
            _ => {}
        }
    }

    fn blas<T: blas::Element>(&self, route: BlasRoute) {
        let size = std::mem::size_of::<T>() as i64;
        let at = |k: usize, bi: i64| element(self.ops[k].0, self.ops[k].1 + bi * self.ops[k].2, size);
        let alpha = T::from_f64(self.scale);
        match route {
            BlasRoute::Batch(call) => {
                let a: Vec<*const T> = (0..self.batch).map(|bi| at(0, bi) as *const T).collect();
                let b: Vec<*const T> = (0..self.batch).map(|bi| at(1, bi) as *const T).collect();
                let c: Vec<*mut T> = (0..self.batch).map(|bi| at(2, bi) as *mut T).collect();
                // SAFETY: pointers and strides describe live buffers of this
                // call whose layouts the guards checked; `plan_batch` checked
                // that BLAS can read them; the outputs are distinct products
                // of one buffer the plan allocated for them.
                unsafe { blas::run_batch::<T>(&self.product, call, &a, &b, &c, alpha) };
            }
            BlasRoute::Each(call) => {
                for bi in 0..self.batch {
                    // SAFETY: as above; `plan` checked that BLAS can read them.
                    unsafe {
                        blas::run::<T>(
                            &self.product,
                            call,
                            at(0, bi) as *const T,
                            at(1, bi) as *const T,
                            at(2, bi) as *mut T,
                            alpha,
                            T::ZERO,
                        )
                    };
                }
            }
        }
    }

    /// Run the product through the `gemm` crate. On the OpenMP team, each
    /// thread runs whole products, or a block of the rows or columns of one;
    /// on rayon, the crate splits each product.
    pub(crate) fn run_crate(&self) {
        match self.dtype {
            DType::F32 => self.crate_gemm::<f32>(),
            DType::F64 => self.crate_gemm::<f64>(),
            _ => {}
        }
    }

    fn crate_gemm<T: blas::Element>(&self) {
        let blas::Product { m, n, k, a: (a_rs, a_cs), b: (b_rs, b_cs), c: (o_rs, o_cs) } = self.product;
        let [(ptr_a, a_off, a_bs), (ptr_b, b_off, b_bs), (ptr_o, o_off, o_bs)] = self.ops;
        let big = m * n * k > 64 * 64 * 64;
        let threads = crate::parallel::threads() as i64;
        let on_team = self.batch * m * n * k > 64 * 64 * 64 && threads > 1 && crate::parallel::on_openmp();
        let par = if big && !on_team { Parallelism::Rayon(threads as usize) } else { Parallelism::None };
        // Each thread packs all of the operand its block does not split: a
        // block of rows reads all of `b`, a block of columns all of `a`. So
        // the threads split the longer side: an 8×1024 by 1024×4096 product
        // split by rows packed `b` (16 MiB) once per thread and took 6.6 ms,
        // split by columns 3.8 ms (MKL: 1.0 ms, and [`choice`] gives it MKL).
        let by_cols = n > m;
        let side = if by_cols { n } else { m };
        let blocks = if on_team && self.batch < threads { threads.min(side.max(1)) } else { 1 };
        let per_block = (side + blocks - 1) / blocks.max(1);
        let size = std::mem::size_of::<T>() as i64;
        let scale = T::from_f64(self.scale);
        let unit = |u: usize| {
            let (bi, block) = (u as i64 / blocks, u as i64 % blocks);
            let lo = block * per_block;
            let len = (side - lo).min(per_block);
            if len <= 0 {
                return;
            }
            let (r0, rows, c_lo, c_hi) = if by_cols { (0, m, lo, lo + len) } else { (lo, len, 0, n) };
            for c0 in (c_lo..c_hi).step_by(GEMM_COLS as usize) {
                let cols = (c_hi - c0).min(GEMM_COLS);
                let oa = element(ptr_a, a_off + bi * a_bs + r0 * a_rs, size);
                let ob = element(ptr_b, b_off + bi * b_bs + c0 * b_cs, size);
                let oo = element(ptr_o, o_off + bi * o_bs + r0 * o_rs + c0 * o_cs, size);
                // SAFETY: pointers and strides describe live buffers of this
                // call whose layouts the guards checked; units write
                // disjoint blocks of the output, calls disjoint columns.
                unsafe {
                    gemm::gemm::<T>(
                        rows as usize,
                        cols as usize,
                        k as usize,
                        oo as *mut T,
                        o_cs as isize,
                        o_rs as isize,
                        false,
                        oa as *const T,
                        a_cs as isize,
                        a_rs as isize,
                        ob as *const T,
                        b_cs as isize,
                        b_rs as isize,
                        T::ZERO,
                        scale,
                        false,
                        false,
                        false,
                        par,
                    );
                }
            }
        };
        let units = (self.batch * blocks) as usize;
        if on_team {
            crate::parallel::for_each(units, &unit);
        } else {
            (0..units).for_each(unit);
        }
    }
}

/// The address of the element `index` elements of `size` bytes from `ptr`.
fn element(ptr: usize, index: i64, size: i64) -> usize {
    (ptr as i64 + index * size) as usize
}
