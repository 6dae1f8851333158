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
//!
//! searchsorted and bucketize are ATen's binary search: the same midpoints and
//! comparisons (`!(mid >= v)` moves right, `!(mid > v)` for the right side), so NaN
//! in the sequence or among the values lands where eager's does. On the CPU rdyn's
//! search kernel (`ExternKind::Search`, `codegen-cpu/src/search.rs`); on GPU
//! devices the search is unrolled into each element's expression, one fused kernel.

use crate::ir::graph::{Arg, Node};
use crate::ir::loops::{
    contiguous_strides, BinaryOp, Extern, ExternKind, Negatives, ReduceOp, ScalarId, SortSelect, SortSpec, Step,
    UnaryOp,
};
use crate::ir::op::Op;
use crate::ir::{DType, Expr};
use crate::lazy::Lazy;
use crate::lower::{Handled, Lowerer};
use crate::reduce::kernel_dtype;
use crate::shape::norm_dim;
use crate::LowerError;

type Res = Result<Handled, LowerError>;

/// Whether `a` sorts before `b` ascending: smaller, or a number before NaN.
fn less(s: &mut crate::ir::loops::Scalars, a: ScalarId, b: ScalarId, dtype: DType) -> ScalarId {
    let lt = s.binary(BinaryOp::Lt, a, b, DType::Bool);
    if !dtype.is_float() {
        return lt;
    }
    let (a_nan, b_nan) = (s.unary(UnaryOp::IsNan, a, DType::Bool), s.unary(UnaryOp::IsNan, b, DType::Bool));
    let a_number = s.unary(UnaryOp::Not, a_nan, DType::Bool);
    let number_first = s.binary(BinaryOp::And, b_nan, a_number, DType::Bool);
    s.binary(BinaryOp::Or, lt, number_first, DType::Bool)
}

impl Lowerer<'_> {
    /// sort, topk, kthvalue, median, nanmedian.
    pub(crate) fn sort(&mut self, node: &Node) -> Res {
        let op = node.target.as_str();
        let overload = node.overload();
        let known = match node.op {
            Op::Sort => matches!(overload, "default" | "stable"),
            Op::Median | Op::Nanmedian => matches!(overload, "default" | "dim"),
            _ => overload == "default",
        };
        if !known {
            return Err(crate::unsupported(op, format!("overload {overload}")));
        }
        let (_, out) = self.out_meta(node)?;
        let x = self.tensor_arg(node, 0, "self")?;
        if x.dtype != out {
            return Err(crate::invalid(op, format!("values of {out} from an input of {}", x.dtype)));
        }
        let int =
            |arg: &Arg, what: &str| arg.as_int().ok_or_else(|| crate::invalid(op, format!("{what} must be an int")));
        let flag = |arg: &Arg, default: bool| arg.as_bool().unwrap_or(default);
        // Whole-tensor medians sort the flattened tensor and return a value only.
        let whole = matches!(node.op, Op::Median | Op::Nanmedian) && overload == "default";
        let x = if whole { self.flatten(&x) } else { x };
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
            return Err(crate::invalid(op, format!("dim {dim} out of range for {r} dims")));
        }
        let (descending, select, keepdim) = match node.op {
            Op::Sort => {
                let key = if overload == "stable" { node.kwarg("descending") } else { node.arg(2, "descending") };
                (flag(key, false), SortSelect::All, true)
            }
            Op::Topk => (flag(node.arg(3, "largest"), true), SortSelect::Leading(int(node.arg(1, "k"), "k")?), true),
            Op::Kthvalue => {
                (false, SortSelect::Kth(int(node.arg(1, "k"), "k")? - 1), flag(node.arg(3, "keepdim"), false))
            }
            // A whole-tensor median is 0-dim: the flattened dim goes.
            Op::Median => (false, SortSelect::Median, !whole && flag(node.arg(2, "keepdim"), false)),
            _ => (false, SortSelect::NanMedian, !whole && flag(node.arg(2, "keepdim"), false)),
        };
        if r == 0 {
            // A 0-dim tensor is its own sort, topk(1), kthvalue(1) and median.
            if matches!(select, SortSelect::Leading(k) if k != 1) || matches!(select, SortSelect::Kth(k) if k != 0) {
                return Err(crate::unsupported(op, "k out of range for a 0-dim tensor"));
            }
            let zero = self.prog.scalars.int_constant(0, DType::I64);
            return Ok(Handled::Native(vec![x, Lazy { sizes: Vec::new(), value: zero, dtype: DType::I64 }]));
        }
        let d = norm_dim(dim, r);
        // A selection needs a known length to check its position against
        // (eager raises for one out of range, and for a median of nothing).
        if select != SortSelect::All {
            let n =
                self.constant(&x.sizes[d]).ok_or_else(|| crate::unsupported(op, "a selection along a symbolic dim"))?;
            let fits = match select {
                SortSelect::Leading(k) => (0..=n).contains(&k),
                SortSelect::Kth(k) => (0..n).contains(&k),
                _ => n > 0,
            };
            if !fits {
                return Err(crate::unsupported(op, format!("{select:?} of a dim of length {n} (eager raises)")));
            }
        }
        let spec = SortSpec { dim: d, descending, select };
        let x = self.cast_lazy(x, kernel_dtype(out));
        let mut outs =
            if self.options.cpu_kernels { self.sort_kernel(&x, spec) } else { self.rank_sort(node, &x, spec)? };
        outs[0] = self.cast_lazy(outs[0].clone(), out);
        if !keepdim {
            outs = outs.iter().map(|o| self.squeeze_dim(o, d)).collect();
        }
        if whole {
            outs.truncate(1);
        }
        Ok(Handled::Native(outs))
    }

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
            crate::unsupported(
                &node.target,
                format!("a sort on this device of a line longer than {MAX_LINE} (or symbolic)"),
            )
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

impl Lowerer<'_> {
    /// searchsorted and bucketize: ATen's binary search, on the CPU rdyn's
    /// search kernel, on GPU devices unrolled into one scalar expression per
    /// element (a fused kernel, no stored intermediates). Each step takes the same midpoint and the
    /// same comparison as ATen's: `!(mid >= v)` (`!(mid > v)` for the
    /// right side) moves right, so NaN in the sequence or among the values
    /// lands where ATen's puts it.
    pub(crate) fn search_sorted(&mut self, node: &Node) -> Res {
        let op = node.target.as_str();
        let (sizes, out) = self.out_meta(node)?;
        let (seq, v) = match node.op {
            Op::Searchsorted if node.overload() == "Tensor" => {
                (self.tensor_arg(node, 0, "sorted_sequence")?, self.tensor_arg(node, 1, "self")?)
            }
            Op::Bucketize if node.overload() == "Tensor" => {
                (self.tensor_arg(node, 1, "boundaries")?, self.tensor_arg(node, 0, "self")?)
            }
            _ => return Err(crate::unsupported(op, format!("overload {}", node.overload()))),
        };
        let right =
            node.kwarg("right").as_bool().unwrap_or(false) || matches!(node.kwarg("side"), Arg::Str(s) if s == "right");
        if seq.dtype != v.dtype || v.sizes != sizes {
            return Err(crate::unsupported(op, "a sequence and values of different dtypes"));
        }
        let batched = seq.ndim() > 1;
        if seq.ndim() == 0
            || (batched && (seq.ndim() != v.ndim() || seq.sizes[..seq.ndim() - 1] != v.sizes[..v.ndim() - 1]))
        {
            return Err(crate::unsupported(op, "a sequence whose leading dims differ from the values'"));
        }
        let last = seq.ndim() - 1;
        // Each value's row of the sequence: the values' leading dims, then
        // a position along the last.
        let row: Vec<Option<Expr>> = (0..last).map(|d| Some(Expr::v(d as u32))).chain([None]).collect();
        let m =
            self.constant(&seq.sizes[last]).ok_or_else(|| crate::unsupported(op, "a sequence of symbolic length"))?;
        // With a sorter, the sequence is read through it: seq[..., sorter[..., j]].
        let seq = match node.kwarg("sorter") {
            Arg::Tensor(s) => {
                let sorter = self.value(*s, op)?;
                let value = self.gather_load(&seq, &row, &[(last, sorter.value)], &seq.sizes.clone(), Negatives::Wrap);
                Lazy { value, ..seq }
            }
            _ => seq,
        };
        if self.options.cpu_kernels {
            let acc = kernel_dtype(v.dtype);
            let (seq, v) = (self.cast_lazy(seq, acc), self.cast_lazy(v, acc));
            let inputs = vec![self.buffer_for_extern(&seq), self.buffer_for_extern(&v)];
            let buf = self.temp_buffer(DType::I64, sizes.clone(), contiguous_strides(&sizes));
            self.prog.steps.push(Step::Extern(Extern {
                kind: ExternKind::Search { right },
                inputs,
                outputs: vec![buf],
            }));
            let positions = self.load_buffer(buf);
            return Ok(Handled::Native(vec![self.cast_lazy(positions, out)]));
        }
        let s = &mut self.prog.scalars;
        let (zero, one, two) =
            (s.int_constant(0, DType::I64), s.int_constant(1, DType::I64), s.int_constant(2, DType::I64));
        let (mut start, mut end) = (zero, s.int_constant(m, DType::I64));
        for _ in 0..u64::BITS - (m as u64).leading_zeros() {
            let s = &mut self.prog.scalars;
            let active = s.binary(BinaryOp::Lt, start, end, DType::Bool);
            let width = s.binary(BinaryOp::Sub, end, start, DType::I64);
            let half = s.binary(BinaryOp::FloorDiv, width, two, DType::I64);
            let centre = s.binary(BinaryOp::Add, start, half, DType::I64);
            let mid = s.select(active, centre, zero, DType::I64);
            let mid_val = self.gather_load(&seq, &row, &[(last, mid)], &sizes, Negatives::Wrap);
            let s = &mut self.prog.scalars;
            let stop = s.binary(if right { BinaryOp::Gt } else { BinaryOp::Ge }, mid_val, v.value, DType::Bool);
            let go = s.unary(UnaryOp::Not, stop, DType::Bool);
            let (moves_up, moves_down) =
                (s.binary(BinaryOp::And, active, go, DType::Bool), s.binary(BinaryOp::And, active, stop, DType::Bool));
            let next = s.binary(BinaryOp::Add, mid, one, DType::I64);
            start = s.select(moves_up, next, start, DType::I64);
            end = s.select(moves_down, mid, end, DType::I64);
        }
        let value = self.prog.scalars.cast(start, out);
        Ok(Handled::Native(vec![Lazy { sizes, value, dtype: out }]))
    }
}
