//! A compiled graph: guards → cached specialization (or the shape-generic
//! program) → run.
//!
//! A specialization is the graph lowered with this call's symbol values
//! (`LowerOptions` from the device's [`Caps`], and `RDYN_PIECEWISE_MIN`),
//! memory-planned (`rdyn_memplan`) and planned for its device
//! ([`Device::plan`]). Execution ([`execute`]) places the buffers (inputs,
//! host tensors, a per-call arena taken from a pool for devices with a host
//! arena) and hands the call to the device plan. The shape-generic program
//! runs on the CPU device.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use rdyn_ir::expr::Sym;
use rdyn_ir::graph::{Graph, Input};
use rdyn_ir::loops::{BufId, Program};
use rdyn_ir::op::Op;
use rdyn_ir::{Atom, Ctx, Expr};
use rdyn_lowering::{lower_with, InputLayout, Lowered, NodeCounts};
use rdyn_memplan::{resolve_views, MemPlan, Storage};

use crate::device::{Call, Caps, Device, DevicePlan, Purpose};
use crate::devices::cpu::Cpu;
use crate::guard::{CallArg, GuardKey};
use crate::host::Host;
use crate::stats::STATS;
use crate::RuntimeError;

/// How many specializations a graph keeps before using its generic program.
pub const MAX_SPECIALIZATIONS: usize = 8;
/// CUDA graphs have no generic program; they keep this many.
pub const MAX_CUDA_SPECIALIZATIONS: usize = 64;

/// A program's memory plan and its device plan.
pub struct Planned {
    pub mem: Arc<MemPlan>,
    pub device: Box<dyn DevicePlan>,
}

/// One cached specialization.
pub struct Specialization {
    pub key: Vec<i64>,
    pub program: Arc<Program>,
    pub planned: Planned,
    pub counts: NodeCounts,
    /// Arenas between calls, each with whether it holds the results of the
    /// plan's input-free steps (`MemPlan::once`).
    arena_pool: Mutex<Vec<(Vec<u64>, bool)>>,
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
    pub device: Arc<dyn Device>,
    /// The device's capabilities, read once (every call consults them).
    caps: Caps,
    guard_offsets: bool,
    specs: Mutex<Vec<Arc<Specialization>>>,
    generic: Mutex<Option<Arc<Generic>>>,
}

/// What one call ran.
#[derive(Clone)]
pub enum Selected {
    Spec(Arc<Specialization>),
    Generic(Arc<Planned>),
}

impl Selected {
    pub fn planned(&self) -> &Planned {
        match self {
            Selected::Spec(s) => &s.planned,
            Selected::Generic(p) => p,
        }
    }

    /// Every buffer's layout and storage, and the outputs.
    pub fn mem(&self) -> &MemPlan {
        &self.planned().mem
    }
}

impl CompiledGraph {
    pub fn new(graph: Graph, device: Arc<dyn Device>) -> CompiledGraph {
        let guard_offsets = graph.nodes.iter().any(|n| n.op == Op::AsStrided);
        STATS.graphs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let caps = device.caps();
        CompiledGraph { graph, device, caps, guard_offsets, specs: Mutex::new(Vec::new()), generic: Mutex::new(None) }
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

    /// What the graph's device can do.
    pub fn caps(&self) -> Caps {
        self.caps
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

    /// As [`CompiledGraph::select`]; with `describe_only`, a device plan is
    /// generated and validated without opening the device.
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
        // Devices whose kernels need concrete sizes keep specializing, up
        // to a bound past which calls run eagerly.
        let caps = self.caps;
        let count = self.specs.lock().map_err(|_| RuntimeError::Poisoned)?.len();
        match caps.specialize_up_to {
            Some(limit) if count >= limit => {
                return Err(RuntimeError::Unsupported(format!(
                    "a {} graph called with more than {limit} shapes runs eagerly for new ones",
                    self.device.name()
                )))
            }
            None if count >= MAX_SPECIALIZATIONS => return self.run_generic(args, ctx),
            _ => {}
        }
        let start = Instant::now();
        let options = caps.lower_options(piecewise_min());
        let Lowered { program, counts } = lower_with(&self.graph, &self.layouts(args), &ctx, options)?;
        let mem = Arc::new(rdyn_memplan::plan(&program, &ctx)?);
        let purpose = if describe_only { Purpose::Describe } else { Purpose::Run };
        let device = self.device.plan(&program, &mem, &ctx, purpose)?;
        STATS.record_lowering(&counts, program.kernels().count(), start.elapsed().as_nanos() as u64);
        let spec = Arc::new(Specialization {
            key: key.clone(),
            program: Arc::new(program),
            planned: Planned { mem, device },
            counts,
            arena_pool: Mutex::new(Vec::new()),
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
        let mem = Arc::new(rdyn_memplan::plan(&generic.program, &ctx)?);
        let device = Cpu.plan(&generic.program, &mem, &ctx, Purpose::Run)?;
        Ok(Selected::Generic(Arc::new(Planned { mem, device })))
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
        let options = Cpu.caps().lower_options(piecewise_min());
        let lowered = lower_with(&self.graph, &layouts, &Ctx::default(), options)?;
        Ok(Generic { program: lowered.program, stride_syms })
    }
}

/// Run a selected program on the call's tensors. Returns each buffer's
/// address (for building outputs).
pub fn execute(selected: &Selected, args: &[CallArg], host: &mut dyn Host) -> Result<Vec<usize>, RuntimeError> {
    let Planned { mem, device } = selected.planned();
    // Before any output is allocated on a device that may be missing.
    device.ready()?;
    let bufs = &mem.buffers;
    let mut ptrs = vec![0usize; bufs.len()];
    let (mut arena, mut ready) = match selected {
        Selected::Spec(s) => s.arena_pool.lock().ok().and_then(|mut p| p.pop()).unwrap_or_default(),
        Selected::Generic(_) => (Vec::new(), false),
    };
    // Devices without a host arena keep their scratch themselves.
    let words = if device.host_arena() { mem.arena_bytes.div_ceil(8) + 8 } else { 0 };
    if arena.len() < words {
        (arena, ready) = (scratch_words(words)?, false);
    }
    let arena_base = (arena.as_mut_ptr() as usize).div_ceil(64) * 64;
    // Kept tensors belong to a specialization's plan (the generic program
    // keeps none); the input-free steps are skipped only when every one
    // came back with its values.
    let owner = match selected {
        Selected::Spec(s) => Some(Arc::as_ptr(&s.planned.mem) as usize),
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
    let mut call = Call { args, host, ptrs: &mut ptrs, skip_once: ready && kept };
    device.run(mem, &mut call)?;
    if let Selected::Spec(s) = selected {
        if let Ok(mut pool) = s.arena_pool.lock() {
            pool.push((arena, device.fills_once()));
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
        CompiledGraph::new(graph, Arc::new(Cpu))
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
