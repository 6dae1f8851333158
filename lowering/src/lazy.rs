//! Lazy tensors: a value defined by a scalar expression over its index.
//!
//! A [`Lazy`] is sizes plus a scalar expression (in the hash-consed `Scalars`
//! arena) giving the element at index `(i0..iN)`. Pointwise ops build new
//! expressions; views substitute index expressions (`permute` swaps variables,
//! `view` uses floordiv/mod, `expand` uses 0). The index algebra folds a quotient
//! and remainder of the same value back, so a view of a view (a 4-D weight viewed
//! as a matrix, then transposed) stays an affine strided view. A size symbol may be
//! a value too: `scalar_tensor(s0)` and `full` of a size (dynamic upsampling's
//! scale) read it as an `Index` expression, and a float computed from sizes is a
//! `SymFloat` (`sym_float`: a constant where the symbols are bound, float64
//! arithmetic on `Index` values in a shape-generic program).
//!
//! `realize` stores a lazy in storage order: the kernel's loops are ordered by
//! the buffer's strides, largest first, so a channels-last or transposed result
//! (eager's layout for a pointwise op on such an input) is written along memory,
//! and an input of the same layout is read so too.

use crate::ir::graph::{Arg, SymFloat};
use crate::ir::loops::{contiguous_strides, BinaryOp, BufId, BufRole, Buffer, Kernel, ScalarId, ScalarOp, Stage, Step};
use crate::ir::{DType, Expr, Var};
use crate::lower::Lowerer;
use crate::LowerError;

/// A tensor not (necessarily) in memory: `value` is its element at index
/// `(i0, …, i{ndim-1})`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Lazy {
    pub sizes: Vec<Expr>,
    pub value: ScalarId,
    pub dtype: DType,
}

impl Lazy {
    pub fn ndim(&self) -> usize {
        self.sizes.len()
    }
}

/// The index variables `i0..n` as expressions.
pub(crate) fn vars(n: usize) -> Vec<Expr> {
    (0..n as u32).map(Expr::v).collect()
}

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
            other => return Err(crate::unsupported(op, format!("operand {other} is not a tensor or number"))),
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

    /// Store `lazy` into a new temporary buffer (contiguous unless `strides`
    /// says otherwise) and return it. The kernel walks the buffer in storage
    /// order: a channels-last buffer is written along its channels, not
    /// across them (see [`storage_order`]).
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

    /// A buffer holding `lazy` laid out by `strides`: the source itself when
    /// it is a view with them, else a copy.
    pub(crate) fn buffer_with_strides(&mut self, lazy: &Lazy, strides: Vec<Expr>) -> BufId {
        match self.as_view_with_strides(lazy, &strides) {
            Some(view) => view,
            None => self.realize(lazy, Some(strides)),
        }
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
