"""Decompositions rdyn writes itself, where PyTorch's own give graphs that
lower to slow kernels, or ATen's kernel is slow for the shapes models use.

A convolution that reads each pixel once (a 1x1 convolution with stride 1,
or a patch embedding whose kernel is its stride; no padding, one group) is
a matrix product of the weight with the input's patches: ``mm`` (or ``bmm``
over the batch), so it takes rdyn's GEMM path with its epilogue fused,
instead of ATen's convolution, whose per-call set-up dominates at the small
spatial sizes of mobile networks (a 192->1152 channel 1x1 convolution over
3x3 pixels takes ATen ~180 us; ViT's 16x16 patch embedding ~190 us). Only the forward is rewritten: autograd records the convolution before the decomposition runs,
so the backward stays ``convolution_backward``.

PyTorch decomposes ``max_pool2d_with_indices`` into a gather of every window
(``index`` with index tensors, then ``max.dim`` over ``kh*kw``): the window
position becomes a division and a modulo of the reduction index, and the
padding a bounds check on every load. Here the window is unrolled instead:
``kh*kw`` strided slices of the padded input, compared in ATen's order, so
every load is a plain strided view and the kernel is pointwise. The padded
input has one user per window position, so it is stored once (no bounds
checks in the window).
"""

from __future__ import annotations

import math

import torch
from torch._decomp import get_decompositions

aten = torch.ops.aten
_TORCH = get_decompositions([aten.max_pool2d_with_indices])


def _pair(v, default=None):
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        return default
    if isinstance(v, int):
        return (v, v)
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def _out_size(size, k, s, p, d, ceil_mode):
    """ATen's pooling_output_shape."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out = out - 1
    return out


def _first_valid(start, d):
    """The first index of `start, start + d, ...` that is >= 0 (ATen starts
    each window's index there)."""
    behind = torch.clamp(-start, min=0)
    return start + d * ((behind + d - 1) // d)


def max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride, (kh, kw))
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    if not x.dtype.is_floating_point:
        return _TORCH[aten.max_pool2d_with_indices.default](x, kernel_size, stride, padding, dilation, ceil_mode)
    h, w = x.shape[-2], x.shape[-1]
    oh = _out_size(h, kh, sh, ph, dh, ceil_mode)
    ow = _out_size(w, kw, sw, pw, dw, ceil_mode)
    # Pad so that every window lies inside: -inf never beats ATen's starting
    # maximum (-inf), so padded positions change neither value nor index.
    right = max((ow - 1) * sw + (kw - 1) * dw + 1 - w - pw, 0)
    bottom = max((oh - 1) * sh + (kh - 1) * dh + 1 - h - ph, 0)
    padded = aten.constant_pad_nd(x, [pw, right, ph, bottom], -math.inf)
    rows = torch.arange(oh, device=x.device, dtype=torch.int64).unsqueeze(1) * sh - ph
    cols = torch.arange(ow, device=x.device, dtype=torch.int64) * sw - pw
    best = torch.full_like(padded[..., :oh, :ow], -math.inf)
    index = (_first_valid(rows, dh) * w + _first_valid(cols, dw)).expand(best.shape)
    for i in range(kh):
        for j in range(kw):
            r0, c0 = i * dh, j * dw
            value = padded[..., r0 : r0 + (oh - 1) * sh + 1 : sh, c0 : c0 + (ow - 1) * sw + 1 : sw]
            # ATen's rule: take `value` when it is greater or NaN.
            take = (value > best) | torch.isnan(value)
            index = torch.where(take, (rows + r0) * w + (cols + c0), index)
            # The same choice for the value (ties keep `best`, NaN wins) as
            # one op, so that when the indices are unused each partial
            # maximum has one user and the window stays one expression.
            best = torch.maximum(value, best)
    return best, index


def _patch_conv(x, weight, stride, padding, dilation, groups, transposed):
    """Whether the convolution reads each input pixel once: its kernel is its
    stride (1x1 with stride 1, or a vision transformer's patch embedding),
    no padding, one group, and the kernel tiles the image exactly."""
    if transposed or groups != 1 or x.dim() != 4 or weight.dim() != 4 or not x.dtype.is_floating_point:
        return False
    kh, kw = weight.shape[2], weight.shape[3]
    return (
        tuple(stride) == (kh, kw)
        and all(p == 0 for p in padding)
        and ((kh, kw) == (1, 1) or all(d == 1 for d in dilation))
        and x.shape[2] % kh == 0
        and x.shape[3] % kw == 0
        and x.is_contiguous()
    )


def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if not _patch_conv(x, weight, stride, padding, dilation, groups, transposed):
        return NotImplemented
    n, cin, h, w = x.shape
    cout, _, kh, kw = weight.shape
    oh, ow = h // kh, w // kw
    taps = cin * kh * kw
    w2 = aten.view(weight.contiguous(), [cout, taps])
    if (kh, kw) == (1, 1):
        # Channels by pixels: plain views of a contiguous tensor (reshape's
        # symbolic strides would bring Max() into dynamic sizes).
        if n == 1:
            out = aten.mm(w2, aten.view(x, [cin, h * w]))
        else:
            out = aten.bmm(w2.expand(n, cout, cin), aten.view(x, [n, cin, h * w]))
        out = aten.view(out, [n, cout, oh, ow])
    else:
        # One row per patch, (c, i, j) along it: each row copies kw-long
        # runs of the image, and the product is patches @ weightᵀ.
        patches = x.view(n, cin, oh, kh, ow, kw).permute(0, 2, 4, 1, 3, 5).reshape(n * oh * ow, taps)
        out = aten.mm(patches, w2.t())
        # Back to (n, c, h, w), laid out as a convolution's result is.
        out = aten.view(out, [n, oh, ow, cout]).permute(0, 3, 1, 2).contiguous()
    if bias is not None:
        out = out + aten.view(bias, [1, cout, 1, 1])
    return out


DECOMPOSITIONS = {
    aten.max_pool2d_with_indices.default: max_pool2d_with_indices,
    aten.convolution.default: convolution,
}
