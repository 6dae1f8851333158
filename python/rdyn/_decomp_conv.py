"""Gradients of pointwise (1x1), patchwise (kernel = stride) and depthwise
convolutions from rdyn's own kernels, on the CPU.

A 1x1 convolution with stride 1, no padding and one group is
``weight[cout, cin] @ x[n, cin, pixels]``; rdyn already lowers its forward
as that GEMM (``lowering/src/rules/conv.rs``). Its backward is two more
products, which this decomposition writes out so that rdyn's GEMM runs
them and the bias gradient (a sum) fuses with whatever else reads the
output gradient:

- ``grad_input[n, cin, p] = weightᵀ[cin, cout] @ grad[n, cout, p]``;
- ``grad_weight[cout, cin] = Σₙ grad[n, cout, p] @ x[n, cin, p]ᵀ``;
- ``grad_bias[cout] = Σ grad`` over the batch and the pixels.

ATen's ``convolution_backward`` sets up oneDNN (reorders into its blocked
layout and back) on every call whatever the size: ~260 µs for ShuffleNet's
``[2, 116, 4, 4]`` layers, whose arithmetic is ~0.5 M multiply-adds, and
half of ShuffleNetV2's training step went there.

Channels-last tensors are already ``[n·pixels, channels]`` matrices, so both
products read them as they are. For NCHW tensors the weight gradient sums
over the batch and the pixels, which are not one strided dim: it is one
product per image summed afterwards (a temporary of ``n·cout·cin``, summed
in oneDNN's order), or, where that temporary would be large, one product
over copies of ``grad`` and ``x`` laid out ``[channels, n·pixels]``
(``n·pixels·(cout + cin)`` copied). One image needs neither. The gradients are laid out as ATen's
oneDNN path lays them out: channels-last where the input or the weight is
(`_memory_format`).

A depthwise convolution's input gradient is a stride-1 depthwise
convolution of the output gradient (with ``stride - 1`` zeros between its
pixels for a strided one) by the flipped filter, padded by ``d·(k - 1) - p``
and, at the end, by what the stride left over: rdyn's depthwise kernel. Its
weight gradient stays a ``convolution_backward`` that asks for that gradient
alone, which rdyn lowers to its own kernel (``codegen-cpu``'s
``depthwise_grad.rs``). ATen's call for either (oneDNN) costs ~0.25 ms at
any size and 85 ms for ConvNeXt's 7x7 over ``[8, 96, 56, 56]``.
"""

from __future__ import annotations

import os

import torch
from torch._prims_common import suggest_memory_format
from torch.fx.experimental.symbolic_shapes import statically_known_true

aten = torch.ops.aten


def _memory_format(x, weight):
    """The layout ATen's CPU convolution (oneDNN) computes in and returns its
    gradients in: channels-last where the input or the weight suggests it
    (a channels-last weight over an NCHW input gives a channels-last input
    gradient; PyTorch's `test_conv2d_backward_channels_last`)."""
    formats = (suggest_memory_format(x), suggest_memory_format(weight))
    return torch.channels_last if torch.channels_last in formats else torch.contiguous_format


def _laid_out(t, fmt):
    """``t`` in ``fmt`` with the strides ATen gives a new tensor of it, also
    along dims of size 1 (``contiguous`` leaves those as they are: a 1x1
    weight's gradient is channels-last already, by its strides' test, with
    NCHW strides). The elements are where ``contiguous`` put them, so the
    exact strides are a view."""
    t = t.contiguous(memory_format=fmt)
    sizes = tuple(t.shape)
    if not all(isinstance(v, int) for v in sizes):
        return t
    _, c, h, w = sizes
    want = (c * h * w, 1, w * c, c) if fmt == torch.channels_last else (c * h * w, h * w, w, 1)
    return t if tuple(t.stride()) == want else t.as_strided(sizes, want, t.storage_offset())


def _is_pointwise(grad, x, weight, stride, padding, transposed, groups) -> bool:
    """A 2-D, float32 or float64 CPU convolution with a 1x1 kernel, stride
    1, no padding and one group (dilation does not matter for 1x1)."""
    tensors = (grad, x, weight)
    return (
        all(t.dim() == 4 and t.device.type == "cpu" and t.dtype == x.dtype for t in tensors)
        and x.dtype in (torch.float32, torch.float64)
        and not transposed
        and groups == 1
        and all(isinstance(k, int) and k == 1 for k in weight.shape[2:])
        and all(s == 1 for s in stride)
        and all(p == 0 for p in padding)
    )


#: The largest per-image temporary (``n·cout·cin`` elements, 64 MiB of
#: float32) the NCHW weight gradient makes unless copies would be larger.
PER_IMAGE_MAX = 1 << 24


def _weight_gradient_nchw(g3, x3):
    """``Σₙ g3[n] @ x3[n]ᵀ`` for NCHW operands ``[n, channels, pixels]``.
    Per image then summed, as oneDNN sums (bit for bit on PyTorch's
    `test_conv2d_backward_channels_last`, whose one product over
    ``n·pixels`` had a 40% larger float32 error), and with no copies; over
    ``[channels, n·pixels]`` copies where the per-image temporary would be
    over `PER_IMAGE_MAX` elements and larger than the copies."""
    n, cout, p = g3.shape
    cin = x3.shape[1]
    one_image = statically_known_true(n == 1)
    small = statically_known_true(n * cout * cin <= PER_IMAGE_MAX)
    per_image = not one_image and (small or statically_known_true(cout * cin <= p * (cout + cin)))
    if per_image:
        return torch.matmul(g3, x3.transpose(1, 2)).sum(0)
    g2 = g3.transpose(0, 1).reshape(cout, n * p)
    x2 = x3.transpose(0, 1).reshape(cin, n * p)
    return torch.matmul(g2, x2.t())


def _is_depthwise(grad, x, weight, stride, padding, dilation, transposed, groups) -> bool:
    """A 2-D, float32 or float64 CPU depthwise convolution (one filter per
    channel) of constant sizes, as rdyn's own forward kernel takes it."""
    tensors = (grad, x, weight)
    if not all(t.dim() == 4 and t.device.type == "cpu" and t.dtype == x.dtype for t in tensors):
        return False
    sizes = (*grad.shape, *x.shape, *weight.shape)
    return (
        x.dtype in (torch.float32, torch.float64)
        and all(isinstance(v, int) for v in sizes)
        and not transposed
        and groups == x.shape[1] == weight.shape[0]
        and weight.shape[1] == 1
        and all(isinstance(v, int) and v >= 1 for v in (*stride, *dilation))
        and all(isinstance(v, int) and v >= 0 for v in padding)
        and all(d * (k - 1) >= p for d, k, p in zip(dilation, weight.shape[2:], padding))
    )


def _zeros_between(grad, stride):
    """``grad`` with ``stride - 1`` zeros between its pixels along each
    spatial dim (a strided convolution's gradient is the stride-1 one of
    this): a concatenation with zeros, reshaped."""
    for dim, s in ((3, stride[1]), (2, stride[0])):
        if s == 1:
            continue
        sizes = list(grad.shape)
        zeros = grad.new_zeros([*sizes[: dim + 1], s - 1, *sizes[dim + 1 :]])
        spread = torch.cat([grad.unsqueeze(dim + 1), zeros], dim + 1)
        sizes[dim] *= s
        grad = spread.reshape(sizes).narrow(dim, 0, sizes[dim] - (s - 1))
    return grad


def _depthwise_input_gradient(grad, x, weight, stride, padding, dilation):
    """The input's gradient: a stride-1 depthwise convolution of the
    gradient (zeros between its pixels for a strided one) with the flipped
    kernel, padded by ``d·(k − 1) − p`` on each side and by what the stride
    left over (ATen's output padding) at the end: rdyn's own kernel."""
    spread = _zeros_between(grad, stride)
    pads = []
    for dim in (3, 2):
        k, p, d = weight.shape[dim], padding[dim - 2], dilation[dim - 2]
        extra = x.shape[dim] - (spread.shape[dim] + d * (k - 1) - 2 * p)
        pads += [d * (k - 1) - p, d * (k - 1) - p + extra]
    if any(v < 0 for v in pads):
        return None
    flipped = weight.flip([2, 3])
    groups = x.shape[1]
    if pads[0] == pads[1] and pads[2] == pads[3]:
        # Even padding is the kernel's own (no padded copy).
        return aten.convolution(spread, flipped, None, [1, 1], [pads[2], pads[0]], list(dilation), False, [0, 0], groups)
    padded = aten.constant_pad_nd(spread, pads)
    return aten.convolution(padded, flipped, None, [1, 1], [0, 0], list(dilation), False, [0, 0], groups)


def _depthwise(grad, x, weight, stride, padding, dilation, output_mask):
    """A depthwise convolution's gradients from rdyn's kernels (see the
    module's docs); None where the input's gradient needs a negative
    padding."""
    grad_input = grad_weight = None
    if output_mask[0]:
        grad_input = _depthwise_input_gradient(grad, x, weight, stride, padding, dilation)
        if grad_input is None:
            return None
        grad_input = _laid_out(grad_input, _memory_format(x, weight))
    if output_mask[1]:
        # rdyn's weight gradient kernel (`lowering/src/rules/conv.rs`).
        mask = [False, True, False]
        groups = x.shape[1]
        grad_weight = aten.convolution_backward(
            grad, x, weight, None, stride, padding, dilation, False, [0, 0], groups, mask
        )[1]
    grad_bias = grad.sum([0, 2, 3]) if output_mask[2] else None
    return grad_input, grad_weight, grad_bias


def _is_patchwise(grad, x, weight, stride, padding, dilation, transposed, groups) -> bool:
    """A 2-D, float32 or float64 CPU convolution of constant sizes whose
    kernel is its stride (larger than 1x1), with no padding, no dilation and
    one group: its windows tile the input without overlap (a ViT's patch
    embedding, ConvNeXt's stem and downsampling, Swin's patch embedding)."""
    tensors = (grad, x, weight)
    if not all(t.dim() == 4 and t.device.type == "cpu" and t.dtype == x.dtype for t in tensors):
        return False
    sizes = (*grad.shape, *x.shape, *weight.shape)
    kernel = tuple(weight.shape[2:])
    return (
        x.dtype in (torch.float32, torch.float64)
        and all(isinstance(v, int) for v in sizes)
        and not transposed
        and groups == 1
        and kernel == tuple(stride)
        and kernel != (1, 1)
        and all(p == 0 for p in padding)
        and all(d == 1 for d in dilation)
    )


def _patchwise(grad, x, weight, stride, output_mask):
    """A patchwise convolution's gradients as GEMMs over its patches: the
    forward is ``weight[cout, K] @ patches[n, K, pixels]`` with ``K = cin·kh·kw``
    and ``patches`` a permutation of ``x`` (rdyn lowers it so), so the input's
    gradient is ``weightᵀ @ grad`` permuted back (zeros where the stride left
    pixels out at the end) and the weight's ``Σₙ grad[n] @ patches[n]ᵀ``, per
    image as for 1x1 (`_weight_gradient_nchw`). ATen's call sets up oneDNN
    on every call: 1.2 ms for ConvNeXt's 2x2 downsampling of ``[2, 96, 28, 28]``,
    whose products take about 0.3 ms here."""
    n, cin, h, w = x.shape
    cout, _, kh, kw = weight.shape
    oh, ow = grad.shape[2:]
    k = cin * kh * kw
    g3 = grad.reshape(n, cout, oh * ow)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        cols = torch.matmul(weight.reshape(cout, k).t(), g3)
        grad_input = cols.view(n, cin, kh, kw, oh, ow).permute(0, 1, 4, 2, 5, 3).reshape(n, cin, oh * kh, ow * kw)
        if (oh * kh, ow * kw) != (h, w):
            grad_input = aten.constant_pad_nd(grad_input, [0, w - ow * kw, 0, h - oh * kh])
        grad_input = _laid_out(grad_input, _memory_format(x, weight))
    if output_mask[1]:
        patches = x[:, :, : oh * kh, : ow * kw].reshape(n, cin, oh, kh, ow, kw).permute(0, 1, 3, 5, 2, 4)
        grad_weight = _weight_gradient_nchw(g3, patches.reshape(n, k, oh * ow)).view(cout, cin, kh, kw)
        grad_weight = _laid_out(grad_weight, _memory_format(x, weight))
    if output_mask[2]:
        grad_bias = grad.sum([0, 2, 3])
    return grad_input, grad_weight, grad_bias


def convolution_backward(
    grad, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    """``convolution_backward`` of a pointwise or patchwise convolution as
    GEMMs, of a depthwise one through rdyn's depthwise kernel and a
    reduction; any other convolution stays ATen's call."""
    if _is_patchwise(grad, x, weight, stride, padding, dilation, transposed, groups):
        return _patchwise(grad, x, weight, stride, output_mask)
    if _is_depthwise(grad, x, weight, stride, padding, dilation, transposed, groups):
        if list(output_mask) == [False, True, False]:
            return NotImplemented  # rdyn's own kernel takes it as it is
        result = _depthwise(grad, x, weight, stride, padding, dilation, output_mask)
        return NotImplemented if result is None else result
    if not _is_pointwise(grad, x, weight, stride, padding, transposed, groups):
        return NotImplemented
    n, cin, h, w = x.shape
    cout = weight.shape[0]
    w2 = weight.reshape(cout, cin)
    layout = _memory_format(x, weight)
    channels_last = suggest_memory_format(x) == torch.channels_last == suggest_memory_format(grad)
    grad_input = grad_weight = grad_bias = None
    if channels_last:
        # [n·pixels, channels] views of the NHWC storage.
        g2 = grad.permute(0, 2, 3, 1).reshape(n * h * w, cout)
        if output_mask[0]:
            grad_input = torch.matmul(g2, w2).view(n, h, w, cin).permute(0, 3, 1, 2)
        if output_mask[1]:
            x2 = x.permute(0, 2, 3, 1).reshape(n * h * w, cin)
            grad_weight = torch.matmul(g2.t(), x2)
    else:
        g3 = grad.reshape(n, cout, h * w)
        if output_mask[0]:
            grad_input = torch.matmul(w2.t(), g3).view(n, cin, h, w)
        if output_mask[1]:
            grad_weight = _weight_gradient_nchw(g3, x.reshape(n, cin, h * w))
    if grad_input is not None:
        grad_input = _laid_out(grad_input, layout)
    if grad_weight is not None:
        grad_weight = _laid_out(grad_weight.view(cout, cin, 1, 1), layout)
    if output_mask[2]:
        grad_bias = grad.sum([0, 2, 3])
    return grad_input, grad_weight, grad_bias


#: ``RDYN_CONV_BACKWARD``'s values: "auto" (these decompositions), "aten"
#: (ATen's ``convolution_backward`` for every convolution).
CHOICES = ("auto", "aten")


def decompositions() -> dict:
    """The CPU device's decompositions (`backend.decompositions`); on CUDA
    cuDNN's backward is fast already, and rdyn lowers its forward there as
    a library call too."""
    choice = os.environ.get("RDYN_CONV_BACKWARD", "auto")
    if choice not in CHOICES:
        raise ValueError(f"rdyn: RDYN_CONV_BACKWARD={choice!r} is not one of {list(CHOICES)}")
    return {aten.convolution_backward.default: convolution_backward} if choice == "auto" else {}
