//! The graph outputs' buffers. Outputs share storage exactly where eager's do
//! (`lower_outputs`): an output shares an input's, or another output's, only
//! when the ATen graph reaches it from that value through view ops alone
//! (`Op::is_view`); outputs that view one intermediate share that
//! intermediate's buffer, stored once, their views replayed over it. Any other
//! output is a buffer of its own with eager's strides, even when its lazy reads
//! an input or another output's buffer as a plain view (`x.clone()`,
//! `x.t().contiguous()`, a `copy_` into `empty_like(x)`, the clone of a stored
//! value): returning the input or the other output itself would let a write to
//! the clone change it. A view of an input that is not a strided view here is
//! `Unsupported` (AOTAutograd rebuilds an aliasing output from the input, so it
//! must not become a copy).

use std::collections::{BTreeMap, BTreeSet};

use rdyn_ir::graph::{Arg, Input, ValueId};
use rdyn_ir::loops::{BufId, BufRole, ProgramOutput};
use rdyn_ir::Expr;

use crate::error::{unsupported, LowerError};
use crate::lazy::Lazy;
use crate::lowerer::{Handled, Lowerer};
use crate::rules;

impl Lowerer<'_> {
    /// Give every graph output its buffer (or its int), in order.
    pub(crate) fn lower_outputs(&mut self) -> Result<(), LowerError> {
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

    /// The outputs whose layout rdyn chooses (`Graph::free_layout`): values
    /// every position of which is free, in a graph without size symbols
    /// (the strides reported to AOTAutograd are numbers).
    pub(crate) fn free_values(&self) -> BTreeSet<ValueId> {
        let free: BTreeSet<usize> = self.graph.free_layout.iter().copied().collect();
        if free.is_empty() || !self.graph.sym_names.is_empty() {
            return BTreeSet::new();
        }
        let mut values = BTreeSet::new();
        let mut pinned = BTreeSet::new();
        for (k, arg) in self.graph.outputs.iter().enumerate() {
            if let Arg::Tensor(v) = arg {
                if free.contains(&k) {
                    values.insert(*v)
                } else {
                    pinned.insert(*v)
                };
            }
        }
        values.retain(|v| !pinned.contains(v) && !self.graph.inputs.contains(&Input::Tensor(*v)));
        values
    }

    /// The lazy and strides of free output `v`: the buffer it already is
    /// (an extern call's result, or a dense buffer the program writes), or
    /// the copy a library call's input made of it; None keeps its metadata's.
    fn chosen_layout(&mut self, v: ValueId, lazy: &Lazy) -> Option<(Lazy, Vec<Expr>)> {
        if let Some((buf, strides, offset)) = self.strided_source(lazy) {
            let own = !matches!(self.prog.buffer(self.prog.storage_of(buf)).role, BufRole::Input(_));
            return (own && offset.is_const(0) && dense(&lazy.sizes, &strides)).then(|| (lazy.clone(), strides));
        }
        let buf = *self.laid_out.get(&v)?;
        let strides = self.prog.buffer(buf).strides.clone();
        Some((self.load_buffer(buf), strides))
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
            for &k in &chain {
                let node = &self.graph.nodes[k];
                if let Ok(Handled::Native(lazies) | Handled::Extern(lazies)) = rules::lower_node(self, node) {
                    for (out, lazy) in node.outputs.iter().zip(lazies) {
                        self.env[out.0 as usize] = Some(lazy);
                    }
                }
            }
        }
        let mut lazy = self.value(v, "output")?;
        let mut strides = self.meta_strides(v);
        if chain.is_empty() && self.free_outputs.contains(&v) {
            if let Some((free, layout)) = self.chosen_layout(v, &lazy) {
                (lazy, strides) = (free, layout);
            }
        }
        // Only a view in the ATen graph may come back as an alias of an
        // input; a clone of one must be a copy. AOTAutograd rebuilds an
        // aliasing output from the input and the output's own offset and
        // strides, so one rdyn cannot express as a view must not be a copy.
        let buf = match of_input.then(|| self.as_input_view(&lazy)).flatten() {
            Some(view) => view,
            None if input_view => {
                return Err(unsupported("output", "a view of an input that is not a strided view here"))
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

/// Whether `strides` lay out `sizes` densely: each element once, no gaps
/// (a permutation of a contiguous layout).
fn dense(sizes: &[Expr], strides: &[Expr]) -> bool {
    let mut dims = Vec::with_capacity(sizes.len());
    for (size, stride) in sizes.iter().zip(strides) {
        let (Some(n), Some(s)) = (size.as_const(), stride.as_const()) else { return false };
        if n == 0 {
            return false;
        }
        if n != 1 {
            dims.push((s, n));
        }
    }
    dims.sort_unstable();
    let mut next = 1;
    for (s, n) in dims {
        if s != next {
            return false;
        }
        next = s * n;
    }
    true
}
