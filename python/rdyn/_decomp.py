"""Decompositions rdyn writes itself, where PyTorch's own give graphs that
lower to slow kernels or wrong results, or ATen's kernel is slow for the
shapes models use.

PyTorch decomposes ``max_pool2d_with_indices`` into a gather of every window
(``index`` with index tensors, then ``max.dim`` over ``kh*kw``): the window
position becomes a division and a modulo of the reduction index, and the
padding a bounds check on every load. Here the window is unrolled instead:
``kh*kw`` strided slices of the padded input, compared in ATen's order, so
every load is a plain strided view and the kernel is pointwise. The padded
input has one user per window position, so it is stored once (no bounds
checks in the window).

Each result is laid out as ATen's kernel lays it out (a decomposition's
pointwise ops would follow the input's layout instead): softmax,
``repeat``, ``index_select`` and ``log_sigmoid_forward`` are contiguous,
pooling and batch norm follow the input's suggested memory format
(channels-last or contiguous), ``roll`` is ATen's concatenation of two
slices, whose layout ``cat`` picks, and ``xlogy``/``xlog1py`` follow their
first operand where the operands' layouts differ.

``addbmm`` is one matrix product (the batches side by side along the
contracted dim). ``cdist`` (``_cdist_forward``, ``_euclidean_dist``,
``_cdist_backward``) is computed from coordinate differences, so a point's
distance to itself is 0 (ATen's GEMM form for p = 2 cancels), up to
``CDIST_DIFFERENCES`` for the GEMM path. 3-D adaptive average pooling is one
averaging matrix product per dim; 2-D adaptive pooling's gradient is average
pooling's where the windows tile the input, else such products.
``as_strided_scatter`` into a contiguous tensor is its source where the view
covers the tensor in order, else an ``index_put`` at the storage positions
its view reaches.
``masked_scatter`` counts the selected positions with a cumulative sum and
gathers from the source behind one padding element. Weight norm's backward
(``_weight_norm_interface_backward``, which PyTorch does not decompose) is
its differentiable formula: a per-slice sum and pointwise arithmetic.

Softmax normalises by multiplying with the reciprocal of the row sum, as
ATen's own softmax kernels do: PyTorch's decomposition divides, and a
divide costs several multiplies in the kernel rdyn builds (a softmax of
256x1024 took 125 µs dividing, 105 µs multiplying).
"""

from __future__ import annotations

import math

import torch
from torch._decomp import get_decompositions
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes, suggest_memory_format
from torch.fx.experimental.symbolic_shapes import statically_known_true

aten = torch.ops.aten
_TORCH = get_decompositions(
    [
        aten.max_pool2d_with_indices,
        aten._adaptive_avg_pool2d,
        aten.repeat,
        aten.index_select,
        aten.roll,
        aten.log_sigmoid_forward,
        aten._native_batch_norm_legit_functional,
        aten._euclidean_dist,
        aten.eye,
    ]
)


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
    layout = suggest_memory_format(x)
    return best.contiguous(memory_format=layout), index.contiguous(memory_format=layout)


def _windows(size, out, device):
    """ATen's adaptive pooling windows along one dim, as tensors: each
    output's first input index (floor(i·size/out)) and length
    (ceil((i+1)·size/out) minus the start)."""
    i = torch.arange(out, device=device)
    starts = torch.div(i * size, out, rounding_mode="floor")
    ends = torch.div((i + 1) * size + out - 1, out, rounding_mode="floor")
    return starts, ends - starts


def addbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """``beta·self + alpha·Σ_b batch1[b] @ batch2[b]`` as one matrix
    product: the batches side by side along the contracted dim."""
    b, n, k = batch1.shape
    m = batch2.shape[2]
    prod = torch.mm(batch1.permute(1, 0, 2).reshape(n, b * k), batch2.reshape(b * k, m))
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:
        # ATen ignores `self` (NaN included) when beta is 0.
        return prod.expand(n, m).contiguous()
    return (self if beta == 1 else self * beta) + prod


def _root_or_zero(s, root):
    """``root(s)`` where s > 0, else 0, with a zero gradient at 0 (ATen's
    ``_cdist_backward`` gives points at distance 0 none)."""
    positive = s > 0
    return torch.where(positive, root(torch.where(positive, s, 1)), 0)


def cdist_forward(x1, x2, p, compute_mode=None):
    """``torch.cdist`` from the coordinate differences, for every p and
    every compute mode: ATen's matrix-product form for p = 2 (|x|² + |y|² −
    2x·y under a square root) cancels, so the distance of a point to itself
    came out as the square root of the rounding error (2e-4 for unit-scale
    32-dim points with rdyn's GEMM), where the differences give 0. rdyn
    fuses the differences into the reduction, so they are never stored."""
    if x1.shape[-1] == 0:
        shape = torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]) + (x1.shape[-2], x2.shape[-2])
        return x1.new_zeros(shape)
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    if p == 0:
        return (diff != 0).sum(-1).to(x1.dtype)
    if math.isinf(p):
        return diff.abs().amax(-1)
    if p == 1:
        return diff.abs().sum(-1)
    if p == 2:
        return _root_or_zero((diff * diff).sum(-1), torch.sqrt)
    return _root_or_zero((diff.abs() ** p).sum(-1), lambda s: s ** (1.0 / p))


#: Above this many coordinate differences (pairs times dims), ``cdist``'s
#: matrix-product path keeps ATen's GEMM form: as fast as eager's, with
#: eager's cancellation (the price ATen pays for speed on large inputs).
CDIST_DIFFERENCES = 1 << 16


def euclidean_dist(x1, x2):
    """``_euclidean_dist`` (``cdist``'s matrix-product path, which ATen
    takes for more than 25 points or when asked) by differences, up to
    ``CDIST_DIFFERENCES``; ATen's GEMM form beyond."""
    pairs = x1.shape[-2] * x2.shape[-2] * x1.shape[-1]
    batch = max(torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]).numel(), 1)
    if isinstance(pairs, int) and pairs * batch <= CDIST_DIFFERENCES:
        return cdist_forward(x1, x2, 2.0)
    return _TORCH[aten._euclidean_dist.default](x1, x2)


def pdist_forward(x, p=2.0):
    """``torch.pdist``: the distances of the rows ``i < j`` of ``x``, in
    row-major order of the pairs, from the coordinate differences as
    ``cdist``'s are (the pairs' rows are two gathers, fused into the
    reduction)."""
    n = x.shape[0]
    if not isinstance(n, int):
        return NotImplemented
    pairs = n * (n - 1) // 2
    if pairs == 0 or x.shape[1] == 0:
        return x.new_zeros((pairs,))
    # Row i's pairs start at i·n − i(i+1)/2; pair k belongs to the last row
    # starting at or before k (a binary search, exact in int64).
    i = torch.arange(n - 1, device=x.device)
    starts = i * n - i * (i + 1) // 2
    k = torch.arange(pairs, device=x.device)
    first = torch.searchsorted(starts, k, right=True) - 1
    second = k - starts[first] + first + 1
    return cdist_forward(x[first].unsqueeze(-2), x[second].unsqueeze(-2), p).view(-1)


def trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """``_trilinear`` (``nn.Bilinear``): the product of the three operands,
    each with its ``expand`` dims inserted, summed over ``sumdim``; rdyn
    fuses the product into the reduction, so it is never stored."""

    def expanded(t, dims):
        for d in sorted(dims):
            t = t.unsqueeze(d)
        return t

    prod = expanded(i1, expand1) * expanded(i2, expand2) * expanded(i3, expand3)
    return prod.sum(list(sumdim)) if len(sumdim) else prod


def cdist_backward(grad, x1, x2, p, dist):
    """The gradient of ``cdist`` for ``x1``, ATen's formula: each pair's
    gradient times ∂d/∂x1, which is 0 where the pair's distance or the
    coordinate difference is 0."""
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    d = dist.unsqueeze(-1)
    zero = torch.zeros((), dtype=diff.dtype, device=diff.device)
    if p == 0:
        term = torch.zeros_like(diff)
    elif p == 1:
        term = torch.sign(diff)
    elif math.isinf(p):
        term = torch.sign(diff) * (diff.abs() == d)
    elif p == 2:
        term = torch.where(d == 0, zero, diff / torch.where(d == 0, 1, d))
    else:
        safe = (diff == 0) | (d == 0)
        a = torch.where(safe, 1, diff.abs())
        scale = torch.where(safe, 1, d)
        term = torch.where(safe, zero, torch.sign(diff) * a ** (p - 1) / scale ** (p - 1))
    out = (grad.unsqueeze(-1) * term).sum(-2)
    return out.sum_to_size(x1.shape) if out.shape != x1.shape else out


def masked_scatter(self, mask, source):
    """``masked_scatter``: the k-th selected position (row-major) takes
    ``source``'s k-th element, its position among the selected ones counted
    by a cumulative sum of the mask; contiguous, as ATen's result is. The
    elements are read from ``source`` behind one padding element that the
    unselected positions read, so a selected position past ``source``'s end
    is an index out of range (an error, as in ATen), never a silent value."""
    m = mask.expand(self.shape).reshape(-1)
    flat = self.reshape(-1)
    k = torch.cumsum(m.to(torch.int64), 0)
    padded = torch.cat([flat.new_zeros(1), source.reshape(-1).to(self.dtype)])
    taken = padded[torch.where(m, k, 0)]
    return torch.where(m, taken, flat).view(self.shape)


def _mean_matrix(size, out, dtype, device):
    """The [out, size] matrix averaging ATen's adaptive pooling windows
    along one dim (1/length inside each window, 0 outside)."""
    starts, lengths = _windows(size, out, device)
    j = torch.arange(size, device=device)
    inside = (j >= starts[:, None]) & (j < (starts + lengths)[:, None])
    return torch.where(inside, 1.0 / lengths[:, None].to(dtype), torch.zeros((), dtype=dtype, device=device))


def _pool_mats(sizes, output_size, dtype, device):
    """One averaging matrix per pooled dim (built in float32 at least)."""
    dt = dtype if dtype in (torch.float32, torch.float64) else torch.float32
    return [_mean_matrix(n, o, dt, device).to(dtype) for n, o in zip(sizes, output_size)]


def _sizes_known(*sizes):
    return all(isinstance(v, int) and v > 0 for v in sizes)


def adaptive_avg_pool2d(x, output_size):
    """``_adaptive_avg_pool2d``: PyTorch's decomposition, except for an
    output with no elements (``nn.AdaptiveAvgPool1d(0)``), whose window
    arithmetic divides by the output size (a ZeroDivisionError while
    compiling)."""
    if any(isinstance(o, int) and o == 0 for o in output_size):
        return x.new_empty((*x.shape[:-2], *output_size))
    return _TORCH[aten._adaptive_avg_pool2d.default](x, output_size)


def adaptive_avg_pool3d(x, output_size):
    """``_adaptive_avg_pool3d`` as three matrix products, one per dim (a
    box mean is separable); contiguous, as ATen's kernel writes it (also
    for a channels-last input, unlike its gradient)."""
    if x.numel() == 0 and all(isinstance(v, int) for v in output_size):
        return x.new_zeros((*x.shape[:-3], *output_size))
    if not _sizes_known(*x.shape[-3:], *output_size):
        return _as_is(aten._adaptive_avg_pool3d.default)(x, output_size)
    ad, ah, aw = _pool_mats(x.shape[-3:], output_size, x.dtype, x.device)
    y = torch.matmul(ah, torch.matmul(x, aw.t()))  # [..., D, oh, ow]
    lead, (oh, ow) = y.shape[:-3], y.shape[-2:]
    y = torch.matmul(ad, y.reshape(*lead, y.shape[-3], oh * ow)).view(*lead, output_size[0], oh, ow)
    return y.contiguous()


def adaptive_avg_pool3d_backward(grad, x):
    """Its gradient: the transposed products, in the input's layout."""
    output_size = grad.shape[-3:]
    if not _sizes_known(*x.shape[-3:], *output_size) or x.numel() == 0:
        return _as_is(aten._adaptive_avg_pool3d_backward.default)(grad, x)
    ad, ah, aw = _pool_mats(x.shape[-3:], output_size, grad.dtype, grad.device)
    y = torch.matmul(ah.t(), torch.matmul(grad, aw))  # [..., od, H, W]
    lead, (h, w) = y.shape[:-3], y.shape[-2:]
    y = torch.matmul(ad.t(), y.reshape(*lead, y.shape[-3], h * w)).view(*lead, x.shape[-3], h, w)
    return y.contiguous(memory_format=suggest_memory_format(x))


def adaptive_avg_pool2d_backward(grad, x):
    """``_adaptive_avg_pool2d``'s gradient, in the input's layout. Where
    the windows tile the input (each size a multiple of the output's, a
    global pool for one), it is average pooling's gradient with kernel =
    stride = size / output, which rdyn lowers; else the transposed
    averaging products, as in 3-D. A global pool over dynamic sizes
    spreads each gradient over its channel's elements."""
    (oh, ow), (h, w) = grad.shape[-2:], x.shape[-2:]
    if _sizes_known(h, w, oh, ow) and h % oh == 0 and w % ow == 0:
        kernel = [h // oh, w // ow]
        out = aten.avg_pool2d_backward(grad, x, kernel, kernel, [0, 0], False, True, None)
    elif statically_known_true(oh == 1) and statically_known_true(ow == 1):
        # A global pool under dynamic sizes: the window is the whole input.
        out = (grad / (h * w)).expand(x.shape)
    else:
        # Over dynamic sizes too, the output's included (a 4x4 pool of a
        # dynamic input traces its output size as `16 // (s // 4)`).
        ah, aw = _pool_mats((h, w), (oh, ow), grad.dtype, grad.device)
        out = torch.matmul(ah.t(), torch.matmul(grad, aw))
    return out.contiguous(memory_format=suggest_memory_format(x))


def _covers(self, size, stride, storage_offset) -> bool:
    """Whether the strided view is all of contiguous ``self``, element for
    element in order; decided without guarding on sizes."""
    if storage_offset is not None and not statically_known_true(storage_offset == self.storage_offset()):
        return False
    if len(size) != len(stride) or not statically_known_true(math.prod(size) == self.numel()):
        return False
    expected = 1
    for n, st in reversed(list(zip(size, stride))):
        if not (statically_known_true(n == 1) or statically_known_true(st == expected)):
            return False
        expected = expected * n
    return True


def as_strided_scatter(self, src, size, stride, storage_offset=None):
    """``as_strided_scatter`` into a contiguous ``self`` (what autograd's
    gradients of views build): ``src`` put at the storage positions the
    strided view reaches, relative to ``self``'s first element. Other
    inputs keep the op (it runs eagerly)."""
    if not self.is_contiguous():
        return NotImplemented
    if _covers(self, size, stride, storage_offset):
        # All of `self`, in its order (the gradient of a global mean over a
        # channels-last input): `src` itself, under dynamic sizes too.
        return src.expand(tuple(size)).to(self.dtype).reshape(self.shape).clone()
    sizes = (*size, *stride, self.storage_offset(), storage_offset or 0)
    if not all(isinstance(v, int) for v in sizes):
        return NotImplemented
    start = (self.storage_offset() if storage_offset is None else storage_offset) - self.storage_offset()
    index = torch.full((), start, dtype=torch.int64, device=self.device)
    for d, (n, st) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        index = index + (torch.arange(n, device=self.device) * st).view(shape)
    index = index.expand(tuple(size)).reshape(-1)
    flat = self.reshape(-1).index_put((index,), src.expand(tuple(size)).reshape(-1).to(self.dtype))
    return flat.view(self.shape)


def _first_in_suggested_format(fn):
    """``fn`` with its result (or first result) copied into its input's
    suggested memory format, as ATen's kernel lays it out; the copy is no
    node where the layouts already agree."""

    def laid_out(x, *args, **kwargs):
        out = fn(x, *args, **kwargs)
        if out is NotImplemented:
            return out
        layout = suggest_memory_format(x)
        if isinstance(out, torch.Tensor):
            return out.contiguous(memory_format=layout)
        first, *rest = out
        return (first.contiguous(memory_format=layout), *rest)

    return laid_out


class _Traced:
    """Whether a decomposition below is tracing its own op (which must then
    be traced as it is, not decomposed again)."""

    active = False


def _as_is(op):
    """``op`` itself when traced (a decomposition returning
    ``NotImplemented`` leaves the op in the graph)."""

    def traced(*args, **kwargs):
        if _Traced.active:
            return NotImplemented
        _Traced.active = True
        try:
            return op(*args, **kwargs)
        finally:
            _Traced.active = False

    return traced


def _contiguous(fn):
    """``fn`` with its result (or results) contiguous, as ATen's kernel
    writes them (the decompositions of ``repeat`` and ``index_select``, an
    ``index``, follow the input's layout, as does ``log_sigmoid_forward``'s
    pointwise math; a channels-last or transposed input gave a result laid
    out like it, found by tests/test_fuzz.py)."""

    def contiguous(*args, **kwargs):
        out = fn(*args, **kwargs)
        if isinstance(out, torch.Tensor):
            return out.contiguous()
        return tuple(t.contiguous() for t in out)

    return contiguous


def roll(x, shifts, dims=()):
    """``roll`` laid out as ATen's CPU kernel: along each dim, the
    concatenation of the two slices that swap places, so ``cat`` picks the
    layout (the input's suggested memory format, unless a slice is empty,
    as when a dim of size 1 rolls: contiguous); flattened (no dims), and on
    CUDA, contiguous. PyTorch's decomposition (an ``index``) follows the
    input's layout (channels-last inputs, found by tests/test_fuzz.py,
    seeds 12865 and 10379)."""
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not dims or len(shifts) != len(dims) or x.device.type != "cpu":
        return _TORCH[aten.roll.default](x, shifts, dims).contiguous()
    for shift, dim in zip(shifts, dims):
        if x.numel() == 0:
            return x.clone()
        size = x.shape[dim]
        start = (size - shift) % size
        x = torch.cat([x.narrow(dim, start, size - start), x.narrow(dim, 0, start)], dim)
    return x


def eye(n, m=None, *, dtype=None, layout=None, device=None, pin_memory=None):
    """``torch.eye`` as its int64 row and column positions compared:
    PyTorch's reference builds them in the narrowest unsigned dtype that
    holds the sizes, uint16 above 255, which rdyn does not represent, and
    ATen has no uint16 ``arange`` on the CPU to run them eagerly either.
    Other layouts keep the reference."""
    if layout not in (None, torch.strided) or pin_memory:
        return _TORCH[aten.eye.m](n, n if m is None else m, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory)
    rows = torch.arange(n, dtype=torch.int64, device=device)
    cols = torch.arange(n if m is None else m, dtype=torch.int64, device=device)
    return (rows.unsqueeze(-1) == cols).to(dtype or torch.get_default_dtype())


def softmax(x, dim, half_to_float):
    """``_softmax`` as ATen computes it: ``exp(x - max)`` times the
    reciprocal of its sum along ``dim`` (in float32 for half-precision
    inputs, as PyTorch's decomposition does)."""
    work, result = elementwise_dtypes(x, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    x = x.to(work)
    if x.numel() == 0:
        unnormalized = torch.exp(x)
    else:
        unnormalized = torch.exp(x - torch.amax(x, dim, keepdim=True))
    out = unnormalized * torch.reciprocal(torch.sum(unnormalized, dim, keepdim=True))
    return (out if half_to_float else out.to(result)).contiguous()


def _xlog(log):
    """``xlogy`` (``log``) or ``special.xlog1py`` (``log1p``) laid out as
    ATen's: PyTorch's decompositions test ``isnan(b)`` first, so where ``a``
    and ``b`` differ in layout the result followed ``b``'s; every op here
    reads ``a`` first. The value is the same: 0 where ``a`` is 0 and ``b``
    is not NaN, else ``a * log(b)`` (NaN where ``b`` is, 0 * log(NaN)
    included)."""

    def xlog(a, b):
        work, result = elementwise_dtypes(a, b, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.INT_TO_FLOAT)
        a, b = a.to(work), b.to(work)
        return torch.where((a == 0) & ~torch.isnan(b), 0.0, a * log(b)).to(result)

    return xlog


def weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    """``_weight_norm_interface_backward`` (``w = v * g / ||v||``, the norm
    over every dim but ``dim``) as ATen's differentiable form computes it:
    ``s = sum(grad_w * v)`` per slice, ``grad_g = s / norm`` and
    ``grad_v = g / norm * (grad_w - v * s / norm**2)``, in the norms' dtype
    (float32 for half-precision weights, as ATen keeps them) and returned in
    ``v``'s and ``g``'s."""
    work = saved_norms.dtype
    reduce_dims = [i for i in range(saved_v.dim()) if i != dim % max(saved_v.dim(), 1)]
    gw, v, g, norm = grad_w.to(work), saved_v.to(work), saved_g.to(work), saved_norms
    sums = (gw * v).sum(reduce_dims, keepdim=True) if reduce_dims else gw * v
    grad_v = g / norm * (gw - v * (sums / (norm * norm)))
    grad_g = (sums / norm).reshape(saved_g.shape)
    return grad_v.to(saved_v.dtype), grad_g.to(saved_g.dtype)


DECOMPOSITIONS = {
    aten._softmax.default: softmax,
    aten.max_pool2d_with_indices.default: max_pool2d_with_indices,
    **{
        op: _contiguous(_TORCH[op])
        for op in (aten.repeat.default, aten.index_select.default, aten.log_sigmoid_forward.default)
    },
    # Pooling and batch norm in the input's suggested memory format: from
    # PyTorch's decompositions, or, for the batch norms rdyn lowers whole,
    # from the op itself (its fake kernel lays the result out like the
    # input, and what the graph computes from it would follow).
    aten._adaptive_avg_pool2d.default: _first_in_suggested_format(adaptive_avg_pool2d),
    aten._native_batch_norm_legit_functional.default: _first_in_suggested_format(
        _TORCH[aten._native_batch_norm_legit_functional.default]
    ),
    **{
        op: _first_in_suggested_format(_as_is(op))
        for op in (
            aten._native_batch_norm_legit.default,
            aten._native_batch_norm_legit.no_stats,
            aten._native_batch_norm_legit_no_training.default,
            aten.native_batch_norm.default,
        )
    },
    aten.xlogy.Tensor: _xlog(torch.log),
    aten.special_xlog1py.default: _xlog(torch.log1p),
    aten.roll.default: roll,
    aten.eye.default: eye,
    aten.eye.m: eye,
    aten.addbmm.default: addbmm,
    aten._cdist_forward.default: cdist_forward,
    aten._euclidean_dist.default: euclidean_dist,
    aten._cdist_backward.default: cdist_backward,
    aten._pdist_forward.default: pdist_forward,
    aten._trilinear.default: trilinear,
    aten.masked_scatter.default: masked_scatter,
    aten.as_strided_scatter.default: as_strided_scatter,
    aten._adaptive_avg_pool3d.default: adaptive_avg_pool3d,
    aten._adaptive_avg_pool3d_backward.default: adaptive_avg_pool3d_backward,
    aten._adaptive_avg_pool2d_backward.default: adaptive_avg_pool2d_backward,
    aten._weight_norm_interface_backward.default: weight_norm_interface_backward,
}
