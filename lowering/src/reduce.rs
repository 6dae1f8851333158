//! Reductions. Each becomes a reduction stage whose body is the (inlined)
//! input; derived results (mean, var, std, logsumexp) are lazy epilogues over
//! the reduced buffer, which the scheduler fuses into the same kernel.
//!
//! Variance is computed in two passes (mean, then the sum of squared
//! deviations; `moments`, which layer norm shares) inside one kernel rather
//! than Welford: as stable, and each pass is an ordinary sum the backends already
//! vectorise. The mean of a row of equal values can be off by an ulp (Welford's
//! is exact), which a layer norm of that row multiplies by `1/sqrt(eps)`. Two
//! fixes were measured and not kept: summing deviations from each row's first
//! element reads another point of the row, which split fused kernels; correcting
//! the mean by the mean of the deviations costs a third pass over the row (it
//! needs two sums in one loop, or a Welford reduction, which no backend has yet).
//! One case is exact at no cost: an input that does not vary along the reduced
//! dims (an `expand`) is its own mean, read at index 0, with no reduction at all.
//!
//! `logsumexp` is `max + log(sum(exp(x - max)))`, or the max itself where it is
//! infinite (what PyTorch's decomposition, shifting by 0 there, also gives): its
//! sum is then the very reduction a `log_softmax` of the same input computes, and
//! the two share one pass of `exp`.
//!
//! Scans (cumsum, cumprod, cummax, cummin, logcumsumexp): on the CPU one extern
//! step, rdyn's scan kernel (`ExternKind::Scan`, `codegen-cpu/src/scan.rs`); on
//! GPU devices reductions over each element's prefix (`prefix_scan`, parallel over
//! every output, quadratic in the line), for lines up to 4096 long; longer ones
//! run eagerly.

use crate::ir::graph::{Arg, Node};
use crate::ir::loops::{
    contiguous_strides, BinaryOp, ExternKind, Kernel, Reduce, ReduceOp, ScalarId, ScanOp, Stage, Step, UnaryOp,
};
use crate::ir::op::Op;
use crate::ir::{DType, Expr, Var};
use crate::lazy::{vars, Lazy};
use crate::lower::{Handled, Lowerer};
use crate::LowerError;

type Res = Result<Handled, LowerError>;

/// Normalise a `dim` argument (int, list, or None/empty = all dims).
pub(crate) fn reduce_dims(arg: &Arg, ndim: usize, op: &str) -> Result<Vec<usize>, LowerError> {
    let raw: Vec<i64> = match arg {
        Arg::None => return Ok((0..ndim).collect()),
        Arg::List(items) if items.is_empty() => return Ok((0..ndim).collect()),
        Arg::List(items) => items
            .iter()
            .map(|a| a.as_int().ok_or_else(|| crate::unsupported(op, "symbolic reduction dim")))
            .collect::<Result<_, _>>()?,
        other => vec![other.as_int().ok_or_else(|| crate::unsupported(op, format!("dim {other}")))?],
    };
    let mut dims = Vec::new();
    for d in raw {
        let n = ndim.max(1) as i64;
        let d = if d < 0 { d + n } else { d };
        if d < 0 || d >= n {
            return Err(crate::invalid(op, format!("dim {d} out of range for {ndim}-d input")));
        }
        if ndim > 0 && !dims.contains(&(d as usize)) {
            dims.push(d as usize);
        }
    }
    dims.sort_unstable();
    Ok(dims)
}

/// What [`Lowerer::moments`] returns.
pub(crate) struct Moments {
    /// The mean, reduced dims kept as size 1.
    pub mean: Lazy,
    /// `x - mean` at each element of `x` (over `x`'s index variables).
    pub centered: ScalarId,
    /// Σ (x - mean)², reduced dims kept when asked.
    pub squares: Lazy,
    /// The number of elements reduced.
    pub count: ScalarId,
}

pub(crate) fn acc_dtype(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        other => other,
    }
}

/// The dtype rdyn's CPU kernels (scan, sort, search) compute `dtype` in:
/// float32 or float64, every integer and bool as int64 (exact for all).
pub(crate) fn kernel_dtype(dtype: DType) -> DType {
    match acc_dtype(dtype) {
        DType::F32 => DType::F32,
        DType::F64 => DType::F64,
        _ => DType::I64,
    }
}

impl Lowerer<'_> {
    /// Reduce `input` over `dims` with `op`; the result keeps reduced dims as
    /// size 1 when `keepdim`. Returns the lazy view of the reduced buffer.
    pub(crate) fn reduce(&mut self, input: &Lazy, dims: &[usize], keepdim: bool, op: ReduceOp, dtype: DType) -> Lazy {
        let mut out_sizes = Vec::new();
        let mut red_sizes = Vec::new();
        let mut map = Vec::new();
        for (d, size) in input.sizes.iter().enumerate() {
            if dims.contains(&d) {
                if keepdim {
                    out_sizes.push(Expr::c(1));
                }
                red_sizes.push(size.clone());
                map.push(None);
            } else {
                map.push(Some(out_sizes.len()));
                out_sizes.push(size.clone());
            }
        }
        let n_out = out_sizes.len() as u32;
        let mut red_index = 0u32;
        let map: Vec<Expr> = map
            .into_iter()
            .map(|slot| match slot {
                Some(pos) => Expr::v(pos as u32),
                None => {
                    red_index += 1;
                    Expr::v(n_out + red_index - 1)
                }
            })
            .collect();
        let mut all_sizes = out_sizes.clone();
        all_sizes.extend(red_sizes.iter().cloned());
        let ctx = self.ctx_for(&all_sizes);
        let body = self.prog.scalars.substitute(input.value, &map, &ctx);
        let buf_dtype = match op {
            ReduceOp::ArgMax | ReduceOp::ArgMin => DType::I64,
            ReduceOp::Any | ReduceOp::All => DType::Bool,
            _ => dtype,
        };
        let body = match op {
            ReduceOp::Any | ReduceOp::All => self.prog.scalars.cast(body, DType::Bool),
            ReduceOp::Sum | ReduceOp::Prod => self.prog.scalars.cast(body, dtype),
            _ => body,
        };
        let key = (op, out_sizes.clone(), red_sizes.clone(), body, buf_dtype);
        if let Some(buf) = self.reductions.get(&key) {
            return self.load_buffer(*buf);
        }
        let buf = self.temp_buffer(buf_dtype, out_sizes.clone(), contiguous_strides(&out_sizes));
        let store = self.prog.buffer(buf).address(&vars(out_sizes.len())).simplify(&self.ctx_for(&out_sizes));
        self.prog.steps.push(Step::Kernel(Kernel {
            outer: out_sizes.clone(),
            stages: vec![Stage {
                out: buf,
                ranges: out_sizes,
                reduce: Some(Reduce { op, ranges: red_sizes }),
                value: body,
                store,
                store_indirect: Vec::new(),
            }],
        }));
        self.reductions.insert(key, buf);
        self.load_buffer(buf)
    }

    /// Scans along one dim: cumsum, cumprod, cummax, cummin, logcumsumexp.
    /// On the CPU, rdyn's scan kernel (one pass per line); on GPU devices,
    /// reductions over each element's prefix (`prefix_scan`).
    pub(crate) fn scan(&mut self, node: &Node) -> Res {
        let (sizes, out) = self.out_meta(node)?;
        let x = self.tensor_arg(node, 0, "self")?;
        let extreme = matches!(node.op, Op::Cummax | Op::Cummin);
        if (extreme && out == DType::Bool) || (node.op == Op::Logcumsumexp && !out.is_float()) {
            return Err(crate::unsupported(&node.target, format!("a scan of {out}")));
        }
        // Values are computed in float32, float64 or int64.
        let acc = kernel_dtype(out);
        let x = self.cast_lazy(x, acc);
        let r = x.ndim();
        if r == 0 {
            let value = self.cast_lazy(x, out);
            return Ok(Handled::Native(if extreme {
                let zero = self.prog.scalars.int_constant(0, DType::I64);
                vec![value, Lazy { sizes, value: zero, dtype: DType::I64 }]
            } else {
                vec![value]
            }));
        }
        let dim = node.arg(1, "dim").as_int().ok_or_else(|| crate::invalid(&node.target, "dim must be an int"))?;
        let d = if dim < 0 { dim + r as i64 } else { dim };
        if !(0..r as i64).contains(&d) {
            return Err(crate::invalid(&node.target, format!("dim {dim} out of range for {r} dims")));
        }
        let d = d as usize;
        let op = match node.op {
            Op::Cumsum => ScanOp::Sum,
            Op::Cumprod => ScanOp::Prod,
            Op::Cummax => ScanOp::Max,
            Op::Cummin => ScanOp::Min,
            _ => ScanOp::LogSumExp,
        };
        let mut outs = if self.options.cpu_kernels {
            let input = self.buffer_for_extern(&x);
            let strides = contiguous_strides(&x.sizes);
            let mut bufs = vec![self.temp_buffer(acc, x.sizes.clone(), strides.clone())];
            if extreme {
                bufs.push(self.temp_buffer(DType::I64, x.sizes.clone(), strides));
            }
            self.prog.steps.push(Step::Extern(crate::ir::loops::Extern {
                kind: ExternKind::Scan { op, dim: d },
                inputs: vec![input],
                outputs: bufs.clone(),
            }));
            bufs.into_iter().map(|b| self.load_buffer(b)).collect()
        } else {
            self.prefix_scan(node, op, &x, d)?
        };
        outs[0] = self.cast_lazy(outs[0].clone(), out);
        Ok(Handled::Native(outs))
    }

    /// A scan as reductions over each element's prefix: the element at j
    /// reduces the inputs at k ≤ j, the rest masked to the identity (sum,
    /// product) or to x_j itself (always in the prefix, so the extreme is
    /// unchanged). Quadratic in the line's length, so long scans run
    /// eagerly.
    fn prefix_scan(&mut self, node: &Node, op: ScanOp, x: &Lazy, d: usize) -> Result<Vec<Lazy>, LowerError> {
        const MAX_SCAN: i64 = 4096;
        if self.constant(&x.sizes[d]).is_none_or(|n| n > MAX_SCAN) {
            return Err(crate::unsupported(&node.target, format!("a scan longer than {MAX_SCAN} (or symbolic)")));
        }
        let r = x.ndim();
        // The prefix dim k is variable r of the extended space.
        let mut ext = x.sizes.clone();
        ext.push(x.sizes[d].clone());
        let map: Vec<Expr> = (0..r).map(|m| Expr::v(if m == d { r as u32 } else { m as u32 })).collect();
        let xk = self.view(x, ext.clone(), &map);
        let dtype = xk.dtype;
        let s = &mut self.prog.scalars;
        let k = s.index(Expr::v(r as u32));
        let j = s.index(Expr::v(d as u32));
        let upto = s.binary(BinaryOp::Le, k, j, DType::Bool);
        let prefix = |value, dtype| Lazy { sizes: ext.clone(), value, dtype };
        Ok(match op {
            ScanOp::Sum | ScanOp::Prod => {
                let (reduce, identity) = if op == ScanOp::Sum { (ReduceOp::Sum, 0.0) } else { (ReduceOp::Prod, 1.0) };
                let id = s.constant(identity, dtype);
                let value = s.select(upto, xk.value, id, dtype);
                vec![self.reduce(&prefix(value, dtype), &[r], false, reduce, dtype)]
            }
            ScanOp::LogSumExp => {
                // m + log Σ exp(x_k - m) with m the prefix max, taken as 0
                // where infinite (all -inf: log 0 = -inf; +inf: inf).
                let masked = s.select(upto, xk.value, x.value, dtype);
                let m = self.reduce(&prefix(masked, dtype), &[r], false, ReduceOp::Max, dtype);
                let s = &mut self.prog.scalars;
                let inf = s.unary(UnaryOp::IsInf, m.value, DType::Bool);
                let zero = s.constant(0.0, dtype);
                let shift = s.select(inf, zero, m.value, dtype);
                let diff = s.binary(BinaryOp::Sub, xk.value, shift, dtype);
                let e = s.unary(UnaryOp::Exp, diff, dtype);
                let value = s.select(upto, e, zero, dtype);
                let total = self.reduce(&prefix(value, dtype), &[r], false, ReduceOp::Sum, dtype);
                let s = &mut self.prog.scalars;
                let log = s.unary(UnaryOp::Log, total.value, dtype);
                let value = s.binary(BinaryOp::Add, shift, log, dtype);
                vec![Lazy { sizes: x.sizes.clone(), value, dtype }]
            }
            ScanOp::Max | ScanOp::Min => {
                // The extreme of the prefix, and the last k holding it (the
                // last NaN once there is one), as ATen's kernels update on ties.
                let reduce = if op == ScanOp::Max { ReduceOp::Max } else { ReduceOp::Min };
                let masked = s.select(upto, xk.value, x.value, dtype);
                let m = self.reduce(&prefix(masked, dtype), &[r], false, reduce, dtype);
                let s = &mut self.prog.scalars;
                let mut hit = s.binary(BinaryOp::Eq, xk.value, m.value, DType::Bool);
                if dtype.is_float() {
                    let a = s.unary(UnaryOp::IsNan, xk.value, DType::Bool);
                    let b = s.unary(UnaryOp::IsNan, m.value, DType::Bool);
                    let both = s.binary(BinaryOp::And, a, b, DType::Bool);
                    hit = s.binary(BinaryOp::Or, hit, both, DType::Bool);
                }
                let hit = s.binary(BinaryOp::And, hit, upto, DType::Bool);
                let k64 = s.cast(k, DType::I64);
                let zero = s.int_constant(0, DType::I64);
                let value = s.select(hit, k64, zero, DType::I64);
                let index = self.reduce(&prefix(value, DType::I64), &[r], false, ReduceOp::Max, DType::I64);
                vec![m, index]
            }
        })
    }

    pub(crate) fn numel_of(&mut self, input: &Lazy, dims: &[usize], dtype: DType) -> crate::ir::loops::ScalarId {
        let n = dims.iter().fold(Expr::c(1), |acc, d| acc.mul(&input.sizes[*d]));
        let idx = match n.as_const() {
            Some(k) => self.prog.scalars.int_constant(k, DType::I64),
            None => self.prog.scalars.index(n),
        };
        self.prog.scalars.cast(idx, dtype)
    }

    pub(crate) fn reduction(&mut self, node: &Node) -> Res {
        use Op::*;
        let x = self.tensor_arg(node, 0, "self")?;
        let ndim = x.ndim();
        let overload = node.overload();
        // max.other / min.other are elementwise.
        if matches!(node.op, Max | Min) && matches!(node.arg(1, "other"), Arg::Tensor(_)) {
            let (sizes, out) = self.out_meta(node)?;
            let a = self.operand(node.arg(0, "self"), &sizes, out, &node.target)?;
            let b = self.operand(node.arg(1, "other"), &sizes, out, &node.target)?;
            let op = if node.op == Max { BinaryOp::Max } else { BinaryOp::Min };
            let v = self.prog.scalars.binary(op, a, b, out);
            return Ok(Handled::Native(vec![Lazy { sizes, value: v, dtype: out }]));
        }
        let (dim_arg, keepdim) = match node.op {
            Var | Std | VarMean => (node.arg(1, "dim").clone(), node.kwarg("keepdim").as_bool().unwrap_or(false)),
            _ if overload == "default" && matches!(node.op, Sum | Prod | Max | Min | Any | All | Mean) => {
                (Arg::None, false)
            }
            _ => (node.arg(1, "dim").clone(), node.arg(2, "keepdim").as_bool().unwrap_or(false)),
        };
        let dims = reduce_dims(&dim_arg, ndim, &node.target)?;
        let (_, out) = self.out_meta(node)?;
        let keep = keepdim || ndim == 0;
        let results = match node.op {
            Sum | Prod => {
                let op = if node.op == Sum { ReduceOp::Sum } else { ReduceOp::Prod };
                let r = self.reduce(&x, &dims, keep, op, acc_dtype(out));
                vec![self.cast_lazy(r, out)]
            }
            Mean => {
                let acc = acc_dtype(out);
                let r = self.reduce(&x, &dims, keep, ReduceOp::Sum, acc);
                let n = self.numel_of(&x, &dims, acc);
                let v = self.prog.scalars.binary(BinaryOp::Div, r.value, n, acc);
                vec![self.cast_lazy(Lazy { value: v, ..r }, out)]
            }
            Amax | Amin | Max | Min => {
                let op = if matches!(node.op, Amax | Max) { ReduceOp::Max } else { ReduceOp::Min };
                let values = self.reduce(&x, &dims, keep, op, x.dtype);
                if node.outputs.len() == 2 {
                    let arg = if op == ReduceOp::Max { ReduceOp::ArgMax } else { ReduceOp::ArgMin };
                    let idx = self.reduce(&x, &dims, keep, arg, DType::I64);
                    vec![values, idx]
                } else {
                    vec![values]
                }
            }
            Argmax | Argmin => {
                let op = if node.op == Argmax { ReduceOp::ArgMax } else { ReduceOp::ArgMin };
                let keep_arg = keepdim && !dim_arg.is_none();
                let r = self.reduce(&x, &dims, keep_arg || ndim == 0, op, DType::I64);
                if keepdim && dim_arg.is_none() {
                    let (sizes, _) = self.out_meta(node)?;
                    let zeros = vec![Expr::zero(); r.ndim()];
                    vec![self.view(&r, sizes, &zeros)]
                } else {
                    vec![r]
                }
            }
            Any | All => {
                let op = if node.op == Any { ReduceOp::Any } else { ReduceOp::All };
                vec![self.reduce(&x, &dims, keep, op, DType::Bool)]
            }
            Var | Std | VarMean => {
                let correction = match node.kwarg("correction") {
                    Arg::None => 1.0,
                    other => other.as_float().unwrap_or(1.0),
                };
                let acc = acc_dtype(if out.is_float() { out } else { DType::F32 });
                let Moments { mean, squares: ss, count: n, .. } = self.moments(&x, &dims, keep, acc);
                let s = &mut self.prog.scalars;
                let c = s.constant(correction, acc);
                let dof = s.binary(BinaryOp::Sub, n, c, acc);
                let zero = s.constant(0.0, acc);
                let dof = s.binary(BinaryOp::Max, dof, zero, acc);
                let mut var = s.binary(BinaryOp::Div, ss.value, dof, acc);
                if node.op == Std {
                    var = s.unary(UnaryOp::Sqrt, var, acc);
                }
                let var = self.cast_lazy(Lazy { value: var, ..ss.clone() }, out);
                if node.op == VarMean {
                    let mean_out = if keep {
                        mean
                    } else {
                        let zeros_map: Vec<Expr> = self.keepdim_map(ndim, &dims);
                        self.view(&mean, ss.sizes.clone(), &zeros_map)
                    };
                    vec![var, self.cast_lazy(mean_out, out)]
                } else {
                    vec![var]
                }
            }
            // `max + log(sum(exp(x - max)))`, or the max itself where it is
            // infinite. PyTorch's decomposition shifts by 0 there instead,
            // which gives the same: +inf when an element is +inf, -inf when
            // all are (or none); elsewhere it is this very expression. Its
            // sum is the one `log_softmax` over the same input computes, so
            // the two share one pass of `exp` (the suite's reduction block
            // computed it twice).
            Logsumexp => {
                let acc = acc_dtype(if out.is_float() { out } else { DType::F32 });
                let xf = self.cast_lazy(x.clone(), acc);
                let m = self.reduce(&xf, &dims, true, ReduceOp::Max, acc);
                let mb = self.broadcast_to(&m, &x.sizes);
                let s = &mut self.prog.scalars;
                let d = s.binary(BinaryOp::Sub, xf.value, mb.value, acc);
                let e = s.unary(UnaryOp::Exp, d, acc);
                let e = Lazy { sizes: x.sizes.clone(), value: e, dtype: acc };
                // Kept dims, as `log_softmax`'s sum has them.
                let total = self.reduce(&e, &dims, true, ReduceOp::Sum, acc);
                let s = &mut self.prog.scalars;
                let l = s.unary(UnaryOp::Log, total.value, acc);
                let v = s.binary(BinaryOp::Add, l, m.value, acc);
                let inf = s.unary(UnaryOp::IsInf, m.value, DType::Bool);
                let v = s.select(inf, m.value, v, acc);
                let mut result = Lazy { value: v, ..total };
                if !keep {
                    let sizes = (0..ndim).filter(|d| !dims.contains(d)).map(|d| x.sizes[d].clone()).collect();
                    let map = self.keepdim_map(ndim, &dims);
                    result = self.view(&result, sizes, &map);
                }
                vec![self.cast_lazy(result, out)]
            }
            _ => return Err(crate::unsupported(&node.target, "no lowering for this reduction")),
        };
        Ok(Handled::Native(results))
    }

    /// The two passes variance and layer norm share, in `acc`: the mean over
    /// `dims` (kept as size 1), the deviation from it at each element, and
    /// the sum of squared deviations (kept when `keep`).
    ///
    /// When `x` does not vary along `dims` (an input expanded along them),
    /// its mean is its value there, exactly, as eager's Welford gives; the
    /// rounded `sum / n` would be an ulp off, which a layer norm scales by
    /// `1/sqrt(eps)`.
    pub(crate) fn moments(&mut self, x: &Lazy, dims: &[usize], keep: bool, acc: DType) -> Moments {
        let xf = self.cast_lazy(x.clone(), acc);
        let count = self.numel_of(x, dims, acc);
        let repeated = !dims.is_empty()
            && dims.iter().all(|&d| {
                x.sizes[d].as_const().is_some_and(|n| n >= 1)
                    && !self.prog.scalars.mentions_var(xf.value, Var(d as u32))
            });
        let mean = if repeated {
            let sizes =
                (0..x.ndim()).map(|d| if dims.contains(&d) { Expr::c(1) } else { x.sizes[d].clone() }).collect();
            let map: Vec<Expr> =
                (0..x.ndim()).map(|d| if dims.contains(&d) { Expr::zero() } else { Expr::v(d as u32) }).collect();
            self.view(&xf, sizes, &map)
        } else {
            let sum = self.reduce(&xf, dims, true, ReduceOp::Sum, acc);
            let mean_v = self.prog.scalars.binary(BinaryOp::Div, sum.value, count, acc);
            Lazy { value: mean_v, ..sum }
        };
        let mean_b = self.broadcast_to(&mean, &x.sizes);
        let s = &mut self.prog.scalars;
        let centered = s.binary(BinaryOp::Sub, xf.value, mean_b.value, acc);
        let sq = s.binary(BinaryOp::Mul, centered, centered, acc);
        let squares =
            self.reduce(&Lazy { sizes: x.sizes.clone(), value: sq, dtype: acc }, dims, keep, ReduceOp::Sum, acc);
        Moments { mean, centered, squares, count }
    }

    /// Index map from a reduced (no keepdim) tensor into its keepdim form.
    fn keepdim_map(&self, ndim: usize, dims: &[usize]) -> Vec<Expr> {
        let mut pos = 0u32;
        (0..ndim)
            .map(|d| {
                if dims.contains(&d) {
                    Expr::zero()
                } else {
                    pos += 1;
                    Expr::v(pos - 1)
                }
            })
            .collect()
    }

    pub(crate) fn cast_lazy(&mut self, lazy: Lazy, dtype: DType) -> Lazy {
        let value = self.prog.scalars.cast(lazy.value, dtype);
        Lazy { value, dtype, ..lazy }
    }
}
