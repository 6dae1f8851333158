"""Decompositions of indexing and counting ops that ATen runs as one opaque
kernel: written from ops rdyn lowers (cumulative sums, binary searches,
gathers, scatter-adds), so they run in rdyn's kernels instead of eagerly.

``nonzero_static`` finds its k-th selected position by a binary search of
the mask's cumulative count: a gather per result row, no scatter, so it is
the same on every device. ``put`` is an ``index_put`` on the flattened
tensor. ``histc`` is ATen's linear bin formula, computed in the input's
dtype in ATen's order, then a scatter-add of ones. ``x[mask] = v`` is a
``where`` over the mask. The embedding's gradient is a scatter-add of the
gradient rows as they are (no mask multiplied in), which the CPU JIT
compiles. Integer ``>>``/``<<`` are the bitwise shifts. ``index_add`` and
``index_copy`` reject negative indices as their eager kernels do, and
``select_scatter`` keeps its input's dtype. ``nn.EmbeddingBag`` (sum and
mean) and its gradient are a gather and a scatter-add into the bags, each
index's bag a binary search of the offsets.
"""

from __future__ import annotations

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

aten = torch.ops.aten
_TORCH_EMBEDDING_BACKWARD = get_decompositions([aten.embedding_dense_backward])[aten.embedding_dense_backward.default]


def _static(*sizes) -> bool:
    return all(isinstance(s, int) for s in sizes)


def nonzero_static(x, *, size, fill_value=-1):
    """The coordinates of ``x``'s first ``size`` nonzero elements in
    row-major order, rows past the count filled with ``fill_value``. Row r
    is the first position whose running count of nonzeros reaches r + 1."""
    shape = tuple(x.shape)
    n = x.numel()
    if not _static(size):
        return NotImplemented
    out_dims = len(shape)
    if n == 0 or out_dims == 0 or size == 0:
        if out_dims == 0 and n == 1:
            return x.new_empty((size, 0), dtype=torch.int64)
        return torch.full((size, out_dims), fill_value, dtype=torch.int64, device=x.device)
    count = torch.cumsum((x != 0).reshape(-1).to(torch.int64), 0)
    wanted = torch.arange(1, size + 1, dtype=torch.int64, device=x.device)
    position = torch.searchsorted(count, wanted)
    found = position < n
    coords = []
    stride = n
    for extent in shape:
        stride //= extent
        coords.append(torch.div(position, stride, rounding_mode="floor") % extent)
    return torch.where(found.unsqueeze(-1), torch.stack(coords, -1), fill_value)


def put(x, index, source, accumulate=False):
    """``put``: ``x`` as one row-major line, ``source`` written (or added)
    at ``index`` (negative indices count from the end, as ``index_put``'s
    do, and an index out of range is an error)."""
    flat = x.reshape(-1).index_put((index.reshape(-1),), source.reshape(-1).to(x.dtype), accumulate)
    return flat.view(x.shape)


def histc(x, bins=100, min=0, max=0):  # noqa: A002 - ATen's argument names
    """``histc`` with its range given (min < max): each element's bin is
    ATen's ``(x - min) * bins / (max - min)`` truncated, computed in x's
    dtype in that order, the top edge in the last bin, elements outside
    the range (and NaN) left out. A range taken from the data (min == max)
    raises in ATen when the data holds infinities, which a graph cannot
    check, so that case stays ATen's."""
    lo, hi = float(min), float(max)
    if lo == hi or x.dtype not in (torch.float32, torch.float64) or not _static(bins):
        return NotImplemented
    if not (lo < hi) or lo in (float("inf"), float("-inf")) or hi in (float("inf"), float("-inf")):
        return NotImplemented  # ATen's own error
    flat = x.reshape(-1)
    lo_t = torch.full((), lo, dtype=x.dtype, device=x.device)
    hi_t = torch.full((), hi, dtype=x.dtype, device=x.device)
    inside = (flat >= lo_t) & (flat <= hi_t)
    scaled = (flat - lo_t) * bins
    width = hi_t - lo_t
    pos = (scaled / width).to(torch.int64)
    pos = torch.where(pos >= bins, bins - 1, pos)
    pos = torch.where(inside, pos, bins)
    ones = inside.to(x.dtype)
    counts = x.new_zeros((bins + 1,)).index_put((pos,), ones, accumulate=True)
    return counts[:bins]


def index_put_mask(x, indices, values, accumulate=False):
    """``x[mask] = values`` (``index_put`` with one boolean index, other
    entries ``None``) where ``values`` does not depend on how many
    positions the mask selects: a ``where`` over the mask, ``values``
    broadcast across the masked dims (or added, for ``accumulate``). Values
    with one row per selected position keep ATen's kernel, which checks
    their count."""
    given = [k for k, t in enumerate(indices) if t is not None]
    if len(given) != 1 or indices[given[0]].dtype not in (torch.bool, torch.uint8):
        return NotImplemented
    first = given[0]
    mask = indices[first]
    rest = len(x.shape) - first - mask.dim()
    v = values
    if v.dim() > rest:
        selected = v.dim() - rest - 1  # the dim that runs over the selected positions
        if v.shape[selected] != 1:
            return NotImplemented
        v = v.squeeze(selected)
    lead = v.dim() - rest  # dims of v before the mask's (right-aligned)
    if lead > 0:
        v = v.reshape(tuple(v.shape[:lead]) + (1,) * mask.dim() + tuple(v.shape[lead:]))
    where = mask.to(torch.bool).reshape(tuple(mask.shape) + (1,) * rest)
    v = v.to(x.dtype)
    return torch.where(where, x + v if accumulate else v, x)


def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    """The embedding's gradient: each position's gradient row added into
    its index's row, with no mask on the values (PyTorch's decomposition
    multiplies every row by ``index != padding_idx``): rows of the padding
    index go to one extra row, cut off after. The scatter-add then reads
    the gradient as it is, which rdyn compiles. Scaling by frequency keeps
    PyTorch's decomposition."""
    if scale_grad_by_freq or not _static(num_weights, *grad_output.shape):
        return _TORCH_EMBEDDING_BACKWARD(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
    result = grad_output.dtype
    work = torch.float32 if result in (torch.float16, torch.bfloat16) else result
    index = indices.reshape(-1).to(torch.int64)
    rows = grad_output.reshape(index.shape[0], -1).to(work)
    width = num_weights
    if 0 <= padding_idx < num_weights:
        index = index + (index == padding_idx).to(torch.int64) * (num_weights - padding_idx)
        width = num_weights + 1
    grad = rows.new_zeros((width, rows.shape[1])).index_put((index,), rows, accumulate=True)[:num_weights]
    return grad.view((num_weights, *grad_output.shape[indices.dim():])).to(result)


def _integer_only(shift):
    """``x >> n`` and ``x << n`` (``__rshift__``, ``__lshift__``, ATen's
    own ops, not decomposed by PyTorch) as the bitwise shifts they are for
    integers; for floating ``x`` ATen divides or multiplies by 2**n, left
    to ATen."""

    def shifted(x, other):
        if x.is_floating_point() or (isinstance(other, torch.Tensor) and other.is_floating_point()):
            return NotImplemented
        return shift(x, other)

    return shifted


def _negative_rejected(op):
    """PyTorch's decomposition of ``op`` (``index_add``, ``index_copy``),
    whose eager kernel rejects a negative index where the ``index_put`` it
    decomposes to wraps it: a negative index moves out of range
    (`_below_range`), which rdyn's bounds check then reports."""
    decomposition = core_aten_decompositions()[op]

    def run(x, dim, index, *args, **kwargs):
        size = x.shape[dim] if x.dim() > 0 else 1
        return decomposition(x, dim, _below_range(index, size), *args, **kwargs)

    return run


def _below_range(index, size):
    """``index`` with each negative entry moved below ``-size``, so that
    ``index_put``'s wrap still leaves it out of range: ``index + size ·
    (index >> bits - 1)``, integer arithmetic the CPU executor computes
    once per row (a scatter of rows stays compiled)."""
    sign = torch.bitwise_right_shift(index, torch.iinfo(index.dtype).bits - 1)
    return index + sign * size


_TORCH_INDEX_SELECT = get_decompositions([aten.index_select])[aten.index_select.default]


def index_select(x, index_dim, index):
    """``index_select`` as PyTorch decomposes it (an ``index``), with a
    negative index out of range, as its eager kernel has it (see
    `_below_range`), and a
    contiguous result, as that kernel writes it."""
    size = x.shape[index_dim] if x.dim() > 0 else 1
    return _TORCH_INDEX_SELECT(x, index_dim, _below_range(index, size)).contiguous()


def select_scatter(x, src, dim, index):
    """``select_scatter``: PyTorch's decomposition (a ``where`` over a mask
    of the selected slice) returns the promoted dtype of ``x`` and ``src``;
    eager keeps ``x``'s, so ``src`` is converted first."""
    dim = dim % x.dim() if x.dim() > 0 else 0
    if index < 0:
        index = index + x.shape[dim]
    shape = [1] * x.dim()
    shape[dim] = -1
    mask = torch.arange(x.shape[dim], device=x.device).view(shape) == index
    return torch.where(mask, src.to(x.dtype).unsqueeze(dim).expand(x.shape), x)


def efficient_zero_tensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """``_efficientzerotensor`` (torch.func's forward-mode AD puts them in
    backward graphs): zeros rdyn writes, since a ZeroTensor has no memory
    for a kernel to read."""
    return torch.zeros(size, dtype=dtype, device=device)


_SUM, _MEAN = 0, 1


def _bag_of_each_index(indices, offsets, num_bags):
    """The bag each index belongs to: how many bags after the first start
    at or before its position (a binary search of the offsets; never
    negative, so no index wrapping follows)."""
    positions = torch.arange(indices.shape[0], device=indices.device, dtype=offsets.dtype)
    return torch.searchsorted(offsets[1:num_bags], positions, right=True)


def _bag_sizes(indices, offsets, num_bags):
    """Indices per bag: the differences of the offsets, the last bag ending
    at the last index."""
    ends = torch.cat([offsets[1:num_bags], offsets.new_full((1,), indices.shape[0])])
    return ends - offsets[:num_bags]


def _plain_bags(indices, offsets, mode, per_sample_weights, padding_idx) -> bool:
    """The cases the decompositions below cover: sum or mean over 1-D
    indices and offsets, without per-sample weights or a padding index."""
    return (
        mode in (_SUM, _MEAN)
        and per_sample_weights is None
        and padding_idx < 0
        and indices.dim() == 1
        and offsets.dim() == 1
        and offsets.shape[0] > 0
    )


def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """``nn.EmbeddingBag`` (``_embedding_bag``, sum or mean): the rows of
    ``weight`` gathered, then added into their bags (a scatter-add in
    index order, as ATen sums each bag), divided by the bag's size for the
    mean (an empty bag is 0). The other results are what the backward
    below reads: each index's bag and each bag's size."""
    if include_last_offset or not _plain_bags(indices, offsets, mode, per_sample_weights, padding_idx):
        return NotImplemented
    num_bags = offsets.shape[0]
    bag = _bag_of_each_index(indices, offsets, num_bags)
    sizes = _bag_sizes(indices, offsets, num_bags)
    # `index_select` rejects a negative or too large index, as eager does;
    # the bags are in range by construction, so the scatter-add is an
    # `index_put` (`index_add` would first move negative indices out of
    # range, an int64 kernel of its own).
    rows = weight.index_select(0, indices)
    out = weight.new_zeros((num_bags, weight.shape[1])).index_put((bag,), rows, accumulate=True)
    if mode == _MEAN:
        out = out / sizes.clamp(min=1).unsqueeze(1).to(weight.dtype)
    return out, bag, sizes, offsets.new_zeros(num_bags)


def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                           scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx=-1):
    """The weight's gradient of a sum or mean bag: each bag's gradient row
    (divided by its size for the mean) added into the row of each of its
    indices. Each index's bag and each bag's size are the forward's
    auxiliary results (the decomposition above returns both, as ATen's
    kernel does where it fills them); found again from the offsets only
    where they are empty (ATen's fast path for sums)."""
    num_bags = grad.shape[0]
    plain = _plain_bags(indices, offsets, mode, per_sample_weights, padding_idx)
    if sparse or scale_grad_by_freq or not plain or offsets.shape[0] != num_bags:
        return NotImplemented
    filled = offset2bag.shape[0] == indices.shape[0]
    bag = offset2bag if filled else _bag_of_each_index(indices, offsets, num_bags)
    rows = grad.index_select(0, bag)
    if mode == _MEAN:
        sizes = bag_size if bag_size.shape[0] == num_bags else _bag_sizes(indices, offsets, num_bags)
        rows = rows / sizes.clamp(min=1).to(grad.dtype).index_select(0, bag).unsqueeze(1)
    # The forward's `index_select` checked `indices` (negative ones raise).
    return grad.new_zeros((num_weights, grad.shape[1])).index_put((indices,), rows, accumulate=True)


DECOMPOSITIONS = {
    **{
        getattr(op, overload): _integer_only(shift)
        for op, shift in ((aten.__rshift__, torch.bitwise_right_shift), (aten.__lshift__, torch.bitwise_left_shift))
        for overload in ("Scalar", "Tensor")
    },
    aten.nonzero_static.default: nonzero_static,
    aten.put.default: put,
    aten.embedding_dense_backward.default: embedding_dense_backward,
    aten.index_put.default: index_put_mask,
    aten.histc.default: histc,
    aten.index_add.default: _negative_rejected(aten.index_add.default),
    aten.index_copy.default: _negative_rejected(aten.index_copy.default),
    aten.select_scatter.default: select_scatter,
    aten.index_select.default: index_select,
    aten._efficientzerotensor.default: efficient_zero_tensor,
    aten._embedding_bag.default: embedding_bag,
    aten._embedding_bag_backward.default: embedding_bag_backward,
}
