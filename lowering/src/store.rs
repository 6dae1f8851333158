//! When a lazy becomes a buffer: `realize` stores one, and the helpers
//! around it find a buffer a lazy already is (a strided view of one), so that
//! library calls, eager fallbacks and graph outputs get memory without a copy
//! where a view will do.
//!
//! `realize` stores a lazy in storage order: the kernel's loops are ordered by
//! the buffer's strides, largest first, so a channels-last or transposed result
//! (eager's layout for a pointwise op on such an input) is written along memory,
//! and an input of the same layout is read so too.

use rdyn_ir::graph::{Node, ValueId};
use rdyn_ir::loops::{contiguous_strides, BufId, BufRole, Buffer, Extern, ExternKind, Kernel, ScalarOp, Stage, Step};
use rdyn_ir::{Expr, Var};

use crate::error::LowerError;
use crate::lazy::{vars, Lazy};
use crate::lowerer::Lowerer;

impl Lowerer<'_> {
    /// Store `lazy` into a new temporary buffer (contiguous unless `strides`
    /// says otherwise) and return it. The kernel walks the buffer in storage
    /// order: a channels-last buffer is written along its channels, not
    /// across them (see [`storage_order`]). `strides` has one stride per
    /// dim of `lazy`: callers pass a value's metadata strides for its lazy,
    /// whose rank `lower.rs` checks is the metadata's.
    pub(crate) fn realize(&mut self, lazy: &Lazy, strides: Option<Vec<Expr>>) -> BufId {
        let strides = strides.unwrap_or_else(|| contiguous_strides(&lazy.sizes));
        let order = storage_order(&lazy.sizes, &strides);
        let buf = self.temp_buffer(lazy.dtype, lazy.sizes.clone(), strides);
        let (ranges, value, index) = match order {
            Some(perm) => {
                let ranges: Vec<Expr> = perm.iter().map(|&d| lazy.sizes[d].clone()).collect();
                let mut map = vec![Expr::zero(); perm.len()];
                for (j, &d) in perm.iter().enumerate() {
                    map[d] = Expr::v(j as u32);
                }
                let permuted = self.view(lazy, ranges.clone(), &map);
                (ranges, permuted.value, map)
            }
            None => (lazy.sizes.clone(), lazy.value, vars(lazy.ndim())),
        };
        let store = self.prog.buffer(buf).address(&index).simplify(&self.ctx_for(&ranges));
        self.prog.steps.push(Step::Kernel(Kernel {
            outer: ranges.clone(),
            stages: vec![Stage { out: buf, ranges, reduce: None, value, store, store_indirect: Vec::new() }],
        }));
        buf
    }

    /// If `lazy` reads one buffer through an affine index (a strided view),
    /// the buffer and that view's strides and offset.
    pub(crate) fn strided_source(&self, lazy: &Lazy) -> Option<(BufId, Vec<Expr>, Expr)> {
        let ScalarOp::Load { buf, index, indirect, mask } = &self.prog.scalars.get(lazy.value).op else {
            return None;
        };
        if !indirect.is_empty() || mask.is_some() || self.prog.buffer(*buf).dtype != lazy.dtype {
            return None;
        }
        let mut strides = Vec::with_capacity(lazy.ndim());
        for k in 0..lazy.ndim() {
            let var = Var(k as u32);
            // Symbolic in a shape-generic program, whose input strides are
            // symbols: an output viewing an input must stay a view there
            // too (AOTAutograd rebuilds an aliased output from its offset).
            let coef = index.linear_coef_expr(var)?;
            // A size-1 dimension may have any stride; PyTorch's is fine.
            strides.push(coef);
        }
        let zero: Vec<Expr> = vec![Expr::zero(); lazy.ndim()];
        let offset = index.substitute_vars(&zero, &self.syms);
        if offset.max_var().is_some() {
            return None;
        }
        Some((*buf, strides, offset))
    }

    /// A view buffer over the storage `lazy` reads, if it is a strided view.
    pub(crate) fn as_view(&mut self, lazy: &Lazy) -> Option<BufId> {
        self.view_buffer(lazy, None)
    }

    /// [`Self::as_view`], with the strides of size-1 dimensions taken from
    /// `promised` (what PyTorch's metadata says) when given.
    fn view_buffer(&mut self, lazy: &Lazy, promised: Option<&[Expr]>) -> Option<BufId> {
        let (buf, mut strides, offset) = self.strided_source(lazy)?;
        if let Some(promised) = promised {
            for ((s, p), n) in strides.iter_mut().zip(promised).zip(&lazy.sizes) {
                if n.is_const(1) || n.is_const(0) {
                    *s = p.clone();
                }
            }
        }
        // PyTorch tensors cannot have negative strides (flip): copy instead.
        if strides.iter().any(|s| s.as_const().is_some_and(|v| v < 0)) {
            return None;
        }
        let base = self.prog.storage_of(buf);
        let source = self.prog.buffer(buf);
        if source.sizes == lazy.sizes && source.strides == strides && source.offset == offset {
            return Some(buf);
        }
        Some(self.prog.add_buffer(Buffer {
            dtype: lazy.dtype,
            sizes: lazy.sizes.clone(),
            strides,
            offset,
            role: BufRole::View(base),
        }))
    }

    /// A view of a graph input (so an output can alias it), if that is what
    /// `lazy` is.
    pub(crate) fn as_input_view(&mut self, lazy: &Lazy) -> Option<BufId> {
        let (buf, _, _) = self.strided_source(lazy)?;
        let base = self.prog.storage_of(buf);
        if !matches!(self.prog.buffer(base).role, BufRole::Input(_)) {
            return None;
        }
        self.as_view(lazy)
    }

    /// A view of an existing buffer when `lazy` is one and has the layout
    /// PyTorch would give (size-1 dimensions may have any stride).
    pub(crate) fn as_view_with_strides(&mut self, lazy: &Lazy, strides: &[Expr]) -> Option<BufId> {
        let (_, own, _) = self.strided_source(lazy)?;
        let same = own.iter().zip(strides).zip(&lazy.sizes).all(|((a, b), n)| a == b || n.is_const(1) || n.is_const(0));
        if !same || own.len() != strides.len() {
            return None;
        }
        self.view_buffer(lazy, Some(strides))
    }

    /// A buffer holding `lazy` for a library or eager call: the source itself
    /// when it is a strided view, else a new contiguous buffer.
    pub(crate) fn buffer_for_extern(&mut self, lazy: &Lazy) -> BufId {
        match self.as_view(lazy) {
            Some(buf) => buf,
            None => self.realize(lazy, None),
        }
    }
}

/// Library and eager calls.
impl Lowerer<'_> {
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
            let buf = match self.as_view_with_strides(&lazy, &strides) {
                Some(view) => view,
                None => {
                    let copy = self.realize(&lazy, Some(strides));
                    self.laid_out.entry(v).or_insert(copy);
                    copy
                }
            };
            inputs.push(buf);
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
}

/// The order of the dimensions, outermost first, that walks a buffer of
/// `sizes` laid out by `strides` in storage order (strides decreasing;
/// size-1 dimensions, whose stride means nothing, first), or None when the
/// given order already does or a stride is symbolic.
fn storage_order(sizes: &[Expr], strides: &[Expr]) -> Option<Vec<usize>> {
    let mut keys = Vec::with_capacity(sizes.len());
    for (size, stride) in sizes.iter().zip(strides) {
        keys.push(if size.is_const(1) { i64::MAX } else { stride.as_const()? });
    }
    let in_order = keys.iter().filter(|&&k| k != i64::MAX).collect::<Vec<_>>().windows(2).all(|w| w[0] >= w[1]);
    if in_order {
        return None;
    }
    let mut perm: Vec<usize> = (0..sizes.len()).collect();
    perm.sort_by_key(|&d| std::cmp::Reverse(keys[d]));
    Some(perm)
}
