//! The device layer: what every device provides, and what a compiled graph
//! asks of it.
//!
//! A [`Device`] says what it can do ([`Caps`]: what lowering may emit for it,
//! whether its graphs have a shape-generic program, where tensors live) and
//! plans a lowered program over its memory plan into a [`DevicePlan`], which
//! runs a call and describes its steps (one renderer for `explain()`, logs
//! and profiles). `devices::by_name` is the one place a device name is
//! matched; adding a device is one file under `devices/` plus its code
//! generator.
//!
//! Invariant: planning for a device builds only that device's code (a test
//! pins that a CUDA or wgpu specialization plans no CPU kernel and compiles
//! no Cranelift code, except the steps wgpu hands to the CPU).

use std::sync::Arc;

use rdyn_ir::loops::{BufId, Program};
use rdyn_ir::Ctx;
use rdyn_lowering::LowerOptions;
use rdyn_memplan::{BufPlan, MemPlan};

use crate::guard::CallArg;
use crate::host::Host;
use crate::RuntimeError;

/// What a device can do, as the compiler and the runtime need to know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// GEMMs are GEMM steps the device runs itself (cuBLAS on CUDA);
    /// otherwise, on CUDA, ATen library calls.
    pub gemm_steps: bool,
    /// rdyn's CPU-only kernels (scan, sort, search, depthwise convolution)
    /// may be planned.
    pub cpu_kernels: bool,
    /// Binary ops read a Python float operand of a half-precision tensor in
    /// float32 (ATen's CUDA convention).
    pub opmath_scalars: bool,
    /// Kernels need concrete sizes: no shape-generic program, graphs keep
    /// specializing up to this many shapes (then run eagerly). `None`: past
    /// `compiled::MAX_SPECIALIZATIONS`, calls run the shape-generic program
    /// on the CPU.
    pub specialize_up_to: Option<usize>,
    /// The graph's tensors are CUDA tensors (the host allocates there, and
    /// library calls run there).
    pub cuda_tensors: bool,
    /// Calls read inputs' version counters (a device that keeps copies of
    /// unchanged inputs).
    pub input_versions: bool,
}

impl Caps {
    /// The options lowering takes for this device.
    pub fn lower_options(&self, piecewise_min: i64) -> LowerOptions {
        LowerOptions {
            cublas: self.gemm_steps,
            cpu_kernels: self.cpu_kernels,
            piecewise_min,
            split_reduce: self.cpu_kernels && env_on("RDYN_SPLIT_REDUCE"),
            host_partials: self.cpu_kernels && env_on("RDYN_HOST_PARTIALS"),
            conv_backward_channels_last: self.cpu_kernels && env_on("RDYN_CONV_LAYOUT"),
            relayout: self.cpu_kernels && env_on("RDYN_RELAYOUT"),
            opmath_scalars: self.opmath_scalars,
        }
    }
}

/// Whether the switch `name` is on: unset, or anything but `0`. Read at each
/// compile, so a benchmark can compare both in one process:
/// `RDYN_SPLIT_REDUCE=0` keeps narrow column reductions whole on the CPU,
/// `RDYN_HOST_PARTIALS=0` keeps their partials out of the row kernels
/// (`lowering`'s `split_reduce` and `host_partials`), `RDYN_CONV_LAYOUT=0`
/// runs convolution backwards as eager lays them out
/// (`conv_backward_channels_last`; `backend.py` then keeps saved
/// activations in eager's layout too), `RDYN_RELAYOUT=0` computes every
/// stage in its store's layout (`relayout`).
fn env_on(name: &str) -> bool {
    std::env::var(name).map_or(true, |v| v != "0")
}

/// Why a program is planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// To run: the device is opened.
    Run,
    /// To describe (`explain()`): code is generated and validated, no
    /// device is opened, so a machine without the device can show it.
    Describe,
}

/// A device rdyn generates code for.
pub trait Device: Send + Sync {
    /// The name `options={"device": ...}` takes.
    fn name(&self) -> &'static str;
    fn caps(&self) -> Caps;
    /// Plan `program`, whose buffers `mem` placed, with these symbol values.
    fn plan(
        &self,
        program: &Program,
        mem: &Arc<MemPlan>,
        syms: &Ctx,
        purpose: Purpose,
    ) -> Result<Box<dyn DevicePlan>, RuntimeError>;
}

/// One call's state as a device plan sees it.
pub struct Call<'a> {
    pub args: &'a [CallArg],
    pub host: &'a mut dyn Host,
    /// Each buffer's address: inputs, host tensors, the arena's blocks
    /// (for devices with a host arena) and views.
    pub ptrs: &'a mut [usize],
    /// The arena already holds the values of the input-free steps
    /// ([`MemPlan::once`]) and every kept tensor came back with them.
    pub skip_once: bool,
}

/// A program planned for one device.
pub trait DevicePlan: Send + Sync {
    /// Whether the device can run now (checked before any output is
    /// allocated on a device that may be missing).
    fn ready(&self) -> Result<(), RuntimeError> {
        Ok(())
    }
    /// Whether temporaries live in a host arena the runtime provides
    /// (otherwise the device places its own scratch).
    fn host_arena(&self) -> bool {
        true
    }
    /// Whether a successful run leaves the arena holding the input-free
    /// steps' values (so a later call with it may skip them).
    fn fills_once(&self) -> bool {
        false
    }
    /// Run every step of a call.
    fn run(&self, mem: &MemPlan, call: &mut Call<'_>) -> Result<(), RuntimeError>;
    /// Each step as `explain()` shows it.
    fn describe(&self, mem: &MemPlan) -> Vec<StepText>;
}

/// A step as text: its name, where it runs, and its source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepText {
    pub name: String,
    pub device: &'static str,
    pub source: String,
}

/// A library or eager call's text (ATen, on `device`): each tensor with its
/// layout, since a library call's inputs may be laid out for it
/// (channels-last).
pub fn extern_call_text(
    target: &str,
    fallback: bool,
    inputs: &[BufId],
    outputs: &[BufId],
    bufs: &[BufPlan],
    device: &'static str,
) -> StepText {
    let layout = |b: &BufId| {
        let plan = &bufs[b.0 as usize];
        format!("{b} {:?} strides {:?}", plan.sizes, plan.strides)
    };
    let list = |ids: &[BufId]| ids.iter().map(layout).collect::<Vec<_>>().join(", ");
    StepText {
        name: if fallback { "fallback" } else { "library" }.into(),
        device,
        source: format!(
            "{} {target} (ATen)\n  in: {}\n  out: {}\n",
            if fallback { "eager fallback" } else { "library call" },
            list(inputs),
            list(outputs)
        ),
    }
}
