//! Planning a program for the CPU: every kernel step through
//! `lower_kernel.rs` and the JIT, every extern step as its CPU step, over the
//! buffers the memory plan placed.

use std::sync::atomic::{AtomicU64, Ordering};

use rdyn_ir::loops::{ExternKind, Program, Step};
use rdyn_ir::Ctx;
use rdyn_memplan::MemPlan;

use crate::plan::{CpuProgram, CpuStep, Geometry};
use crate::CodegenError;

static KERNELS_PLANNED: AtomicU64 = AtomicU64::new(0);
static STAGES_COMPILED: AtomicU64 = AtomicU64::new(0);
static STAGES_INTERPRETED: AtomicU64 = AtomicU64::new(0);

/// What this process has planned for the CPU so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanCounts {
    /// Kernels planned (tests pin that a CUDA or wgpu specialization plans
    /// none of its own kernels for the CPU).
    pub kernels: u64,
    /// Stages compiled to machine code by the JIT.
    pub stages_compiled: u64,
    /// Stages left to the tile interpreter (blocked transposes, which run
    /// as native copies, are neither).
    pub stages_interpreted: u64,
}

/// The process's [`PlanCounts`].
pub fn plan_counts() -> PlanCounts {
    PlanCounts {
        kernels: KERNELS_PLANNED.load(Ordering::Relaxed),
        stages_compiled: STAGES_COMPILED.load(Ordering::Relaxed),
        stages_interpreted: STAGES_INTERPRETED.load(Ordering::Relaxed),
    }
}

/// Plan every step of `program` for the CPU, over `mem`'s buffers.
pub fn plan(program: &Program, mem: &MemPlan, syms: &Ctx) -> Result<CpuProgram, CodegenError> {
    let steps = plan_steps(program, mem, syms, |_| true)?.into_iter().map(|(_, step)| step).collect();
    Ok(CpuProgram { steps })
}

/// Plan the steps of `program` that `keep` selects (by step index), with
/// their indices; kernels keep their program-wide names (`k3`).
pub fn plan_steps(
    program: &Program,
    mem: &MemPlan,
    syms: &Ctx,
    keep: impl Fn(usize) -> bool,
) -> Result<Vec<(usize, CpuStep)>, CodegenError> {
    let buffers = &mem.buffers;
    let mut indices = Vec::new();
    let mut steps = Vec::new();
    let mut kernel_count = 0;
    for (i, step) in program.steps.iter().enumerate() {
        let name = format!("k{kernel_count}");
        kernel_count += matches!(step, Step::Kernel(_)) as usize;
        if !keep(i) {
            continue;
        }
        indices.push(i);
        steps.push(match step {
            Step::Kernel(kernel) => {
                KERNELS_PLANNED.fetch_add(1, Ordering::Relaxed);
                CpuStep::Kernel(crate::lower_kernel::kernel_plan(program, buffers, kernel, syms, name)?)
            }
            Step::Extern(ext) => extern_step(ext),
        });
    }
    crate::jit::compile_program(&mut steps, buffers);
    for step in &steps {
        let CpuStep::Kernel(kernel) = step else { continue };
        if kernel.transpose.is_some() {
            continue;
        }
        let compiled = kernel.stages.iter().filter(|s| s.jit.is_some()).count() as u64;
        STAGES_COMPILED.fetch_add(compiled, Ordering::Relaxed);
        STAGES_INTERPRETED.fetch_add(kernel.stages.len() as u64 - compiled, Ordering::Relaxed);
    }
    Ok(indices.into_iter().zip(steps).collect())
}

fn extern_step(ext: &rdyn_ir::loops::Extern) -> CpuStep {
    match &ext.kind {
        ExternKind::Gemm { scale_bits } => CpuStep::Gemm {
            a: ext.inputs[0],
            b: ext.inputs[1],
            out: ext.outputs[0],
            scale: f64::from_bits(*scale_bits),
        },
        ExternKind::DepthwiseConv2d { stride, padding, dilation } => CpuStep::Depthwise {
            x: ext.inputs[0],
            w: ext.inputs[1],
            out: ext.outputs[0],
            geometry: Geometry { stride: *stride, padding: *padding, dilation: *dilation },
        },
        ExternKind::DepthwiseWeightGrad { stride, padding, dilation } => CpuStep::DepthwiseWeightGrad {
            grad: ext.inputs[0],
            x: ext.inputs[1],
            out: ext.outputs[0],
            geometry: Geometry { stride: *stride, padding: *padding, dilation: *dilation },
        },
        ExternKind::Scan { op, dim } => {
            CpuStep::Scan { op: *op, dim: *dim, x: ext.inputs[0], outs: ext.outputs.clone() }
        }
        ExternKind::Sort(spec) => CpuStep::Sort { spec: *spec, x: ext.inputs[0], outs: ext.outputs.clone() },
        ExternKind::Search { right } => {
            CpuStep::Search { right: *right, seq: ext.inputs[0], values: ext.inputs[1], out: ext.outputs[0] }
        }
        ExternKind::Library { node, target } | ExternKind::Fallback { node, target } => CpuStep::Host {
            node: *node,
            target: target.clone(),
            fallback: matches!(ext.kind, ExternKind::Fallback { .. }),
            inputs: ext.inputs.clone(),
            outputs: ext.outputs.clone(),
        },
    }
}
