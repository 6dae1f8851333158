//! Normalizations lowered as one node each: inference batch norm, and
//! layer norm. Capturing a layer norm decomposed costs PyTorch's tracer
//! about 5 ms (nine traced ops); as one node, about 0.6 ms.
//!
//! Inference batch norm (`_native_batch_norm_legit_no_training`, and
//! `native_batch_norm` with `training=False`) is `x·alpha + beta` with
//! `alpha = weight / sqrt(var + eps)` and `beta = bias - mean·alpha`, as ATen's
//! CPU kernel computes it. alpha and beta depend on the channel only: along an
//! NCHW row they are computed once per tile (the CPU executor's uniform
//! instructions); when the channels are the input's innermost dimension (after a
//! channels-last convolution), they are stored per channel by a small kernel
//! first, since in the big one the square root and divide would run per element.
//! Layer norm's mean and variance are `reduce.rs`'s two passes (`Lowerer::moments`).

use super::common::acc_dtype;
use super::reduce::Moments;
use crate::error::{agree, invalid, shape, unsupported, LowerError};
use crate::lazy::Lazy;
use crate::lowerer::{Handled, Lowerer, Res};
use rdyn_ir::graph::{Arg, Node};
use rdyn_ir::loops::{BinaryOp, ScalarId, UnaryOp};
use rdyn_ir::Expr;

/// `_native_batch_norm_legit_no_training`.
pub(super) fn batch_norm_inference(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    lw.batch_norm(node, 6)
}

/// `native_batch_norm` in inference; batch statistics (training) are not
/// lowered: eager.
pub(super) fn native_batch_norm(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    match node.arg(5, "training") {
        Arg::Bool(false) => lw.batch_norm(node, 7),
        _ => Err(unsupported(&node.target, "no lowering for this op")),
    }
}

/// `native_layer_norm`: `(x - mean) · rstd · weight + bias` over the
/// last `len(normalized_shape)` dims, computed in float32 for half
/// inputs, with the biased variance. Also returns mean and rstd (kept
/// dims), in the dtype PyTorch's metadata gives them. The scalar graph
/// is the one PyTorch's reference decomposition builds.
pub(super) fn layer_norm(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    let op = node.target.as_str();
    let x = lw.tensor_arg(node, 0, "input")?;
    let k = match node.arg(1, "normalized_shape") {
        Arg::List(items) => items.len(),
        other => return Err(unsupported(op, format!("normalized_shape {other}"))),
    };
    let n = x.ndim();
    if node.outputs.len() != 3 || k == 0 || k > n {
        return Err(unsupported(op, format!("normalized_shape of {k} dims on a {n}-dim input")));
    }
    let (sizes, out) = lw.out_meta(node)?;
    let acc = acc_dtype(out);
    let dims: Vec<usize> = (n - k..n).collect();
    let Moments { mean, centered, squares: ss, count } = lw.moments(&x, &dims, true, acc);
    let eps = node.arg(4, "eps").as_float().unwrap_or(1e-5);
    let s = &mut lw.prog.scalars;
    let var = s.binary(BinaryOp::Div, ss.value, count, acc);
    let e = s.constant(eps, acc);
    let ve = s.binary(BinaryOp::Add, var, e, acc);
    let rstd = Lazy { value: s.unary(UnaryOp::Rsqrt, ve, acc), ..ss };
    let rstd_b = lw.broadcast_to(&rstd, &x.sizes);
    let mut y = lw.prog.scalars.binary(BinaryOp::Mul, centered, rstd_b.value, acc);
    if let Some(w) = lw.affine(node, 2, "weight", &sizes, acc)? {
        y = lw.prog.scalars.binary(BinaryOp::Mul, y, w, acc);
    }
    if let Some(b) = lw.affine(node, 3, "bias", &sizes, acc)? {
        y = lw.prog.scalars.binary(BinaryOp::Add, y, b, acc);
    }
    let y = lw.cast_lazy(Lazy { sizes, value: y, dtype: acc }, out);
    let dtype_of = |lw: &Lowerer<'_>, i: usize| lw.graph.meta(node.outputs[i]).dtype;
    let (mean_dt, rstd_dt) = (dtype_of(lw, 1), dtype_of(lw, 2));
    let mean = lw.cast_lazy(mean, mean_dt);
    let rstd = lw.cast_lazy(rstd, rstd_dt);
    Ok(Handled::Native(vec![y, mean, rstd]))
}

impl Lowerer<'_> {
    /// `x · alpha + beta` per channel (dim 1), with `alpha = weight /
    /// sqrt(var + eps)` and `beta = bias - mean · alpha`, as ATen's CPU
    /// kernel computes it; the saved mean / rstd outputs are empty in
    /// inference on the CPU, the running mean and inverse std on CUDA. When
    /// the channels are the input's innermost dimension (after a
    /// channels-last convolution), alpha and beta are stored per
    /// channel first: computed in the kernel, the square root and divide
    /// would run for every element rather than once per channel.
    /// `eps_at`: the position of `eps` (6 in `_native_batch_norm_legit_no_training`,
    /// 7 in `native_batch_norm`, after `training`).
    fn batch_norm(&mut self, node: &Node, eps_at: usize) -> Res {
        let op = node.target.as_str();
        let (sizes, out) = self.out_meta(node)?;
        if sizes.len() < 2 {
            return Err(invalid(
                op,
                format!("output has rank {}; expected 2 or more (dim 1 the channels)", sizes.len()),
            ));
        }
        let x = self.operand(node.arg(0, "input"), &sizes, out, op)?;
        let eps = node.arg(eps_at, "eps").as_float().unwrap_or(1e-5);
        // Per-channel values over their own `[channels]` domain.
        let channel = |lw: &mut Self, arg: &Arg| -> Result<Option<ScalarId>, LowerError> {
            let Arg::Tensor(v) = arg else { return Ok(None) };
            let lazy = lw.value(*v, op)?;
            if !agree(&lazy.sizes, &sizes[1..2]) {
                let given = shape(&lazy.sizes);
                return Err(invalid(
                    op,
                    format!("{v} has sizes {given}; expected one value per channel, {}", sizes[1]),
                ));
            }
            Ok(Some(lw.prog.scalars.cast(lazy.value, out)))
        };
        let weight = channel(self, node.arg(1, "weight"))?;
        let bias = channel(self, node.arg(2, "bias"))?;
        let mean =
            channel(self, node.arg(3, "running_mean"))?.ok_or_else(|| unsupported(&node.target, "no running mean"))?;
        let var =
            channel(self, node.arg(4, "running_var"))?.ok_or_else(|| unsupported(&node.target, "no running var"))?;
        let per_channel = self.channels_innermost(node);
        // A per-channel value, stored per channel when `per_channel`.
        let channels = vec![sizes[1].clone()];
        let stored = |lw: &mut Self, value: ScalarId| {
            let lazy = Lazy { sizes: channels.clone(), value, dtype: out };
            match per_channel {
                true => {
                    let buf = lw.realize(&lazy, None);
                    lw.load_buffer(buf).value
                }
                false => value,
            }
        };
        let s = &mut self.prog.scalars;
        let e = s.constant(eps, out);
        let ve = s.binary(BinaryOp::Add, var, e, out);
        let invstd = s.unary(UnaryOp::Rsqrt, ve, out);
        let mut alpha = invstd;
        if let Some(w) = weight {
            alpha = s.binary(BinaryOp::Mul, alpha, w, out);
        }
        let alpha = stored(self, alpha);
        let s = &mut self.prog.scalars;
        let shifted = s.binary(BinaryOp::Mul, mean, alpha, out);
        let beta = match bias {
            Some(b) => s.binary(BinaryOp::Sub, b, shifted, out),
            None => s.unary(UnaryOp::Neg, shifted, out),
        };
        let beta = stored(self, beta);
        let broadcast = |lw: &mut Self, value: ScalarId| {
            let lazy = Lazy { sizes: channels.clone(), value, dtype: out };
            lw.view(&lazy, sizes.clone(), &[Expr::v(1)]).value
        };
        let (alpha, beta) = (broadcast(self, alpha), broadcast(self, beta));
        let s = &mut self.prog.scalars;
        let scaled = s.binary(BinaryOp::Mul, x, alpha, out);
        let y = s.binary(BinaryOp::Add, scaled, beta, out);
        let mut outs = vec![Lazy { sizes, value: y, dtype: out }];
        // The saved statistics: empty on the CPU; on CUDA, ATen returns the
        // running mean and `1 / sqrt(running_var + eps)`.
        for (v, saved) in node.outputs.iter().skip(1).zip([mean, invstd]) {
            let meta = self.graph.meta(*v);
            let sizes = self.meta_sizes(*v);
            let value = match sizes.iter().any(|s| s.as_const() == Some(0)) {
                true => self.prog.scalars.constant(0.0, meta.dtype),
                false => self.prog.scalars.cast(saved, meta.dtype),
            };
            outs.push(Lazy { sizes, value, dtype: meta.dtype });
        }
        Ok(Handled::Native(outs))
    }

    /// Whether the batch norm's input has more than one channel and they
    /// are its innermost dimension in memory (stride 1).
    fn channels_innermost(&self, node: &Node) -> bool {
        let Ok(x) = self.tensor_arg(node, 0, "input") else { return false };
        let wide = x.sizes.get(1).and_then(Expr::as_const).is_some_and(|c| c > 1);
        wide && x.ndim() > 2 && self.strided_source(&x).is_some_and(|(_, strides, _)| strides[1] == Expr::c(1))
    }

    /// A layer norm's optional weight or bias, broadcast over the input.
    fn affine(
        &mut self,
        node: &Node,
        pos: usize,
        name: &str,
        sizes: &[Expr],
        acc: rdyn_ir::DType,
    ) -> Result<Option<ScalarId>, LowerError> {
        let Arg::Tensor(v) = node.arg(pos, name) else { return Ok(None) };
        let lazy = self.value(*v, &node.target)?;
        // The normalized shape: the output's last dims.
        let tail = sizes.len().checked_sub(lazy.ndim()).map(|at| &sizes[at..]);
        if !tail.is_some_and(|tail| agree(&lazy.sizes, tail)) {
            let why =
                format!("{name} has sizes {}; expected the last of the output's {}", shape(&lazy.sizes), shape(sizes));
            return Err(invalid(&node.target, why));
        }
        let b = self.broadcast_to(&lazy, sizes);
        Ok(Some(self.prog.scalars.cast(b.value, acc)))
    }
}
