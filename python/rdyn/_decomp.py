"""Decompositions rdyn writes itself, where PyTorch's own give graphs that
lower to slow kernels, or ATen's kernel is slow for the shapes models use.

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


DECOMPOSITIONS = {
    aten.max_pool2d_with_indices.default: max_pool2d_with_indices,
}
