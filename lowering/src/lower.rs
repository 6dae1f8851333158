//! The lowering driver: walks the graph in order, lowers each node, and turns
//! unsupported nodes into eager fallbacks.
//!
//! A node's output with several users whose body costs more than
//! `RECOMPUTE_LIMIT` is stored once (`op_cost`); a `cat` piece past
//! `CAT_PIECE_LIMIT` is stored too (`shape.rs`).
//!
//! Graph outputs share storage exactly where eager's do (`lower_outputs`): an
//! output shares an input's, or another output's, only when the ATen graph
//! reaches it from that value through view ops alone (`Op::is_view`); outputs
//! that view one intermediate share that intermediate's buffer, stored once,
//! their views replayed over it. Any other output is a buffer of its own with
//! eager's strides, even when its lazy reads an input or another output's
//! buffer as a plain view (`x.clone()`, `x.t().contiguous()`, a `copy_` into
//! `empty_like(x)`, the clone of a stored value): returning the input or the
//! other output itself would let a write to the clone change it. A view of an
//! input that is not a strided view here is `Unsupported` (AOTAutograd rebuilds
//! an aliasing output from the input, so it must not become a copy).

use std::collections::BTreeMap;

use crate::ir::graph::{Arg, Graph, Input, Node, ValueId};
use crate::ir::loops::{BufId, BufRole, Buffer, Extern, ExternKind, Program, ProgramOutput, ScalarOp, Step};
use crate::ir::op::Op;
use crate::ir::{Ctx, Expr};
use crate::lazy::Lazy;
use crate::{schedule, LowerError};

/// The layout of one tensor input at the call being specialized: sizes,
/// strides and storage offset, concrete or symbolic.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InputLayout {
    pub sizes: Vec<Expr>,
    pub strides: Vec<Expr>,
    pub offset: Expr,
}

/// How the graph's nodes were handled.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeCounts {
    /// Lowered into rdyn-generated kernels (or pure views).
    pub native: u32,
    /// Run by a library routine (GEMM, convolution).
    pub extern_: u32,
    /// Run eagerly by ATen because rdyn does not lower them.
    pub fallback: u32,
    pub fallback_ops: BTreeMap<String, u32>,
    /// Why each fallback op was not lowered (first reason seen).
    pub fallback_reasons: BTreeMap<String, String>,
}

/// The result of lowering: the fused program and how nodes were handled.
#[derive(Clone, Debug)]
pub struct Lowered {
    pub program: Program,
    pub counts: NodeCounts,
}

pub(crate) enum Handled {
    Native(Vec<Lazy>),
    Extern(Vec<Lazy>),
}

/// What a reduction computes: op, output ranges, reduction ranges, body,
/// result dtype.
pub(crate) type ReductionKey =
    (crate::ir::loops::ReduceOp, Vec<Expr>, Vec<Expr>, crate::ir::loops::ScalarId, crate::ir::DType);

pub(crate) struct Lowerer<'g> {
    pub graph: &'g Graph,
    pub options: LowerOptions,
    pub prog: Program,
    pub env: Vec<Option<Lazy>>,
    /// Symbol values known for this specialization.
    pub syms: Ctx,
    pub uses: Vec<u32>,
    pub counts: NodeCounts,
    /// Reductions already emitted, by what they compute: identical ones
    /// (e.g. `sum` and the sum inside `mean`) share one buffer.
    pub reductions: std::collections::HashMap<ReductionKey, crate::ir::loops::BufId>,
}

/// Bodies larger than this are stored once rather than recomputed in every
/// consumer when a value has several users.
const RECOMPUTE_LIMIT: usize = 12;

/// The most a piece of a `cat` may cost per element ([`op_cost`]) and stay
/// fused into it. ShuffleNet passes half of every block's output on
/// untouched through the next block's `cat` and channel shuffle: fused, the
/// last block evaluated all earlier ones per element (224 ops, 2.5 ms; the
/// model 0.74x eager, 2.7x with its pieces stored past this cost).
pub(crate) const CAT_PIECE_LIMIT: usize = 32;

/// The cost of one scalar op when deciding whether to recompute a body.
fn op_cost(op: &ScalarOp) -> usize {
    use crate::ir::loops::{BinaryOp as B, UnaryOp as U};
    match op {
        ScalarOp::Unary(
            U::Neg
            | U::Abs
            | U::Sqrt
            | U::Rsqrt
            | U::Floor
            | U::Ceil
            | U::Round
            | U::Trunc
            | U::Sign
            | U::Reciprocal
            | U::Not
            | U::BitNot
            | U::IsNan
            | U::IsInf
            | U::Signbit,
            _,
        ) => 1,
        ScalarOp::Unary(..) => RECOMPUTE_LIMIT,
        ScalarOp::Binary(
            B::Pow | B::Atan2 | B::Hypot | B::Nextafter | B::Polygamma | B::Zeta | B::Igamma | B::Igammac,
            ..,
        ) => RECOMPUTE_LIMIT,
        // A checked data-dependent index (a gather's row): besides the check,
        // it keeps the row's address out of compiled loops' row steps, so
        // every reader would pay it per row. Gathered values with several
        // users are stored once.
        ScalarOp::Bounded(..) => RECOMPUTE_LIMIT,
        _ => 1,
    }
}

/// Lower `graph` for inputs with the given layouts (one entry per graph
/// input; `None` for non-tensor inputs). `syms` holds the size-symbol values
/// of this specialization (empty for the shape-generic program).
pub fn lower(graph: &Graph, inputs: &[Option<InputLayout>], syms: &Ctx) -> Result<Lowered, LowerError> {
    lower_with(graph, inputs, syms, LowerOptions::default())
}

/// Choices made for a whole graph.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LowerOptions {
    /// GEMMs on CUDA become GEMM steps that run as cuBLAS calls (`gemm.rs`);
    /// otherwise they are ATen library calls.
    pub cublas: bool,
    /// rdyn's CPU-only kernels are available: scans (cumsum, cummax,
    /// logcumsumexp, ...) run its scan kernel, one sequential pass per line,
    /// and sorts (sort, topk, kthvalue, median) its sort kernel. Otherwise
    /// (GPU devices) scans are reductions over each element's prefix,
    /// parallel over every element, and sorts rank each element by a
    /// reduction over its line (`sort.rs` `rank_sort`; long lines eagerly).
    pub cpu_kernels: bool,
    /// With `cpu_kernels`: the fewest elements per piece (on average) for
    /// which a stage that picks between sources by index ranges is split
    /// ([`crate::piecewise`], [`PIECEWISE_MIN_ELEMENTS`] by default); 0
    /// leaves such stages whole.
    pub piecewise_min: i64,
    /// Binary ops read a Python float operand of a float16/bfloat16 tensor
    /// in float32, as ATen's CUDA kernels do. Otherwise (the CPU's
    /// convention, which wgpu's CPU tensors follow) the float is first
    /// converted to the tensor's dtype, as TensorIterator converts a
    /// wrapped scalar, except by mul and div, whose CPU kernels read it in
    /// float32: bfloat16 `x == 3.14` compares with 3.140625.
    pub opmath_scalars: bool,
}

/// [`lower`] with `options`.
pub fn lower_with(
    graph: &Graph,
    inputs: &[Option<InputLayout>],
    syms: &Ctx,
    options: LowerOptions,
) -> Result<Lowered, LowerError> {
    let mut lw = Lowerer {
        options,
        graph,
        prog: Program::default(),
        env: vec![None; graph.values.len()],
        syms: syms.clone(),
        uses: graph.use_counts(),
        counts: NodeCounts::default(),
        reductions: Default::default(),
    };
    for (k, input) in graph.inputs.iter().enumerate() {
        let Input::Tensor(v) = input else { continue };
        let layout = inputs
            .get(k)
            .cloned()
            .flatten()
            .ok_or_else(|| crate::invalid("input", format!("no layout given for tensor input {k}")))?;
        let meta = graph.meta(*v);
        let buf = lw.prog.add_buffer(Buffer {
            dtype: meta.dtype,
            sizes: layout.sizes,
            strides: layout.strides,
            offset: layout.offset,
            role: BufRole::Input(k),
        });
        lw.env[v.0 as usize] = Some(lw.load_buffer(buf));
    }
    for node in &graph.nodes {
        lw.lower_one(node)?;
    }
    lw.lower_outputs()?;
    let mut program = lw.prog;
    check(&program, "lowering")?;
    crate::cse::run(&mut program);
    check(&program, "cse")?;
    crate::permuted::run(&mut program);
    check(&program, "permuted")?;
    crate::dce::run(&mut program);
    check(&program, "dce")?;
    if lw.options.cpu_kernels && lw.options.piecewise_min > 0 {
        crate::piecewise::run(&mut program, lw.options.piecewise_min);
        check(&program, "piecewise")?;
    }
    schedule::run(&mut program);
    check(&program, "schedule")?;
    crate::forward::run(&mut program);
    check(&program, "forward")?;
    crate::reuse::run(&mut program);
    check(&program, "reuse")?;
    Ok(Lowered { program, counts: lw.counts })
}

fn check(program: &Program, pass: &'static str) -> Result<(), LowerError> {
    if cfg!(debug_assertions) {
        crate::ir::verify::verify(program).map_err(|error| LowerError::Verify { pass, error })?;
    }
    Ok(())
}

impl Lowerer<'_> {
    fn lower_one(&mut self, node: &Node) -> Result<(), LowerError> {
        let result = if node.op == Op::Other {
            Err(crate::unsupported(&node.target, "no lowering for this op"))
        } else {
            self.lower_node(node)
        };
        let outs = match result {
            Ok(Handled::Native(outs)) => {
                self.counts.native += 1;
                outs
            }
            Ok(Handled::Extern(outs)) => {
                self.counts.extern_ += 1;
                outs
            }
            Err(LowerError::Unsupported { reason, .. }) => {
                self.counts.fallback += 1;
                *self.counts.fallback_ops.entry(node.target.clone()).or_insert(0) += 1;
                self.counts.fallback_reasons.entry(node.target.clone()).or_insert(reason);
                self.extern_call(node, ExternKind::Fallback { node: node.index, target: node.target.clone() })?
            }
            Err(other) => return Err(other),
        };
        for (v, lazy) in node.outputs.iter().zip(outs) {
            let lazy = if self.uses[v.0 as usize] > 1 && self.body_size(&lazy) > RECOMPUTE_LIMIT {
                let strides = self.meta_strides(*v);
                let buf = self.realize(&lazy, Some(strides));
                self.load_buffer(buf)
            } else {
                lazy
            };
            self.env[v.0 as usize] = Some(lazy);
        }
        Ok(())
    }

    /// Run `node` outside rdyn's kernels: its tensor inputs become buffers,
    /// its outputs buffers that the call fills.
    pub(crate) fn extern_call(&mut self, node: &Node, kind: ExternKind) -> Result<Vec<Lazy>, LowerError> {
        // ATen kernels may rely on the layout PyTorch's metadata promises
        // (e.g. after a contiguous clone): pass exactly that layout.
        self.extern_call_laid_out(node, kind, &|lw, v| lw.meta_strides(v))
    }

    /// As [`Self::extern_call`], each tensor input and output laid out by
    /// `strides_of` (its strides for a value).
    pub(crate) fn extern_call_laid_out(
        &mut self,
        node: &Node,
        kind: ExternKind,
        strides_of: &dyn Fn(&Self, ValueId) -> Vec<Expr>,
    ) -> Result<Vec<Lazy>, LowerError> {
        let mut inputs = Vec::new();
        for v in node.tensor_inputs() {
            let lazy = self.value(v, &node.target)?;
            let strides = strides_of(self, v);
            inputs.push(self.buffer_with_strides(&lazy, strides));
        }
        let mut outputs = Vec::new();
        let mut lazies = Vec::new();
        for v in &node.outputs {
            let meta = self.graph.meta(*v);
            let buf = self.prog.add_buffer(Buffer {
                dtype: meta.dtype,
                sizes: self.meta_sizes(*v),
                strides: strides_of(self, *v),
                offset: Expr::zero(),
                role: BufRole::ExternOut,
            });
            outputs.push(buf);
            lazies.push(self.load_buffer(buf));
        }
        self.prog.steps.push(Step::Extern(Extern { kind, inputs, outputs }));
        Ok(lazies)
    }

    pub(crate) fn value(&self, v: ValueId, op: &str) -> Result<Lazy, LowerError> {
        self.env
            .get(v.0 as usize)
            .cloned()
            .flatten()
            .ok_or_else(|| crate::invalid(op, format!("{v} is used before it is defined")))
    }

    /// The lazy tensor behind a tensor argument.
    pub(crate) fn tensor_arg(&self, node: &Node, pos: usize, name: &str) -> Result<Lazy, LowerError> {
        match node.arg(pos, name) {
            Arg::Tensor(v) => self.value(*v, &node.target),
            other => Err(crate::unsupported(&node.target, format!("argument {name} is {other}, expected a tensor"))),
        }
    }

    pub(crate) fn meta_sizes(&self, v: ValueId) -> Vec<Expr> {
        self.graph.meta(v).sizes.iter().map(|s| s.simplify(&self.syms)).collect()
    }

    /// A temporary buffer for an extern call's output `v`, laid out as
    /// PyTorch's metadata says (`sizes` as the caller computed them).
    pub(crate) fn extern_output(&mut self, v: ValueId, sizes: Vec<Expr>, dtype: crate::ir::DType) -> BufId {
        let strides = self.meta_strides(v);
        self.temp_buffer(dtype, sizes, strides)
    }

    /// A new temporary buffer of `sizes` laid out by `strides`.
    pub(crate) fn temp_buffer(&mut self, dtype: crate::ir::DType, sizes: Vec<Expr>, strides: Vec<Expr>) -> BufId {
        self.prog.add_buffer(Buffer { dtype, sizes, strides, offset: Expr::zero(), role: BufRole::Temp })
    }

    /// `e`'s value in this specialization, if known.
    pub(crate) fn constant(&self, e: &Expr) -> Option<i64> {
        e.simplify(&self.syms).as_const()
    }

    /// The values of `exprs`, if all are known.
    pub(crate) fn concrete(&self, exprs: &[Expr]) -> Option<Vec<i64>> {
        exprs.iter().map(|e| self.constant(e)).collect()
    }

    pub(crate) fn meta_strides(&self, v: ValueId) -> Vec<Expr> {
        self.graph.meta(v).strides.iter().map(|s| s.simplify(&self.syms)).collect()
    }

    /// A simplification context for index variables ranging over `sizes`.
    pub(crate) fn ctx_for(&self, sizes: &[Expr]) -> Ctx {
        let mut ctx = self.syms.clone();
        for (k, size) in sizes.iter().enumerate() {
            if let Some(n) = size.as_const() {
                ctx.var_ranges.insert(crate::ir::Var(k as u32), (0, (n - 1).max(0)));
            }
        }
        ctx
    }

    /// What recomputing a lazy's body costs, in simple ops: a
    /// transcendental counts as `RECOMPUTE_LIMIT`, so a value like softmax's
    /// `exp(x - max)` is stored once rather than recomputed per user.
    pub(crate) fn body_size(&self, lazy: &Lazy) -> usize {
        let scalars = &self.prog.scalars;
        scalars.topo(&[lazy.value]).iter().map(|id| op_cost(&scalars.get(*id).op)).sum()
    }

    /// The value `v` views through view ops only (itself if its producer is
    /// no view op), and the indices of those view nodes, in graph order.
    /// `producer`: per value, the index of the node that computes it.
    fn view_chain(&self, v: ValueId, producer: &[Option<usize>]) -> (ValueId, Vec<usize>) {
        let (mut v, mut chain) = (v, Vec::new());
        while let Some(k) = producer[v.0 as usize] {
            let node = &self.graph.nodes[k];
            match node.tensor_inputs().first() {
                Some(&base) if node.op.is_view() => {
                    chain.push(k);
                    v = base;
                }
                _ => break,
            }
        }
        chain.reverse();
        (v, chain)
    }

    /// The buffer holding `base`, a value that is no output but that several
    /// outputs view, laid out as PyTorch says (stored once, under `base`).
    fn base_buffer(&mut self, base: ValueId, outs: &mut Outputs) -> Result<BufId, LowerError> {
        if let Some(buf) = outs.done.get(&base) {
            return Ok(*buf);
        }
        let lazy = self.value(base, "output")?;
        let strides = self.meta_strides(base);
        let buf = self.own_buffer(&lazy, strides, base, outs);
        outs.done.insert(base, buf);
        Ok(buf)
    }

    /// A buffer holding `lazy` with `strides` for what views `base`: a view
    /// of a buffer the program writes when no other output's storage is
    /// that buffer's (unless it is `base`'s), else a copy.
    fn own_buffer(&mut self, lazy: &Lazy, strides: Vec<Expr>, base: ValueId, outs: &mut Outputs) -> BufId {
        let view = self.as_view_of_own(lazy, &strides).filter(|view| {
            let storage = self.prog.storage_of(*view);
            outs.owner.get(&storage).is_none_or(|owner| *owner == base)
        });
        let buf = view.unwrap_or_else(|| self.realize(lazy, Some(strides)));
        outs.owner.entry(self.prog.storage_of(buf)).or_insert(base);
        buf
    }

    /// A view of a buffer this program writes (or of an extern output), laid
    /// out as PyTorch says: never of a graph input.
    fn as_view_of_own(&mut self, lazy: &Lazy, strides: &[Expr]) -> Option<BufId> {
        let (buf, _, _) = self.strided_source(lazy)?;
        if matches!(self.prog.buffer(self.prog.storage_of(buf)).role, BufRole::Input(_)) {
            return None;
        }
        self.as_view_with_strides(lazy, strides)
    }

    fn lower_outputs(&mut self) -> Result<(), LowerError> {
        let mut producer = vec![None; self.graph.values.len()];
        for (k, node) in self.graph.nodes.iter().enumerate() {
            node.outputs.iter().for_each(|v| producer[v.0 as usize] = Some(k));
        }
        let mut state = Outputs::default();
        for arg in &self.graph.outputs {
            let Arg::Tensor(v) = arg else { continue };
            let (base, chain) = self.view_chain(*v, &producer);
            // An output is its own base; a base viewed by two outputs, or
            // viewed by one and itself an output, is shared.
            *state.viewers.entry(base).or_insert(0) += if chain.is_empty() { 2 } else { 1 };
            state.chains.insert(*v, (base, chain));
        }
        let outputs = self.graph.outputs.clone();
        for arg in &outputs {
            let out = match arg {
                Arg::Tensor(v) => ProgramOutput::Buffer(self.output_buffer(*v, &mut state)?),
                Arg::Int(e) => ProgramOutput::Int(e.simplify(&self.syms)),
                Arg::Bool(b) => ProgramOutput::Int(Expr::c(*b as i64)),
                _ => ProgramOutput::None,
            };
            self.prog.outputs.push(out);
        }
        Ok(())
    }

    /// The buffer of graph output `v`, with PyTorch's strides. An output
    /// that views an input or another output through view ops alone (and
    /// only such an output) shares its storage, as eager's does; outputs
    /// that view one value no output is share it too.
    fn output_buffer(&mut self, v: ValueId, outs: &mut Outputs) -> Result<BufId, LowerError> {
        if let Some(buf) = outs.done.get(&v) {
            return Ok(*buf);
        }
        let (base, chain) = outs.chains.get(&v).cloned().unwrap_or((v, Vec::new()));
        let of_input = self.graph.inputs.contains(&Input::Tensor(base));
        // A chain of views that keep the input's dtype: rdyn expresses it
        // as a strided view (a reinterpreting view, `x.view(torch.int16)`,
        // comes back as a copy, which AOTAutograd replays as such).
        let dtype = self.graph.meta(base).dtype;
        let input_view = of_input
            && !chain.is_empty()
            && chain.iter().all(|k| self.graph.nodes[*k].outputs.iter().all(|v| self.graph.meta(*v).dtype == dtype));
        if !of_input && !chain.is_empty() && outs.viewers.get(&base).is_some_and(|n| *n >= 2) {
            // Replay the views over the base's buffer, so that this output's
            // lazy reads that buffer.
            let base_buf = match self.graph.outputs.contains(&Arg::Tensor(base)) {
                true => self.output_buffer(base, outs)?,
                false => self.base_buffer(base, outs)?,
            };
            self.env[base.0 as usize] = Some(self.load_buffer(base_buf));
            for k in chain {
                let node = &self.graph.nodes[k];
                if let Ok(Handled::Native(lazies) | Handled::Extern(lazies)) = self.lower_node(node) {
                    for (out, lazy) in node.outputs.iter().zip(lazies) {
                        self.env[out.0 as usize] = Some(lazy);
                    }
                }
            }
        }
        let lazy = self.value(v, "output")?;
        let strides = self.meta_strides(v);
        // Only a view in the ATen graph may come back as an alias of an
        // input; a clone of one must be a copy. AOTAutograd rebuilds an
        // aliasing output from the input and the output's own offset and
        // strides, so one rdyn cannot express as a view must not be a copy.
        let buf = match of_input.then(|| self.as_input_view(&lazy)).flatten() {
            Some(view) => view,
            None if input_view => {
                return Err(crate::unsupported("output", "a view of an input that is not a strided view here"))
            }
            None => self.own_buffer(&lazy, strides, base, outs),
        };
        outs.done.insert(v, buf);
        Ok(buf)
    }
}

/// What [`Lowerer::lower_outputs`] has given buffers so far.
#[derive(Default)]
struct Outputs {
    /// Per output (or viewed base) value, its buffer.
    done: BTreeMap<ValueId, BufId>,
    /// Per storage buffer an output's buffer lies in, the value whose views
    /// may share it (the output itself, or the base its views share).
    owner: BTreeMap<BufId, ValueId>,
    /// Per output, the value it views and the view nodes in between
    /// (itself and none when it is no view).
    chains: BTreeMap<ValueId, (ValueId, Vec<usize>)>,
    /// Per viewed value, the outputs viewing it (one that is itself an
    /// output counts twice: its views share its storage).
    viewers: BTreeMap<ValueId, usize>,
}
