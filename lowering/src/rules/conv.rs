//! Convolutions: a depthwise 2-D convolution on the CPU runs rdyn's own
//! kernel ([`ExternKind::DepthwiseConv2d`]); one that reads each input
//! pixel once is a GEMM; every other convolution is a library call through
//! ATen.
//!
//! A convolution whose kernel is its stride (1x1 with stride 1, or a vision
//! transformer's patch embedding), with no padding and one group, is
//! `weight[cout, taps] @ patches[taps, pixels]` per image: the patches of a
//! 1x1 convolution are the input itself, a patch embedding's are one copy.
//! ATen's convolution spends ~180 µs setting up a 192->1152 channel 1x1
//! convolution over 3x3 pixels (MobileNetV2) and ~190 µs on ViT's 16x16
//! patch embedding; the GEMM's result is NCHW as it stands, and the bias
//! and what follows fuse after it. Off CUDA only (`patch_kernel`). A patch
//! embedding copies its patches once as `[b, oy, ox, c, i, j]` (rows read along
//! the image's rows) and is `patches @ weightᵀ`, read back through a transposed
//! view. Their backwards are GEMMs too, written out by
//! `python/rdyn/_decomp_conv.py`.
//!
//! ATen sends a depthwise convolution of a contiguous (NCHW) tensor to
//! oneDNN, which reorders the input into its blocked layout and back on
//! every call: 100–230 µs for the 3x3 depthwise layers of MobileNetV2 at
//! 112 px, whose arithmetic is a few hundred thousand multiply-adds. rdyn's
//! kernel reads NCHW as it is, one channel plane at a time (float32 or float64
//! on the CPU, groups = channels, one filter each, constant channel and kernel
//! sizes). Its bias is a lazy add, as `addmm`'s, so a batch norm and ReLU6 fuse
//! into one kernel after it.
//!
//! A depthwise convolution's backward is decomposed likewise: its input
//! gradient is this kernel over the spread output gradient with the flipped
//! filter, and its weight gradient stays a `convolution_backward` asking for
//! that gradient alone, which is rdyn's own kernel
//! ([`ExternKind::DepthwiseWeightGrad`]). Every other backward is a library
//! call.
//!
//! Library convolutions run on tensors laid out as eager's metadata says: a
//! model run channels-last keeps that layout end to end, the kernels between its
//! convolutions writing channels-last in storage order (`realize`). An NCHW CPU
//! convolution whose weight is at most an eighth of its input, with 16 input
//! channels or more, runs channels-last all the same (`channels_last_wins`):
//! oneDNN reorders an NCHW input into its blocked layout and its result back on
//! every call. The input and weight are copied channels-last (the input's copy
//! fuses into the kernel that computes it, if any), and what reads the result
//! reads it so (a batch norm after it stores its per-channel scale and shift
//! first, `norm.rs`; the NCHW output is written by columns, `codegen-cpu`'s
//! `lower_kernel.rs`). Where the weight is larger (ResNet-18's `[64, 64, 3, 3]`
//! over `[1, 64, 28, 28]`) the copies and transposes cost more than oneDNN saves,
//! so those stay NCHW.
//!
//! In training the same rule runs the backward channels-last
//! (`channels_last_backward_wins`), and the forward's saved activations stay
//! as it computed them: a training forward's saved outputs are of free layout
//! (`Graph::free_layout`, `outputs.rs`), so the convolution's channels-last
//! result is saved as it is, and a value a convolution reads channels-last is
//! stored once channels-last (`channels_last_operands`) rather than NCHW and
//! again transposed. `python/rdyn/backend.py` reports the strides to
//! AOTAutograd, which traces the backward for them.

use super::common::{acc_dtype, int_list, library};
use crate::error::{agree, invalid, shape, unsupported, LowerError};
use crate::lazy::Lazy;
use crate::lowerer::{Handled, Lowerer, Res};
use std::collections::BTreeSet;

use rdyn_ir::graph::{Arg, Node, ValueId};
use rdyn_ir::loops::{BinaryOp, BufId, Extern, ExternKind, Step};
use rdyn_ir::op::Op;
use rdyn_ir::{DType, Device, Expr};

/// A 2-D convolution's operands and geometry (see [`Lowerer::conv2d`]).
struct Conv2d {
    device: Device,
    dtype: DType,
    x_sizes: Vec<Expr>,
    w_sizes: Vec<Expr>,
    groups: i64,
    stride: [i64; 2],
    padding: [i64; 2],
    dilation: [i64; 2],
}

/// Where a convolution node's arguments are: `input` (the weight follows
/// it), then `stride` (padding, dilation, transposed, output padding and
/// groups follow it in that order).
struct ConvArgs {
    input: usize,
    stride: usize,
}

/// `convolution(input, weight, bias, stride, ...)`.
const FORWARD: ConvArgs = ConvArgs { input: 0, stride: 3 };

/// `convolution_backward(grad_output, input, weight, bias_sizes, stride, ...)`.
const BACKWARD: ConvArgs = ConvArgs { input: 1, stride: 4 };

/// Whether a convolution's library call on the CPU runs faster on
/// channels-last copies of NCHW operands (see
/// [`Lowerer::channels_last_wins`]): float32, one group, a weight at most an
/// eighth of the input, 16 input channels or more.
fn channels_last_pays(conv: &Conv2d) -> bool {
    // No overflow: `lower.rs` refuses metadata of 2^63 elements or more.
    let numel = |sizes: &[Expr]| sizes.iter().try_fold(1i64, |n, s| Some(n * s.as_const()?));
    let (Some(x), Some(w)) = (numel(&conv.x_sizes), numel(&conv.w_sizes)) else { return false };
    conv.device == Device::Cpu
        && conv.dtype == DType::F32
        && conv.groups == 1
        && w.saturating_mul(8) <= x
        && conv.x_sizes[1].as_const().is_some_and(|c| c >= 16)
}

/// A pair from a convolution's int-list argument (one value means both).
fn pair(arg: &Arg, op: &str) -> Option<[i64; 2]> {
    match int_list(arg, op).ok()?[..] {
        [v] => Some([v, v]),
        [a, b] => Some([a, b]),
        _ => None,
    }
}

/// How a convolution or convolution backward node runs.
enum Route {
    /// rdyn's depthwise kernel, or its depthwise weight gradient.
    Depthwise(ExternKind),
    /// A GEMM over the patches (`patch_kernel`).
    Patch([i64; 2]),
    /// ATen's call on channels-last copies of NCHW operands.
    ChannelsLast,
    /// ATen's call, laid out as the metadata says.
    Library,
}

pub(super) fn convolution(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    match lw.route(node) {
        Route::Depthwise(kind) => lw.depthwise(node, kind),
        Route::Patch(kernel) => lw.patch_gemm(node, kernel),
        Route::ChannelsLast => lw.channels_last_library(node),
        Route::Library => library(lw, node),
    }
}

/// `convolution_backward`: rdyn's depthwise weight gradient kernel where
/// the node asks for that gradient alone, else ATen's call.
pub(super) fn convolution_backward(lw: &mut Lowerer<'_>, node: &Node) -> Res {
    match lw.route(node) {
        Route::Depthwise(kind) => lw.depthwise_weight_grad(node, kind),
        Route::ChannelsLast => lw.channels_last_library(node),
        Route::Patch(_) | Route::Library => library(lw, node),
    }
}

impl Lowerer<'_> {
    /// The kernel's parameters when `node` is a `convolution_backward` of a
    /// depthwise 2-D convolution (as [`Lowerer::depthwise_geometry`] takes
    /// it) whose output mask asks for the weight's gradient only.
    fn depthwise_weight_grad_geometry(&self, node: &Node) -> Option<ExternKind> {
        let mask: Vec<bool> = match node.arg(10, "output_mask") {
            Arg::List(items) => items.iter().map(|a| matches!(a, Arg::Bool(true))).collect(),
            _ => return None,
        };
        if mask != [false, true, false] || matches!(node.arg(7, "transposed"), Arg::Bool(true)) {
            return None;
        }
        let out = self.graph.meta(*node.outputs.first()?);
        let (Arg::Tensor(g), Arg::Tensor(x)) = (node.arg(0, "grad_output"), node.arg(1, "input")) else { return None };
        let (g, x) = (self.graph.meta(*g), self.graph.meta(*x));
        let float = matches!(out.dtype, DType::F32 | DType::F64) && g.dtype == out.dtype && x.dtype == out.dtype;
        let planes = |s: &[Expr]| s.len() == 4 && s.iter().all(|d| d.as_const().is_some());
        if out.device != Device::Cpu || !float || !planes(&out.sizes) || !planes(&g.sizes) || !planes(&x.sizes) {
            return None;
        }
        let op = node.target.as_str();
        let (stride, padding, dilation) =
            (pair(node.arg(4, "stride"), op)?, pair(node.arg(5, "padding"), op)?, pair(node.arg(6, "dilation"), op)?);
        let channels = x.sizes[1].as_const()?;
        let one_filter = out.sizes[0].as_const()? == channels && out.sizes[1].as_const()? == 1;
        let groups = node.arg(9, "groups").as_int()?;
        let positive = stride.iter().chain(&dilation).all(|&v| v >= 1) && padding.iter().all(|&v| v >= 0);
        (groups == channels && one_filter && positive).then_some(ExternKind::DepthwiseWeightGrad {
            stride,
            padding,
            dilation,
        })
    }

    /// The weight gradient `[c, 1, kh, kw]` from the output's gradient and
    /// the input, one extern step (the kernel checks that the sizes agree).
    fn depthwise_weight_grad(&mut self, node: &Node, kind: ExternKind) -> Res {
        let out_buf = self.two_operand_extern(node, kind, ["grad_output", "input"])?;
        Ok(Handled::Extern(vec![self.load_buffer(out_buf)]))
    }

    /// One extern step of `kind` reading the node's first two tensor
    /// arguments (named `names`) into a buffer for its output.
    fn two_operand_extern(&mut self, node: &Node, kind: ExternKind, names: [&str; 2]) -> Result<BufId, LowerError> {
        let (sizes, dtype) = self.out_meta(node)?;
        let a = self.tensor_arg(node, 0, names[0])?;
        let b = self.tensor_arg(node, 1, names[1])?;
        let inputs = vec![self.buffer_for_extern(&a), self.buffer_for_extern(&b)];
        let out_v = node.outputs.first().copied().ok_or_else(|| invalid(&node.target, "no output"))?;
        let out_buf = self.extern_output(out_v, sizes, dtype);
        self.prog.steps.push(Step::Extern(Extern { kind, inputs, outputs: vec![out_buf] }));
        Ok(out_buf)
    }

    /// Whether a library convolution of NCHW tensors on the CPU runs faster
    /// channels-last. oneDNN reorders an NCHW input into its blocked layout
    /// and its result back on every call; a channels-last one it reads as it
    /// is: a 3x3 convolution over `[2, 32, 56, 56]` takes 400 µs
    /// channels-last against 461. The layout change is not free either: the
    /// weight is copied channels-last on every call, the input too unless
    /// what computes it writes it so, and NCHW readers of the result read
    /// across its channels. It pays where the weight is small beside the
    /// input (at most an eighth) and the input has 16 channels or more (a
    /// copy of a 3-channel image is slow); ResNet-18's 3x3 convolutions at
    /// batch 1 (`[64, 64, 3, 3]` over `[1, 64, 28, 28]`) lost 0.6 ms over
    /// the model.
    fn channels_last_wins(&self, node: &Node) -> bool {
        let Some(conv) = self.conv2d(node, &FORWARD) else { return false };
        let Some(out) = node.outputs.first() else { return false };
        let input_nchw = matches!(node.arg(0, "input"), Arg::Tensor(v) if self.is_nchw(*v));
        input_nchw && self.is_nchw(*out) && channels_last_pays(&conv)
    }

    /// Whether a library `convolution_backward` on the CPU runs faster
    /// channels-last: by the forward's rule (`channels_last_wins`), on the
    /// forward's input and weight, when the input is NCHW or already
    /// channels-last (a saved activation the forward kept so). oneDNN's
    /// backward reorders NCHW operands as its forward does: the gradients of
    /// a 3x3 convolution over `[2, 32, 56, 56]` take 915 µs from NCHW
    /// tensors, 526 µs from channels-last ones. The output gradient is copied
    /// channels-last (fused into the kernel that computes it, a batch norm's
    /// or ReLU's backward), and the gradients come back channels-last: the
    /// input's is read so by what follows, the weight's copied to its layout
    /// if it is a graph output (a tenth of the input's size or less).
    fn channels_last_backward_wins(&self, node: &Node) -> bool {
        if !(self.options.cpu_kernels && self.options.conv_backward_channels_last) {
            return false;
        }
        let Some(conv) = self.conv2d(node, &BACKWARD) else { return false };
        let input_ok = matches!(node.arg(1, "input"), Arg::Tensor(v)
            if self.is_nchw(*v) || self.meta_strides(*v) == channels_last_strides(&self.meta_sizes(*v)));
        input_ok && channels_last_pays(&conv)
    }

    /// The NCHW values library convolutions read channels-last (the input
    /// of one `channels_last_wins` picks, the output gradient and input of a
    /// backward `channels_last_backward_wins` picks) that no graph output
    /// pins to its metadata's layout: a value stored once is stored
    /// channels-last (`stored_strides`), so that the convolution reads it as
    /// it is rather than through a second, transposed copy.
    pub(crate) fn channels_last_operands(&self) -> BTreeSet<ValueId> {
        let mut outputs = Vec::new();
        self.graph.outputs.iter().for_each(|a| a.tensors(&mut outputs));
        let pinned: BTreeSet<ValueId> = outputs.into_iter().filter(|v| !self.free_outputs.contains(v)).collect();
        let mut operands = BTreeSet::new();
        for node in &self.graph.nodes {
            let positions: &[usize] = match node.op {
                Op::Convolution => &[0],
                Op::ConvolutionBackward => &[0, 1],
                _ => continue,
            };
            if !matches!(self.route(node), Route::ChannelsLast) {
                continue;
            }
            for &pos in positions {
                if let Some(Arg::Tensor(v)) = node.args.get(pos) {
                    if self.is_nchw(*v) && !pinned.contains(v) {
                        operands.insert(*v);
                    }
                }
            }
        }
        operands
    }

    /// The strides a value stored once is stored with: channels-last for
    /// what library convolutions read so (`channels_last_operands`), else
    /// its metadata's.
    pub(crate) fn stored_strides(&self, v: ValueId) -> Vec<Expr> {
        match self.channels_last.contains(&v) {
            true => channels_last_strides(&self.meta_sizes(v)),
            false => self.meta_strides(v),
        }
    }

    /// How convolution (or convolution backward) `node` runs; the first
    /// that applies of rdyn's depthwise kernels, a patch GEMM, a
    /// channels-last library call and a plain one.
    fn route(&self, node: &Node) -> Route {
        if node.op == Op::ConvolutionBackward {
            return match self.depthwise_weight_grad_geometry(node) {
                Some(kind) => Route::Depthwise(kind),
                None if self.channels_last_backward_wins(node) => Route::ChannelsLast,
                None => Route::Library,
            };
        }
        if let Some(kind) = self.depthwise_geometry(node) {
            return Route::Depthwise(kind);
        }
        match self.patch_kernel(node) {
            Some(kernel) => Route::Patch(kernel),
            None if self.channels_last_wins(node) => Route::ChannelsLast,
            None => Route::Library,
        }
    }

    /// Whether `v`'s metadata lays it out contiguously.
    fn is_nchw(&self, v: ValueId) -> bool {
        self.meta_strides(v) == rdyn_ir::loops::contiguous_strides(&self.meta_sizes(v))
    }

    /// The library convolution on channels-last copies of its input and
    /// weight (the copies fuse into whatever computes them), returning a
    /// channels-last result that what follows reads as it is; the bias as
    /// PyTorch lays it out.
    fn channels_last_library(&mut self, node: &Node) -> Res {
        let kind = ExternKind::Library { node: node.index, target: node.target.clone() };
        let strides_of = |lw: &Self, v: ValueId| match lw.meta_sizes(v) {
            sizes if sizes.len() == 4 => channels_last_strides(&sizes),
            _ => lw.meta_strides(v),
        };
        Ok(Handled::Extern(self.extern_call_laid_out(node, kind, &strides_of)?))
    }

    /// The kernel's parameters when `node` is a depthwise 2-D convolution
    /// rdyn's CPU kernel computes: float32 or float64 on the CPU, not
    /// transposed, `groups` equal to the input's channels, one filter per
    /// channel, constant channel and kernel sizes.
    fn depthwise_geometry(&self, node: &Node) -> Option<ExternKind> {
        let conv = self.conv2d(node, &FORWARD)?;
        if conv.device != Device::Cpu || !matches!(conv.dtype, DType::F32 | DType::F64) {
            return None;
        }
        let channels = conv.x_sizes[1].as_const()?;
        let filters = conv.w_sizes[0].as_const()? == channels && conv.w_sizes[1].as_const()? == 1;
        if conv.groups != channels || !filters || conv.w_sizes[2].as_const()? < 1 || conv.w_sizes[3].as_const()? < 1 {
            return None;
        }
        let Conv2d { stride, padding, dilation, .. } = conv;
        let positive = stride.iter().chain(&dilation).all(|&v| v >= 1) && padding.iter().all(|&v| v >= 0);
        positive.then_some(ExternKind::DepthwiseConv2d { stride, padding, dilation })
    }

    /// What the convolution kinds here test of a node (a convolution, or
    /// its backward, by `at`): a 2-D, not transposed convolution whose
    /// input, weight and first output share a dtype, with int stride,
    /// padding, dilation and groups.
    fn conv2d(&self, node: &Node, at: &ConvArgs) -> Option<Conv2d> {
        let op = node.target.as_str();
        let meta = self.graph.meta(*node.outputs.first()?);
        let (Arg::Tensor(x), Arg::Tensor(w)) = (node.arg(at.input, "input"), node.arg(at.input + 1, "weight")) else {
            return None;
        };
        let (x, w) = (self.graph.meta(*x), self.graph.meta(*w));
        let same_dtype = x.dtype == meta.dtype && w.dtype == meta.dtype;
        let transposed = matches!(node.arg(at.stride + 3, "transposed"), Arg::Bool(true));
        if !same_dtype || transposed || x.sizes.len() != 4 || w.sizes.len() != 4 {
            return None;
        }
        Some(Conv2d {
            device: meta.device,
            dtype: meta.dtype,
            x_sizes: x.sizes.clone(),
            w_sizes: w.sizes.clone(),
            groups: node.arg(at.stride + 5, "groups").as_int()?,
            stride: pair(node.arg(at.stride, "stride"), op)?,
            padding: pair(node.arg(at.stride + 1, "padding"), op)?,
            dilation: pair(node.arg(at.stride + 2, "dilation"), op)?,
        })
    }

    /// `result + bias[channel]`, in `result`'s dtype, when the node has a
    /// bias: a lazy epilogue that fuses into what follows.
    fn add_channel_bias(&mut self, node: &Node, mut result: Lazy) -> Result<Lazy, LowerError> {
        if let Arg::Tensor(_) = node.arg(2, "bias") {
            let bias = self.tensor_arg(node, 2, "bias")?;
            let bias = self.view(&bias, result.sizes.clone(), &[Expr::v(1)]);
            let bias = self.cast_lazy(bias, result.dtype);
            result.value = self.prog.scalars.binary(BinaryOp::Add, result.value, bias.value, result.dtype);
        }
        Ok(result)
    }

    /// What rdyn's own kernels read of a 2-D convolution's metadata: a
    /// weight with the input's channels per group, and an output of the
    /// batch, the filters and, per spatial dim, `(n + 2p − d(k − 1) − 1) / s + 1`
    /// (where known): an error naming what disagrees otherwise.
    fn check_conv2d(&self, node: &Node) -> Result<(), LowerError> {
        let op = node.target.as_str();
        let Some(conv) = self.conv2d(node, &FORWARD) else { return Ok(()) };
        let (x, w) = (&conv.x_sizes, &conv.w_sizes);
        let groups = conv.groups;
        if let (Some(c), Some(per_group)) = (x[1].as_const(), w[1].as_const()) {
            if groups < 1 || per_group.checked_mul(groups) != Some(c) {
                let why = format!("the weight has {per_group} input channels per group, {groups} groups");
                return Err(invalid(op, format!("{why}; expected the input's {c} channels in all")));
            }
        }
        let (given, _) = self.out_meta(node)?;
        let mut expected = vec![x[0].clone(), w[0].clone()];
        for m in 0..2 {
            expected.push(match (x[2 + m].as_const(), w[2 + m].as_const()) {
                (Some(n), Some(k)) => Expr::c(conv_len(n, k, conv.stride[m], conv.padding[m], conv.dilation[m])),
                _ => given.get(2 + m).cloned().unwrap_or_default(),
            });
        }
        match agree(&given, &expected) {
            true => Ok(()),
            false => {
                let why = format!("a weight of sizes {} over an input of sizes {}", shape(w), shape(x));
                Err(invalid(op, format!("output has sizes {}; {why} gives {}", shape(&given), shape(&expected))))
            }
        }
    }

    fn depthwise(&mut self, node: &Node, kind: ExternKind) -> Res {
        self.check_conv2d(node)?;
        let out_buf = self.two_operand_extern(node, kind, ["input", "weight"])?;
        // The bias, per channel, is added by the consumers (it fuses into a
        // batch norm's scale and shift, or an activation).
        let result = self.load_buffer(out_buf);
        Ok(Handled::Extern(vec![self.add_channel_bias(node, result)?]))
    }

    /// The kernel size `[kh, kw]` when `node` is a 2-D convolution that reads
    /// each input pixel once, off CUDA (cuDNN serves it there): float,
    /// not transposed, one group, stride equal to the kernel, no padding,
    /// no dilation unless 1x1, constant channels and image sizes that the
    /// kernel tiles exactly.
    fn patch_kernel(&self, node: &Node) -> Option<[i64; 2]> {
        let conv = self.conv2d(node, &FORWARD)?;
        if matches!(conv.device, Device::Cuda(_)) || !conv.dtype.is_float() || conv.groups != 1 {
            return None;
        }
        let (x, w) = (&conv.x_sizes, &conv.w_sizes);
        let kernel = [w[2].as_const()?, w[3].as_const()?];
        let image = [x[2].as_const()?, x[3].as_const()?];
        if x[1].as_const().is_none() || w[0].as_const().is_none() {
            return None;
        }
        let Conv2d { stride, padding, dilation, .. } = conv;
        let fits = kernel.iter().zip(&image).all(|(&k, &n)| k >= 1 && n % k == 0);
        let undilated = kernel == [1, 1] || dilation == [1, 1];
        (stride == kernel && padding == [0, 0] && undilated && fits).then_some(kernel)
    }

    /// One batched GEMM (the weight broadcast over the batch), viewed as
    /// NCHW. A 1x1 convolution is `weight[o, c] @ x[b, c, p]`, whose result
    /// is NCHW as it stands. A patch embedding copies the patches once, as
    /// rows read along the image's rows (`[b, oy, ox, c, i, j]`), and is
    /// `patches[b, p, t] @ weightᵀ[t, o]`, read back through a transposed
    /// view (what follows a patch embedding wants the channels innermost).
    fn patch_gemm(&mut self, node: &Node, [kh, kw]: [i64; 2]) -> Res {
        self.check_conv2d(node)?;
        let op = node.target.as_str();
        let (sizes, dtype) = self.out_meta(node)?;
        let x = self.tensor_arg(node, 0, "input")?;
        let w = self.tensor_arg(node, 1, "weight")?;
        let constant = |e: &Expr, what: &str| e.as_const().ok_or_else(|| unsupported(op, what.to_string()));
        let (cin, cout) = (constant(&x.sizes[1], "channels")?, constant(&w.sizes[0], "filters")?);
        let (oh, ow) = (constant(&sizes[2], "height")?, constant(&sizes[3], "width")?);
        let (taps, pixels) = (cin * kh * kw, oh * ow);
        let batch = x.sizes[0].clone();
        let c = Expr::c;
        // A [batch, rows, cols] operand over `source`, column (or row) `t`
        // of it being a tap: (channel, row, column) of the kernel.
        let taps_of = |lw: &mut Self, source: &Lazy, tap_var: u32, rows: i64, cols: i64| {
            let sizes3 = vec![batch.clone(), c(rows), c(cols)];
            let ctx = lw.ctx_for(&sizes3);
            let t = Expr::v(tap_var);
            let map = [
                Expr::v(if tap_var == 2 { 1 } else { 2 }),
                t.floordiv(&c(kh * kw), &ctx),
                t.floordiv(&c(kw), &ctx).modulo(&c(kh), &ctx),
                t.modulo(&c(kw), &ctx),
            ];
            lw.view(source, sizes3, &map)
        };
        let acc = acc_dtype(dtype);
        let (gemm_sizes, back) = if [kh, kw] == [1, 1] {
            let weight = taps_of(self, &w, 2, cout, cin);
            let ctx = self.ctx_for(&[batch.clone(), c(cin), c(pixels)]);
            let q = Expr::v(2);
            let map = [Expr::v(0), Expr::v(1), q.floordiv(&c(ow), &ctx), q.modulo(&c(ow), &ctx)];
            let image = self.view(&x, vec![batch.clone(), c(cin), c(pixels)], &map);
            let gemm_sizes = vec![batch.clone(), c(cout), c(pixels)];
            let strides = rdyn_ir::loops::contiguous_strides(&gemm_sizes);
            let out_buf = self.gemm_into(weight, image, acc, gemm_sizes, strides, 1.0);
            (out_buf, [Expr::v(0), Expr::v(1), Expr::v(2).scale(ow).add(&Expr::v(3))])
        } else {
            // [b, oy, ox, c, i, j] ← x[b, c, oy·kh + i, ox·kw + j], stored
            // contiguous: then [b, pixels, taps] is a plain view of it.
            let six = vec![batch.clone(), c(oh), c(ow), c(cin), c(kh), c(kw)];
            let map =
                [Expr::v(0), Expr::v(3), Expr::v(1).scale(kh).add(&Expr::v(4)), Expr::v(2).scale(kw).add(&Expr::v(5))];
            let rows = self.view(&x, six, &map);
            let rows = self.cast_lazy(rows, acc);
            let copied = self.realize(&rows, None);
            let copied = self.load_buffer(copied);
            let ctx = self.ctx_for(&[batch.clone(), c(pixels), c(taps)]);
            let (q, t) = (Expr::v(1), Expr::v(2));
            let map = [
                Expr::v(0),
                q.floordiv(&c(ow), &ctx),
                q.modulo(&c(ow), &ctx),
                t.floordiv(&c(kh * kw), &ctx),
                t.floordiv(&c(kw), &ctx).modulo(&c(kh), &ctx),
                t.modulo(&c(kw), &ctx),
            ];
            let patches = self.view(&copied, vec![batch.clone(), c(pixels), c(taps)], &map);
            let weight_t = taps_of(self, &w, 1, taps, cout);
            let gemm_sizes = vec![batch.clone(), c(pixels), c(cout)];
            let strides = rdyn_ir::loops::contiguous_strides(&gemm_sizes);
            let out_buf = self.gemm_into(patches, weight_t, acc, gemm_sizes, strides, 1.0);
            (out_buf, [Expr::v(0), Expr::v(2).scale(ow).add(&Expr::v(3)), Expr::v(1)])
        };
        let product = self.load_buffer(gemm_sizes);
        let result = self.view(&product, sizes, &back);
        let result = self.add_channel_bias(node, result)?;
        Ok(Handled::Extern(vec![self.cast_lazy(result, dtype)]))
    }
}

/// A convolution's output length along a dim of length `n` (ATen's
/// formula, in int128); -1 (no length) past int64 or for a stride below 1.
fn conv_len(n: i64, k: i64, s: i64, p: i64, d: i64) -> i64 {
    let [n, k, s, p, d] = [n, k, s, p, d].map(i128::from);
    match s >= 1 {
        true => i64::try_from((n + 2 * p - d * (k - 1) - 1).div_euclid(s) + 1).unwrap_or(-1),
        false => -1,
    }
}

/// The strides of an NCHW-shaped tensor stored channels-last (NHWC).
fn channels_last_strides(sizes: &[Expr]) -> Vec<Expr> {
    let (c, h, w) = (&sizes[1], &sizes[2], &sizes[3]);
    let one = Expr::c(1);
    vec![h.mul(w).mul(c), one, w.mul(c), c.clone()]
}
