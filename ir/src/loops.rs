//! The loop-level IR: buffers defined by functions from an index to a value.
//!
//! A [`Stage`] computes one buffer: over its `ranges` (and, for a reduction,
//! its reduction ranges) it evaluates a scalar expression DAG and stores the
//! value at `store`. Scalar expressions live in one hash-consed arena per
//! program ([`Scalars`]), so inlining a producer into a consumer is a
//! substitution that shares structure instead of copying it.
//!
//! A [`Kernel`] is a group of stages that share an outer iteration space and
//! run in order for each outer point: pointwise fusion, reductions with their
//! prologue and epilogue, and horizontal fusion are all this one shape.

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::dtype::DType;
use crate::expr::{Ctx, Expr, Var};

mod simplify;

/// A buffer (`buf3`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufId(pub u32);

/// A scalar expression node (`t7`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScalarId(pub u32);

impl fmt::Display for BufId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "buf{}", self.0)
    }
}

impl fmt::Display for ScalarId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}

/// What a buffer is to the program.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum BufRole {
    /// Graph input number `n`.
    Input(usize),
    /// Scratch owned by the program for one call.
    Temp,
    /// Filled by an extern call (library or eager fallback) that allocates it.
    ExternOut,
    /// A strided view of another buffer's storage.
    View(BufId),
}

/// A buffer: element type and strided layout.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Buffer {
    pub dtype: DType,
    pub sizes: Vec<Expr>,
    pub strides: Vec<Expr>,
    pub offset: Expr,
    pub role: BufRole,
}

impl Buffer {
    /// Storage index of the element at `index` (one expression per dim).
    pub fn address(&self, index: &[Expr]) -> Expr {
        let mut acc = self.offset.clone();
        for (i, s) in index.iter().zip(&self.strides) {
            acc = acc.add(&i.mul(s));
        }
        acc
    }
}

/// Contiguous strides for `sizes`.
pub fn contiguous_strides(sizes: &[Expr]) -> Vec<Expr> {
    let mut strides = vec![Expr::c(1); sizes.len()];
    let mut acc = Expr::c(1);
    for k in (0..sizes.len()).rev() {
        strides[k] = acc.clone();
        let size = if sizes[k].is_const(0) { Expr::c(1) } else { sizes[k].clone() };
        acc = acc.mul(&size);
    }
    strides
}

macro_rules! simple_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $text:literal,)* }) => {
        $(#[$doc])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($variant,)* }
        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text,)* }
            }

            /// The variant printed as `name` (the text parser reads it back).
            pub fn from_name(name: &str) -> Option<$name> {
                Self::ALL.iter().copied().find(|v| v.name() == name)
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.name()) }
        }
    };
}

simple_enum! {
    /// One-operand scalar operations.
    UnaryOp {
        Neg => "neg", Abs => "abs", Exp => "exp", Exp2 => "exp2", Expm1 => "expm1",
        Log => "log", Log2 => "log2", Log10 => "log10", Log1p => "log1p",
        Sqrt => "sqrt", Rsqrt => "rsqrt", Sin => "sin", Cos => "cos", Tan => "tan",
        Asin => "asin", Acos => "acos", Atan => "atan", Sinh => "sinh", Cosh => "cosh",
        Tanh => "tanh", Asinh => "asinh", Acosh => "acosh", Atanh => "atanh",
        Sigmoid => "sigmoid", Erf => "erf", Erfc => "erfc", Erfinv => "erfinv",
        // Exact GELU, x·Φ(x) = x·(1 + erf(x/√2))/2: one op, not its five.
        Gelu => "gelu",
        // Its derivative Φ(x) + x·φ(x) (gelu_backward's factor), one op.
        GeluGrad => "gelu_grad",
        Floor => "floor", Ceil => "ceil", Round => "round", Trunc => "trunc",
        Sign => "sign", Reciprocal => "reciprocal", Not => "not", BitNot => "bitnot",
        IsNan => "isnan", IsInf => "isinf", Signbit => "signbit", Lgamma => "lgamma",
        Digamma => "digamma",
        // special functions
        I0 => "i0", I0e => "i0e", I1 => "i1", I1e => "i1e", K0 => "k0", K1 => "k1",
        K0e => "k0e", K1e => "k1e", BesselJ0 => "bessel_j0", BesselJ1 => "bessel_j1",
        BesselY0 => "bessel_y0", BesselY1 => "bessel_y1", SphericalJ0 => "spherical_j0", AiryAi => "airy_ai",
        Erfcx => "erfcx", Ndtri => "ndtri",
    }
}

simple_enum! {
    /// Two-operand scalar operations. Operands share the result's kind,
    /// except comparisons, whose operands share a kind and whose result is bool.
    BinaryOp {
        Add => "add", Sub => "sub", Mul => "mul", Div => "div",
        FloorDiv => "floordiv", TruncDiv => "truncdiv", Rem => "rem", Fmod => "fmod",
        Pow => "pow", Max => "max", Min => "min", Fmax => "fmax", Fmin => "fmin",
        Atan2 => "atan2", Hypot => "hypot", Copysign => "copysign", Nextafter => "nextafter",
        Eq => "eq", Ne => "ne", Lt => "lt", Le => "le", Gt => "gt", Ge => "ge",
        And => "and", Or => "or", Xor => "xor",
        Zeta => "zeta", Igamma => "igamma", Igammac => "igammac",
        ChebyshevT => "chebyshev_t", ChebyshevU => "chebyshev_u", ChebyshevV => "chebyshev_v",
        ChebyshevW => "chebyshev_w", ShiftedChebyshevT => "shifted_chebyshev_t",
        ShiftedChebyshevU => "shifted_chebyshev_u", ShiftedChebyshevV => "shifted_chebyshev_v",
        ShiftedChebyshevW => "shifted_chebyshev_w", HermiteH => "hermite_h", HermiteHe => "hermite_he",
        LaguerreL => "laguerre_l", LegendreP => "legendre_p",
        BitAnd => "bitand", BitOr => "bitor", BitXor => "bitxor", Shl => "shl", Shr => "shr",
        // 24 random bits for (position, key): [`crate::random::hash_mix`].
        HashMix => "hash_mix",
    }
}

simple_enum! {
    /// How a reduction combines values.
    ReduceOp {
        Sum => "sum", Prod => "prod", Max => "max", Min => "min",
        ArgMax => "argmax", ArgMin => "argmin", Any => "any", All => "all",
    }
}

simple_enum! {
    /// Running reductions along one dim (rdyn's CPU scan kernel).
    ScanOp {
        Sum => "cumsum", Prod => "cumprod", Max => "cummax", Min => "cummin",
        LogSumExp => "logcumsumexp",
    }
}

/// Which elements of each sorted line a sort keeps.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum SortSelect {
    /// The whole line (sort, argsort).
    All,
    /// The first `k` (topk).
    Leading(i64),
    /// The one at 0-based position `k` (kthvalue).
    Kth(i64),
    /// The lower median, or the first NaN of a line that has one (median).
    Median,
    /// The lower median of the line's non-NaN values (nanmedian).
    NanMedian,
}

/// A sort along `dim`. Ties keep their input order (a stable sort, which
/// also meets `stable=False`); NaN sorts above every number, as in ATen.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SortSpec {
    pub dim: usize,
    pub descending: bool,
    pub select: SortSelect,
}

impl SortSpec {
    /// The output's length along `dim`, given the input's.
    pub fn out_len(&self, n: i64) -> i64 {
        match self.select {
            SortSelect::All => n,
            SortSelect::Leading(k) => k,
            _ => 1,
        }
    }
}

impl fmt::Display for SortSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let order = if self.descending { "descending" } else { "ascending" };
        write!(f, "sort dim {} {order}", self.dim)?;
        match self.select {
            SortSelect::All => Ok(()),
            SortSelect::Leading(k) => write!(f, " first {k}"),
            SortSelect::Kth(k) => write!(f, " element {k}"),
            SortSelect::Median => f.write_str(" median"),
            SortSelect::NanMedian => f.write_str(" nanmedian"),
        }
    }
}

/// A node of a scalar expression DAG, evaluated at one index.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ScalarOp {
    /// Read `buf` at storage index `index + Σ value(s)·stride`. With a mask,
    /// lanes where the mask is false read nothing and yield zero.
    Load {
        buf: BufId,
        index: Expr,
        indirect: Vec<(ScalarId, Expr)>,
        mask: Option<ScalarId>,
    },
    /// A literal: float bits for float dtypes, the integer otherwise.
    Const {
        bits: u64,
    },
    /// The value of an index expression.
    Index(Expr),
    Unary(UnaryOp, ScalarId),
    Binary(BinaryOp, ScalarId, ScalarId),
    Where(ScalarId, ScalarId, ScalarId),
    /// Convert to the node's dtype (wrapping for integers, rounding for
    /// narrow floats).
    Cast(ScalarId),
    /// An index read from data: a negative value wraps once by `size` or is
    /// out of range (`Negatives`); a value still outside `0..size` is an
    /// error the kernel reports (and reads 0).
    Bounded(ScalarId, Expr, Negatives),
}

impl ScalarOp {
    /// The nodes this one reads (a load's mask first, then its indirect parts).
    pub fn operands(&self) -> Vec<ScalarId> {
        match self {
            ScalarOp::Load { indirect, mask, .. } => {
                let mut out: Vec<ScalarId> = mask.iter().copied().collect();
                out.extend(indirect.iter().map(|(s, _)| *s));
                out
            }
            ScalarOp::Const { .. } | ScalarOp::Index(_) => Vec::new(),
            ScalarOp::Unary(_, x) | ScalarOp::Cast(x) | ScalarOp::Bounded(x, _, _) => vec![*x],
            ScalarOp::Binary(_, a, b) => vec![*a, *b],
            ScalarOp::Where(c, a, b) => vec![*c, *a, *b],
        }
    }
}

/// What a negative index read from data means, as the eager op has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Negatives {
    /// Counted from the end once: `aten.index`, `index_put`.
    Wrap,
    /// Out of range: gather, `index_select`, embedding and the scatters,
    /// whose eager kernels reject it.
    Reject,
}

/// A scalar node: operation plus the dtype of its value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Scalar {
    pub op: ScalarOp,
    pub dtype: DType,
}

/// Hash-consed arena of scalar expressions.
#[derive(Clone, Debug, Default)]
pub struct Scalars {
    nodes: Vec<Scalar>,
    dedup: HashMap<Scalar, ScalarId>,
}

impl Scalars {
    pub fn get(&self, id: ScalarId) -> &Scalar {
        &self.nodes[id.0 as usize]
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn add(&mut self, op: ScalarOp, dtype: DType) -> ScalarId {
        let node = Scalar { op, dtype };
        if let Some(id) = self.dedup.get(&node) {
            return *id;
        }
        let id = ScalarId(self.nodes.len() as u32);
        self.nodes.push(node.clone());
        self.dedup.insert(node, id);
        id
    }

    pub fn dtype(&self, id: ScalarId) -> DType {
        self.get(id).dtype
    }

    pub fn constant(&mut self, value: f64, dtype: DType) -> ScalarId {
        let bits = if dtype.is_float() { value.to_bits() } else { (value as i64) as u64 };
        self.add(ScalarOp::Const { bits }, dtype)
    }

    pub fn int_constant(&mut self, value: i64, dtype: DType) -> ScalarId {
        self.add(ScalarOp::Const { bits: value as u64 }, dtype)
    }

    pub fn unary(&mut self, op: UnaryOp, x: ScalarId, dtype: DType) -> ScalarId {
        if let (UnaryOp::Not, DType::Bool, Some(v)) = (op, dtype, self.bool_const(x)) {
            return self.int_constant(i64::from(!v), DType::Bool);
        }
        self.add(ScalarOp::Unary(op, x), dtype)
    }

    /// The value of a boolean constant.
    pub fn bool_const(&self, id: ScalarId) -> Option<bool> {
        match self.get(id).op {
            ScalarOp::Const { bits } if self.dtype(id) == DType::Bool => Some(bits != 0),
            _ => None,
        }
    }

    /// The index expression an int64 scalar stands for, if it is one.
    pub fn as_index(&self, id: ScalarId) -> Option<Expr> {
        let node = self.get(id);
        if node.dtype != DType::I64 {
            return None;
        }
        match &node.op {
            ScalarOp::Index(e) => Some(e.clone()),
            ScalarOp::Const { bits } => Some(Expr::c(*bits as i64)),
            _ => None,
        }
    }

    pub fn index(&mut self, expr: Expr) -> ScalarId {
        match expr.as_const() {
            Some(v) => self.int_constant(v, DType::I64),
            None => self.add(ScalarOp::Index(expr), DType::I64),
        }
    }

    /// Rewrite every index expression under `root` by substituting its
    /// variables with `vars` (positionally). Shared subtrees stay shared.
    pub fn substitute(&mut self, root: ScalarId, vars: &[Expr], ctx: &Ctx) -> ScalarId {
        let mut memo = HashMap::new();
        self.substitute_rec(root, vars, ctx, &mut memo)
    }

    fn substitute_rec(
        &mut self,
        id: ScalarId,
        vars: &[Expr],
        ctx: &Ctx,
        memo: &mut HashMap<ScalarId, ScalarId>,
    ) -> ScalarId {
        if let Some(done) = memo.get(&id) {
            return *done;
        }
        let node = self.get(id).clone();
        let op = match node.op {
            ScalarOp::Load { buf, index, indirect, mask } => {
                let indirect =
                    indirect.into_iter().map(|(s, stride)| (self.substitute_rec(s, vars, ctx, memo), stride)).collect();
                let mask = mask.map(|m| self.substitute_rec(m, vars, ctx, memo));
                ScalarOp::Load { buf, index: index.substitute_vars(vars, ctx), indirect, mask }
            }
            ScalarOp::Const { bits } => ScalarOp::Const { bits },
            ScalarOp::Index(e) => ScalarOp::Index(e.substitute_vars(vars, ctx)),
            ScalarOp::Unary(op, x) => ScalarOp::Unary(op, self.substitute_rec(x, vars, ctx, memo)),
            ScalarOp::Binary(op, a, b) => {
                let a = self.substitute_rec(a, vars, ctx, memo);
                let b = self.substitute_rec(b, vars, ctx, memo);
                let out = self.binary(op, a, b, node.dtype);
                memo.insert(id, out);
                return out;
            }
            ScalarOp::Where(c, a, b) => {
                let c = self.substitute_rec(c, vars, ctx, memo);
                let a = self.substitute_rec(a, vars, ctx, memo);
                let b = self.substitute_rec(b, vars, ctx, memo);
                ScalarOp::Where(c, a, b)
            }
            ScalarOp::Cast(x) => ScalarOp::Cast(self.substitute_rec(x, vars, ctx, memo)),
            ScalarOp::Bounded(x, size, negatives) => {
                ScalarOp::Bounded(self.substitute_rec(x, vars, ctx, memo), size.simplify(ctx), negatives)
            }
        };
        let out = self.add(op, node.dtype);
        memo.insert(id, out);
        out
    }

    /// Rebuild `root` with the nodes in `with` replaced by their values
    /// there (shared subtrees stay shared).
    pub fn replace(&mut self, root: ScalarId, with: &HashMap<ScalarId, ScalarId>) -> ScalarId {
        let mut memo = with.clone();
        for id in self.topo(&[root]) {
            if memo.contains_key(&id) {
                continue;
            }
            let node = self.get(id).clone();
            let get = |x: &ScalarId| memo.get(x).copied().unwrap_or(*x);
            let op = match node.op {
                ScalarOp::Load { buf, index, indirect, mask } => ScalarOp::Load {
                    buf,
                    index,
                    indirect: indirect.iter().map(|(s, stride)| (get(s), stride.clone())).collect(),
                    mask: mask.as_ref().map(get),
                },
                ScalarOp::Const { .. } | ScalarOp::Index(_) => node.op,
                ScalarOp::Unary(op, x) => ScalarOp::Unary(op, get(&x)),
                ScalarOp::Binary(op, a, b) => ScalarOp::Binary(op, get(&a), get(&b)),
                ScalarOp::Where(c, a, b) => ScalarOp::Where(get(&c), get(&a), get(&b)),
                ScalarOp::Cast(x) => ScalarOp::Cast(get(&x)),
                ScalarOp::Bounded(x, size, negatives) => ScalarOp::Bounded(get(&x), size, negatives),
            };
            let out = self.add(op, node.dtype);
            memo.insert(id, out);
        }
        memo.get(&root).copied().unwrap_or(root)
    }

    /// Rebuild `root` so that every load under it is masked by `mask`
    /// (combined with any mask it already has).
    /// `0 ≤ index < size` for every `(index, size)` pair, as one bool
    /// (`None` for no pairs): the mask of reads that may fall outside.
    pub fn in_range(&mut self, bounds: &[(Expr, Expr)]) -> Option<ScalarId> {
        let zero = self.int_constant(0, DType::I64);
        let mut inside: Option<ScalarId> = None;
        for (index, size) in bounds {
            let idx = self.index(index.clone());
            let n = self.index(size.clone());
            let ge = self.binary(BinaryOp::Ge, idx, zero, DType::Bool);
            let lt = self.binary(BinaryOp::Lt, idx, n, DType::Bool);
            let both = self.binary(BinaryOp::And, ge, lt, DType::Bool);
            inside = Some(match inside {
                None => both,
                Some(prev) => self.binary(BinaryOp::And, prev, both, DType::Bool),
            });
        }
        inside
    }

    pub fn add_mask(&mut self, root: ScalarId, mask: ScalarId) -> ScalarId {
        let mut memo = HashMap::new();
        self.add_mask_rec(root, mask, &mut memo)
    }

    fn add_mask_rec(&mut self, id: ScalarId, mask: ScalarId, memo: &mut HashMap<ScalarId, ScalarId>) -> ScalarId {
        if let Some(done) = memo.get(&id) {
            return *done;
        }
        let node = self.get(id).clone();
        let op = match node.op {
            ScalarOp::Load { buf, index, indirect, mask: old } => {
                let indirect = indirect.into_iter().map(|(s, st)| (self.add_mask_rec(s, mask, memo), st)).collect();
                let combined = match old {
                    Some(m) => {
                        let m = self.add_mask_rec(m, mask, memo);
                        self.binary(BinaryOp::And, m, mask, DType::Bool)
                    }
                    None => mask,
                };
                ScalarOp::Load { buf, index, indirect, mask: Some(combined) }
            }
            ScalarOp::Const { .. } | ScalarOp::Index(_) => node.op,
            ScalarOp::Unary(op, x) => ScalarOp::Unary(op, self.add_mask_rec(x, mask, memo)),
            ScalarOp::Binary(op, a, b) => {
                let a = self.add_mask_rec(a, mask, memo);
                let b = self.add_mask_rec(b, mask, memo);
                ScalarOp::Binary(op, a, b)
            }
            ScalarOp::Where(c, a, b) => {
                let c = self.add_mask_rec(c, mask, memo);
                let a = self.add_mask_rec(a, mask, memo);
                let b = self.add_mask_rec(b, mask, memo);
                ScalarOp::Where(c, a, b)
            }
            ScalarOp::Cast(x) => ScalarOp::Cast(self.add_mask_rec(x, mask, memo)),
            ScalarOp::Bounded(x, size, negatives) => {
                ScalarOp::Bounded(self.add_mask_rec(x, mask, memo), size, negatives)
            }
        };
        let out = self.add(op, node.dtype);
        memo.insert(id, out);
        out
    }

    /// Whether the value of `root` depends on loop variable `var`.
    pub fn mentions_var(&self, root: ScalarId, var: Var) -> bool {
        self.topo(&[root]).into_iter().any(|id| match &self.get(id).op {
            ScalarOp::Load { index, indirect, .. } => {
                index.mentions_var(var) || indirect.iter().any(|(_, stride)| stride.mentions_var(var))
            }
            ScalarOp::Index(e) | ScalarOp::Bounded(_, e, _) => e.mentions_var(var),
            _ => false,
        })
    }

    /// Nodes reachable from `roots`, in dependency order (operands first).
    pub fn topo(&self, roots: &[ScalarId]) -> Vec<ScalarId> {
        let mut seen = vec![false; self.nodes.len()];
        let mut order = Vec::new();
        let mut stack: Vec<(ScalarId, bool)> = roots.iter().rev().map(|r| (*r, false)).collect();
        while let Some((id, expanded)) = stack.pop() {
            if expanded {
                order.push(id);
                continue;
            }
            if seen[id.0 as usize] {
                continue;
            }
            seen[id.0 as usize] = true;
            stack.push((id, true));
            for operand in self.operands(id).into_iter().rev() {
                if !seen[operand.0 as usize] {
                    stack.push((operand, false));
                }
            }
        }
        order
    }

    pub fn operands(&self, id: ScalarId) -> Vec<ScalarId> {
        self.get(id).op.operands()
    }

    /// Buffers read under `roots`.
    pub fn loaded_buffers(&self, roots: &[ScalarId]) -> Vec<BufId> {
        let mut out = Vec::new();
        for id in self.topo(roots) {
            if let ScalarOp::Load { buf, .. } = &self.get(id).op {
                if !out.contains(buf) {
                    out.push(*buf);
                }
            }
        }
        out
    }

    /// Write one node in the text format.
    pub fn fmt_node(&self, id: ScalarId) -> String {
        let node = self.get(id);
        let body = match &node.op {
            ScalarOp::Load { buf, index, indirect, mask } => {
                let mut text = format!("load {buf}[{index}");
                for (s, stride) in indirect {
                    text.push_str(&format!(" + {s}*({stride})"));
                }
                text.push(']');
                if let Some(m) = mask {
                    text.push_str(&format!(" if {m}"));
                }
                text
            }
            ScalarOp::Const { bits } => {
                let value = f64::from_bits(*bits);
                if !node.dtype.is_float() {
                    format!("const {}", *bits as i64)
                } else if value.is_nan() && *bits != f64::NAN.to_bits() {
                    // `{:?}` writes every NaN as `NaN`: a sign or payload
                    // other than the usual one is written as bits, so the
                    // text keeps every constant apart.
                    format!("const NaN({bits:#018x})")
                } else {
                    format!("const {value:?}")
                }
            }
            ScalarOp::Index(e) => format!("index {e}"),
            ScalarOp::Unary(op, x) => format!("{op} {x}"),
            ScalarOp::Binary(op, a, b) => format!("{op} {a}, {b}"),
            ScalarOp::Where(c, a, b) => format!("where {c}, {a}, {b}"),
            ScalarOp::Cast(x) => format!("cast {x}"),
            ScalarOp::Bounded(x, size, Negatives::Wrap) => format!("bounded {x}, {size}"),
            ScalarOp::Bounded(x, size, Negatives::Reject) => format!("bounded {x}, {size}, nonnegative"),
        };
        format!("{id}: {} = {body}", node.dtype)
    }
}

/// A reduction's ranges and combine op.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reduce {
    pub op: ReduceOp,
    pub ranges: Vec<Expr>,
}

/// One buffer computed over an iteration space. Variables `0..ranges.len()`
/// index the output; reduction variables follow them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stage {
    pub out: BufId,
    pub ranges: Vec<Expr>,
    pub reduce: Option<Reduce>,
    pub value: ScalarId,
    /// Storage index of the result, over the output variables.
    pub store: Expr,
    /// Data-dependent part of the store index (scatter): `Σ value(s)·stride`.
    /// Stages with one run serially, in index order.
    pub store_indirect: Vec<(ScalarId, Expr)>,
}

/// Stages that share `outer` (a prefix of every stage's ranges) and run in
/// order for each outer point.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Kernel {
    pub outer: Vec<Expr>,
    pub stages: Vec<Stage>,
}

/// A call rdyn does not generate code for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ExternKind {
    /// `out = s·(a @ b)`; batched when the buffers are 3-D. `scale_bits`
    /// is `s` as f64 bits (`addmm`'s bias is added by the consumers).
    Gemm { scale_bits: u64 },
    /// A depthwise 2-D convolution (one filter per channel: input
    /// `[n, c, h, w]`, weight `[c, 1, kh, kw]`, output `[n, c, oh, ow]`),
    /// rdyn's own CPU kernel; the bias is added by the consumers.
    DepthwiseConv2d { stride: [i64; 2], padding: [i64; 2], dilation: [i64; 2] },
    /// The weight gradient of such a convolution (inputs: the output's
    /// gradient `[n, c, oh, ow]` and the input `[n, c, h, w]`; output
    /// `[c, 1, kh, kw]`), rdyn's own CPU kernel.
    DepthwiseWeightGrad { stride: [i64; 2], padding: [i64; 2], dilation: [i64; 2] },
    /// A running reduction along `dim` (rdyn's own CPU kernel): `out[j]`
    /// combines the input at every index up to `j` along `dim`. Max and min
    /// also write the index of the element they hold (a second output).
    Scan { op: ScanOp, dim: usize },
    /// Sorting along one dim (rdyn's own CPU kernel), writing the values
    /// and their int64 indices along `dim` that `spec.select` keeps.
    Sort(SortSpec),
    /// Each value's position in a sorted sequence (rdyn's own CPU kernel):
    /// inputs the sequence (one line, or one per row of values) and the
    /// values, output their int64 positions; `right` takes the last
    /// position among equal elements.
    Search { right: bool },
    /// A library kernel run through ATen (e.g. convolution).
    Library { node: u32, target: String },
    /// An op rdyn does not lower: the ATen node runs eagerly.
    Fallback { node: u32, target: String },
}

impl ExternKind {
    /// A kernel rdyn runs itself (GEMM, depthwise convolution, scan, sort,
    /// search), not a call through ATen: its outputs are rdyn's buffers, and
    /// it can be dropped when none is read.
    pub fn is_own_kernel(&self) -> bool {
        !matches!(self, ExternKind::Library { .. } | ExternKind::Fallback { .. })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Extern {
    pub kind: ExternKind,
    pub inputs: Vec<BufId>,
    pub outputs: Vec<BufId>,
}

/// One step of a program.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    Kernel(Kernel),
    Extern(Extern),
}

/// A lowered graph: buffers, scalar arena and the steps that fill buffers.
#[derive(Clone, Debug, Default)]
pub struct Program {
    pub buffers: Vec<Buffer>,
    pub scalars: Scalars,
    pub steps: Vec<Step>,
    /// Graph outputs: a buffer, or an integer (SymInt) output.
    pub outputs: Vec<ProgramOutput>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ProgramOutput {
    Buffer(BufId),
    Int(Expr),
    None,
}

impl Program {
    pub fn buffer(&self, id: BufId) -> &Buffer {
        &self.buffers[id.0 as usize]
    }

    pub fn add_buffer(&mut self, buffer: Buffer) -> BufId {
        self.buffers.push(buffer);
        BufId(self.buffers.len() as u32 - 1)
    }

    /// Follow `View` roles to the buffer that owns the storage.
    pub fn storage_of(&self, mut id: BufId) -> BufId {
        while let BufRole::View(base) = self.buffer(id).role {
            id = base;
        }
        id
    }

    /// The storages of the program's output buffers.
    pub fn output_storages(&self) -> HashSet<BufId> {
        self.outputs
            .iter()
            .filter_map(|o| match o {
                ProgramOutput::Buffer(b) => Some(self.storage_of(*b)),
                _ => None,
            })
            .collect()
    }

    /// Storages a pass must leave stored as they are, whoever reads them:
    /// outputs (the caller gets them, and two must not alias) and storages
    /// some view buffer reads.
    pub fn pinned_storages(&self) -> HashSet<BufId> {
        let mut pinned = self.output_storages();
        for (k, buffer) in self.buffers.iter().enumerate() {
            if let BufRole::View(_) = buffer.role {
                pinned.insert(self.storage_of(BufId(k as u32)));
            }
        }
        pinned
    }

    pub fn kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.steps.iter().filter_map(|s| match s {
            Step::Kernel(k) => Some(k),
            Step::Extern(_) => None,
        })
    }
}
