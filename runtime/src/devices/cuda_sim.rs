//! The `cuda-sim` device: CUDA's programs (the same PTX, the same cuBLAS
//! calls, emulated) run by the PTX simulator (`rdyn_ptx_sim`) on
//! CPU tensors, so the CUDA code generator is tested end to end on machines
//! without a GPU. The scratch arena and the error flag are one host
//! allocation per call; each launch may touch only the program's buffers.

use std::sync::{Arc, OnceLock};

use rdyn_codegen_cuda::IndexChecks;
use rdyn_ir::loops::Program;
use rdyn_ir::Ctx;
use rdyn_memplan::MemPlan;
use rdyn_ptx_sim as sim;

use crate::device::{Call, Caps, Device, DevicePlan, Purpose, StepText};
use crate::devices::cuda::{
    cuda_caps, error_raised, first_element, place_scratch, plan_cuda, run_host_step, scratch_arena, CudaProgram,
    CudaStep,
};
use crate::host::Host;
use crate::stats::STATS;
use crate::RuntimeError;

/// The simulated CUDA device.
pub struct CudaSim {
    pub index_checks: IndexChecks,
    pub cublas: bool,
}

impl Device for CudaSim {
    fn name(&self) -> &'static str {
        "cuda-sim"
    }

    fn caps(&self) -> Caps {
        cuda_caps(self.cublas, false)
    }

    fn plan(
        &self,
        program: &Program,
        mem: &Arc<MemPlan>,
        syms: &Ctx,
        _purpose: Purpose,
    ) -> Result<Box<dyn DevicePlan>, RuntimeError> {
        let program = plan_cuda(program, mem, syms, self.index_checks)?;
        Ok(Box::new(SimPlan { program, decoded: OnceLock::new() }))
    }
}

/// A CUDA program for the simulator.
pub struct SimPlan {
    pub program: CudaProgram,
    /// Each kernel step decoded for the simulator, on first use.
    decoded: OnceLock<Result<Vec<Option<sim::Kernel>>, String>>,
}

impl DevicePlan for SimPlan {
    fn host_arena(&self) -> bool {
        false
    }

    fn run(&self, mem: &MemPlan, call: &mut Call<'_>) -> Result<(), RuntimeError> {
        execute_simulated(self, mem, call.host, call.ptrs)
    }

    fn describe(&self, mem: &MemPlan) -> Vec<StepText> {
        // Host calls run on the simulator's CPU tensors.
        self.program.describe(mem, "cpu")
    }
}

/// What a trapped kernel means, for the simulator's error (on a GPU the
/// driver reports the failure at the next synchronisation).
const TRAPPED: &str = "an index was out of range. On a GPU this surfaces at the next synchronisation as a CUDA \
error and leaves the CUDA context unusable, as eager's device-side asserts do; options={'index_checks': 'sync'} \
raises an IndexError at the call instead";

/// Run a CUDA program's kernels in the PTX simulator, on host memory (the
/// `cuda-sim` device): the buffers are CPU tensors, the scratch arena and
/// the error flag a host allocation. Each launch may touch only the
/// program's buffers.
fn execute_simulated(
    plan: &SimPlan,
    mem: &MemPlan,
    host: &mut dyn Host,
    ptrs: &mut [usize],
) -> Result<(), RuntimeError> {
    let decoded = plan
        .decoded
        .get_or_init(|| {
            let kernel = |s: &CudaStep| match s {
                CudaStep::Kernel(k) => sim::parse(&k.source).map(Some).map_err(|e| e.to_string()),
                CudaStep::Host { .. } | CudaStep::Gemm { .. } => Ok(None),
            };
            plan.program.steps.iter().map(kernel).collect()
        })
        .as_ref()
        .map_err(|e| RuntimeError::Internal(e.clone()))?;
    let plan = &plan.program;
    let bufs = &mem.buffers;
    let arena = scratch_arena(mem);
    let mut scratch = vec![0u64; (arena + 256) / 8];
    let base = scratch.as_mut_ptr() as usize;
    place_scratch(mem, base, ptrs);
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
                STATS.record_simulated(t.bytes_loaded, t.bytes_stored, t.instructions);
            }
            (CudaStep::Host { node, inputs, outputs, .. }, _) => {
                run_host_step(mem, *node, inputs, outputs, host, ptrs)?
            }
            (CudaStep::Gemm { call, a, b, out }, _) => {
                let at = |buf| first_element(mem, ptrs, buf);
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
