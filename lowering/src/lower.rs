//! The lowering driver: the graph's inputs become loads, each node is lowered
//! by its op's rule (`rules/`), an unsupported node becomes an eager fallback,
//! the graph outputs get their buffers (`outputs.rs`), and the passes run
//! (`pipeline.rs`).

use rdyn_ir::graph::{Graph, Input, Node};
use rdyn_ir::loops::{BufRole, Buffer, ExternKind, Program};
use rdyn_ir::{Ctx, Expr};

use crate::error::{invalid, LowerError};
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
            .ok_or_else(|| invalid("input", format!("no layout given for tensor input {k}")))?;
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
        lower_one(&mut lw, node)?;
    }
    lw.lower_outputs()?;
    let mut program = lw.prog;
    pipeline::run(&mut program, &lw.options)?;
    Ok(Lowered { program, counts: lw.counts })
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
    for (v, lazy) in node.outputs.iter().zip(outs) {
        let lazy = if lw.uses[v.0 as usize] > 1 && lw.body_size(&lazy) > RECOMPUTE_LIMIT {
            let strides = lw.meta_strides(*v);
            let buf = lw.realize(&lazy, Some(strides));
            lw.load_buffer(buf)
        } else {
            lazy
        };
        lw.env[v.0 as usize] = Some(lazy);
    }
    Ok(())
}
