//! GEMM steps on CUDA through cuBLAS (cudarc's `cublas`), loaded at run time.
//!
//! One cuBLAS handle serves the process, on PyTorch's primary context; each
//! call sets it to PyTorch's current stream, so a GEMM is ordered with the
//! kernels around it. The call's arguments come from
//! [`rdyn_codegen_cuda::gemm::GemmCall`], made when the program is planned.
//! Float32 products use `CUBLAS_COMPUTE_32F` (full float32, no TF32, as
//! PyTorch's default `torch.backends.cuda.matmul.allow_tf32 = False`; with
//! TF32 allowed, eager is faster and less exact). The handle's workspace
//! is cuBLAS's own allocation, not PyTorch's caching allocator, so these
//! calls are not for CUDA-graph capture.

use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

use cudarc::cublas::{result, sys};
use rdyn_codegen_cuda::gemm::{GemmCall, Trans};
use rdyn_ir::DType;

use crate::RuntimeError;

/// The process's cuBLAS handle (its address), created on first use.
static HANDLE: OnceLock<Result<Mutex<usize>, String>> = OnceLock::new();

/// Whether the cuBLAS library loads here (CUDA 13's `libcublas.so.13`,
/// which PyTorch's CUDA 13 builds load, or CUDA 12's).
pub(crate) fn available() -> bool {
    // SAFETY: only probes for the library; nothing is called through it.
    unsafe { sys::is_culib_present() }
}

fn handle() -> Result<&'static Mutex<usize>, RuntimeError> {
    let state = HANDLE.get_or_init(|| {
        if !available() {
            return Err("cuBLAS not available: no libcublas was found (PyTorch's CUDA builds load it); \
options={'cuda_gemm': 'aten'} runs GEMMs through ATen instead"
                .into());
        }
        let handle = result::create_handle().map_err(|e| format!("cuBLAS handle: {e}"))?;
        Ok(Mutex::new(handle as usize))
    });
    state.as_ref().map_err(|e| RuntimeError::Unavailable(e.clone()))
}

fn data_type(dtype: DType) -> Result<sys::cudaDataType, RuntimeError> {
    Ok(match dtype {
        DType::F32 => sys::cudaDataType::CUDA_R_32F,
        DType::F64 => sys::cudaDataType::CUDA_R_64F,
        DType::F16 => sys::cudaDataType::CUDA_R_16F,
        DType::BF16 => sys::cudaDataType::CUDA_R_16BF,
        other => return Err(RuntimeError::Internal(format!("a cuBLAS GEMM on {other}"))),
    })
}

fn op(t: Trans) -> sys::cublasOperation_t {
    match t {
        Trans::N => sys::cublasOperation_t::CUBLAS_OP_N,
        Trans::T => sys::cublasOperation_t::CUBLAS_OP_T,
    }
}

/// Run `call` on `stream` (the current context must be PyTorch's):
/// `inputs` are the addresses of the step's `a` and `b` at their first
/// elements, `c` that of the result.
///
/// # Safety
/// The addresses must be device buffers of the layouts the call was made
/// from, live until the stream has run the call.
pub(crate) unsafe fn gemm(call: &GemmCall, inputs: [usize; 2], c: usize, stream: usize) -> Result<(), RuntimeError> {
    let compute = call.types().map_err(RuntimeError::Internal)?;
    let (alpha32, alpha64) = (call.alpha as f32, call.alpha);
    let (beta32, beta64) = (0f32, 0f64);
    let (alpha, beta, compute_type) = match compute {
        DType::F64 => (
            &alpha64 as *const f64 as *const c_void,
            &beta64 as *const f64 as *const c_void,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_64F,
        ),
        _ => (
            &alpha32 as *const f32 as *const c_void,
            &beta32 as *const f32 as *const c_void,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        ),
    };
    let int = |v: i64| v as std::ffi::c_int;
    let handle = handle()?.lock().map_err(|_| RuntimeError::Poisoned)?;
    let h = *handle as sys::cublasHandle_t;
    // SAFETY: `h` is the live handle (held under its lock for the whole
    // call); the buffers are the caller's; alpha and beta are host values
    // (cuBLAS's default pointer mode) that outlive the call's launch.
    unsafe {
        result::set_stream(h, stream as sys::cudaStream_t).map_err(|e| failed("cublasSetStream", e))?;
        result::gemm_strided_batched_ex(
            h,
            op(call.a.trans),
            op(call.b.trans),
            int(call.m),
            int(call.n),
            int(call.k),
            alpha,
            inputs[call.a.input] as *const c_void,
            data_type(call.a.dtype)?,
            int(call.a.ld),
            call.a.batch_stride,
            inputs[call.b.input] as *const c_void,
            data_type(call.b.dtype)?,
            int(call.b.ld),
            call.b.batch_stride,
            beta,
            c as *mut c_void,
            data_type(call.c_dtype)?,
            int(call.ldc),
            call.c_batch_stride,
            int(call.batch),
            compute_type,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
        )
        .map_err(|e| failed("cublasGemmStridedBatchedEx", e))
    }
}

fn failed(what: &str, e: result::CublasError) -> RuntimeError {
    RuntimeError::Internal(format!("{what} failed: {e}"))
}
