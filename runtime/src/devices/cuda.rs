//! The CUDA device: rdyn's PTX modules loaded with cudarc and launched on
//! PyTorch's context and current stream.
//!
//! Every kernel of a program is generated as PTX when the graph is compiled
//! (no GPU needed for that: `rdyn.explain(..., device="cuda")` shows it).
//! A kernel the generator cannot express (float64 transcendentals, symbolic
//! sizes) raises `RuntimeError::Unsupported` → Python `NotImplementedError` →
//! the graph runs eagerly, counted as fallback nodes.
//! GEMM steps are cuBLAS calls (`cuda/cublas.rs`); eager and library steps
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
//! `rdyn_ptx_sim` on CPU tensors (`cuda_sim.rs`).
//!
//! The driver is loaded at run time: with no driver the first call says
//! "CUDA not available" as a normal error (cudarc would panic if called
//! blindly).

mod cublas;

use std::ffi::{c_void, CString};
use std::sync::{Arc, OnceLock};

use cudarc::driver::{result, sys};
use rdyn_codegen_cuda::gemm::{GemmCall, Layout};
use rdyn_codegen_cuda::{kernel_ptx, IndexChecks, PtxError, PtxKernel};
use rdyn_ir::loops::{BufId, ExternKind, Program, Step};
use rdyn_ir::Ctx;
use rdyn_memplan::{resolve_views, MemPlan, Storage};

use crate::device::{extern_call_text, Call, Caps, Device, DevicePlan, Purpose, StepText};
use crate::host::Host;
use crate::RuntimeError;

/// The CUDA device, with how its kernels check indices and whether its
/// GEMMs are cuBLAS calls rdyn plans (else ATen library calls).
pub struct Cuda {
    pub index_checks: IndexChecks,
    pub cublas: bool,
}

/// What CUDA and the simulated CUDA device can do.
pub(crate) fn cuda_caps(cublas: bool, cuda_tensors: bool) -> Caps {
    Caps {
        gemm_steps: cublas,
        cpu_kernels: false,
        opmath_scalars: true,
        specialize_up_to: Some(crate::compiled::MAX_CUDA_SPECIALIZATIONS),
        cuda_tensors,
        input_versions: false,
    }
}

impl Device for Cuda {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn caps(&self) -> Caps {
        cuda_caps(self.cublas, true)
    }

    fn plan(
        &self,
        program: &Program,
        mem: &Arc<MemPlan>,
        syms: &Ctx,
        _purpose: Purpose,
    ) -> Result<Box<dyn DevicePlan>, RuntimeError> {
        let program = plan_cuda(program, mem, syms, self.index_checks)?;
        Ok(Box::new(CudaPlan { program, functions: OnceLock::new() }))
    }
}

/// One step of a CUDA program.
pub enum CudaStep {
    /// A generated kernel.
    Kernel(PtxKernel),
    /// An eager or library call, run by the host on CUDA tensors.
    Host { node: u32, target: String, fallback: bool, inputs: Vec<BufId>, outputs: Vec<BufId> },
    /// A GEMM step, one cuBLAS call (emulated by the simulator).
    Gemm { call: GemmCall, a: BufId, b: BufId, out: BufId },
}

/// A program's CUDA form, run on a GPU or by the simulator.
pub struct CudaProgram {
    pub steps: Vec<CudaStep>,
    /// Some kernel can set the error flag (then each call reads it back).
    pub(crate) checks_errors: bool,
}

/// A program planned for a GPU.
pub struct CudaPlan {
    pub program: CudaProgram,
    /// The loaded function of each kernel step, on first use.
    functions: OnceLock<Result<Vec<Option<usize>>, String>>,
}

impl DevicePlan for CudaPlan {
    fn ready(&self) -> Result<(), RuntimeError> {
        available()
    }

    fn host_arena(&self) -> bool {
        false
    }

    fn run(&self, mem: &MemPlan, call: &mut Call<'_>) -> Result<(), RuntimeError> {
        execute_cuda(self, mem, call.host, call.ptrs)
    }

    fn describe(&self, mem: &MemPlan) -> Vec<StepText> {
        self.program.describe(mem, "cuda")
    }
}

impl CudaProgram {
    /// Each step's text: a kernel's PTX, a GEMM's cuBLAS call, a host call
    /// (on `device`'s tensors).
    pub(crate) fn describe(&self, mem: &MemPlan, device: &'static str) -> Vec<StepText> {
        let text = |step: &CudaStep| match step {
            CudaStep::Kernel(k) => StepText { name: k.name.clone(), device: "cuda", source: k.source.clone() },
            CudaStep::Gemm { call, a, b, out } => {
                StepText { name: "gemm".into(), device: "cuda", source: format!("cuBLAS: {out} = {a} @ {b}\n{call}") }
            }
            CudaStep::Host { target, fallback, inputs, outputs, .. } => {
                extern_call_text(target, *fallback, inputs, outputs, &mem.buffers, device)
            }
        };
        self.steps.iter().map(text).collect()
    }
}

/// The PTX for every kernel of `program`; extern steps run on the host.
pub(crate) fn plan_cuda(
    program: &Program,
    mem: &MemPlan,
    syms: &Ctx,
    checks: IndexChecks,
) -> Result<CudaProgram, RuntimeError> {
    let mut steps = Vec::new();
    let mut kernel_index = 0;
    for step in &program.steps {
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
                ExternKind::Gemm { scale_bits } => steps.push(gemm_step(mem, e, f64::from_bits(*scale_bits))?),
                ExternKind::Library { node, target } | ExternKind::Fallback { node, target } => {
                    steps.push(CudaStep::Host {
                        node: *node,
                        target: target.clone(),
                        fallback: matches!(e.kind, ExternKind::Fallback { .. }),
                        inputs: e.inputs.clone(),
                        outputs: e.outputs.clone(),
                    })
                }
                other => {
                    return Err(RuntimeError::Internal(format!("a CPU kernel in a CUDA program: {other:?}")));
                }
            },
        }
    }
    let checks_errors = steps.iter().any(|s| matches!(s, CudaStep::Kernel(k) if k.error_flag));
    Ok(CudaProgram { steps, checks_errors })
}

/// A GEMM step's cuBLAS call, from its buffers' planned layouts.
fn gemm_step(mem: &MemPlan, e: &rdyn_ir::loops::Extern, scale: f64) -> Result<CudaStep, RuntimeError> {
    let (a, b, out) = (e.inputs[0], e.inputs[1], e.outputs[0]);
    let layout = |buf: BufId| {
        let p = &mem.buffers[buf.0 as usize];
        Layout { dtype: p.dtype, sizes: &p.sizes, strides: &p.strides }
    };
    let call = GemmCall::new(layout(a), layout(b), layout(out), scale)
        .map_err(|why| RuntimeError::Internal(format!("no cuBLAS call for a GEMM step: {why}")))?;
    Ok(CudaStep::Gemm { call, a, b, out })
}

/// The address of a buffer's first element (`ptrs` holds storage bases).
pub(crate) fn first_element(mem: &MemPlan, ptrs: &[usize], buf: BufId) -> usize {
    let p = &mem.buffers[buf.0 as usize];
    (ptrs[buf.0 as usize] as isize + p.offset as isize * p.dtype.itemsize() as isize) as usize
}

/// The process's CUDA driver state: PyTorch's primary context on device 0.
struct Driver {
    ctx: usize,
}

static CUDA: OnceLock<Result<Driver, String>> = OnceLock::new();

fn cuda() -> Result<&'static Driver, RuntimeError> {
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
        Ok(Driver { ctx: ctx as usize })
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
fn load(plan: &CudaProgram) -> Result<Vec<Option<usize>>, String> {
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
fn execute_cuda(plan: &CudaPlan, mem: &MemPlan, host: &mut dyn Host, ptrs: &mut [usize]) -> Result<(), RuntimeError> {
    let cuda = cuda()?;
    // SAFETY: the context was retained in `cuda()` and is never released.
    unsafe { result::ctx::set_current(cuda.ctx as sys::CUcontext) }.map_err(|e| driver("set context", e))?;
    let functions =
        plan.functions.get_or_init(|| load(&plan.program)).as_ref().map_err(|e| RuntimeError::Internal(e.clone()))?;
    let plan = &plan.program;
    let stream = host.cuda_stream()? as sys::CUstream;
    // One scratch allocation: the arena, then the error flag; none when
    // the program has neither (a call then makes no allocation of its own).
    let arena = scratch_arena(mem);
    let flag = if arena == 0 && !plan.checks_errors {
        0
    } else {
        let scratch = host.alloc_device(arena + 256)?;
        place_scratch(mem, scratch, ptrs);
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
            (CudaStep::Host { node, inputs, outputs, .. }, _) => {
                run_host_step(mem, *node, inputs, outputs, host, ptrs)?
            }
            (CudaStep::Gemm { call, a, b, out }, _) => {
                let at = |buf| first_element(mem, ptrs, buf);
                // SAFETY: the buffers are live device buffers of the
                // planned layouts (inputs checked by the guards; the rest
                // allocated for this call), kept until the call returns.
                unsafe { cublas::gemm(call, [at(*a), at(*b)], at(*out), stream as usize)? }
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
pub(crate) fn scratch_arena(mem: &MemPlan) -> usize {
    mem.arena_bytes.div_ceil(256) * 256
}

/// Point the arena buffers (and views of them) into scratch at `base`.
pub(crate) fn place_scratch(mem: &MemPlan, base: usize, ptrs: &mut [usize]) {
    for (k, buf) in mem.buffers.iter().enumerate() {
        if let Storage::Arena(offset) = buf.storage {
            ptrs[k] = base + offset;
        }
    }
    resolve_views(&mem.buffers, ptrs);
}

/// An eager or library call, run by the host.
pub(crate) fn run_host_step(
    mem: &MemPlan,
    node: u32,
    inputs: &[BufId],
    outputs: &[BufId],
    host: &mut dyn Host,
    ptrs: &mut [usize],
) -> Result<(), RuntimeError> {
    host.run_node(node, inputs, outputs, &mem.buffers, ptrs)?;
    resolve_views(&mem.buffers, ptrs);
    Ok(())
}

pub(crate) fn error_raised() -> RuntimeError {
    RuntimeError::Kernel("a CUDA kernel read an index out of range or divided an integer by zero".into())
}
