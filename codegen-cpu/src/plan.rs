//! Loop IR (with concrete sizes) → CPU kernel plans.
//!
//! A plan is built once per specialization (the shape-generic program is
//! planned per call): outer dimensions that indices divide are split
//! (`split.rs`), those every index walks contiguously are collapsed (a dim of
//! size 1 joins its neighbours whatever its strides), each kernel picks a tile
//! axis ([`TileMode`]), each stage's scalar DAG becomes a register program over
//! tiles (registers reused by liveness, sized to the widest tile a kernel uses),
//! each index an affine part plus a residual evaluated once per tile, and
//! temporaries get arena offsets by liveness. The plan's text form is what
//! `explain()` shows as the kernel's source (`[jit]` marks compiled stages,
//! `[jit rows]` stages run over several rows per call; "by columns of N" and
//! "as blocked transposes" name the kernel shapes of `lower_kernel.rs` and
//! `transpose.rs`).
//!
//! Memory ([`Storage`]): temporaries live in a per-call arena (reused across
//! calls); outputs and tensors that eager ops read are allocated by torch
//! (`Host`); tensors only library calls read (a convolution's input) are
//! `Pooled`, kept by the compiled graph for its next call, since allocating them
//! again page-faulted on every call. A kernel that reads no input (only what
//! such kernels wrote, or nothing: a mask from `arange`, `diff` and `cumsum`)
//! computes the same values on every call ([`CpuProgram::once`], from
//! `input_free`): its buffers get arena space no other buffer reuses, each pooled
//! arena remembers whether it holds them, and later calls with that arena skip
//! those kernels. A buffer such a kernel writes for a library call (a
//! convolution's weight computed from `arange`) is `Kept`: the graph keeps that
//! torch tensor per specialization after a successful call, and a call that gets
//! it back (`Host::alloc_kept`) skips its kernels too. The shape-generic program
//! gets a fresh arena per call and keeps nothing, so it always runs them. Buffers
//! handed to torch (outputs, eager calls' inputs) are fresh tensors each call.

use std::fmt::Write;

use rdyn_ir::loops::{
    BinaryOp, BufId, BufRole, ExternKind, Negatives, Program, ProgramOutput, ReduceOp, ScalarId, ScalarOp, ScanOp,
    SortSpec, Step, UnaryOp,
};
use rdyn_ir::{Atom, Ctx, DType, Expr, Kind, Var};

use crate::CodegenError;

/// A register number.
pub type Reg = u16;

/// Where a buffer's storage comes from at run time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Storage {
    Input(usize),
    /// Scratch at a byte offset of the per-call arena.
    Arena(usize),
    /// Allocated by the host as a torch tensor (graph outputs, and buffers
    /// that eager fallbacks read).
    Host,
    /// A torch tensor only library calls read (a convolution's input): the
    /// host may keep it for the next call instead of allocating again.
    Pooled,
    /// A torch tensor only library calls read, written only by input-free
    /// steps ([`CpuProgram::once`]): the host keeps it for the plan with its
    /// values, so those steps run on the plan's first call only (GPT-2's
    /// attention mask, an input of ATen's attention).
    Kept,
    /// Produced by an extern call.
    Extern,
    View(BufId),
}

#[derive(Clone, Debug)]
pub struct BufPlan {
    pub dtype: DType,
    pub sizes: Vec<i64>,
    pub strides: Vec<i64>,
    pub offset: i64,
    pub storage: Storage,
}

impl BufPlan {
    /// Elements from storage element 0 to one past the last element reached.
    pub fn extent_elems(&self) -> i64 {
        (self.extent_bytes() / self.dtype.itemsize()) as i64
    }

    /// Bytes from storage element 0 to one past the last element reached.
    pub fn extent_bytes(&self) -> usize {
        if self.sizes.contains(&0) {
            return 0;
        }
        let mut last = self.offset;
        for (s, st) in self.sizes.iter().zip(&self.strides) {
            last += (s - 1) * st.max(&0);
        }
        ((last + 1).max(0) as usize) * self.dtype.itemsize()
    }
}

/// An index as a function of the stage variables: an affine part
/// `c0 + Σ coef·var` plus, when needed, a residual expression of the terms
/// that are not affine (divisions and moduli from reshapes and pooling).
#[derive(Clone, Debug)]
pub struct IndexFn {
    pub c0: i64,
    pub coefs: Vec<(u32, i64)>,
    pub rest: Option<Expr>,
}

impl IndexFn {
    pub fn new(expr: &Expr) -> IndexFn {
        let mut coefs = Vec::new();
        let mut rest = Expr::zero();
        for (atom, coef) in expr.terms() {
            match atom {
                Atom::Var(v) => coefs.push((v.0, *coef)),
                other => rest = rest.add(&Expr::atom_expr(other.clone()).scale(*coef)),
            }
        }
        IndexFn { c0: expr.constant(), coefs, rest: if rest.is_const(0) { None } else { Some(rest) } }
    }

    #[inline]
    pub fn eval(&self, env: &[i64]) -> i64 {
        let affine = self.coefs.iter().fold(self.c0, |acc, (v, c)| acc + c * env[*v as usize]);
        match &self.rest {
            None => affine,
            Some(e) => affine + e.eval(env, &[]),
        }
    }

    /// Step per unit of `var`, when the index is affine in it.
    pub fn step(&self, var: u32) -> Option<i64> {
        if self.rest.as_ref().is_some_and(|e| e.mentions_var(Var(var))) {
            return None;
        }
        Some(self.coefs.iter().find(|(v, _)| *v == var).map_or(0, |(_, c)| *c))
    }

    pub fn is_affine(&self) -> bool {
        self.rest.is_none()
    }
}

impl std::fmt::Display for IndexFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut e = Expr::c(self.c0);
        for (v, c) in &self.coefs {
            e = e.add(&Expr::v(*v).scale(*c));
        }
        if let Some(rest) = &self.rest {
            e = e.add(rest);
        }
        write!(f, "{e}")
    }
}

#[derive(Clone, Debug)]
pub enum InstOp {
    Load {
        buf: BufId,
        dtype: DType,
        index: IndexFn,
        indirect: Vec<(Reg, i64)>,
        mask: Option<Reg>,
    },
    ConstF(f64),
    ConstI(i64),
    Index(IndexFn),
    Unary(UnaryOp, Reg),
    Binary(BinaryOp, Reg, Reg),
    Where(Reg, Reg, Reg),
    /// Convert from register kind `from` into the instruction's kind, with
    /// `to`'s narrowing (wrap, round to half, bool).
    Cast {
        src: Reg,
        from: Kind,
        to: DType,
    },
    Bounded {
        src: Reg,
        size: i64,
        negatives: Negatives,
    },
}

#[derive(Clone, Debug)]
pub struct Inst {
    pub dst: Reg,
    pub kind: Kind,
    /// Narrow integer / bool result to wrap after the op.
    pub narrow: Option<DType>,
    pub op: InstOp,
}

#[derive(Clone, Debug)]
pub struct StagePlan {
    pub out: BufId,
    pub out_dtype: DType,
    /// Ranges after the kernel's outer ranges.
    pub inner: Vec<i64>,
    pub reduce: Option<(ReduceOp, Vec<i64>)>,
    pub insts: Vec<Inst>,
    pub value: Reg,
    pub value_kind: Kind,
    pub store: IndexFn,
    pub store_indirect: Vec<(Reg, i64)>,
    pub regs: Vec<Kind>,
    /// Registers holding constants (filled once per thread, never written).
    pub consts: Vec<(Reg, InstOp)>,
    /// The register program as machine code, when the JIT compiled it.
    pub jit: Option<crate::jit::JitStage>,
    /// Instructions whose value is the same on every lane of a tile along
    /// `.0` (broadcast loads, constants, arithmetic on them): the executor
    /// computes one lane and copies it.
    pub uniform: Option<(usize, Vec<bool>)>,
    /// A scatter-reduce: each lane's value combines with what the buffer
    /// holds at its address, `out[a] = op(out[a], value)`, lane by lane in
    /// order, so lanes that meet at one address all count.
    pub accumulate: Option<BinaryOp>,
}

impl StagePlan {
    /// Points of the stage's own ranges (inner and reduction) per outer
    /// point, at least 1.
    pub fn points_per_outer(&self) -> usize {
        let red = self.reduce.as_ref().map_or(1, |(_, r)| r.iter().product::<i64>());
        (self.inner.iter().product::<i64>() * red).max(1) as usize
    }

    /// Which instructions are uniform along `tile_var` (see `uniform`;
    /// `None`: a one-lane tile, on which everything is).
    pub fn uniform_insts(&self, tile_var: Option<usize>) -> Vec<bool> {
        let constant = |index: &IndexFn| tile_var.is_none_or(|v| index.step(v as u32) == Some(0));
        let mut reg = vec![false; self.regs.len()];
        for (r, _) in &self.consts {
            reg[*r as usize] = true;
        }
        let mut out = Vec::with_capacity(self.insts.len());
        for inst in &self.insts {
            let u = |r: &Reg| reg[*r as usize];
            let uniform = match &inst.op {
                InstOp::Load { index, indirect, mask, .. } => {
                    constant(index) && indirect.iter().all(|(r, _)| u(r)) && mask.as_ref().is_none_or(u)
                }
                InstOp::ConstF(_) | InstOp::ConstI(_) => true,
                InstOp::Index(index) => constant(index),
                InstOp::Unary(_, x) => u(x),
                InstOp::Binary(_, a, b) => u(a) && u(b),
                InstOp::Where(c, a, b) => u(c) && u(a) && u(b),
                InstOp::Cast { src, .. } | InstOp::Bounded { src, .. } => u(src),
            };
            reg[inst.dst as usize] = uniform;
            out.push(uniform);
        }
        out
    }

    /// One line for profiles: the output, the reduction and whether the JIT
    /// compiled the stage.
    pub fn summary(&self) -> String {
        let reduce = match &self.reduce {
            Some((op, ranges)) => format!(" {op:?} over {ranges:?}"),
            None => String::new(),
        };
        let jit = if self.jit.is_some() { " jit" } else { "" };
        format!("{} {:?} {} insts{reduce}{jit}", self.out, self.out_dtype, self.insts.len())
    }
}

/// How a kernel vectorises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TileMode {
    /// Lanes are consecutive points of the last outer dimension.
    Outer,
    /// Lanes run along each stage's own last inner/reduction dimension.
    Inner,
}

#[derive(Clone, Debug)]
pub struct KernelPlan {
    pub name: String,
    pub outer: Vec<i64>,
    pub mode: TileMode,
    pub stages: Vec<StagePlan>,
    /// Scatter kernels run on one thread, in index order: in tiles along
    /// the last loop where a stage cannot see its own writes within a tile
    /// (lanes combine or store in order), else one point per tile
    /// (`lower_kernel.rs`).
    pub serial: bool,
    /// Lanes per tile.
    pub tile: usize,
    /// Outer tiles run column by column: every row's tile at one column of
    /// the last dimension, then the next column (see `lower_kernel`'s
    /// `column_tile`), rather than each row's tiles in turn.
    pub columns: bool,
    /// Every stage is a copy into the transposed layout, run as blocked
    /// transposes instead of tiles ([`crate::transpose`]).
    pub transpose: Option<Vec<crate::transpose::TransposeCopy>>,
}

#[derive(Clone, Debug)]
pub enum CpuStep {
    Kernel(KernelPlan),
    Gemm {
        a: BufId,
        b: BufId,
        out: BufId,
        /// Multiplies the product (`addmm`'s alpha).
        scale: f64,
    },
    /// rdyn's depthwise convolution kernel ([`crate::depthwise`]).
    Depthwise {
        x: BufId,
        w: BufId,
        out: BufId,
        geometry: crate::depthwise::Geometry,
    },
    /// rdyn's scan kernel ([`crate::scan`]): `outs[0]` the running values,
    /// `outs[1]` the indices of max and min.
    Scan {
        op: ScanOp,
        dim: usize,
        x: BufId,
        outs: Vec<BufId>,
    },
    /// rdyn's search kernel ([`crate::search`]): positions of `values` in
    /// `seq`.
    Search {
        right: bool,
        seq: BufId,
        values: BufId,
        out: BufId,
    },
    /// rdyn's sort kernel ([`crate::sort`]): `outs[0]` the kept values,
    /// `outs[1]` their indices.
    Sort {
        spec: SortSpec,
        x: BufId,
        outs: Vec<BufId>,
    },
    /// Runs through the host (ATen): a library kernel or an eager fallback.
    Host {
        node: u32,
        target: String,
        fallback: bool,
        inputs: Vec<BufId>,
        outputs: Vec<BufId>,
    },
}

#[derive(Clone, Debug)]
pub enum OutputPlan {
    Buffer(BufId),
    Int(i64),
    None,
}

/// A program ready to run on the CPU.
#[derive(Clone, Debug)]
pub struct CpuProgram {
    pub buffers: Vec<BufPlan>,
    pub steps: Vec<CpuStep>,
    /// Per step: whether it depends on no input (a causal mask built from
    /// `arange`), so an arena that already holds its results may skip it.
    pub once: Vec<bool>,
    pub arena_bytes: usize,
    pub outputs: Vec<OutputPlan>,
}

fn concrete(e: &Expr, ctx: &Ctx, what: &str) -> Result<i64, CodegenError> {
    e.simplify(ctx).as_const().ok_or_else(|| CodegenError::Symbolic(format!("{what} {e}")))
}

fn concrete_all(es: &[Expr], ctx: &Ctx, what: &str) -> Result<Vec<i64>, CodegenError> {
    es.iter().map(|e| concrete(e, ctx, what)).collect()
}

const ARENA_ALIGN: usize = 64;

/// Build the CPU plan of `program` with the symbol values in `syms`.
pub fn plan(program: &Program, syms: &Ctx) -> Result<CpuProgram, CodegenError> {
    // Torch tensors: what the caller gets or an eager call may keep
    // (`host_visible`), and what only library calls read (`library_read`),
    // which never alias their inputs into their results.
    let mut host_visible = vec![false; program.buffers.len()];
    let mut library_read = vec![false; program.buffers.len()];
    for out in &program.outputs {
        if let ProgramOutput::Buffer(b) = out {
            host_visible[program.storage_of(*b).0 as usize] = true;
        }
    }
    for step in &program.steps {
        if let Step::Extern(ext) = step {
            let seen = match ext.kind {
                ExternKind::Library { .. } => &mut library_read,
                ExternKind::Fallback { .. } => &mut host_visible,
                _ => continue,
            };
            for b in &ext.inputs {
                seen[program.storage_of(*b).0 as usize] = true;
            }
        }
    }
    let mut buffers = Vec::with_capacity(program.buffers.len());
    for (k, buf) in program.buffers.iter().enumerate() {
        let storage = match &buf.role {
            BufRole::Input(n) => Storage::Input(*n),
            BufRole::ExternOut => Storage::Extern,
            BufRole::View(base) => Storage::View(*base),
            BufRole::Temp if host_visible[k] => Storage::Host,
            BufRole::Temp if library_read[k] => Storage::Pooled,
            BufRole::Temp => Storage::Arena(0),
        };
        buffers.push(BufPlan {
            dtype: buf.dtype,
            sizes: concrete_all(&buf.sizes, syms, "buffer size")?,
            strides: concrete_all(&buf.strides, syms, "buffer stride")?,
            offset: concrete(&buf.offset, syms, "buffer offset")?,
            storage,
        });
    }
    let mut steps = Vec::new();
    let mut kernel_count = 0;
    for step in &program.steps {
        steps.push(match step {
            Step::Kernel(kernel) => {
                let name = format!("k{kernel_count}");
                kernel_count += 1;
                CpuStep::Kernel(crate::lower_kernel::kernel_plan(program, &buffers, kernel, syms, name)?)
            }
            Step::Extern(ext) => match &ext.kind {
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
                    geometry: crate::depthwise::Geometry { stride: *stride, padding: *padding, dilation: *dilation },
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
            },
        });
    }
    crate::jit::compile_program(&mut steps, &buffers);
    let once = input_free(&buffers, &steps);
    for (step, _) in steps.iter().zip(&once).filter(|(_, &once)| once) {
        for w in step.io(&buffers).1 {
            if buffers[w].storage == Storage::Pooled {
                buffers[w].storage = Storage::Kept;
            }
        }
    }
    let arena_bytes = assign_arena(&mut buffers, &steps, &once);
    let outputs = program
        .outputs
        .iter()
        .map(|o| match o {
            ProgramOutput::Buffer(b) => Ok(OutputPlan::Buffer(*b)),
            ProgramOutput::Int(e) => Ok(OutputPlan::Int(concrete(e, syms, "output")?)),
            ProgramOutput::None => Ok(OutputPlan::None),
        })
        .collect::<Result<_, CodegenError>>()?;
    Ok(CpuProgram { buffers, steps, once, arena_bytes, outputs })
}

/// The kernels whose results depend on no input: they read only what such
/// kernels wrote (or nothing: `arange`, `full`), and write arena (or
/// library-read, then kept) buffers no other step writes. Their values are
/// the same on every call of the plan.
fn input_free(buffers: &[BufPlan], steps: &[CpuStep]) -> Vec<bool> {
    let n = buffers.len();
    let mut writers = vec![0usize; n];
    for step in steps {
        let (_, mut writes) = step.io(buffers);
        writes.sort_unstable();
        writes.dedup();
        writes.into_iter().for_each(|w| writers[w] += 1);
    }
    let mut constant = vec![false; n];
    let mut once = vec![false; steps.len()];
    for (i, step) in steps.iter().enumerate() {
        if !matches!(step, CpuStep::Kernel(_)) {
            continue;
        }
        let (reads, writes) = step.io(buffers);
        let own = writes
            .iter()
            .all(|&w| writers[w] == 1 && matches!(buffers[w].storage, Storage::Arena(_) | Storage::Pooled));
        if own && reads.iter().all(|r| constant[*r] || writes.contains(r)) {
            once[i] = true;
            writes.into_iter().for_each(|w| constant[w] = true);
        }
    }
    once
}

/// Give arena buffers offsets, reusing space whose buffer is dead. What
/// input-free steps (`once`) write stays for the arena's next call: live
/// throughout, its space never reused.
fn assign_arena(buffers: &mut [BufPlan], steps: &[CpuStep], once: &[bool]) -> usize {
    let n = buffers.len();
    let mut first = vec![usize::MAX; n];
    let mut last = vec![0usize; n];
    for (at, step) in steps.iter().enumerate() {
        let (reads, writes) = step.io(buffers);
        if once[at] {
            for &b in &writes {
                (first[b], last[b]) = (0, usize::MAX);
            }
        }
        for b in reads.into_iter().chain(writes) {
            first[b] = first[b].min(at);
            last[b] = last[b].max(at);
        }
    }
    let mut order: Vec<usize> =
        (0..n).filter(|&b| matches!(buffers[b].storage, Storage::Arena(_)) && first[b] != usize::MAX).collect();
    order.sort_by_key(|&b| first[b]);
    // (offset, size, last use) of placed blocks.
    let mut placed: Vec<(usize, usize, usize)> = Vec::new();
    let mut total = 0usize;
    for b in order {
        let size = buffers[b].extent_bytes().div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        let live: Vec<&(usize, usize, usize)> = placed.iter().filter(|(_, _, end)| *end >= first[b]).collect();
        let mut offset = 0usize;
        let mut sorted: Vec<(usize, usize)> = live.iter().map(|(o, s, _)| (*o, *s)).collect();
        sorted.sort();
        for (o, s) in sorted {
            if offset + size <= o {
                break;
            }
            offset = offset.max(o + s);
        }
        buffers[b].storage = Storage::Arena(offset);
        placed.push((offset, size, last[b]));
        total = total.max(offset + size);
    }
    total
}

/// The buffer that owns `b`'s storage (a view's base, else `b` itself).
pub fn storage_root(bufs: &[BufPlan], b: BufId) -> usize {
    match bufs[b.0 as usize].storage {
        Storage::View(base) => base.0 as usize,
        _ => b.0 as usize,
    }
}

/// Point every view at its base's address (after the bases are known).
pub fn resolve_views(bufs: &[BufPlan], ptrs: &mut [usize]) {
    for (k, buf) in bufs.iter().enumerate() {
        if let Storage::View(base) = buf.storage {
            ptrs[k] = ptrs[base.0 as usize];
        }
    }
}

impl CpuStep {
    /// Storage roots the step reads and writes. A scatter reads the buffer
    /// it updates; an accumulating GEMM reads its output.
    pub fn io(&self, bufs: &[BufPlan]) -> (Vec<usize>, Vec<usize>) {
        let root = |b: &BufId| storage_root(bufs, *b);
        match self {
            CpuStep::Kernel(k) => {
                let mut reads = Vec::new();
                let mut writes = Vec::new();
                for s in &k.stages {
                    writes.push(root(&s.out));
                    for inst in &s.insts {
                        if let InstOp::Load { buf, .. } = &inst.op {
                            reads.push(root(buf));
                        }
                    }
                    if !s.store_indirect.is_empty() {
                        reads.push(root(&s.out));
                    }
                }
                (reads, writes)
            }
            CpuStep::Gemm { a, b, out, .. } => (vec![root(a), root(b)], vec![root(out)]),
            CpuStep::Search { seq, values, out, .. } => (vec![root(seq), root(values)], vec![root(out)]),
            CpuStep::Depthwise { x, w, out, .. } => (vec![root(x), root(w)], vec![root(out)]),
            CpuStep::Scan { x, outs, .. } | CpuStep::Sort { x, outs, .. } => {
                (vec![root(x)], outs.iter().map(root).collect())
            }
            CpuStep::Host { inputs, outputs, .. } => {
                (inputs.iter().map(root).collect(), outputs.iter().map(root).collect())
            }
        }
    }
}

impl CpuProgram {
    /// The kernel plan as text: what `RDYN_LOG=kernels` and `explain()` show.
    pub fn kernel_source(kernel: &KernelPlan) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "cpu kernel {} outer {:?} tile {:?}{}{}",
            kernel.name,
            kernel.outer,
            kernel.mode,
            if kernel.serial { " serial" } else { " parallel" },
            if kernel.transpose.is_some() {
                " as blocked transposes".to_string()
            } else if kernel.columns {
                format!(" by columns of {}", kernel.tile)
            } else {
                String::new()
            }
        );
        for stage in &kernel.stages {
            let red = match &stage.reduce {
                Some((op, r)) => format!(" {op} over {r:?}"),
                None => String::new(),
            };
            let jit = match &stage.jit {
                Some(j) if j.rows == crate::jit::Rows::Points => " [jit rows]",
                Some(_) => " [jit]",
                None => "",
            };
            let _ = writeln!(out, "  stage -> {} ({}) inner {:?}{red}{jit}", stage.out, stage.out_dtype, stage.inner);
            for (reg, op) in &stage.consts {
                let _ = writeln!(out, "    r{reg} = {}", fmt_inst(op));
            }
            for inst in &stage.insts {
                let _ = writeln!(out, "    r{} {:?} = {}", inst.dst, inst.kind, fmt_inst(&inst.op));
            }
            let scatter: String = stage.store_indirect.iter().map(|(r, s)| format!(" + r{r}*{s}")).collect();
            let target = format!("{}[{}{scatter}]", stage.out, stage.store);
            let _ = match stage.accumulate {
                // A scatter-reduce, combined lane by lane at the store.
                Some(op) => writeln!(out, "    store {target} = {op}({target}, r{}) per lane", stage.value),
                None => writeln!(out, "    store {target} = r{}", stage.value),
            };
        }
        out
    }
}

fn fmt_inst(op: &InstOp) -> String {
    match op {
        InstOp::Load { buf, dtype, index, indirect, mask } => {
            let ind: String = indirect.iter().map(|(r, s)| format!(" + r{r}*{s}")).collect();
            let m = mask.map(|m| format!(" if r{m}")).unwrap_or_default();
            format!("load {buf}:{dtype}[{index}{ind}]{m}")
        }
        InstOp::ConstF(v) => format!("{v:?}"),
        InstOp::ConstI(v) => format!("{v}"),
        InstOp::Index(e) => format!("index {e}"),
        InstOp::Unary(op, x) => format!("{op} r{x}"),
        InstOp::Binary(op, a, b) => format!("{op} r{a}, r{b}"),
        InstOp::Where(c, a, b) => format!("where r{c}, r{a}, r{b}"),
        InstOp::Cast { src, to, .. } => format!("cast<{to}> r{src}"),
        InstOp::Bounded { src, size, negatives: Negatives::Wrap } => format!("bounded r{src} < {size}"),
        InstOp::Bounded { src, size, negatives: Negatives::Reject } => format!("bounded 0 <= r{src} < {size}"),
    }
}

/// Whether a scalar op's operands are computed in a different kind than its
/// result (comparisons; casts handle their own).
pub(crate) fn operand_kind(program: &Program, id: ScalarId) -> Kind {
    match &program.scalars.get(id).op {
        ScalarOp::Binary(_, a, _) => program.scalars.dtype(*a).kind(),
        ScalarOp::Unary(UnaryOp::IsNan | UnaryOp::IsInf | UnaryOp::Signbit | UnaryOp::Not, x) => {
            program.scalars.dtype(*x).kind()
        }
        _ => program.scalars.dtype(id).kind(),
    }
}
