//! The CPU device: `rdyn_codegen_cpu`'s tiled kernels (Cranelift machine
//! code, or the tile interpreter), rdyn's own CPU kernels (GEMM, depthwise
//! convolution, scan, sort, search) and ATen calls through the host.
//!
//! The CPU is the one device with a shape-generic program, and the one whose
//! arena keeps the input-free steps' values between calls
//! (`MemPlan::once`). `RDYN_PROFILE=1` times every step (`stats.rs`).

use std::sync::Arc;
use std::time::Instant;

use rdyn_codegen_cpu::build::plan;
use rdyn_codegen_cpu::depthwise::run_depthwise;
use rdyn_codegen_cpu::exec::run_kernel;
use rdyn_codegen_cpu::gemm::run_gemm;
use rdyn_codegen_cpu::plan::{CpuProgram, CpuStep};
use rdyn_codegen_cpu::tile::Memory;
use rdyn_ir::loops::Program;
use rdyn_ir::Ctx;
use rdyn_memplan::{resolve_views, BufPlan, MemPlan};

/// The CPU's threads and BLAS, which the frontend wires to torch's own
/// (ATen's OpenMP team, its BLAS entry points).
pub use rdyn_codegen_cpu::blas::{batched as blas_batched, use_blas, BlasEntries};
pub use rdyn_codegen_cpu::gemm::choice::{measured as gemm_choices, set_measuring as measure_gemms};
pub use rdyn_codegen_cpu::parallel::{backend as thread_backend, threads, use_openmp, GompEntries};

use crate::device::{extern_call_text, Call, Caps, Device, DevicePlan, Purpose, StepText};
use crate::host::Host;
use crate::stats::{profiling, STATS};
use crate::RuntimeError;

/// The CPU device.
pub struct Cpu;

impl Device for Cpu {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn caps(&self) -> Caps {
        Caps {
            gemm_steps: false,
            cpu_kernels: true,
            opmath_scalars: false,
            specialize_up_to: None,
            cuda_tensors: false,
            input_versions: false,
        }
    }

    fn plan(
        &self,
        program: &Program,
        mem: &Arc<MemPlan>,
        syms: &Ctx,
        _purpose: Purpose,
    ) -> Result<Box<dyn DevicePlan>, RuntimeError> {
        Ok(Box::new(CpuPlan(plan(program, mem, syms)?)))
    }
}

/// A program planned for the CPU.
pub struct CpuPlan(pub CpuProgram);

impl DevicePlan for CpuPlan {
    fn fills_once(&self) -> bool {
        true
    }

    fn run(&self, mem: &MemPlan, call: &mut Call<'_>) -> Result<(), RuntimeError> {
        let profile = profiling();
        for (step, &once) in self.0.steps.iter().zip(&mem.once) {
            if once && call.skip_once {
                continue;
            }
            let start = profile.then(Instant::now);
            run_cpu_step(step, &mem.buffers, call.ptrs, call.host)?;
            if let Some(start) = start {
                // The time first: building the label is not the step's.
                let ns = start.elapsed().as_nanos() as u64;
                STATS.record_step(&step_label(step, &mem.buffers), ns);
            }
        }
        Ok(())
    }

    fn describe(&self, mem: &MemPlan) -> Vec<StepText> {
        self.0.steps.iter().map(|step| describe_cpu_step(step, &mem.buffers)).collect()
    }
}

/// Run one CPU step over the buffers at `ptrs` (the CPU device, and the
/// steps wgpu runs on the CPU).
pub(crate) fn run_cpu_step(
    step: &CpuStep,
    bufs: &[BufPlan],
    ptrs: &mut [usize],
    host: &mut dyn Host,
) -> Result<(), RuntimeError> {
    let mem = Memory { ptrs, bufs };
    match step {
        CpuStep::Kernel(kernel) => {
            if !run_kernel(kernel, &mem) {
                return Err(RuntimeError::Kernel(format!(
                    "kernel {} read an index out of range or divided an integer by zero",
                    kernel.name
                )));
            }
        }
        CpuStep::Gemm { a, b, out, scale } => run_gemm(*a, *b, *out, *scale, &mem)?,
        CpuStep::Depthwise { x, w, out, geometry } => run_depthwise(*x, *w, *out, geometry, &mem)?,
        CpuStep::DepthwiseWeightGrad { grad, x, out, geometry } => {
            rdyn_codegen_cpu::depthwise_grad::run_depthwise_weight_grad(*grad, *x, *out, geometry, &mem)?
        }
        CpuStep::Scan { op, dim, x, outs } => rdyn_codegen_cpu::scan::run_scan(*op, *dim, *x, outs, &mem)?,
        CpuStep::Sort { spec, x, outs } => rdyn_codegen_cpu::sort::run_sort(*spec, *x, outs, &mem)?,
        CpuStep::Search { right, seq, values, out } => {
            rdyn_codegen_cpu::search::run_search(*right, *seq, *values, *out, &mem)?
        }
        CpuStep::Host { node, inputs, outputs, .. } => {
            host.run_node(*node, inputs, outputs, bufs, ptrs)?;
            resolve_views(bufs, ptrs);
        }
    }
    Ok(())
}

fn joined(ids: &[rdyn_ir::loops::BufId]) -> String {
    ids.iter().map(|b| b.to_string()).collect::<Vec<_>>().join(", ")
}

/// A CPU step as `explain()` shows it.
pub(crate) fn describe_cpu_step(step: &CpuStep, bufs: &[BufPlan]) -> StepText {
    let text = |name: &str, source: String| StepText { name: name.into(), device: "cpu", source };
    match step {
        CpuStep::Kernel(k) => text(&k.name, CpuProgram::kernel_source(k)),
        CpuStep::Gemm { a, b, out, scale } => text(
            "gemm",
            format!(
                "gemm (torch's BLAS or the gemm crate): {out} = {}{a} @ {b}\n",
                if *scale == 1.0 { String::new() } else { format!("{scale} * ") }
            ),
        ),
        CpuStep::Scan { op, dim, x, outs } => {
            text("scan", format!("{op} (rdyn's scan kernel) along dim {dim}: {} = {op}({x})\n", joined(outs)))
        }
        CpuStep::Search { right, seq, values, out } => text(
            "searchsorted",
            format!(
                "searchsorted (rdyn's binary search kernel), {} side: {out} = searchsorted({seq}, {values})\n",
                if *right { "right" } else { "left" }
            ),
        ),
        CpuStep::Sort { spec, x, outs } => {
            text("sort", format!("{spec} (rdyn's sort kernel): {} = sort({x})\n", joined(outs)))
        }
        CpuStep::Depthwise { x, w, out, geometry } => text(
            "depthwise_conv2d",
            format!(
                "depthwise_conv2d (rdyn's kernel): {out} = conv({x}, {w}) stride {:?} padding {:?} dilation {:?}\n",
                geometry.stride, geometry.padding, geometry.dilation
            ),
        ),
        CpuStep::DepthwiseWeightGrad { grad, x, out, geometry } => text(
            "depthwise_weight_grad",
            format!(
                "depthwise_weight_grad (rdyn's kernel): {out} = dconv/dw({grad}, {x}) stride {:?} padding {:?} dilation {:?}\n",
                geometry.stride, geometry.padding, geometry.dilation
            ),
        ),
        CpuStep::Host { target, fallback, inputs, outputs, .. } => {
            extern_call_text(target, *fallback, inputs, outputs, bufs, "cpu")
        }
    }
}

/// How `RDYN_PROFILE` names a step: what it runs and on which sizes.
fn step_label(step: &CpuStep, bufs: &[BufPlan]) -> String {
    let sizes = |b: &rdyn_ir::loops::BufId| &bufs[b.0 as usize].sizes;
    match step {
        CpuStep::Kernel(k) => {
            let stages: Vec<String> = k.stages.iter().map(|s| s.summary()).collect();
            format!("kernel {:?} {:?} tile {} [{}]", k.outer, k.mode, k.tile, stages.join("; "))
        }
        CpuStep::Gemm { a, b, .. } => format!("gemm {:?} @ {:?}", sizes(a), sizes(b)),
        CpuStep::Scan { op, dim, x, .. } => format!("{op} dim {dim} {:?}", sizes(x)),
        CpuStep::Sort { spec, x, .. } => format!("{spec} {:?}", sizes(x)),
        CpuStep::Search { seq, values, .. } => format!("searchsorted {:?} in {:?}", sizes(values), sizes(seq)),
        CpuStep::Depthwise { x, w, .. } => format!("depthwise_conv2d {:?} * {:?}", sizes(x), sizes(w)),
        CpuStep::DepthwiseWeightGrad { grad, x, .. } => {
            format!("depthwise_weight_grad {:?} x {:?}", sizes(grad), sizes(x))
        }
        CpuStep::Host { target, inputs, .. } => {
            let all: Vec<_> = inputs.iter().map(sizes).collect();
            format!("{target} {all:?}")
        }
    }
}
