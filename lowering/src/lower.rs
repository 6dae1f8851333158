//! The lowering driver: the graph's inputs become loads, each node is lowered
//! by its op's rule (`rules/`), an unsupported node becomes an eager fallback,
//! the graph outputs get their buffers (`outputs.rs`), and the passes run
//! (`pipeline.rs`).

use rdyn_ir::graph::{Arg, Graph, Input, Node, ValueId};
use rdyn_ir::loops::{BufRole, Buffer, ExternKind, Program};
use rdyn_ir::{Ctx, Expr};

use crate::error::{agree, invalid, shape, LowerError};
use crate::lazy::Lazy;
use crate::lowerer::{Handled, LowerOptions, Lowerer, NodeCounts, RECOMPUTE_LIMIT};
use crate::{pipeline, rules};

/// The layout of one tensor input at the call being specialized: sizes,
/// strides and storage offset, concrete or symbolic.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InputLayout {
    pub sizes: Vec<Expr>,
    pub strides: Vec<Expr>,
    pub offset: Expr,
}

/// The result of lowering: the fused program and how nodes were handled.
#[derive(Clone, Debug)]
pub struct Lowered {
    pub program: Program,
    pub counts: NodeCounts,
}

/// Lower `graph` for inputs with the given layouts (one entry per graph
/// input; `None` for non-tensor inputs). `syms` holds the size-symbol values
/// of this specialization (empty for the shape-generic program).
pub fn lower(graph: &Graph, inputs: &[Option<InputLayout>], syms: &Ctx) -> Result<Lowered, LowerError> {
    lower_with(graph, inputs, syms, LowerOptions::default())
}

/// [`lower`] with `options`.
pub fn lower_with(
    graph: &Graph,
    inputs: &[Option<InputLayout>],
    syms: &Ctx,
    options: LowerOptions,
) -> Result<Lowered, LowerError> {
    check_graph(graph)?;
    let mut lw = Lowerer {
        options,
        graph,
        prog: Program::default(),
        env: vec![None; graph.values.len()],
        syms: syms.clone(),
        uses: graph.use_counts(),
        counts: NodeCounts::default(),
        reductions: Default::default(),
        laid_out: Default::default(),
        free_outputs: Default::default(),
        channels_last: Default::default(),
    };
    lw.free_outputs = lw.free_values();
    lw.channels_last = lw.channels_last_operands();
    for (k, input) in graph.inputs.iter().enumerate() {
        let Input::Tensor(v) = input else { continue };
        let layout = inputs
            .get(k)
            .cloned()
            .flatten()
            .ok_or_else(|| invalid("input", format!("no layout given for tensor input {k}")))?;
        let meta = graph.meta(*v);
        check_layout(&layout, meta.ndim(), k)?;
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
        lower_one(&mut lw, node)?;
    }
    lw.lower_outputs()?;
    let mut program = lw.prog;
    pipeline::run(&mut program, &lw.options)?;
    Ok(Lowered { program, counts: lw.counts })
}

/// What every rule takes for granted of the graph: each value a node or
/// the graph names exists, and each value's metadata describes a tensor
/// that can exist (as many strides as sizes, no negative size, fewer than
/// 2^63 elements and offsets): an error naming the node otherwise.
fn check_graph(graph: &Graph) -> Result<(), LowerError> {
    let count = graph.values.len();
    let exists = |v: ValueId, at: &str| match (v.0 as usize) < count {
        true => Ok(()),
        false => Err(invalid(at, format!("{v} names no value (the graph has {count})"))),
    };
    let mut named = Vec::new();
    for node in &graph.nodes {
        named.clear();
        node.args.iter().chain(node.kwargs.iter().map(|(_, a)| a)).for_each(|a| a.tensors(&mut named));
        for v in named.iter().chain(&node.outputs) {
            exists(*v, &node.target)?;
        }
        for v in &node.outputs {
            check_meta(graph, *v, &node.target)?;
        }
    }
    for input in &graph.inputs {
        if let Input::Tensor(v) = input {
            exists(*v, "input")?;
            check_meta(graph, *v, "input")?;
        }
    }
    named.clear();
    graph.outputs.iter().for_each(|a: &Arg| a.tensors(&mut named));
    named.iter().try_for_each(|v| exists(*v, "output"))
}

/// Value `v`'s metadata describes a tensor that can exist (`at` names the
/// node or graph input it belongs to, for the error).
fn check_meta(graph: &Graph, v: ValueId, at: &str) -> Result<(), LowerError> {
    let meta = graph.meta(v);
    if meta.strides.len() != meta.sizes.len() {
        let (sizes, strides) = (meta.sizes.len(), meta.strides.len());
        return Err(invalid(at, format!("{v} has {sizes} sizes and {strides} strides; expected as many of each")));
    }
    let consts: Vec<i64> = meta.sizes.iter().filter_map(Expr::as_const).collect();
    if let Some(n) = consts.iter().find(|n| **n < 0) {
        return Err(invalid(at, format!("{v} has size {n}; expected sizes of 0 or more")));
    }
    let span = |(n, s): (&Expr, &Expr)| match (n.as_const(), s.as_const()) {
        (Some(n), Some(s)) => n.saturating_sub(1).checked_mul(s).is_some(),
        _ => true,
    };
    let fits = consts.iter().try_fold(1i64, |acc, n| acc.checked_mul(*n)).is_some()
        && meta.sizes.iter().zip(&meta.strides).all(span);
    if !fits && !consts.contains(&0) {
        let sizes = shape(&meta.sizes);
        return Err(invalid(at, format!("{v} has sizes {sizes}: 2^63 elements or more; expected fewer")));
    }
    Ok(())
}

/// Tensor input `k`'s layout at this call: as many sizes and strides as
/// its metadata has dims, no size negative.
fn check_layout(layout: &InputLayout, ndim: usize, k: usize) -> Result<(), LowerError> {
    let (sizes, strides) = (layout.sizes.len(), layout.strides.len());
    if sizes != ndim || strides != ndim {
        let why = format!("{sizes} sizes and {strides} strides; expected {ndim} of each");
        return Err(invalid("input", format!("the layout of tensor input {k} has {why}")));
    }
    if let Some(n) = layout.sizes.iter().filter_map(Expr::as_const).find(|n| *n < 0) {
        return Err(invalid("input", format!("tensor input {k} has size {n}; expected sizes of 0 or more")));
    }
    Ok(())
}

/// A rule's result for output `v` has the rank and the (known) sizes of
/// `v`'s metadata: a rule that computes its result's sizes from its inputs
/// (a reduction) must agree with PyTorch's, or the buffers laid out by the
/// metadata would not fit it.
fn check_output(lw: &Lowerer<'_>, node: &Node, v: ValueId, lazy: &Lazy) -> Result<(), LowerError> {
    let meta = lw.meta_sizes(v);
    if !agree(&meta, &lazy.sizes) {
        let (computed, given) = (shape(&lazy.sizes), shape(&meta));
        return Err(invalid(&node.target, format!("output {v} has sizes {given}; its arguments give {computed}")));
    }
    Ok(())
}

/// Lower `node` by its rule, or as an eager fallback; store an output that
/// several users would each recompute at more than `RECOMPUTE_LIMIT`.
fn lower_one(lw: &mut Lowerer<'_>, node: &Node) -> Result<(), LowerError> {
    let result = rules::lower_node(lw, node);
    let outs = match result {
        Ok(Handled::Native(outs)) => {
            lw.counts.native += 1;
            outs
        }
        Ok(Handled::Extern(outs)) => {
            lw.counts.extern_ += 1;
            outs
        }
        Err(LowerError::Unsupported { reason, .. }) => {
            lw.counts.fallback += 1;
            *lw.counts.fallback_ops.entry(node.target.clone()).or_insert(0) += 1;
            lw.counts.fallback_reasons.entry(node.target.clone()).or_insert(reason);
            lw.extern_call(node, ExternKind::Fallback { node: node.index, target: node.target.clone() })?
        }
        Err(other) => return Err(other),
    };
    for (v, lazy) in node.outputs.iter().zip(&outs) {
        check_output(lw, node, *v, lazy)?;
    }
    for (v, lazy) in node.outputs.iter().zip(outs) {
        let lazy = if lw.uses[v.0 as usize] > 1 && lw.body_size(&lazy) > RECOMPUTE_LIMIT {
            let strides = lw.stored_strides(*v);
            let buf = lw.realize(&lazy, Some(strides));
            lw.load_buffer(buf)
        } else {
            lazy
        };
        lw.env[v.0 as usize] = Some(lazy);
    }
    Ok(())
}
