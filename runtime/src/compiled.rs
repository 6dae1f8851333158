//! A compiled graph: guards → cached specialization (or the shape-generic
//! program) → run.
//!
//! A specialization is the graph lowered with this call's symbol values
//! (`LowerOptions` per backend: cuBLAS GEMMs and `opmath_scalars` on CUDA,
//! rdyn's CPU-only kernels on the CPU, `RDYN_PIECEWISE_MIN`), planned for the
//! CPU (`rdyn_codegen_cpu::plan`: also the buffer layouts of the GPU devices,
//! and wgpu's fallback for steps without WGSL) and, for wgpu or CUDA, planned
//! for that device too (with `cuda_gemm="aten"`, CUDA GEMMs are ATen calls).
//! Execution (`execute`) runs the steps in order: kernels, GEMMs, rdyn's own
//! CPU kernels, and library and eager nodes through the [`Host`]. Temporaries
//! live in a per-call arena taken from a pool (`Storage::Kept` buffers and
//! input-free kernels: `rdyn_codegen_cpu::plan`). `RDYN_PROFILE=1` times every
//! CPU step (`stats.rs`).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use rdyn_codegen_cpu::depthwise::run_depthwise;
use rdyn_codegen_cpu::exec::{run_kernel, Memory};
use rdyn_codegen_cpu::gemm::run_gemm;
use rdyn_codegen_cpu::plan::{plan, resolve_views, BufPlan, CpuProgram, CpuStep, Storage};
use rdyn_ir::expr::Sym;
use rdyn_ir::graph::{Graph, Input};
use rdyn_ir::loops::{BufId, Program};
use rdyn_ir::op::Op;
use rdyn_ir::{Atom, Ctx, Expr};
use rdyn_lowering::{lower_with, InputLayout, LowerOptions, Lowered, NodeCounts};

use crate::guard::{CallArg, GuardKey};
use crate::stats::STATS;
use crate::RuntimeError;

/// How many specializations a graph keeps before using its generic program.
pub const MAX_SPECIALIZATIONS: usize = 8;
/// CUDA graphs have no generic program; they keep this many.
pub const MAX_CUDA_SPECIALIZATIONS: usize = 64;

/// What the runtime needs from its host (the Python frontend): torch-owned
/// memory and eager ATen calls.
pub trait Host {
    /// Allocate a tensor with this layout; return the address of its storage
    /// element 0.
    fn alloc(&mut self, buf: BufId, plan: &BufPlan) -> Result<usize, RuntimeError>;
    /// As `alloc`, for a buffer only library calls read ([`Storage::Pooled`]):
    /// the host may hand out a tensor of this layout kept from an earlier
    /// call.
    fn alloc_pooled(&mut self, buf: BufId, plan: &BufPlan) -> Result<usize, RuntimeError> {
        self.alloc(buf, plan)
    }
    /// As `alloc`, for a buffer input-free steps write ([`Storage::Kept`]):
    /// the host may hand back the tensor it kept for this buffer of the
    /// plan `owner` (its address; `None`: keep nothing) from an earlier,
    /// successful call. Returns the address and whether the tensor holds
    /// the steps' values.
    fn alloc_kept(&mut self, buf: BufId, plan: &BufPlan, _owner: Option<usize>) -> Result<(usize, bool), RuntimeError> {
        Ok((self.alloc(buf, plan)?, false))
    }
    /// Run graph node `node` eagerly on the given buffers; fill `ptrs` for
    /// its outputs.
    fn run_node(
        &mut self,
        node: u32,
        inputs: &[BufId],
        outputs: &[BufId],
        bufs: &[BufPlan],
        ptrs: &mut [usize],
    ) -> Result<(), RuntimeError>;
    /// The CUDA stream PyTorch is using (a `CUstream` address).
    fn cuda_stream(&mut self) -> Result<usize, RuntimeError> {
        Err(RuntimeError::Unavailable("CUDA not available in this host".into()))
    }
    /// Device scratch memory of `bytes` bytes, alive until the call ends.
    fn alloc_device(&mut self, _bytes: usize) -> Result<usize, RuntimeError> {
        Err(RuntimeError::Unavailable("CUDA not available in this host".into()))
    }
}

/// Where a graph's kernels run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Cpu,
    Wgpu,
    Cuda,
    /// CUDA's PTX run by the PTX simulator on CPU tensors (for testing the
    /// CUDA code generator without a GPU).
    CudaSim,
}

impl Backend {
    /// Whether graphs are generated as PTX.
    pub fn is_cuda(self) -> bool {
        matches!(self, Backend::Cuda | Backend::CudaSim)
    }
}

/// One cached specialization.
pub struct Specialization {
    pub key: Vec<i64>,
    pub program: Arc<Program>,
    pub plan: Arc<CpuProgram>,
    /// The wgpu plan, for graphs compiled for wgpu.
    pub wgpu: Option<crate::gpu::WgpuPlan>,
    /// The CUDA plan, for graphs compiled for CUDA.
    pub cuda: Option<crate::cuda::CudaPlan>,
    pub counts: NodeCounts,
    /// Arenas between calls, each with whether it holds the results of the
    /// plan's input-free steps (`CpuProgram::once`).
    arena_pool: Mutex<Vec<(Vec<u64>, bool)>>,
    inputs: crate::gpu::InputCache,
}

/// The shape-generic program: lowered once with symbolic sizes and strides,
/// planned per call.
struct Generic {
    program: Program,
    /// Symbol for (input, dim) strides, after the graph's own symbols.
    stride_syms: Vec<Vec<Sym>>,
}

/// A graph plus its specializations.
pub struct CompiledGraph {
    pub graph: Graph,
    pub backend: Backend,
    /// How CUDA kernels report an index out of range.
    pub index_checks: rdyn_codegen_cuda::IndexChecks,
    /// CUDA GEMMs run as cuBLAS calls rdyn plans (emulated on `cuda-sim`),
    /// else as ATen library calls.
    pub cublas: bool,
    guard_offsets: bool,
    specs: Mutex<Vec<Arc<Specialization>>>,
    generic: Mutex<Option<Arc<Generic>>>,
}

/// What one call ran.
#[derive(Clone)]
pub enum Selected {
    Spec(Arc<Specialization>),
    Generic(Arc<CpuProgram>),
}

impl Selected {
    pub fn plan(&self) -> &CpuProgram {
        match self {
            Selected::Spec(s) => &s.plan,
            Selected::Generic(p) => p,
        }
    }
}

impl CompiledGraph {
    pub fn new(graph: Graph, backend: Backend) -> CompiledGraph {
        let guard_offsets = graph.nodes.iter().any(|n| n.op == Op::AsStrided);
        STATS.graphs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        CompiledGraph {
            graph,
            backend,
            index_checks: Default::default(),
            cublas: true,
            guard_offsets,
            specs: Mutex::new(Vec::new()),
            generic: Mutex::new(None),
        }
    }

    pub fn specializations(&self) -> Vec<Arc<Specialization>> {
        self.specs.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Bind size symbols from the call and check static sizes and dtypes.
    fn bind(&self, args: &[CallArg]) -> Result<Ctx, RuntimeError> {
        if args.len() != self.graph.inputs.len() {
            return Err(RuntimeError::Input(format!(
                "the graph takes {} inputs but was called with {}",
                self.graph.inputs.len(),
                args.len()
            )));
        }
        let mut ctx = Ctx::default();
        for (k, (input, arg)) in self.graph.inputs.iter().zip(args).enumerate() {
            match (input, arg) {
                (Input::SymInt(sym), CallArg::Int(v)) => {
                    ctx.sym_values.insert(*sym, *v);
                }
                (Input::Tensor(v), CallArg::Tensor(t)) => {
                    let meta = self.graph.meta(*v);
                    if meta.dtype != t.dtype {
                        return Err(RuntimeError::Input(format!(
                            "input {k} has dtype {} but the graph was captured for {}; recompile with the new dtype",
                            t.dtype, meta.dtype
                        )));
                    }
                    if meta.sizes.len() != t.sizes.len() {
                        return Err(RuntimeError::Input(format!(
                            "input {k} has {} dims, the graph expects {}",
                            t.sizes.len(),
                            meta.sizes.len()
                        )));
                    }
                    for (size, actual) in meta.sizes.iter().zip(&t.sizes) {
                        if let [(Atom::Sym(s), 1)] = size.terms() {
                            if size.constant() == 0 {
                                ctx.sym_values.entry(*s).or_insert(*actual);
                            }
                        }
                    }
                }
                (Input::Opaque, _) => {}
                (_, _) => return Err(RuntimeError::Input(format!("input {k} has the wrong kind"))),
            }
        }
        // Symbols PyTorch defines from others (`Max(1, s0 - 2)`): computed
        // from their arguments, or checked where an input's size bound them.
        for derived in &self.graph.derived_syms {
            let Some(value) = derived.eval(&ctx) else { continue };
            let bound = *ctx.sym_values.entry(derived.sym).or_insert(value);
            if bound != value {
                return Err(RuntimeError::Input(format!(
                    "the inputs' sizes disagree: {} is {bound} by an input's size but {value} by its definition \
                     ({derived}); call torch.compile again with inputs of consistent shapes",
                    self.graph.sym_names.get(derived.sym.0 as usize).map_or("a size", String::as_str),
                )));
            }
        }
        // Check every size now that all symbols are bound.
        for (k, (input, arg)) in self.graph.inputs.iter().zip(args).enumerate() {
            if let (Input::Tensor(v), CallArg::Tensor(t)) = (input, arg) {
                let expected: Vec<Option<i64>> =
                    self.graph.meta(*v).sizes.iter().map(|s| s.simplify(&ctx).as_const()).collect();
                if expected.iter().zip(&t.sizes).any(|(e, a)| e.is_some_and(|e| e != *a)) {
                    return Err(RuntimeError::Input(format!(
                        "input {k} has shape {:?} but the graph was captured for {:?}; call torch.compile again (or use dynamic=True)",
                        t.sizes,
                        self.graph.meta(*v).sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>()
                    )));
                }
            }
        }
        Ok(ctx)
    }

    fn layouts(&self, args: &[CallArg]) -> Vec<Option<InputLayout>> {
        args.iter()
            .map(|a| match a {
                CallArg::Tensor(t) => Some(InputLayout {
                    sizes: t.sizes.iter().map(|&s| Expr::c(s)).collect(),
                    strides: t.strides.iter().map(|&s| Expr::c(s)).collect(),
                    offset: Expr::c(if self.guard_offsets { t.storage_offset } else { 0 }),
                }),
                _ => None,
            })
            .collect()
    }

    /// Whether this graph's GEMMs on CUDA are cuBLAS calls rdyn makes
    /// (emulated on `cuda-sim`).
    fn uses_cublas(&self) -> bool {
        self.cublas && self.backend.is_cuda()
    }

    /// Whether guards include storage offsets (the graph addresses input
    /// storage directly, through `as_strided`).
    pub fn guard_offsets(&self) -> bool {
        self.guard_offsets
    }

    /// Pick (or build) what runs this call; `key` is scratch for the guard key.
    pub fn select(&self, args: &[CallArg], key: &mut Vec<i64>) -> Result<Selected, RuntimeError> {
        self.select_for(args, key, false)
    }

    /// As [`CompiledGraph::select`]; with `describe_only`, a wgpu plan is
    /// generated and validated without opening a device.
    pub fn select_for(
        &self,
        args: &[CallArg],
        key: &mut Vec<i64>,
        describe_only: bool,
    ) -> Result<Selected, RuntimeError> {
        GuardKey::fill(key, args, self.guard_offsets);
        {
            let specs = self.specs.lock().map_err(|_| RuntimeError::Poisoned)?;
            if let Some(spec) = specs.iter().find(|s| s.key == *key) {
                STATS.guard_hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Ok(Selected::Spec(spec.clone()));
            }
        }
        STATS.guard_misses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ctx = self.bind(args)?;
        // CUDA kernels need concrete sizes: CUDA graphs keep specializing,
        // up to a bound past which calls run eagerly.
        let count = self.specs.lock().map_err(|_| RuntimeError::Poisoned)?.len();
        if self.backend.is_cuda() && count >= MAX_CUDA_SPECIALIZATIONS {
            return Err(RuntimeError::Unsupported(format!(
                "a CUDA graph called with more than {MAX_CUDA_SPECIALIZATIONS} shapes runs eagerly for new ones"
            )));
        }
        let full = !self.backend.is_cuda() && count >= MAX_SPECIALIZATIONS;
        if full {
            return self.run_generic(args, ctx);
        }
        let start = Instant::now();
        let options = LowerOptions {
            cublas: self.uses_cublas(),
            cpu_kernels: self.backend == Backend::Cpu,
            piecewise_min: piecewise_min(),
            opmath_scalars: self.backend.is_cuda(),
        };
        let Lowered { program, counts } = lower_with(&self.graph, &self.layouts(args), &ctx, options)?;
        let cpu = Arc::new(plan(&program, &ctx)?);
        let wgpu = match self.backend {
            Backend::Wgpu => Some(crate::gpu::plan_wgpu(&program, cpu.clone(), &ctx, !describe_only)?),
            Backend::Cpu | Backend::Cuda | Backend::CudaSim => None,
        };
        let cuda = match self.backend {
            Backend::Cuda | Backend::CudaSim => {
                let simulated = self.backend == Backend::CudaSim;
                Some(crate::cuda::plan_cuda(&program, cpu.clone(), &ctx, simulated, self.index_checks)?)
            }
            Backend::Cpu | Backend::Wgpu => None,
        };
        STATS.record_lowering(&counts, program.kernels().count(), start.elapsed().as_nanos() as u64);
        let spec = Arc::new(Specialization {
            key: key.clone(),
            program: Arc::new(program),
            plan: cpu,
            wgpu,
            cuda,
            counts,
            arena_pool: Mutex::new(Vec::new()),
            inputs: Default::default(),
        });
        self.specs.lock().map_err(|_| RuntimeError::Poisoned)?.push(spec.clone());
        Ok(Selected::Spec(spec))
    }

    fn run_generic(&self, args: &[CallArg], mut ctx: Ctx) -> Result<Selected, RuntimeError> {
        let generic = {
            let mut slot = self.generic.lock().map_err(|_| RuntimeError::Poisoned)?;
            match slot.as_ref() {
                Some(g) => g.clone(),
                None => {
                    let start = Instant::now();
                    let g = Arc::new(self.build_generic()?);
                    STATS.generic_programs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    STATS.compile_ns.fetch_add(start.elapsed().as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
                    *slot = Some(g.clone());
                    g
                }
            }
        };
        for (syms, arg) in generic.stride_syms.iter().zip(args) {
            if let CallArg::Tensor(t) = arg {
                for (s, v) in syms.iter().zip(&t.strides) {
                    ctx.sym_values.insert(*s, *v);
                }
            }
        }
        Ok(Selected::Generic(Arc::new(plan(&generic.program, &ctx)?)))
    }

    fn build_generic(&self) -> Result<Generic, RuntimeError> {
        let mut next = self.graph.sym_names.len() as u32;
        let mut stride_syms = Vec::new();
        let mut layouts = Vec::new();
        for input in &self.graph.inputs {
            match input {
                Input::Tensor(v) => {
                    let meta = self.graph.meta(*v);
                    let syms: Vec<Sym> = (0..meta.sizes.len())
                        .map(|_| {
                            next += 1;
                            Sym(next - 1)
                        })
                        .collect();
                    layouts.push(Some(InputLayout {
                        sizes: meta.sizes.clone(),
                        strides: syms.iter().map(|s| Expr::sym(*s)).collect(),
                        offset: Expr::zero(),
                    }));
                    stride_syms.push(syms);
                }
                _ => {
                    layouts.push(None);
                    stride_syms.push(Vec::new());
                }
            }
        }
        // The generic program runs on the CPU.
        let options =
            LowerOptions { cublas: false, cpu_kernels: true, piecewise_min: piecewise_min(), opmath_scalars: false };
        let lowered = lower_with(&self.graph, &layouts, &Ctx::default(), options)?;
        Ok(Generic { program: lowered.program, stride_syms })
    }
}

/// Run a selected program on the call's tensors. Returns each buffer's
/// address (for building outputs).
pub fn execute(selected: &Selected, args: &[CallArg], host: &mut dyn Host) -> Result<Vec<usize>, RuntimeError> {
    let cuda_plan = match selected {
        Selected::Spec(spec) => spec.cuda.as_ref(),
        Selected::Generic(_) => None,
    };
    if cuda_plan.is_some_and(|p| !p.simulated) {
        // Before any output is allocated on a device that may be missing.
        crate::cuda::available()?;
    }
    let plan = selected.plan();
    let bufs = &plan.buffers;
    let mut ptrs = vec![0usize; bufs.len()];
    let (mut arena, mut ready) = match selected {
        Selected::Spec(s) => s.arena_pool.lock().ok().and_then(|mut p| p.pop()).unwrap_or_default(),
        Selected::Generic(_) => (Vec::new(), false),
    };
    // CUDA programs keep their scratch on the device.
    let words = if cuda_plan.is_some() { 0 } else { plan.arena_bytes.div_ceil(8) + 8 };
    if arena.len() < words {
        (arena, ready) = (scratch_words(words)?, false);
    }
    let arena_base = (arena.as_mut_ptr() as usize).div_ceil(64) * 64;
    // Kept tensors belong to a specialization's plan (the generic program
    // keeps none); the input-free steps are skipped only when every one
    // came back with its values.
    let owner = match selected {
        Selected::Spec(s) => Some(Arc::as_ptr(&s.plan) as usize),
        Selected::Generic(_) => None,
    };
    let mut kept = true;
    for (k, buf) in bufs.iter().enumerate() {
        ptrs[k] = match &buf.storage {
            Storage::Input(n) => match args.get(*n) {
                // The buffer indexes from storage element 0 when its offset is
                // the call's storage offset (graphs with as_strided), else from
                // the view's first element.
                Some(CallArg::Tensor(t)) => t.ptr.wrapping_sub(buf.offset as usize * buf.dtype.itemsize()),
                _ => return Err(RuntimeError::Input(format!("input {n} is not a tensor"))),
            },
            Storage::Arena(offset) => arena_base + offset,
            Storage::Host => host.alloc(BufId(k as u32), buf)?,
            Storage::Pooled => host.alloc_pooled(BufId(k as u32), buf)?,
            Storage::Kept => {
                let (ptr, holds) = host.alloc_kept(BufId(k as u32), buf, owner)?;
                kept &= holds;
                ptr
            }
            Storage::Extern | Storage::View(_) => 0,
        };
    }
    resolve_views(bufs, &mut ptrs);
    if let Some(cuda_plan) = cuda_plan {
        crate::cuda::execute_cuda(cuda_plan, host, &mut ptrs)?;
        return Ok(ptrs);
    }
    if let Selected::Spec(spec) = selected {
        if let Some(wgpu_plan) = &spec.wgpu {
            crate::gpu::execute_wgpu(wgpu_plan, args, host, &mut ptrs, &spec.inputs)?;
            if let Ok(mut pool) = spec.arena_pool.lock() {
                pool.push((arena, false));
            }
            return Ok(ptrs);
        }
    }
    let profile = crate::stats::profiling();
    for (step, &once) in plan.steps.iter().zip(&plan.once) {
        if once && ready && kept {
            continue;
        }
        let start = profile.then(Instant::now);
        run_cpu_step(step, bufs, &mut ptrs, host)?;
        if let Some(start) = start {
            crate::stats::STATS.record_step(&step_label(step, bufs), start.elapsed().as_nanos() as u64);
        }
    }
    if let Selected::Spec(s) = selected {
        if let Ok(mut pool) = s.arena_pool.lock() {
            pool.push((arena, true));
        }
    }
    Ok(ptrs)
}

/// `words` zeroed words of scratch, or an error (never an abort) when the
/// process cannot have them: a process near its memory limit gets a
/// catchable error, as eager's allocator gives one.
fn scratch_words(words: usize) -> Result<Vec<u64>, RuntimeError> {
    let mut arena = Vec::new();
    arena.try_reserve_exact(words).map_err(|_| {
        RuntimeError::OutOfMemory(format!(
            "cannot allocate {} bytes of scratch memory for this graph's kernels; free memory or use smaller inputs",
            words.saturating_mul(8)
        ))
    })?;
    arena.resize(words, 0);
    Ok(arena)
}

/// Run one step of a CPU program over the buffers at `ptrs` (the CPU
/// path, and the CPU steps of a wgpu program).
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

/// How `RDYN_PROFILE` names a step: what it runs and on which sizes.
fn step_label(step: &CpuStep, bufs: &[BufPlan]) -> String {
    match step {
        CpuStep::Kernel(k) => {
            let stages: Vec<String> = k.stages.iter().map(|s| s.summary()).collect();
            format!("kernel {:?} {:?} tile {} [{}]", k.outer, k.mode, k.tile, stages.join("; "))
        }
        CpuStep::Gemm { a, b, .. } => {
            format!("gemm {:?} @ {:?}", bufs[a.0 as usize].sizes, bufs[b.0 as usize].sizes)
        }
        CpuStep::Scan { op, dim, x, .. } => format!("{op} dim {dim} {:?}", bufs[x.0 as usize].sizes),
        CpuStep::Sort { spec, x, .. } => format!("{spec} {:?}", bufs[x.0 as usize].sizes),
        CpuStep::Search { seq, values, .. } => {
            format!("searchsorted {:?} in {:?}", bufs[values.0 as usize].sizes, bufs[seq.0 as usize].sizes)
        }
        CpuStep::Depthwise { x, w, .. } => {
            format!("depthwise_conv2d {:?} * {:?}", bufs[x.0 as usize].sizes, bufs[w.0 as usize].sizes)
        }
        CpuStep::Host { target, inputs, .. } => {
            let sizes: Vec<_> = inputs.iter().map(|i| &bufs[i.0 as usize].sizes).collect();
            format!("{target} {sizes:?}")
        }
    }
}

/// The fewest elements per piece for which a CPU stage is split where its
/// sources change: `RDYN_PIECEWISE_MIN` (read at each compile; 1 splits
/// every such stage, as the tests do to fuzz the split on small tensors, 0
/// none), else [`rdyn_lowering::PIECEWISE_MIN_ELEMENTS`].
fn piecewise_min() -> i64 {
    std::env::var("RDYN_PIECEWISE_MIN")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &i64| n >= 0)
        .unwrap_or(rdyn_lowering::PIECEWISE_MIN_ELEMENTS)
}

#[cfg(test)]
mod tests {
    use rdyn_ir::graph::{Arg, DerivedSym, SymFn, TensorMeta, ValueId};
    use rdyn_ir::{DType, Device};

    use super::*;
    use crate::guard::TensorArg;

    /// Inputs `x: [s0]` and `y: [s1]` with `s1 = max(1, s0 - 2)`, as a
    /// backward graph of a valid convolution over a dynamic size reads them.
    fn graph() -> CompiledGraph {
        let meta = |s: u32| TensorMeta {
            sizes: vec![Expr::sym(Sym(s))],
            strides: vec![Expr::c(1)],
            offset: Expr::zero(),
            dtype: DType::F32,
            device: Device::Cpu,
        };
        let graph = Graph {
            values: vec![meta(0), meta(1)],
            inputs: vec![Input::Tensor(ValueId(0)), Input::Tensor(ValueId(1))],
            outputs: vec![Arg::Tensor(ValueId(1))],
            sym_names: vec!["s0".into(), "Max(1, s0 - 2)".into()],
            derived_syms: vec![DerivedSym {
                sym: Sym(1),
                func: SymFn::Max,
                args: vec![Expr::c(1), Expr::sym(Sym(0)).add_c(-2)],
            }],
            ..Graph::default()
        };
        CompiledGraph::new(graph, Backend::Cpu)
    }

    fn tensor(n: i64) -> CallArg {
        CallArg::Tensor(TensorArg {
            ptr: 0,
            dtype: DType::F32,
            device: Device::Cpu,
            sizes: vec![n],
            strides: vec![1],
            storage_offset: 0,
            version: 0,
            identity: 0,
        })
    }

    #[test]
    fn bind_computes_derived_symbols_and_checks_them_against_input_sizes() {
        let g = graph();
        for (x, y) in [(9, 7), (2, 1), (1, 1)] {
            let ctx = g.bind(&[tensor(x), tensor(y)]).expect("consistent sizes bind");
            assert_eq!(ctx.sym_values.get(&Sym(1)), Some(&y), "x = {x}");
        }
        let err = g.bind(&[tensor(9), tensor(6)]).expect_err("y disagrees with max(1, 9 - 2)");
        let text = err.to_string();
        assert!(text.contains("Max(1, s0 - 2) is 6") && text.contains("7 by its definition"), "{text}");
    }
}
