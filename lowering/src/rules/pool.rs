//! Average pooling (2-D and 3-D) as a reduction over the window, and its
//! gradient as a reduction over the windows that cover each input element.
//!
//! `avg_pool2d_backward` / `avg_pool3d_backward`: input element `h` is covered by
//! outputs `o = (h + p) // s - j` for `j < ceil(k / s)`, masked to windows that
//! exist and reach `h`, each adding `grad / count` with the forward's divisor.

use super::common::int_list;
use crate::error::{agree, invalid, shape, unsupported, LowerError};
use crate::lazy::Lazy;
use crate::lowerer::{Handled, Lowerer, Res};
use rdyn_ir::graph::Node;
use rdyn_ir::loops::{BinaryOp, ReduceOp, ScalarId};
use rdyn_ir::op::Op;
use rdyn_ir::{DType, Expr};

/// `avg_pool2d` / `avg_pool3d`: each output sums its window (padding
/// reads nothing) and divides by PyTorch's count — the window clipped to
/// the padded input (`count_include_pad`) or to the input itself, unless
/// `divisor_override` is given.
pub(super) fn avg_pool(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let op = node.target.as_str();
    let (sp, sizes, out, x) = lw.pool_operand(node, "self", "average pooling")?;
    let n = x.ndim();
    if n < sp || sizes.len() != n {
        return Err(invalid(op, "input has too few dims"));
    }
    let lead = n - sp;
    let w = Window::parse(node, 1, sp)?;
    w.check_output(op, &x.sizes, &sizes, lead)?;
    let (kernel, stride, pad) = (&w.kernel, &w.stride, &w.pad);
    // Window position k_m of output o_m reads input o_m·s_m − p_m + k_m.
    let mut ext = sizes.clone();
    ext.extend(kernel.iter().map(|k| Expr::c(*k)));
    let mut map: Vec<Expr> = (0..n as u32).map(Expr::v).collect();
    let mut starts = Vec::new();
    for m in 0..sp {
        let start = Expr::v((lead + m) as u32).mul(&Expr::c(stride[m])).add_c(-pad[m]);
        map[lead + m] = start.add(&Expr::v((n + m) as u32));
        starts.push(start);
    }
    let xw = lw.view(&x, ext.clone(), &map);
    let s = &mut lw.prog.scalars;
    let bounds: Vec<(Expr, Expr)> = (0..sp).map(|m| (map[lead + m].clone(), x.sizes[lead + m].clone())).collect();
    let inside = s.in_range(&bounds).ok_or_else(|| invalid(op, "no spatial dims"))?;
    let masked = s.add_mask(xw.value, inside);
    let zero = s.constant(0.0, xw.dtype);
    let value = s.select(inside, masked, zero, xw.dtype);
    let dtype = xw.dtype;
    let red: Vec<usize> = (n..n + sp).collect();
    let sum = lw.reduce(&Lazy { sizes: ext, value, dtype }, &red, false, ReduceOp::Sum, dtype);
    let count = lw.window_count(&w, &starts, &x.sizes[lead..], dtype);
    let v = lw.prog.scalars.binary(BinaryOp::Div, sum.value, count, dtype);
    let result = lw.cast_lazy(Lazy { sizes: sum.sizes, value: v, dtype }, out);
    Ok(Handled::Native(vec![result]))
}

/// `avg_pool2d_backward` / `avg_pool3d_backward`: each input element
/// sums `grad / count` over the windows that cover it. Along a spatial
/// dim, input `h` lies in the windows `o = (h + p) // s - j` for
/// `j < ceil(k / s)` that exist (`0 <= o < O`) and reach it
/// (`h < o·s − p + k`): a reduction of `ceil(k / s)` steps per dim, one
/// for the usual `k = s`.
pub(super) fn avg_pool_backward(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let op = node.target.as_str();
    let (sp, sizes, out, g) = lw.pool_operand(node, "grad_output", "average pooling gradient")?;
    let n = sizes.len();
    if n < sp || g.ndim() != n {
        return Err(invalid(op, "grad_output and self need the same dims, at least one per spatial dim"));
    }
    let lead = n - sp;
    let w = Window::parse(node, 2, sp)?;
    w.check_output(op, &sizes, &g.sizes, lead)?;
    let mut ext = sizes.clone();
    ext.extend((0..sp).map(|m| Expr::c((w.kernel[m] + w.stride[m] - 1) / w.stride[m])));
    let ctx = lw.ctx_for(&ext);
    let mut map: Vec<Expr> = (0..n as u32).map(Expr::v).collect();
    let mut starts = Vec::new();
    let mut bounds = Vec::new();
    for m in 0..sp {
        let h = Expr::v((lead + m) as u32);
        let o = h.add_c(w.pad[m]).floordiv(&Expr::c(w.stride[m]), &ctx).sub(&Expr::v((n + m) as u32));
        let start = o.scale(w.stride[m]).add_c(-w.pad[m]);
        bounds.push((o.clone(), g.sizes[lead + m].clone()));
        bounds.push((h.sub(&start), Expr::c(w.kernel[m])));
        map[lead + m] = o;
        starts.push(start);
    }
    let gw = lw.view(&g, ext.clone(), &map);
    let dtype = gw.dtype;
    let count = lw.window_count(&w, &starts, &sizes[lead..], dtype);
    let s = &mut lw.prog.scalars;
    let inside = s.in_range(&bounds).ok_or_else(|| invalid(op, "no spatial dims"))?;
    let masked = s.add_mask(gw.value, inside);
    let share = s.binary(BinaryOp::Div, masked, count, dtype);
    let zero = s.constant(0.0, dtype);
    let value = s.select(inside, share, zero, dtype);
    let red: Vec<usize> = (n..n + sp).collect();
    let sum = lw.reduce(&Lazy { sizes: ext, value, dtype }, &red, false, ReduceOp::Sum, dtype);
    let result = lw.cast_lazy(sum, out);
    Ok(Handled::Native(vec![result]))
}

impl Lowerer<'_> {
    /// An average pooling node's spatial rank (2 or 3), output sizes and
    /// dtype, and its first argument `name` in the dtype it is computed in
    /// (float32 for half precision). `what` names the op in the error for
    /// a non-float output.
    fn pool_operand(
        &mut self,
        node: &Node,
        name: &str,
        what: &str,
    ) -> Result<(usize, Vec<Expr>, DType, Lazy), LowerError> {
        let sp = if matches!(node.op, Op::AvgPool3d | Op::AvgPool3dBackward) { 3 } else { 2 };
        let (sizes, out) = self.out_meta(node)?;
        if !out.is_float() {
            return Err(unsupported(&node.target, format!("{what} of {out}")));
        }
        let x = self.tensor_arg(node, 0, name)?;
        let x = self.cast_lazy(x, if matches!(out, DType::F16 | DType::BF16) { DType::F32 } else { out });
        Ok((sp, sizes, out, x))
    }

    /// PyTorch's divisor of the window starting at `starts` (one index
    /// expression per spatial dim, over an input of spatial `sizes`): the
    /// override, or the window clipped to the padded input
    /// (`count_include_pad`) or to the input itself.
    fn window_count(&mut self, w: &Window, starts: &[Expr], sizes: &[Expr], dtype: DType) -> ScalarId {
        let s = &mut self.prog.scalars;
        let count = match w.divisor {
            Some(d) => s.int_constant(d, DType::I64),
            None => {
                let mut count = s.int_constant(1, DType::I64);
                for (m, (start, size)) in starts.iter().zip(sizes).enumerate() {
                    let start = s.index(start.clone());
                    let k = s.int_constant(w.kernel[m], DType::I64);
                    let end = s.binary(BinaryOp::Add, start, k, DType::I64);
                    let padded_end = s.index(size.add_c(w.pad[m]));
                    let end = s.binary(BinaryOp::Min, end, padded_end, DType::I64);
                    let extent = if w.count_include_pad {
                        s.binary(BinaryOp::Sub, end, start, DType::I64)
                    } else {
                        let zero = s.int_constant(0, DType::I64);
                        let lo = s.binary(BinaryOp::Max, start, zero, DType::I64);
                        let n_c = s.index(size.clone());
                        let hi = s.binary(BinaryOp::Min, end, n_c, DType::I64);
                        s.binary(BinaryOp::Sub, hi, lo, DType::I64)
                    };
                    count = s.binary(BinaryOp::Mul, count, extent, DType::I64);
                }
                count
            }
        };
        s.cast(count, dtype)
    }
}

/// An average pooling's window arguments, one value per spatial dim.
struct Window {
    kernel: Vec<i64>,
    stride: Vec<i64>,
    pad: Vec<i64>,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor: Option<i64>,
}

impl Window {
    /// The arguments from `kernel_size` (at position `first`) on: kernel,
    /// stride, padding, ceil_mode, count_include_pad, divisor_override.
    fn parse(node: &Node, first: usize, sp: usize) -> Result<Window, LowerError> {
        let op = node.target.as_str();
        let spread = |v: Vec<i64>, default: &[i64]| -> Vec<i64> {
            match v.len() {
                0 => default.to_vec(),
                1 => vec![v[0]; sp],
                _ => v,
            }
        };
        let kernel = spread(int_list(node.arg(first, "kernel_size"), op)?, &[]);
        let stride = spread(int_list(node.arg(first + 1, "stride"), op).unwrap_or_default(), &kernel);
        let pad = spread(int_list(node.arg(first + 2, "padding"), op).unwrap_or_else(|_| vec![0]), &[0]);
        if kernel.len() != sp || stride.len() != sp || pad.len() != sp {
            return Err(invalid(op, "kernel_size, stride and padding need one value per spatial dim"));
        }
        if kernel.iter().chain(&stride).any(|&v| v <= 0) {
            return Err(invalid(op, "kernel_size and stride must be positive"));
        }
        if let Some((p, k)) = pad.iter().zip(&kernel).find(|(p, k)| **p < 0 || **p > **k / 2) {
            return Err(invalid(op, format!("padding {p} for a kernel of {k}; expected 0 to half the kernel")));
        }
        Ok(Window {
            ceil_mode: node.arg(first + 3, "ceil_mode").as_bool().unwrap_or(false),
            kernel,
            stride,
            pad,
            count_include_pad: node.arg(first + 4, "count_include_pad").as_bool().unwrap_or(true),
            divisor: node.arg(first + 5, "divisor_override").as_int(),
        })
    }
}

impl Window {
    /// The number of windows along spatial dim `m` of length `input`, as
    /// ATen's `pooling_output_shape` counts them.
    fn windows(&self, m: usize, input: i64) -> i64 {
        let (k, s, p) = (i128::from(self.kernel[m]), i128::from(self.stride[m]), i128::from(self.pad[m]));
        let span = i128::from(input) + 2 * p - k + if self.ceil_mode { s - 1 } else { 0 };
        let mut out = span.div_euclid(s) + 1;
        if self.ceil_mode && (out - 1) * s >= i128::from(input) + p {
            out -= 1;
        }
        i64::try_from(out).unwrap_or(-1)
    }

    /// The pooled sizes `pooled` are those of `input` (`lead` dims before
    /// the spatial ones) pooled by this window; and the window is one
    /// rdyn's arithmetic holds.
    fn check_output(&self, op: &str, input: &[Expr], pooled: &[Expr], lead: usize) -> Result<(), LowerError> {
        let expected: Vec<Expr> = input
            .iter()
            .enumerate()
            .map(|(d, size)| match (d.checked_sub(lead), size.as_const()) {
                (Some(m), Some(n)) => Expr::c(self.windows(m, n)),
                (Some(_), None) => pooled[d].clone(),
                (None, _) => size.clone(),
            })
            .collect();
        if !agree(pooled, &expected) {
            let why = format!("this window over {} gives {}", shape(input), shape(&expected));
            return Err(invalid(op, format!("pooled sizes {}; {why}", shape(pooled))));
        }
        // Past int32 (ATen's pooling kernels index in int32), the window
        // arithmetic could overflow int64: eager's.
        match self.kernel.iter().chain(&self.stride).all(|&v| v <= i64::from(i32::MAX)) {
            true => Ok(()),
            false => Err(unsupported(op, "a kernel or stride past 2^31")),
        }
    }
}
