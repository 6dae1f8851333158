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

use rdyn_ir::loops::{BinaryOp, BufId, Negatives, Program, ReduceOp, ScalarId, ScalarOp, ScanOp, SortSpec, UnaryOp};
use rdyn_ir::{DType, Kind};

pub(crate) use rdyn_memplan::{storage_root, BufPlan};

pub use crate::index::{IndexFn, Reg};
use crate::jit::stage::{JitStage, Rows};

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
    pub jit: Option<JitStage>,
    /// Instructions whose value is the same on every lane of a tile along
    /// `.0` (broadcast loads, constants, arithmetic on them): the executor
    /// computes one lane and copies it.
    pub uniform: Option<(usize, Vec<bool>)>,
    /// A scatter-reduce: each lane's value combines with what the buffer
    /// holds at its address, `out[a] = op(out[a], value)`, lane by lane in
    /// order, so lanes that meet at one address all count.
    pub accumulate: Option<BinaryOp>,
    /// A reduction whose lanes walk its last inner dim in an inner-tiled
    /// kernel (set by `lower_kernel` from [`StagePlan::walks_inner`]): each
    /// lane is its own output, accumulated over the reduction points in
    /// order, as in an outer-tiled kernel. A row kernel hosting column
    /// partials (`split_reduce`'s blocks) sums its block's rows so.
    pub vertical: bool,
}

impl StagePlan {
    /// Whether this reduction, in an inner-tiled kernel of `m` outer dims,
    /// should run its lanes along its last inner dim: a plain combine
    /// (sum, product, max, min) whose loads walk that dim contiguously and
    /// none its last reduction dim (`x[r, c]` summed over `r` for each `c`;
    /// a per-row statistic `s[r]` may be read).
    /// Along the reduction, every lane would be a strided load.
    pub fn walks_inner(&self, m: usize) -> bool {
        let Some((op, red)) = &self.reduce else { return false };
        let plain = matches!(op, ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Max | ReduceOp::Min);
        let ni = self.inner.len();
        if !plain || red.is_empty() || self.inner.last().is_none_or(|&n| n < 2) {
            return false;
        }
        if !self.store_indirect.is_empty() || self.accumulate.is_some() {
            return false;
        }
        let (iv, rv) = ((m + ni - 1) as u32, (m + ni + red.len() - 1) as u32);
        let loads = || {
            self.insts.iter().filter_map(|i| match &i.op {
                InstOp::Load { index, indirect, .. } if indirect.is_empty() => Some(index),
                _ => None,
            })
        };
        // A load constant along the columns (a per-row statistic) is the
        // same on every lane: it does not vote.
        let along_rows = |ix: &IndexFn| ix.step(iv) != Some(0) && ix.step(rv).is_some_and(|s| s.abs() == 1);
        loads().any(|ix| ix.step(iv) == Some(1)) && !loads().any(along_rows)
    }

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
    /// Of a serial kernel: how many leading outer dims split its writes
    /// into disjoint sets ([`crate::disjoint`]); its work runs in parallel
    /// across their points, in index order within each. 0: one thread.
    pub disjoint: usize,
    /// Lanes per tile.
    pub tile: usize,
    /// Outer tiles run column by column: every row's tile at one column of
    /// the last dimension, then the next column (see `lower_kernel`'s
    /// `column_tile`), rather than each row's tiles in turn.
    pub columns: bool,
    /// Every stage is a copy into the transposed layout, run as blocked
    /// transposes instead of tiles ([`crate::transpose`]).
    pub transpose: Option<Vec<TransposeCopy>>,
}

/// Stride, padding and dilation, as (height, width).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub stride: [i64; 2],
    pub padding: [i64; 2],
    pub dilation: [i64; 2],
}

/// One stage of a transposing copy: over the kernel's outer ranges,
/// `dst[.. + b * dst_b + a] = src[.. + a * src_a + b]`.
#[derive(Clone, Debug)]
pub struct TransposeCopy {
    /// What each float32 element goes through after the copy, in order:
    /// a binary op with a constant (the stage's value is its load, then
    /// `x + 0.0`, `max(x, 0.0)`, `x * s`, ...).
    pub(crate) post: Vec<PostOp>,
    pub(crate) src: BufId,
    pub(crate) dst: BufId,
    pub(crate) itemsize: usize,
    /// The copy's own dims: the kernel's outer dims, those both sides walk
    /// as one merged, those of size 1 dropped (the indices are over these).
    pub(crate) outer: Vec<i64>,
    /// The outer variable along which the store steps by one element.
    pub(crate) a: usize,
    /// The outer variable along which the load steps by one element.
    pub(crate) b: usize,
    pub(crate) src_index: IndexFn,
    pub(crate) dst_index: IndexFn,
    pub(crate) src_a: i64,
    pub(crate) dst_b: i64,
}

/// `x = op(x, constant)`, or `op(constant, x)` when `constant_first`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PostOp {
    pub(crate) op: BinaryOp,
    pub(crate) constant: f32,
    pub(crate) constant_first: bool,
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
        geometry: Geometry,
    },
    /// rdyn's depthwise weight gradient kernel ([`crate::depthwise_grad`]).
    DepthwiseWeightGrad {
        grad: BufId,
        x: BufId,
        out: BufId,
        geometry: Geometry,
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
            match (kernel.serial, kernel.disjoint) {
                (false, _) => " parallel".to_string(),
                (true, 0) => " serial".to_string(),
                (true, k) => format!(" serial within {k} parallel dims"),
            },
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
                Some(j) if j.rows == Rows::Points => " [jit rows]",
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
        ScalarOp::Unary(op, x) if op.is_predicate() => program.scalars.dtype(*x).kind(),
        _ => program.scalars.dtype(id).kind(),
    }
}
