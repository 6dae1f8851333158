//! Construction-time simplification: `cast`, `binary` and `select` build
//! the simplest node that computes the same value (constants folded,
//! index arithmetic kept affine, identities dropped, clamps recognised),
//! so every lowering gets them without a separate pass.
//!
//! - Integer arithmetic on index values stays an `Index` expression, so indices
//!   built from `arange` (pooling, upsampling) become affine loads, not gathers.
//! - A float32/float64 division by a constant power of two (whose reciprocal is
//!   normal) is a multiplication by the reciprocal: both round the same real
//!   number once (subnormal, infinite and NaN results included), so it is exact
//!   (a mean's `/ 256`, attention's `/ 8.0`); any other division stays one.
//! - `x * 1.0` is `x`, and so are `x + -0.0` and `x + 0.0` where `x` was converted
//!   from an integer (so it is not -0.0).
//! - A float32 (or narrower) conversion of a float64 converted from an index or
//!   an integer of at most 32 bits converts the integer directly: one rounding
//!   either way.
//! - `where(x >= c | isnan(x), x, c)` with a constant, non-NaN `c` (PyTorch's
//!   decomposition of a clamp inside other ops) is `max(c, x)` in
//!   `BinaryOp::Max`'s semantics, `<=` giving `min`: one operation instead of four.
//! - `where(not m, a, b)` is `where(m, b, a)` (`masked_fill(~mask, v)`).
//! - Booleans: `m & true` and `m | false` are `m` (a causal mask built from
//!   `ones(..).tril()` is then one comparison); `m & false` is false, `m | true`
//!   true, `not` of a constant folds, and `select` of a constant condition is the
//!   side it picks (`piecewise.rs` relies on these once it has decided a piece's
//!   range conditions).
//! - `Scalars::rounded`: a float16/bfloat16 value rounded to its dtype where it was
//!   computed, for readers that stand for eager reading a stored tensor (a GEMM
//!   operand); other fused readers read the float32 value.
//!
//! `Program::simplify` rebuilds a whole program through these constructors
//! (for nodes that were added without them: text written by hand).

use std::collections::HashMap;

use super::{BinaryOp, Program, ScalarId, ScalarOp, Scalars, Step, UnaryOp};
use crate::dtype::DType;
use crate::expr::Ctx;

impl Program {
    /// Rebuild every stage's scalar DAG through the constructors below, so
    /// that nodes added as they are (written by hand in the text form, or
    /// by `Scalars::add` directly) get the folds lowering's nodes got as it
    /// built them. Nodes shared between stages stay shared; the old nodes
    /// stay in the arena, unread.
    pub fn simplify(&mut self) {
        let mut memo = HashMap::new();
        for step in &mut self.steps {
            let Step::Kernel(kernel) = step else { continue };
            for stage in &mut kernel.stages {
                stage.value = self.scalars.rebuild(stage.value, &mut memo);
                for (s, _) in &mut stage.store_indirect {
                    *s = self.scalars.rebuild(*s, &mut memo);
                }
            }
        }
    }
}

impl Scalars {
    /// `root` rebuilt bottom-up through the folding constructors; `memo`
    /// maps each node rebuilt so far to its new id.
    fn rebuild(&mut self, root: ScalarId, memo: &mut HashMap<ScalarId, ScalarId>) -> ScalarId {
        for id in self.topo(&[root]) {
            if memo.contains_key(&id) {
                continue;
            }
            let node = self.get(id).clone();
            let get = |x: ScalarId| memo.get(&x).copied().unwrap_or(x);
            let dtype = node.dtype;
            let out = match node.op {
                ScalarOp::Load { buf, index, indirect, mask } => {
                    let indirect = indirect.into_iter().map(|(s, stride)| (get(s), stride)).collect();
                    self.add(ScalarOp::Load { buf, index, indirect, mask: mask.map(get) }, dtype)
                }
                ScalarOp::Index(e) if dtype == DType::I64 => self.index(e),
                op @ (ScalarOp::Const { .. } | ScalarOp::Index(_)) => self.add(op, dtype),
                ScalarOp::Unary(op, x) => self.unary(op, get(x), dtype),
                ScalarOp::Binary(op, a, b) => self.binary(op, get(a), get(b), dtype),
                ScalarOp::Where(c, a, b) => self.select(get(c), get(a), get(b), dtype),
                ScalarOp::Cast(x) => self.cast(get(x), dtype),
                ScalarOp::Bounded(x, size, negatives) => self.add(ScalarOp::Bounded(get(x), size, negatives), dtype),
            };
            memo.insert(id, out);
        }
        memo.get(&root).copied().unwrap_or(root)
    }

    /// `x` converted to `dtype` (no node when it already has it).
    /// `x`, a float16/bfloat16 value, rounded to its dtype where it was
    /// computed: backends compute half-precision values in float32 and
    /// round them only where they store or convert them, so a reader that
    /// stands for eager reading a stored tensor (a GEMM operand) rounds it.
    /// Loads, constants and conversions hold narrow values already.
    pub fn rounded(&mut self, x: ScalarId) -> ScalarId {
        let narrow = self.dtype(x);
        let computed = !matches!(self.get(x).op, ScalarOp::Load { .. } | ScalarOp::Const { .. } | ScalarOp::Cast(_));
        if !matches!(narrow, DType::F16 | DType::BF16) || !computed {
            return x;
        }
        let wide = self.add(ScalarOp::Cast(x), DType::F32);
        self.add(ScalarOp::Cast(wide), narrow)
    }

    pub fn cast(&mut self, x: ScalarId, dtype: DType) -> ScalarId {
        if self.dtype(x) == dtype {
            return x;
        }
        // A narrower float from a float64 that holds an integer exactly (an
        // index, or an integer of at most 32 bits): one rounding either way,
        // so convert the integer directly (WGSL has no float64).
        if let ScalarOp::Cast(inner) = self.get(x).op {
            if self.dtype(x) == DType::F64
                && matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
                && self.exact_in_f64(inner)
            {
                return self.cast(inner, dtype);
            }
        }
        if let ScalarOp::Const { bits } = self.get(x).op {
            let from = self.dtype(x);
            let value = if from.is_float() { f64::from_bits(bits) } else { bits as i64 as f64 };
            if dtype.is_float() || !from.is_float() {
                return match dtype {
                    DType::Bool => self.int_constant((value != 0.0) as i64, dtype),
                    // A conversion rounds: a bfloat16 `full(.., 3.14)` holds 3.140625.
                    d if d.is_float() => self.constant(d.round_float(value), d),
                    d => self.int_constant(bits as i64, d),
                };
            }
            // A whole float that the integer dtype holds: `full(.., 3.0,
            // dtype=int64)` is the constant 3.
            let n = value as i64;
            if value.fract() == 0.0 && value.abs() < 9.0e15 && dtype.wrap_int(n) == n {
                return self.int_constant(n, dtype);
            }
        }
        self.add(ScalarOp::Cast(x), dtype)
    }

    pub fn binary(&mut self, op: BinaryOp, a: ScalarId, b: ScalarId, dtype: DType) -> ScalarId {
        if let Some(folded) = self.fold_index(op, a, b, dtype) {
            return folded;
        }
        if let Some(folded) = self.fold_floats(op, a, b, dtype) {
            return folded;
        }
        // `(x + 0.0) + 0.0` is `x + 0.0`: the first add made `-0.0` `+0.0`
        // and left every other value as it was (a sum of one-hot selects
        // that a piecewise split decided: `unbind`'s gradient).
        if op == BinaryOp::Add && matches!(dtype, DType::F32 | DType::F64) {
            for (x, c) in [(a, b), (b, a)] {
                if self.is_plus_zero(c, dtype) && self.adds_plus_zero(x, dtype) {
                    return x;
                }
            }
        }
        // `m & true` and `m | false` on booleans are `m` (a causal mask
        // built as `ones(..).tril()` ands the comparison with a constant);
        // `m & false` is false and `m | true` true (a range condition that
        // a piece of a split stage decides, `piecewise.rs`).
        if dtype == DType::Bool && matches!(op, BinaryOp::And | BinaryOp::Or) {
            let identity = op == BinaryOp::And;
            for (x, c) in [(a, b), (b, a)] {
                match self.bool_const(c) {
                    Some(v) if v == identity => return x,
                    Some(_) => return c,
                    None => {}
                }
            }
        }
        // `x * 1.0` is `x`, and so is `x + 0.0` where `x` cannot be -0.0
        // (it was converted from an integer); `x + -0.0` always is.
        // Decompositions build index arithmetic this way (nearest
        // upsampling: `arange(n).to(float64) * 1.0 + 0.0`).
        if dtype.is_float() && matches!(op, BinaryOp::Mul | BinaryOp::Add) {
            for (x, c) in [(a, b), (b, a)] {
                if self.dtype(x) == dtype && self.is_float_identity(op, c, dtype) {
                    let signed_zero_safe = op == BinaryOp::Mul
                        || self.float_const(c).is_some_and(|v| v.is_sign_negative())
                        || matches!(self.get(x).op, ScalarOp::Cast(i) if !self.dtype(i).is_float());
                    if signed_zero_safe {
                        return x;
                    }
                }
            }
        }
        // `x / c` for a constant power of two is exactly `x * (1 / c)`: both
        // round the same real number once (subnormal, infinite and NaN
        // results included), and a multiply costs a fraction of a divide
        // (a mean's `/ 256`, attention's `/ 8.0`).
        if op == BinaryOp::Div && self.dtype(a) == dtype {
            if let Some(r) = self.exact_reciprocal(b, dtype) {
                let r = self.constant(r, dtype);
                return self.add(ScalarOp::Binary(BinaryOp::Mul, a, r), dtype);
            }
        }
        self.add(ScalarOp::Binary(op, a, b), dtype)
    }

    /// `a op b` for two float32 or float64 constants of `dtype` and a sum,
    /// difference or product, rounded once in `dtype` as a kernel rounds it
    /// (what a split stage's decided selects leave: `0.0 + 0.0`).
    fn fold_floats(&mut self, op: BinaryOp, a: ScalarId, b: ScalarId, dtype: DType) -> Option<ScalarId> {
        if self.dtype(a) != dtype || self.dtype(b) != dtype {
            return None;
        }
        let (x, y) = (self.float_const(a)?, self.float_const(b)?);
        let value = match (dtype, op) {
            (DType::F64, BinaryOp::Add) => x + y,
            (DType::F64, BinaryOp::Sub) => x - y,
            (DType::F64, BinaryOp::Mul) => x * y,
            (DType::F32, BinaryOp::Add) => f64::from(x as f32 + y as f32),
            (DType::F32, BinaryOp::Sub) => f64::from(x as f32 - y as f32),
            (DType::F32, BinaryOp::Mul) => f64::from(x as f32 * y as f32),
            _ => return None,
        };
        Some(self.constant(value, dtype))
    }

    /// Whether `c` is the constant `+0.0` of `dtype`.
    fn is_plus_zero(&self, c: ScalarId, dtype: DType) -> bool {
        self.dtype(c) == dtype && self.float_const(c).is_some_and(|v| v.to_bits() == 0)
    }

    /// Whether `x` is `y + 0.0` (either order) in `dtype`.
    fn adds_plus_zero(&self, x: ScalarId, dtype: DType) -> bool {
        matches!(self.get(x).op, ScalarOp::Binary(BinaryOp::Add, p, q)
            if self.dtype(x) == dtype && (self.is_plus_zero(p, dtype) || self.is_plus_zero(q, dtype)))
    }

    /// The value of a float constant.
    fn float_const(&self, c: ScalarId) -> Option<f64> {
        match self.get(c).op {
            ScalarOp::Const { bits } if self.dtype(c).is_float() => Some(f64::from_bits(bits)),
            _ => None,
        }
    }

    /// Whether `c` is a constant of `dtype` that `op` leaves any value
    /// unchanged with: 1 for a product, ±0 for a sum.
    fn is_float_identity(&self, op: BinaryOp, c: ScalarId, dtype: DType) -> bool {
        self.dtype(c) == dtype
            && self.float_const(c).is_some_and(|v| match op {
                BinaryOp::Mul => v == 1.0,
                _ => v == 0.0,
            })
    }

    /// Whether `x` is an integer that float64 holds exactly: a loop index,
    /// or a value of an integer dtype of at most 32 bits.
    fn exact_in_f64(&self, x: ScalarId) -> bool {
        matches!(self.get(x).op, ScalarOp::Index(_))
            || matches!(self.dtype(x), DType::Bool | DType::U8 | DType::I8 | DType::I16 | DType::I32)
    }

    /// `1 / c` when `c` is a float32/float64 constant of `dtype` that is a
    /// power of two whose reciprocal is a normal number of that type.
    fn exact_reciprocal(&self, c: ScalarId, dtype: DType) -> Option<f64> {
        let ScalarOp::Const { bits } = self.get(c).op else { return None };
        if self.dtype(c) != dtype {
            return None;
        }
        let c = f64::from_bits(bits);
        let power_of_two = c.is_normal() && c.to_bits() & ((1u64 << 52) - 1) == 0;
        let r = 1.0 / c;
        let normal = match dtype {
            DType::F32 => (c as f32).is_normal() && (r as f32).is_normal(),
            DType::F64 => r.is_normal(),
            _ => false,
        };
        (power_of_two && normal).then_some(r)
    }

    /// Integer arithmetic on index values stays an index expression, so
    /// indices computed from `arange` (pooling, upsampling) become affine
    /// loads instead of gathers.
    fn fold_index(&mut self, op: BinaryOp, a: ScalarId, b: ScalarId, dtype: DType) -> Option<ScalarId> {
        if dtype != DType::I64 {
            return None;
        }
        let (x, y) = (self.as_index(a)?, self.as_index(b)?);
        let ctx = Ctx::default();
        let e = match op {
            BinaryOp::Add => x.add(&y),
            BinaryOp::Sub => x.sub(&y),
            BinaryOp::Mul => x.mul(&y),
            BinaryOp::FloorDiv if y.as_const().is_some_and(|k| k > 0) => x.floordiv(&y, &ctx),
            BinaryOp::Rem if y.as_const().is_some_and(|k| k > 0) => x.modulo(&y, &ctx),
            BinaryOp::TruncDiv if y.as_const().is_some_and(|k| k > 0) && x.as_const().is_some_and(|v| v >= 0) => {
                x.floordiv(&y, &ctx)
            }
            _ => return None,
        };
        Some(match e.as_const() {
            Some(v) => self.int_constant(v, DType::I64),
            None => self.index(e),
        })
    }

    pub fn select(&mut self, cond: ScalarId, a: ScalarId, b: ScalarId, dtype: DType) -> ScalarId {
        if let Some(pick) = self.bool_const(cond) {
            return self.cast(if pick { a } else { b }, dtype);
        }
        if let Some(op) = self.clamp_form(cond, a, b) {
            // `max(c, x)`: c if c > x, else x (also for NaN x, and ±0 ties).
            return self.add(ScalarOp::Binary(op, b, a), dtype);
        }
        // `where(not c, a, b)` is `where(c, b, a)` (`masked_fill(~mask, v)`).
        if let ScalarOp::Unary(UnaryOp::Not, c) = self.get(cond).op {
            if self.dtype(c) == DType::Bool {
                return self.select(c, b, a, dtype);
            }
        }
        self.add(ScalarOp::Where(cond, a, b), dtype)
    }

    /// PyTorch's decomposition of `hardtanh` (ReLU6) and `clamp` writes
    /// `where(x >= c | isnan(x), x, c)`: for a constant `c` that is not NaN,
    /// that is exactly `max(c, x)` in [`BinaryOp::Max`]'s semantics (`min`
    /// for `<=`), one operation instead of four.
    fn clamp_form(&self, cond: ScalarId, x: ScalarId, c: ScalarId) -> Option<BinaryOp> {
        let ScalarOp::Const { bits } = self.get(c).op else { return None };
        let dtype = self.dtype(c);
        if !dtype.is_float() || self.dtype(x) != dtype || f64::from_bits(bits).is_nan() {
            return None;
        }
        let ScalarOp::Binary(BinaryOp::Or, p, q) = self.get(cond).op else { return None };
        let is_nan_x = |id: ScalarId| self.get(id).op == ScalarOp::Unary(UnaryOp::IsNan, x);
        let compare = |id: ScalarId| match self.get(id).op {
            ScalarOp::Binary(BinaryOp::Ge, l, r) if l == x && r == c => Some(BinaryOp::Max),
            ScalarOp::Binary(BinaryOp::Le, l, r) if l == x && r == c => Some(BinaryOp::Min),
            _ => None,
        };
        match (compare(p), compare(q)) {
            (Some(op), None) if is_nan_x(q) => Some(op),
            (None, Some(op)) if is_nan_x(p) => Some(op),
            _ => None,
        }
    }
}
