//! The lowering state every rule works on ([`Lowerer`]), the options of a
//! graph ([`LowerOptions`]), and the primitives rules build lazies with:
//! argument and metadata readers, loads, views, broadcasts, operands, casts.
//!
//! A value with several users whose body costs more than `RECOMPUTE_LIMIT`
//! is stored once (`body_size`, from the costs in `rdyn_ir::ops`); a `cat`
//! piece past `CAT_PIECE_LIMIT` is stored too (`rules/data.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rdyn_ir::graph::{Arg, Graph, Node, SymFloat, ValueId};
use rdyn_ir::loops::{contiguous_strides, BinaryOp, BufId, BufRole, Buffer, Program, ReduceOp, ScalarId, ScalarOp};
use rdyn_ir::ops::Cost;
use rdyn_ir::{Ctx, DType, Expr, Var};

use crate::error::{invalid, unsupported, LowerError};
use crate::lazy::{vars, Lazy};

/// Choices made for a whole graph.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LowerOptions {
    /// GEMMs on CUDA become GEMM steps that run as cuBLAS calls (`rules/gemm.rs`);
    /// otherwise they are ATen library calls.
    pub cublas: bool,
    /// rdyn's CPU-only kernels are available: scans (cumsum, cummax,
    /// logcumsumexp, ...) run its scan kernel, one sequential pass per line,
    /// and sorts (sort, topk, kthvalue, median) its sort kernel. Otherwise
    /// (GPU devices) scans are reductions over each element's prefix,
    /// parallel over every element, and sorts rank each element by a
    /// reduction over its line (`rules/sort.rs` `rank_sort`; long lines eagerly).
    pub cpu_kernels: bool,
    /// With `cpu_kernels`: the fewest elements per piece (on average) for
    /// which a stage that picks between sources by index ranges is split
    /// (`passes/piecewise.rs`, [`crate::PIECEWISE_MIN_ELEMENTS`] by default); 0
    /// leaves such stages whole.
    pub piecewise_min: i64,
    /// With `cpu_kernels`: narrow column reductions run as partials over
    /// blocks of rows and a combine (`passes/split_reduce.rs`).
    pub split_reduce: bool,
    /// With `split_reduce`: a column reduction's partials run in the row
    /// kernel before it when one covers the same rows
    /// (`passes/host_partials.rs`).
    pub host_partials: bool,
    /// With `cpu_kernels`: library convolution backwards run channels-last
    /// where the forward's rule says so (`rules/conv.rs`
    /// `channels_last_backward_wins`).
    pub conv_backward_channels_last: bool,
    /// With `cpu_kernels`: a computed stage whose loads cross its store's
    /// layout is computed in theirs, then copied (`passes/relayout.rs`).
    pub relayout: bool,
    /// Binary ops read a Python float operand of a float16/bfloat16 tensor
    /// in float32, as ATen's CUDA kernels do. Otherwise (the CPU's
    /// convention, which wgpu's CPU tensors follow) the float is first
    /// converted to the tensor's dtype, as TensorIterator converts a
    /// wrapped scalar, except by mul and div, whose CPU kernels read it in
    /// float32: bfloat16 `x == 3.14` compares with 3.140625.
    pub opmath_scalars: bool,
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

/// What a rule did with a node: its outputs, computed by rdyn's kernels
/// (or views), or by a library call.
pub(crate) enum Handled {
    Native(Vec<Lazy>),
    Extern(Vec<Lazy>),
}

/// What a rule returns.
pub(crate) type Res = Result<Handled, LowerError>;

/// What a reduction computes: op, output ranges, reduction ranges, body,
/// result dtype.
pub(crate) type ReductionKey = (ReduceOp, Vec<Expr>, Vec<Expr>, ScalarId, DType);

/// One graph being lowered: the program so far and, per graph value, its lazy.
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
    pub reductions: HashMap<ReductionKey, BufId>,
    /// Per value, the buffer a library call's input copy stored it in, laid
    /// out for that call (a convolution's channels-last input): a graph
    /// output whose layout rdyn chooses is that buffer (`outputs.rs`).
    pub laid_out: BTreeMap<ValueId, BufId>,
    /// The graph outputs whose layout rdyn chooses (`outputs.rs`
    /// `free_values`).
    pub free_outputs: BTreeSet<ValueId>,
    /// NCHW values that library convolutions read channels-last: stored so
    /// when stored once (`rules/conv.rs` `stored_strides`).
    pub channels_last: BTreeSet<ValueId>,
}

/// Bodies larger than this are stored once rather than recomputed in every
/// consumer when a value has several users.
pub(crate) const RECOMPUTE_LIMIT: usize = 12;

/// The most a piece of a `cat` may cost per element ([`op_cost`]) and stay
/// fused into it. ShuffleNet passes half of every block's output on
/// untouched through the next block's `cat` and channel shuffle: fused, the
/// last block evaluated all earlier ones per element (224 ops, 2.5 ms; the
/// model 0.74x eager, 2.7x with its pieces stored past this cost).
pub(crate) const CAT_PIECE_LIMIT: usize = 32;

/// The cost of one scalar op when deciding whether to recompute a body.
fn op_cost(op: &ScalarOp) -> usize {
    let cost = match op {
        ScalarOp::Unary(op, _) => op.info().cost,
        ScalarOp::Binary(op, ..) => op.info().cost,
        // A checked data-dependent index (a gather's row): besides the check,
        // it keeps the row's address out of compiled loops' row steps, so
        // every reader would pay it per row. Gathered values with several
        // users are stored once.
        ScalarOp::Bounded(..) => Cost::Costly,
        _ => Cost::Cheap,
    };
    match cost {
        Cost::Cheap => 1,
        Cost::Costly => RECOMPUTE_LIMIT,
    }
}

impl Lowerer<'_> {
    /// The lazy of graph value `v` (`op` names the node asking, for the error).
    pub(crate) fn value(&self, v: ValueId, op: &str) -> Result<Lazy, LowerError> {
        self.env
            .get(v.0 as usize)
            .cloned()
            .flatten()
            .ok_or_else(|| invalid(op, format!("{v} is used before it is defined")))
    }

    /// The lazy tensor behind a tensor argument.
    pub(crate) fn tensor_arg(&self, node: &Node, pos: usize, name: &str) -> Result<Lazy, LowerError> {
        match node.arg(pos, name) {
            Arg::Tensor(v) => self.value(*v, &node.target),
            other => Err(unsupported(&node.target, format!("argument {name} is {other}, expected a tensor"))),
        }
    }

    /// The result's sizes and dtype, from PyTorch's metadata.
    pub(crate) fn out_meta(&self, node: &Node) -> Result<(Vec<Expr>, DType), LowerError> {
        let v = node.outputs.first().ok_or_else(|| invalid(&node.target, "node has no tensor output"))?;
        Ok((self.meta_sizes(*v), self.graph.meta(*v).dtype))
    }

    pub(crate) fn meta_sizes(&self, v: ValueId) -> Vec<Expr> {
        self.graph.meta(v).sizes.iter().map(|s| s.simplify(&self.syms)).collect()
    }

    pub(crate) fn meta_strides(&self, v: ValueId) -> Vec<Expr> {
        self.graph.meta(v).strides.iter().map(|s| s.simplify(&self.syms)).collect()
    }

    /// A temporary buffer for an extern call's output `v`, laid out as
    /// PyTorch's metadata says (`sizes` as the caller computed them).
    pub(crate) fn extern_output(&mut self, v: ValueId, sizes: Vec<Expr>, dtype: DType) -> BufId {
        let strides = self.meta_strides(v);
        self.temp_buffer(dtype, sizes, strides)
    }

    /// A new temporary buffer of `sizes` laid out by `strides`.
    pub(crate) fn temp_buffer(&mut self, dtype: DType, sizes: Vec<Expr>, strides: Vec<Expr>) -> BufId {
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

    /// A simplification context for index variables ranging over `sizes`.
    pub(crate) fn ctx_for(&self, sizes: &[Expr]) -> Ctx {
        let mut ctx = self.syms.clone();
        for (k, size) in sizes.iter().enumerate() {
            if let Some(n) = size.as_const() {
                ctx.var_ranges.insert(Var(k as u32), (0, n.saturating_sub(1).max(0)));
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
}

/// Lazies from buffers, views, operands and casts.
impl Lowerer<'_> {
    /// The lazy tensor that reads `buf` element by element.
    pub(crate) fn load_buffer(&mut self, buf: BufId) -> Lazy {
        let buffer = self.prog.buffer(buf).clone();
        let index = buffer.address(&vars(buffer.sizes.len())).simplify(&self.ctx_for(&buffer.sizes));
        let value =
            self.prog.scalars.add(ScalarOp::Load { buf, index, indirect: Vec::new(), mask: None }, buffer.dtype);
        Lazy { sizes: buffer.sizes, value, dtype: buffer.dtype }
    }

    /// A view: the new tensor has `sizes`, and its element at `i` is the old
    /// tensor's element at `map(i)` (one expression per old dimension).
    pub(crate) fn view(&mut self, lazy: &Lazy, sizes: Vec<Expr>, map: &[Expr]) -> Lazy {
        let ctx = self.ctx_for(&sizes);
        let value = self.prog.scalars.substitute(lazy.value, map, &ctx);
        Lazy { sizes, value, dtype: lazy.dtype }
    }

    /// Broadcast to `sizes` (right-aligned, size-1 dimensions stretched).
    pub(crate) fn broadcast_to(&mut self, lazy: &Lazy, sizes: &[Expr]) -> Lazy {
        if lazy.sizes == sizes {
            return lazy.clone();
        }
        let shift = sizes.len().saturating_sub(lazy.ndim());
        let map: Vec<Expr> = (0..lazy.ndim())
            .map(|k| {
                let out_dim = k + shift;
                if lazy.sizes[k].is_const(1) && !sizes.get(out_dim).is_some_and(|s| s.is_const(1)) {
                    Expr::zero()
                } else {
                    Expr::v(out_dim as u32)
                }
            })
            .collect();
        self.view(lazy, sizes.to_vec(), &map)
    }

    /// The value of a tensor or scalar argument at the output index, cast to
    /// `dtype`, broadcast to `sizes`.
    pub(crate) fn operand(
        &mut self,
        arg: &Arg,
        sizes: &[Expr],
        dtype: DType,
        op: &str,
    ) -> Result<ScalarId, LowerError> {
        let value = match arg {
            Arg::Tensor(v) => {
                let lazy = self.value(*v, op)?;
                self.broadcast_to(&lazy, sizes).value
            }
            Arg::Float(x) => self.prog.scalars.constant(*x, DType::F64),
            Arg::SymFloat(x) => match x.eval(&self.syms) {
                Some(v) => self.prog.scalars.constant(v, DType::F64),
                None => self.sym_float(x),
            },
            Arg::Int(e) => match e.as_const() {
                Some(n) => self.prog.scalars.int_constant(n, DType::I64),
                None => self.prog.scalars.index(e.clone()),
            },
            Arg::Bool(b) => self.prog.scalars.int_constant(*b as i64, DType::Bool),
            other => return Err(unsupported(op, format!("operand {other} is not a tensor or number"))),
        };
        Ok(self.prog.scalars.cast(value, dtype))
    }

    /// A float computed from sizes the program does not fix (a generic
    /// program's): float64 arithmetic on its index values.
    fn sym_float(&mut self, x: &SymFloat) -> ScalarId {
        let (op, a, b) = match x {
            SymFloat::Const(v) => return self.prog.scalars.constant(*v, DType::F64),
            SymFloat::Int(e) => {
                let i = self.prog.scalars.index(e.clone());
                return self.prog.scalars.cast(i, DType::F64);
            }
            SymFloat::Add(a, b) => (BinaryOp::Add, a, b),
            SymFloat::Mul(a, b) => (BinaryOp::Mul, a, b),
            SymFloat::Div(a, b) => (BinaryOp::Div, a, b),
        };
        let (a, b) = (self.sym_float(a), self.sym_float(b));
        self.prog.scalars.binary(op, a, b, DType::F64)
    }

    pub(crate) fn cast_lazy(&mut self, lazy: Lazy, dtype: DType) -> Lazy {
        let value = self.prog.scalars.cast(lazy.value, dtype);
        Lazy { value, dtype, ..lazy }
    }

    /// `x` with new `sizes` and the same elements in row-major order.
    pub(crate) fn reshape(&mut self, x: &Lazy, sizes: Vec<Expr>) -> Lazy {
        // No elements: no index is ever read, and a map through `% 0` left
        // the view's offset unevaluable (`16*(0 % 0) + 64`).
        if sizes.iter().chain(&x.sizes).any(|s| s.is_const(0)) {
            return self.view(x, sizes, &vec![Expr::zero(); x.ndim()]);
        }
        let ctx = self.ctx_for(&sizes);
        let out_strides = contiguous_strides(&sizes);
        let linear = vars(sizes.len()).iter().zip(&out_strides).fold(Expr::zero(), |acc, (v, s)| acc.add(&v.mul(s)));
        let in_strides = contiguous_strides(&x.sizes);
        let map: Vec<Expr> =
            (0..x.ndim()).map(|j| linear.floordiv(&in_strides[j], &ctx).modulo(&x.sizes[j], &ctx)).collect();
        self.view(x, sizes, &map)
    }
}
