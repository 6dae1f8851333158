//! The CUDA device: rdyn's PTX modules loaded with cudarc and launched on
//! PyTorch's context and current stream.
//!
//! Every kernel of a program is generated as PTX when the graph is compiled
//! (no GPU needed for that: `rdyn.explain(..., device="cuda")` shows it).
//! A kernel the generator cannot express (float64 transcendentals, symbolic
//! sizes) raises `RuntimeError::Unsupported` → Python `NotImplementedError` →
//! the graph runs eagerly, counted as fallback nodes.
//! GEMM steps are cuBLAS calls (`cublas.rs`); eager and library steps
//! (convolution) run through the host on CUDA tensors. Scratch buffers live in one
//! allocation from PyTorch's caching allocator per call (none when a program has
//! no scratch and no error flag); outputs are torch
//! tensors the host allocates on the device.
//!
//! Which graphs get here is the Python backend's decision
//! (`python/rdyn/backend.py`): CUDA tensors compile for CUDA by themselves; the
//! device is read off the inputs and off every value the graph makes, so a graph
//! with no tensor inputs (`torch.arange(n, device="cuda")`) runs on CUDA, and one
//! mixing CPU and CUDA tensors (moving a CPU input to the GPU) runs eagerly, as
//! do graphs on a CUDA device other than 0 and graphs with constants off the GPU.
//!
//! Index checks (`rdyn_codegen_cuda::IndexChecks`): by default an index out of
//! range makes the kernel execute `trap`, as eager's and Inductor's device-side
//! asserts do, so the failure surfaces at the next synchronisation and no call
//! waits for the GPU; integer division by zero is then unchecked, as in eager's
//! CUDA kernels. With `index_checks="sync"` the kernels set an error flag in the
//! scratch allocation instead, read back after every call of a program that can
//! set it (one stream synchronisation), and the call raises `IndexError`, for
//! division by zero too. The `cuda-sim` device runs the same programs through
//! `rdyn_ptx_sim` on CPU tensors.
//!
//! The driver is loaded at run time: with no driver the first call says
//! "CUDA not available" as a normal error (cudarc would panic if called
//! blindly).

use std::ffi::{c_void, CString};
use std::sync::{Arc, OnceLock};

use cudarc::driver::{result, sys};
use rdyn_codegen_cpu::plan::{CpuProgram, CpuStep, Storage};
use rdyn_codegen_cuda::gemm::{GemmCall, Layout};
use rdyn_codegen_cuda::{kernel_ptx, IndexChecks, PtxError, PtxKernel};
use rdyn_ir::loops::{BufId, ExternKind, Program, Step};
use rdyn_ir::Ctx;
use rdyn_ptx_sim as sim;

use crate::compiled::Host;
use crate::RuntimeError;

/// One step of a CUDA program.
pub enum CudaStep {
    /// A generated kernel.
    Kernel(PtxKernel),
    /// Step `n` of the CPU plan, run by the host (an eager or library call).
    Host(usize),
    /// A GEMM step, one cuBLAS call (emulated by the simulator).
    Gemm { call: GemmCall, a: BufId, b: BufId, out: BufId },
}

/// A program's CUDA form.
pub struct CudaPlan {
    pub cpu: Arc<CpuProgram>,
    pub steps: Vec<CudaStep>,
    /// Some kernel can set the error flag (then each call reads it back).
    checks_errors: bool,
    /// Run by the PTX simulator on host memory, not on a GPU.
    pub simulated: bool,
    /// The loaded function of each kernel step, on first use.
    functions: OnceLock<Result<Vec<Option<usize>>, String>>,
    /// Each kernel step decoded for the simulator, on first use.
    decoded: OnceLock<Result<Vec<Option<sim::Kernel>>, String>>,
}

/// The PTX for every kernel of `program`; extern steps run on the host.
pub fn plan_cuda(
    program: &Program,
    cpu: Arc<CpuProgram>,
    syms: &Ctx,
    simulated: bool,
    checks: IndexChecks,
) -> Result<CudaPlan, RuntimeError> {
    let mut steps = Vec::new();
    let mut kernel_index = 0;
    for (i, step) in program.steps.iter().enumerate() {
        match step {
            Step::Kernel(k) => {
                let kernel = kernel_ptx(program, k, syms, format!("k{kernel_index}"), checks).map_err(|e| match e {
                    PtxError::Unsupported(why) => RuntimeError::Unsupported(format!("kernel k{kernel_index}: {why}")),
                    other => RuntimeError::Internal(other.to_string()),
                })?;
                kernel_index += 1;
                steps.push(CudaStep::Kernel(kernel));
            }
            Step::Extern(e) => match &e.kind {
                ExternKind::Gemm { scale_bits } => steps.push(gemm_step(&cpu, e, f64::from_bits(*scale_bits))?),
                _ => steps.push(CudaStep::Host(i)),
            },
        }
    }
    let checks_errors = steps.iter().any(|s| matches!(s, CudaStep::Kernel(k) if k.error_flag));
    Ok(CudaPlan { cpu, steps, checks_errors, simulated, functions: OnceLock::new(), decoded: OnceLock::new() })
}

/// A GEMM step's cuBLAS call, from its buffers' planned layouts.
fn gemm_step(cpu: &CpuProgram, e: &rdyn_ir::loops::Extern, scale: f64) -> Result<CudaStep, RuntimeError> {
    let (a, b, out) = (e.inputs[0], e.inputs[1], e.outputs[0]);
    let layout = |buf: BufId| {
        let p = &cpu.buffers[buf.0 as usize];
        Layout { dtype: p.dtype, sizes: &p.sizes, strides: &p.strides }
    };
    let call = GemmCall::new(layout(a), layout(b), layout(out), scale)
        .map_err(|why| RuntimeError::Internal(format!("no cuBLAS call for a GEMM step: {why}")))?;
    Ok(CudaStep::Gemm { call, a, b, out })
}

/// The address of a buffer's first element (`ptrs` holds storage bases).
fn first_element(cpu: &CpuProgram, ptrs: &[usize], buf: BufId) -> usize {
    let p = &cpu.buffers[buf.0 as usize];
    (ptrs[buf.0 as usize] as isize + p.offset as isize * p.dtype.itemsize() as isize) as usize
}

/// The process's CUDA driver state: PyTorch's primary context on device 0.
struct Cuda {
    ctx: usize,
}

static CUDA: OnceLock<Result<Cuda, String>> = OnceLock::new();

fn cuda() -> Result<&'static Cuda, RuntimeError> {
    let state = CUDA.get_or_init(|| {
        // SAFETY: only probes for the driver library; nothing is called
        // through it when it is absent.
        if !unsafe { sys::is_culib_present() } {
            return Err("CUDA not available: no NVIDIA driver (libcuda) was found on this machine".into());
        }
        result::init().map_err(|e| format!("CUDA not available: cuInit failed: {e}"))?;
        let dev = result::device::get(0).map_err(|e| format!("CUDA not available: no device 0: {e}"))?;
        // SAFETY: `dev` is a valid device handle; the primary context is
        // the one PyTorch uses and stays retained for the process.
        let ctx = unsafe { result::primary_ctx::retain(dev) }.map_err(|e| format!("CUDA context: {e}"))?;
        Ok(Cuda { ctx: ctx as usize })
    });
    state.as_ref().map_err(|e| RuntimeError::Unavailable(e.clone()))
}

/// Whether CUDA can run here (the driver loads and device 0 opens).
pub fn available() -> Result<(), RuntimeError> {
    cuda().map(|_| ())
}

fn driver(what: &str, e: result::DriverError) -> RuntimeError {
    RuntimeError::Internal(format!("CUDA {what}: {e}"))
}

/// Load each kernel's module once; the function handles (as addresses).
fn load(plan: &CudaPlan) -> Result<Vec<Option<usize>>, String> {
    let mut out = Vec::new();
    for step in &plan.steps {
        let CudaStep::Kernel(k) = step else {
            out.push(None);
            continue;
        };
        let image = CString::new(k.source.as_str()).map_err(|e| e.to_string())?;
        // SAFETY: `image` is a NUL-terminated PTX module; the module stays
        // loaded for the process (its functions are cached in the plan).
        let func = unsafe {
            let module = result::module::load_data(image.as_ptr() as *const c_void)
                .map_err(|e| format!("loading PTX of {}: {e}", k.name))?;
            result::module::get_function(module, CString::new(k.name.as_str()).map_err(|e| e.to_string())?)
                .map_err(|e| format!("function {}: {e}", k.name))?
        };
        out.push(Some(func as usize));
    }
    Ok(out)
}

/// Run a CUDA program. `ptrs` holds every buffer's device address (inputs
/// and host-allocated outputs); scratch buffers are placed here.
pub fn execute_cuda(plan: &CudaPlan, host: &mut dyn Host, ptrs: &mut [usize]) -> Result<(), RuntimeError> {
    if plan.simulated {
        return execute_simulated(plan, host, ptrs);
    }
    let cuda = cuda()?;
    // SAFETY: the context was retained in `cuda()` and is never released.
    unsafe { result::ctx::set_current(cuda.ctx as sys::CUcontext) }.map_err(|e| driver("set context", e))?;
    let functions =
        plan.functions.get_or_init(|| load(plan)).as_ref().map_err(|e| RuntimeError::Internal(e.clone()))?;
    let stream = host.cuda_stream()? as sys::CUstream;
    // One scratch allocation: the arena, then the error flag; none when
    // the program has neither (a call then makes no allocation of its own).
    let arena = scratch_arena(plan);
    let flag = if arena == 0 && !plan.checks_errors {
        0
    } else {
        let scratch = host.alloc_device(arena + 256)?;
        place_scratch(plan, scratch, ptrs);
        scratch + arena
    };
    if plan.checks_errors {
        // SAFETY: `flag` is 4 bytes inside the scratch allocation.
        unsafe { result::memset_d8_async(flag as sys::CUdeviceptr, 0, 4, stream) }.map_err(|e| driver("memset", e))?;
    }
    for (step, func) in plan.steps.iter().zip(functions) {
        match (step, func) {
            (CudaStep::Kernel(k), Some(func)) => {
                let mut values: Vec<u64> = k.params.iter().map(|b| ptrs[b.0 as usize] as u64).collect();
                values.push(flag as u64);
                let mut params: Vec<*mut c_void> = values.iter_mut().map(|v| v as *mut u64 as *mut c_void).collect();
                // SAFETY: the parameters are device addresses of live
                // buffers laid out as the kernel was generated for (the
                // guards checked the inputs), in the kernel's order.
                unsafe {
                    result::launch_kernel(
                        *func as sys::CUfunction,
                        (k.grid, 1, 1),
                        (k.block, 1, 1),
                        0,
                        stream,
                        &mut params,
                    )
                }
                .map_err(|e| driver(&format!("launch of {}", k.name), e))?;
            }
            (CudaStep::Host(i), _) => run_host_step(plan, *i, host, ptrs)?,
            (CudaStep::Gemm { call, a, b, out }, _) => {
                let at = |buf| first_element(&plan.cpu, ptrs, buf);
                // SAFETY: the buffers are live device buffers of the
                // planned layouts (inputs checked by the guards; the rest
                // allocated for this call), kept until the call returns.
                unsafe { crate::cublas::gemm(call, [at(*a), at(*b)], at(*out), stream as usize)? }
            }
            (CudaStep::Kernel(_), None) => return Err(RuntimeError::Internal("kernel without a function".into())),
        }
    }
    if plan.checks_errors {
        let mut value = [0u32; 1];
        // SAFETY: copies the 4-byte flag into `value`, then waits for it.
        unsafe {
            result::memcpy_dtoh_async(&mut value, flag as sys::CUdeviceptr, stream)
                .map_err(|e| driver("copy of the error flag", e))?;
            result::stream::synchronize(stream).map_err(|e| driver("stream sync", e))?;
        }
        if value[0] != 0 {
            return Err(error_raised());
        }
    }
    Ok(())
}

/// Bytes of a call's scratch arena (the error flag follows it).
fn scratch_arena(plan: &CudaPlan) -> usize {
    plan.cpu.arena_bytes.div_ceil(256) * 256
}

/// Point the arena buffers (and views of them) into scratch at `base`.
fn place_scratch(plan: &CudaPlan, base: usize, ptrs: &mut [usize]) {
    let bufs = &plan.cpu.buffers;
    for (k, buf) in bufs.iter().enumerate() {
        if let Storage::Arena(offset) = buf.storage {
            ptrs[k] = base + offset;
        }
    }
    rdyn_codegen_cpu::plan::resolve_views(bufs, ptrs);
}

/// Step `i` of the CPU plan, an eager or library call, run by the host.
fn run_host_step(plan: &CudaPlan, i: usize, host: &mut dyn Host, ptrs: &mut [usize]) -> Result<(), RuntimeError> {
    let bufs = &plan.cpu.buffers;
    match &plan.cpu.steps[i] {
        CpuStep::Host { node, inputs, outputs, .. } => {
            host.run_node(*node, inputs, outputs, bufs, ptrs)?;
            rdyn_codegen_cpu::plan::resolve_views(bufs, ptrs);
            Ok(())
        }
        _ => Err(RuntimeError::Internal("a CPU step in a CUDA program".into())),
    }
}

/// What a trapped kernel means, for the simulator's error (on a GPU the
/// driver reports the failure at the next synchronisation).
const TRAPPED: &str = "an index was out of range. On a GPU this surfaces at the next synchronisation as a CUDA \
error and leaves the CUDA context unusable, as eager's device-side asserts do; options={'index_checks': 'sync'} \
raises an IndexError at the call instead";

fn error_raised() -> RuntimeError {
    RuntimeError::Kernel("a CUDA kernel read an index out of range or divided an integer by zero".into())
}

/// Run a CUDA program's kernels in the PTX simulator, on host memory (the
/// `cuda-sim` device): the buffers are CPU tensors, the scratch arena and
/// the error flag a host allocation. Each launch may touch only the
/// program's buffers.
fn execute_simulated(plan: &CudaPlan, host: &mut dyn Host, ptrs: &mut [usize]) -> Result<(), RuntimeError> {
    let decoded = plan
        .decoded
        .get_or_init(|| {
            let kernel = |s: &CudaStep| match s {
                CudaStep::Kernel(k) => sim::parse(&k.source).map(Some).map_err(|e| e.to_string()),
                CudaStep::Host(_) | CudaStep::Gemm { .. } => Ok(None),
            };
            plan.steps.iter().map(kernel).collect()
        })
        .as_ref()
        .map_err(|e| RuntimeError::Internal(e.clone()))?;
    let bufs = &plan.cpu.buffers;
    let arena = scratch_arena(plan);
    let mut scratch = vec![0u64; (arena + 256) / 8];
    let base = scratch.as_mut_ptr() as usize;
    place_scratch(plan, base, ptrs);
    let flag = base + arena;
    for (step, kernel) in plan.steps.iter().zip(decoded) {
        match (step, kernel) {
            (CudaStep::Kernel(k), Some(kernel)) => {
                let mut memory = sim::Memory::new();
                for (buf, &ptr) in bufs.iter().zip(ptrs.iter()) {
                    let start = buf.offset.max(0) as usize * buf.dtype.itemsize();
                    if ptr != 0 {
                        memory.allow(ptr + start, buf.extent_bytes().saturating_sub(start));
                    }
                }
                memory.allow(flag, 4);
                let mut params: Vec<u64> = k.params.iter().map(|b| ptrs[b.0 as usize] as u64).collect();
                params.push(flag as u64);
                // SAFETY: every region is a live buffer of this call (torch
                // tensors the host holds, or `scratch`), and nothing else
                // touches them while the kernel runs.
                let t = unsafe { kernel.launch(k.grid, k.block, &params, &memory) }.map_err(|e| match e {
                    sim::SimError::Trap { .. } => RuntimeError::DeviceCheck(format!("simulated CUDA: {e}: {TRAPPED}")),
                    other => RuntimeError::Internal(format!("simulated CUDA: {other}")),
                })?;
                crate::stats::STATS.record_simulated(t.bytes_loaded, t.bytes_stored, t.instructions);
            }
            (CudaStep::Host(i), _) => run_host_step(plan, *i, host, ptrs)?,
            (CudaStep::Gemm { call, a, b, out }, _) => {
                let at = |buf| first_element(&plan.cpu, ptrs, buf);
                // SAFETY: the buffers are the call's host tensors and
                // scratch, of the planned layouts; nothing else runs.
                unsafe { call.emulate([at(*a), at(*b)], at(*out)) }
            }
            (CudaStep::Kernel(_), None) => return Err(RuntimeError::Internal("kernel without a decoding".into())),
        }
    }
    if plan.checks_errors && scratch[arena / 8] as u32 != 0 {
        return Err(error_raised());
    }
    Ok(())
}
