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
//! Identical reductions (the `sum` and the sum inside a `mean` of the same
//! input) share one buffer (`Lowerer::reductions`).

use rdyn_ir::graph::{Arg, Node};
use rdyn_ir::loops::{contiguous_strides, BinaryOp, Kernel, Reduce, ReduceOp, ScalarId, Stage, Step, UnaryOp};
use rdyn_ir::op::Op;
use rdyn_ir::{DType, Expr, Var};

use super::common::{acc_dtype, reduce_dims};
use crate::error::LowerError;
use crate::lazy::{vars, Lazy};
use crate::lowerer::{Handled, Lowerer, Res};

/// Float sums over windows of fewer points are pointwise sums
/// ([`Lowerer::unrolled_sum`]): below 16 points, the CPU tiles a reduction
/// along its outer dims anyway, each lane reading its window point by point.
const UNROLLED_WINDOW: i64 = 16;

/// The most points of an unrolled sum broadcast back over its window
/// (each of whose points recomputes it: at 4, four loads an element).
const UNROLLED_BROADCAST: i64 = 4;

/// What [`Lowerer::moments`] returns.
pub(super) struct Moments {
    /// The mean, reduced dims kept as size 1.
    pub mean: Lazy,
    /// `x - mean` at each element of `x` (over `x`'s index variables).
    pub centered: ScalarId,
    /// Σ (x - mean)², reduced dims kept when asked.
    pub squares: Lazy,
    /// The number of elements reduced.
    pub count: ScalarId,
}

/// Reduction stages, and what variance and layer norm share.
impl Lowerer<'_> {
    /// Reduce `input` over `dims` with `op`; the result keeps reduced dims as
    /// size 1 when `keepdim`. Returns the lazy view of the reduced buffer.
    pub(super) fn reduce(&mut self, input: &Lazy, dims: &[usize], keepdim: bool, op: ReduceOp, dtype: DType) -> Lazy {
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
        if let Some(window) = self.unrolled_sum(op, body, (&out_sizes, &red_sizes), buf_dtype, keepdim) {
            return Lazy { sizes: out_sizes, value: window, dtype: buf_dtype };
        }
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

    /// A float sum over a window of fewer than [`UNROLLED_WINDOW`] points
    /// of fixed size, as one pointwise expression: the points' values added
    /// in the order the reduction visits them. What sums such windows (a
    /// nearest upsampling's gradient over 2x2, an average pool, a sum over a
    /// dim of 3) is then an ordinary pointwise value, fused with its
    /// neighbours and run as pointwise rows; as a reduction stage every tile
    /// of lanes set up an accumulator, called the compiled body once per
    /// window row and stored the lanes, which for 2x2 windows cost more than
    /// the loads (2x upsampling's gradient, `[2, 32, 32, 32]` from a
    /// channels-last `[2, 64, 64, 64]`: 150 µs, 2.3 ns an output). Windows
    /// this short were already tiled along the outer dims (`codegen-cpu`
    /// tiles a reduction along its window only from 16 points), so each
    /// output read its window point by point either way.
    ///
    /// A sum kept with its reduced dims (`keepdim`: a softmax's or a layer
    /// norm's, broadcast back over the window it summed) is recomputed at
    /// every point of that window, `points` times the loads; it is unrolled
    /// only up to [`UNROLLED_BROADCAST`] points. A softmax over a middle
    /// dim of 15, `[4096, 15, 64]`: 2.2 ms as a reduction, 4.3 ms unrolled.
    fn unrolled_sum(
        &mut self,
        op: ReduceOp,
        body: ScalarId,
        sizes: (&[Expr], &[Expr]),
        dtype: DType,
        broadcast_back: bool,
    ) -> Option<ScalarId> {
        let (out_sizes, red_sizes) = sizes;
        let window: Vec<i64> = red_sizes.iter().map(Expr::as_const).collect::<Option<_>>()?;
        let points: i64 = window.iter().product();
        let most = if broadcast_back { UNROLLED_BROADCAST } else { UNROLLED_WINDOW - 1 };
        if op != ReduceOp::Sum || !dtype.is_float() || !(1..=most).contains(&points) {
            return None;
        }
        let n_out = out_sizes.len();
        let ctx = self.ctx_for(out_sizes);
        let mut sum: Option<ScalarId> = None;
        for p in 0..points {
            // Point `p` of the window, last dim fastest (the reduction's order).
            let mut map = vars(n_out);
            let mut rest = p;
            let mut point = vec![0; window.len()];
            for (k, &n) in window.iter().enumerate().rev() {
                point[k] = rest % n;
                rest /= n;
            }
            map.extend(point.into_iter().map(Expr::c));
            let value = self.prog.scalars.substitute(body, &map, &ctx);
            sum = Some(match sum {
                None => value,
                Some(acc) => self.prog.scalars.binary(BinaryOp::Add, acc, value, dtype),
            });
        }
        sum
    }

    pub(super) fn numel_of(&mut self, input: &Lazy, dims: &[usize], dtype: DType) -> ScalarId {
        let n = dims.iter().fold(Expr::c(1), |acc, d| acc.mul(&input.sizes[*d]));
        let idx = match n.as_const() {
            Some(k) => self.prog.scalars.int_constant(k, DType::I64),
            None => self.prog.scalars.index(n),
        };
        self.prog.scalars.cast(idx, dtype)
    }

    /// The two passes variance and layer norm share, in `acc`: the mean over
    /// `dims` (kept as size 1), the deviation from it at each element, and
    /// the sum of squared deviations (kept when `keep`).
    ///
    /// When `x` does not vary along `dims` (an input expanded along them),
    /// its mean is its value there, exactly, as eager's Welford gives; the
    /// rounded `sum / n` would be an ulp off, which a layer norm scales by
    /// `1/sqrt(eps)`.
    pub(super) fn moments(&mut self, x: &Lazy, dims: &[usize], keep: bool, acc: DType) -> Moments {
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
}

/// A reduction node's input and what it reduces.
struct Reduction {
    x: Lazy,
    ndim: usize,
    /// The `dim` argument (None: every dim).
    dim_arg: Arg,
    keepdim: bool,
    dims: Vec<usize>,
    out: DType,
    /// Reduced dims kept as size 1 (asked for, or a 0-dim input).
    keep: bool,
}

impl Reduction {
    /// The reduction of `x`, the node's input.
    fn of(lw: &Lowerer<'_>, node: &Node, x: Lazy) -> Result<Reduction, LowerError> {
        use Op::*;
        let ndim = x.ndim();
        let overload = node.overload();
        let (dim_arg, keepdim) = match node.op {
            Var | Std | VarMean => (node.arg(1, "dim").clone(), node.kwarg("keepdim").as_bool().unwrap_or(false)),
            _ if overload == "default" && matches!(node.op, Sum | Prod | Max | Min | Any | All | Mean) => {
                (Arg::None, false)
            }
            _ => (node.arg(1, "dim").clone(), node.arg(2, "keepdim").as_bool().unwrap_or(false)),
        };
        let dims = reduce_dims(&dim_arg, ndim, &node.target)?;
        let (_, out) = lw.out_meta(node)?;
        let keep = keepdim || ndim == 0;
        Ok(Reduction { x, ndim, dim_arg, keepdim, dims, out, keep })
    }

    /// The reduction of the node's first argument.
    fn read(lw: &Lowerer<'_>, node: &Node) -> Result<Reduction, LowerError> {
        let x = lw.tensor_arg(node, 0, "self")?;
        Reduction::of(lw, node, x)
    }
}

/// `sum`, `prod`: accumulated in float32 for half precision.
pub(super) fn sum_prod(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let Reduction { x, dims, keep, out, .. } = Reduction::read(lw, node)?;
    let op = if node.op == Op::Sum { ReduceOp::Sum } else { ReduceOp::Prod };
    let r = lw.reduce(&x, &dims, keep, op, acc_dtype(out));
    Ok(Handled::Native(vec![lw.cast_lazy(r, out)]))
}

/// `mean`: the sum divided by the count, in the sum's dtype.
pub(super) fn mean(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let Reduction { x, dims, keep, out, .. } = Reduction::read(lw, node)?;
    let acc = acc_dtype(out);
    let r = lw.reduce(&x, &dims, keep, ReduceOp::Sum, acc);
    let n = lw.numel_of(&x, &dims, acc);
    let v = lw.prog.scalars.binary(BinaryOp::Div, r.value, n, acc);
    Ok(Handled::Native(vec![lw.cast_lazy(Lazy { value: v, ..r }, out)]))
}

/// `amax`, `amin`, and `max`/`min` (with their indices when the node
/// returns them; of two tensors, elementwise).
pub(super) fn extreme(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let x = lw.tensor_arg(node, 0, "self")?;
    // max.other / min.other are elementwise.
    if matches!(node.op, Op::Max | Op::Min) && matches!(node.arg(1, "other"), Arg::Tensor(_)) {
        let (sizes, out) = lw.out_meta(node)?;
        let a = lw.operand(node.arg(0, "self"), &sizes, out, &node.target)?;
        let b = lw.operand(node.arg(1, "other"), &sizes, out, &node.target)?;
        let op = if node.op == Op::Max { BinaryOp::Max } else { BinaryOp::Min };
        let v = lw.prog.scalars.binary(op, a, b, out);
        return Ok(Handled::Native(vec![Lazy { sizes, value: v, dtype: out }]));
    }
    let Reduction { x, dims, keep, .. } = Reduction::of(lw, node, x)?;
    let op = if matches!(node.op, Op::Amax | Op::Max) { ReduceOp::Max } else { ReduceOp::Min };
    let values = lw.reduce(&x, &dims, keep, op, x.dtype);
    if node.outputs.len() == 2 {
        let arg = if op == ReduceOp::Max { ReduceOp::ArgMax } else { ReduceOp::ArgMin };
        let idx = lw.reduce(&x, &dims, keep, arg, DType::I64);
        Ok(Handled::Native(vec![values, idx]))
    } else {
        Ok(Handled::Native(vec![values]))
    }
}

/// `argmax`, `argmin`: over every dim, with `keepdim`, a view of all ones.
pub(super) fn arg_extreme(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let Reduction { x, ndim, dim_arg, keepdim, dims, .. } = Reduction::read(lw, node)?;
    let op = if node.op == Op::Argmax { ReduceOp::ArgMax } else { ReduceOp::ArgMin };
    let keep_arg = keepdim && !dim_arg.is_none();
    let r = lw.reduce(&x, &dims, keep_arg || ndim == 0, op, DType::I64);
    if keepdim && dim_arg.is_none() {
        let (sizes, _) = lw.out_meta(node)?;
        let zeros = vec![Expr::zero(); r.ndim()];
        Ok(Handled::Native(vec![lw.view(&r, sizes, &zeros)]))
    } else {
        Ok(Handled::Native(vec![r]))
    }
}

/// `any`, `all`.
pub(super) fn any_all(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let Reduction { x, dims, keep, .. } = Reduction::read(lw, node)?;
    let op = if node.op == Op::Any { ReduceOp::Any } else { ReduceOp::All };
    Ok(Handled::Native(vec![lw.reduce(&x, &dims, keep, op, DType::Bool)]))
}

/// `var`, `std`, `var_mean`: the sum of squared deviations (`moments`)
/// over the count less the `correction`.
pub(super) fn variance(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let Reduction { x, ndim, dims, out, keep, .. } = Reduction::read(lw, node)?;
    let correction = match node.kwarg("correction") {
        Arg::None => 1.0,
        other => other.as_float().unwrap_or(1.0),
    };
    let acc = acc_dtype(if out.is_float() { out } else { DType::F32 });
    let Moments { mean, squares: ss, count: n, .. } = lw.moments(&x, &dims, keep, acc);
    let s = &mut lw.prog.scalars;
    let c = s.constant(correction, acc);
    let dof = s.binary(BinaryOp::Sub, n, c, acc);
    let zero = s.constant(0.0, acc);
    let dof = s.binary(BinaryOp::Max, dof, zero, acc);
    let mut var = s.binary(BinaryOp::Div, ss.value, dof, acc);
    if node.op == Op::Std {
        var = s.unary(UnaryOp::Sqrt, var, acc);
    }
    let var = lw.cast_lazy(Lazy { value: var, ..ss.clone() }, out);
    if node.op != Op::VarMean {
        return Ok(Handled::Native(vec![var]));
    }
    let mean_out = if keep {
        mean
    } else {
        let zeros_map: Vec<Expr> = lw.keepdim_map(ndim, &dims);
        lw.view(&mean, ss.sizes.clone(), &zeros_map)
    };
    Ok(Handled::Native(vec![var, lw.cast_lazy(mean_out, out)]))
}

/// `max + log(sum(exp(x - max)))`, or the max itself where it is
/// infinite. PyTorch's decomposition shifts by 0 there instead,
/// which gives the same: +inf when an element is +inf, -inf when
/// all are (or none); elsewhere it is this very expression. Its
/// sum is the one `log_softmax` over the same input computes, so
/// the two share one pass of `exp` (the suite's reduction block
/// computed it twice).
pub(super) fn logsumexp(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let Reduction { x, ndim, dims, out, keep, .. } = Reduction::read(lw, node)?;
    let acc = acc_dtype(if out.is_float() { out } else { DType::F32 });
    let xf = lw.cast_lazy(x.clone(), acc);
    let m = lw.reduce(&xf, &dims, true, ReduceOp::Max, acc);
    let mb = lw.broadcast_to(&m, &x.sizes);
    let s = &mut lw.prog.scalars;
    let d = s.binary(BinaryOp::Sub, xf.value, mb.value, acc);
    let e = s.unary(UnaryOp::Exp, d, acc);
    let e = Lazy { sizes: x.sizes.clone(), value: e, dtype: acc };
    // Kept dims, as `log_softmax`'s sum has them.
    let total = lw.reduce(&e, &dims, true, ReduceOp::Sum, acc);
    let s = &mut lw.prog.scalars;
    let l = s.unary(UnaryOp::Log, total.value, acc);
    let v = s.binary(BinaryOp::Add, l, m.value, acc);
    let inf = s.unary(UnaryOp::IsInf, m.value, DType::Bool);
    let v = s.select(inf, m.value, v, acc);
    let mut result = Lazy { value: v, ..total };
    if !keep {
        let sizes = (0..ndim).filter(|d| !dims.contains(d)).map(|d| x.sizes[d].clone()).collect();
        let map = lw.keepdim_map(ndim, &dims);
        result = lw.view(&result, sizes, &map);
    }
    Ok(Handled::Native(vec![lw.cast_lazy(result, out)]))
}
