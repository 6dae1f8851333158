//! Sorting and selection along one dim: sort (argsort, msort), topk,
//! kthvalue, median and nanmedian, as one extern step running rdyn's CPU
//! sort kernel (`rdyn_codegen_cpu::sort`). Its input is the operand cast to
//! float32, float64 or int64 (exact for every dtype here), its outputs the
//! kept values in that dtype and their int64 indices; consumers read them
//! lazily, cast back and, without `keepdim`, with the dim squeezed out.
//!
//! GPU devices rank each element in its line instead (`rank_sort`), for
//! lines of up to 2048: its rank is a reduction over the line (the elements that
//! sort before it, ties at earlier positions included, so the order is the same
//! stable one), then each kept position's index is a second reduction (the one
//! element of that rank) and its value a load there. Quadratic in the line, so
//! longer lines run eagerly (counted).

use rdyn_ir::graph::{Arg, Node};
use rdyn_ir::loops::{
    contiguous_strides, BinaryOp, Extern, ExternKind, Negatives, ReduceOp, ScalarId, Scalars, SortSelect, SortSpec,
    Step, UnaryOp,
};
use rdyn_ir::op::Op;
use rdyn_ir::{DType, Expr};

use super::common::{kernel_dtype, norm_dim};
use crate::error::{invalid, unsupported, LowerError};
use crate::lazy::Lazy;
use crate::lowerer::{Handled, Lowerer, Res};

/// Whether `a` sorts before `b` ascending: smaller, or a number before NaN.
fn less(s: &mut Scalars, a: ScalarId, b: ScalarId, dtype: DType) -> ScalarId {
    let lt = s.binary(BinaryOp::Lt, a, b, DType::Bool);
    if !dtype.is_float() {
        return lt;
    }
    let (a_nan, b_nan) = (s.unary(UnaryOp::IsNan, a, DType::Bool), s.unary(UnaryOp::IsNan, b, DType::Bool));
    let a_number = s.unary(UnaryOp::Not, a_nan, DType::Bool);
    let number_first = s.binary(BinaryOp::And, b_nan, a_number, DType::Bool);
    s.binary(BinaryOp::Or, lt, number_first, DType::Bool)
}

/// sort, topk, kthvalue, median, nanmedian.
pub(super) fn sort(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let op = node.target.as_str();
    let overload = node.overload();
    let known = match node.op {
        Op::Sort => matches!(overload, "default" | "stable"),
        Op::Median | Op::Nanmedian => matches!(overload, "default" | "dim"),
        _ => overload == "default",
    };
    if !known {
        return Err(unsupported(op, format!("overload {overload}")));
    }
    let (_, out) = lw.out_meta(node)?;
    let x = lw.tensor_arg(node, 0, "self")?;
    if x.dtype != out {
        return Err(invalid(op, format!("values of {out} from an input of {}", x.dtype)));
    }
    let int = |arg: &Arg, what: &str| arg.as_int().ok_or_else(|| invalid(op, format!("{what} must be an int")));
    let flag = |arg: &Arg, default: bool| arg.as_bool().unwrap_or(default);
    // Whole-tensor medians sort the flattened tensor and return a value only.
    let whole = matches!(node.op, Op::Median | Op::Nanmedian) && overload == "default";
    let x = if whole { lw.flatten(&x) } else { x };
    let r = x.ndim();
    let dim = match node.op {
        _ if whole => 0,
        Op::Sort if overload == "stable" => int(node.kwarg("dim"), "dim").unwrap_or(-1),
        Op::Sort => node.arg(1, "dim").as_int().unwrap_or(-1),
        Op::Topk | Op::Kthvalue => node.arg(2, "dim").as_int().unwrap_or(-1),
        _ => int(node.arg(1, "dim"), "dim")?,
    };
    let r_eff = r.max(1) as i64;
    if !(-r_eff..r_eff).contains(&dim) {
        return Err(invalid(op, format!("dim {dim} out of range for {r} dims")));
    }
    let (descending, select, keepdim) = match node.op {
        Op::Sort => {
            let key = if overload == "stable" { node.kwarg("descending") } else { node.arg(2, "descending") };
            (flag(key, false), SortSelect::All, true)
        }
        Op::Topk => (flag(node.arg(3, "largest"), true), SortSelect::Leading(int(node.arg(1, "k"), "k")?), true),
        Op::Kthvalue => {
            (false, SortSelect::Kth(int(node.arg(1, "k"), "k")?.saturating_sub(1)), flag(node.arg(3, "keepdim"), false))
        }
        // A whole-tensor median is 0-dim: the flattened dim goes.
        Op::Median => (false, SortSelect::Median, !whole && flag(node.arg(2, "keepdim"), false)),
        _ => (false, SortSelect::NanMedian, !whole && flag(node.arg(2, "keepdim"), false)),
    };
    if r == 0 {
        // A 0-dim tensor is its own sort, topk(1), kthvalue(1) and median.
        if matches!(select, SortSelect::Leading(k) if k != 1) || matches!(select, SortSelect::Kth(k) if k != 0) {
            return Err(unsupported(op, "k out of range for a 0-dim tensor"));
        }
        let zero = lw.prog.scalars.int_constant(0, DType::I64);
        return Ok(Handled::Native(vec![x, Lazy { sizes: Vec::new(), value: zero, dtype: DType::I64 }]));
    }
    let d = norm_dim(dim, r);
    // A selection needs a known length to check its position against
    // (eager raises for one out of range, and for a median of nothing).
    if select != SortSelect::All {
        let n = lw.constant(&x.sizes[d]).ok_or_else(|| unsupported(op, "a selection along a symbolic dim"))?;
        let fits = match select {
            SortSelect::Leading(k) => (0..=n).contains(&k),
            SortSelect::Kth(k) => (0..n).contains(&k),
            _ => n > 0,
        };
        if !fits {
            return Err(unsupported(op, format!("{select:?} of a dim of length {n} (eager raises)")));
        }
    }
    let spec = SortSpec { dim: d, descending, select };
    let x = lw.cast_lazy(x, kernel_dtype(out));
    let mut outs = if lw.options.cpu_kernels { lw.sort_kernel(&x, spec) } else { lw.rank_sort(node, &x, spec)? };
    outs[0] = lw.cast_lazy(outs[0].clone(), out);
    if !keepdim {
        outs = outs.iter().map(|o| lw.squeeze_dim(o, d)).collect();
    }
    if whole {
        outs.truncate(1);
    }
    Ok(Handled::Native(outs))
}

impl Lowerer<'_> {
    /// A sort by rdyn's CPU sort kernel: an extern step writing the kept
    /// values and their indices.
    fn sort_kernel(&mut self, x: &Lazy, spec: SortSpec) -> Vec<Lazy> {
        let input = self.buffer_for_extern(x);
        let mut sizes = x.sizes.clone();
        if spec.select != SortSelect::All {
            sizes[spec.dim] = Expr::c(spec.out_len(0));
        }
        let strides = contiguous_strides(&sizes);
        let bufs =
            [self.temp_buffer(x.dtype, sizes.clone(), strides.clone()), self.temp_buffer(DType::I64, sizes, strides)];
        self.prog.steps.push(Step::Extern(Extern {
            kind: ExternKind::Sort(spec),
            inputs: vec![input],
            outputs: bufs.to_vec(),
        }));
        bufs.iter().map(|&b| self.load_buffer(b)).collect()
    }

    /// A sort for GPU devices, parallel over every element: each element's
    /// rank in its line (how many elements sort before it: smaller ones, in
    /// the sort's order, and equal ones at earlier positions, which makes
    /// it stable), a reduction over the line; then each kept position's
    /// index, the one element of that rank (a second reduction), and its
    /// value read there. Quadratic in the line's length, so long lines run
    /// eagerly.
    fn rank_sort(&mut self, node: &Node, x: &Lazy, spec: SortSpec) -> Result<Vec<Lazy>, LowerError> {
        const MAX_LINE: i64 = 2048;
        let d = spec.dim;
        let n = self.constant(&x.sizes[d]).filter(|&n| n <= MAX_LINE).ok_or_else(|| {
            unsupported(&node.target, format!("a sort on this device of a line longer than {MAX_LINE} (or symbolic)"))
        })?;
        let r = x.ndim();
        let dtype = x.dtype;
        let mut out_sizes = x.sizes.clone();
        out_sizes[d] = Expr::c(spec.out_len(n));
        if x.sizes.iter().any(|s| s.is_const(0)) {
            // Nothing to sort, and nothing to read.
            let s = &mut self.prog.scalars;
            let (value, index) = (s.int_constant(0, dtype), s.int_constant(0, DType::I64));
            return Ok(vec![
                Lazy { sizes: out_sizes.clone(), value, dtype },
                Lazy { sizes: out_sizes, value: index, dtype: DType::I64 },
            ]);
        }
        // The extended space: x's dims, then k, the other element's position.
        let mut ext = x.sizes.clone();
        ext.push(Expr::c(n));
        let other: Vec<Expr> = (0..r).map(|m| Expr::v(if m == d { r as u32 } else { m as u32 })).collect();
        let xk = self.view(x, ext.clone(), &other).value;
        let s = &mut self.prog.scalars;
        let (k, i) = (s.index(Expr::v(r as u32)), s.index(Expr::v(d as u32)));
        let (first, second) = if spec.descending { (x.value, xk) } else { (xk, x.value) };
        let before = less(s, first, second, dtype);
        let after = less(s, second, first, dtype);
        let earlier = s.binary(BinaryOp::Lt, k, i, DType::Bool);
        let not_after = s.unary(UnaryOp::Not, after, DType::Bool);
        let tie_earlier = s.binary(BinaryOp::And, not_after, earlier, DType::Bool);
        let counts = s.binary(BinaryOp::Or, before, tie_earlier, DType::Bool);
        let counts = s.cast(counts, DType::I64);
        let rank = self.reduce(
            &Lazy { sizes: ext.clone(), value: counts, dtype: DType::I64 },
            &[r],
            false,
            ReduceOp::Sum,
            DType::I64,
        );
        // The sorted position each output takes: its own position along d,
        // a constant, or a median's (which counts the line's NaN).
        let s = &mut self.prog.scalars;
        let position = match spec.select {
            SortSelect::All | SortSelect::Leading(_) => s.index(Expr::v(d as u32)),
            SortSelect::Kth(k) => s.int_constant(k, DType::I64),
            SortSelect::Median | SortSelect::NanMedian => {
                let nan = if dtype.is_float() {
                    s.unary(UnaryOp::IsNan, x.value, DType::Bool)
                } else {
                    s.int_constant(0, DType::Bool)
                };
                let nan = s.cast(nan, DType::I64);
                let nans = self.reduce(
                    &Lazy { sizes: x.sizes.clone(), value: nan, dtype: DType::I64 },
                    &[d],
                    true,
                    ReduceOp::Sum,
                    DType::I64,
                );
                let s = &mut self.prog.scalars;
                let (one, two, len) =
                    (s.int_constant(1, DType::I64), s.int_constant(2, DType::I64), s.int_constant(n, DType::I64));
                let numbers = s.binary(BinaryOp::Sub, len, nans.value, DType::I64);
                if spec.select == SortSelect::Median {
                    let lower = s.int_constant((n - 1) / 2, DType::I64);
                    let zero = s.int_constant(0, DType::I64);
                    let any = s.binary(BinaryOp::Gt, nans.value, zero, DType::Bool);
                    s.select(any, numbers, lower, DType::I64)
                } else {
                    let zero = s.int_constant(0, DType::I64);
                    let below = s.binary(BinaryOp::Sub, numbers, one, DType::I64);
                    let below = s.binary(BinaryOp::Max, below, zero, DType::I64);
                    s.binary(BinaryOp::FloorDiv, below, two, DType::I64)
                }
            }
        };
        // The index holding that rank: Σ_k k·[rank_k = position].
        let mut ext = out_sizes.clone();
        ext.push(Expr::c(n));
        let rank_k = self.view(&rank, ext.clone(), &other).value;
        let s = &mut self.prog.scalars;
        let hit = s.binary(BinaryOp::Eq, rank_k, position, DType::Bool);
        let zero = s.int_constant(0, DType::I64);
        let k = s.index(Expr::v(r as u32));
        let picked = s.select(hit, k, zero, DType::I64);
        let index =
            self.reduce(&Lazy { sizes: ext, value: picked, dtype: DType::I64 }, &[r], false, ReduceOp::Sum, DType::I64);
        let at: Vec<Option<Expr>> = (0..r).map(|m| (m != d).then(|| Expr::v(m as u32))).collect();
        let value = self.gather_load(x, &at, &[(d, index.value)], &out_sizes, Negatives::Wrap);
        Ok(vec![Lazy { sizes: out_sizes, value, dtype }, index])
    }

    /// `x` as a 1-D tensor (its elements in row-major order).
    fn flatten(&mut self, x: &Lazy) -> Lazy {
        let numel = x.sizes.iter().fold(Expr::c(1), |acc, s| acc.mul(s));
        self.reshape(x, vec![numel])
    }

    /// `x` without its size-1 dim `d`.
    fn squeeze_dim(&mut self, x: &Lazy, d: usize) -> Lazy {
        let mut sizes = x.sizes.clone();
        sizes.remove(d);
        let map: Vec<Expr> = (0..x.ndim())
            .map(|k| match k.cmp(&d) {
                std::cmp::Ordering::Less => Expr::v(k as u32),
                std::cmp::Ordering::Equal => Expr::zero(),
                std::cmp::Ordering::Greater => Expr::v(k as u32 - 1),
            })
            .collect();
        self.view(x, sizes, &map)
    }
}
