//! Loop IR (with concrete sizes) + its memory plan → CPU kernel plans.
//!
//! A plan is built once per specialization (the shape-generic program is
//! planned per call), over the buffers and storage `rdyn_memplan` assigned:
//! outer dimensions that indices divide are split (`split.rs`), those every
//! index walks contiguously are collapsed (a dim of size 1 joins its
//! neighbours whatever its strides), each kernel picks a tile axis
//! ([`TileMode`]), each stage's scalar DAG becomes a register program over
//! tiles (registers reused by liveness, sized to the widest tile a kernel
//! uses), each index an affine part plus a residual evaluated once per tile.
//! The plan's text form is what `explain()` shows as the kernel's source
//! (`[jit]` marks compiled stages, `[jit rows]` stages run over several rows
//! per call; "by columns of N" and "as blocked transposes" name the kernel
//! shapes of `lower_kernel.rs` and `transpose.rs`).
//!
//! [`plan`] plans every step (the CPU device); [`plan_steps`] only some (the
//! steps wgpu runs on the CPU). Both count the kernels they plan
//! ([`kernels_planned`]), so tests can pin that GPU devices plan none.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use rdyn_ir::loops::{
    BinaryOp, BufId, ExternKind, Negatives, Program, ReduceOp, ScalarId, ScalarOp, ScanOp, SortSpec, Step, UnaryOp,
};
use rdyn_ir::{Atom, Ctx, DType, Expr, Kind, Var};

use rdyn_memplan::MemPlan;
pub(crate) use rdyn_memplan::{storage_root, BufPlan};

use crate::CodegenError;

/// A register number.
pub type Reg = u16;

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

/// A program's steps planned for the CPU, one per program step (its
/// buffers are the memory plan's).
#[derive(Clone, Debug)]
pub struct CpuProgram {
    pub steps: Vec<CpuStep>,
}

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
