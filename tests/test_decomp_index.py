"""Indexing and counting ops rdyn decomposes itself
(`python/rdyn/_decomp_index.py`, and ``pdist``/``_trilinear`` in
`python/rdyn/_decomp.py`), against eager: results exact where eager's are
exact (indices, counts, selections), at float32 tolerance otherwise, and
with no eager node in the graph. Each runs on the CPU and on the PTX
simulator (``cuda-sim``), whose kernels are the CUDA backend's.
"""

from __future__ import annotations

import pytest
import torch

import rdyn
from helpers import assert_same

DEVICES = ["cpu", "cuda-sim"]
NAN, INF = float("nan"), float("inf")


def _compiled(fn, device):
    torch._dynamo.reset()
    rdyn.reset_stats()
    return torch.compile(fn, backend="rdyn", options={"device": device}, fullgraph=True)


def _no_fallback():
    stats = rdyn.stats()
    assert stats["nodes_fallback"] == 0, stats["fallback_ops"]
    assert stats["nodes_native"] > 0


def _sparse(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    return torch.where(x.abs() < 0.8, torch.zeros(()), x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "shape,size,fill",
    [((7, 5), 40, -1), ((7, 5), 3, 9), ((3, 4, 2), 30, -1), ((11,), 11, 0), ((0, 3), 4, -1), ((), 2, -1)],
    ids=str,
)
def test_nonzero_static_matches_eager(device, shape, size, fill) -> None:
    """The first ``size`` nonzero coordinates in row-major order, padded
    with ``fill_value`` (fewer nonzeros) or cut off (more)."""
    x = _sparse(shape) if shape else torch.tensor(2.0)
    fn = lambda t: torch.nonzero_static(t, size=size, fill_value=fill)  # noqa: E731
    got = _compiled(fn, device)(x)
    want = fn(x)
    assert got.dtype == want.dtype and torch.equal(got, want), (got, want)
    if x.numel():
        _no_fallback()


def test_combinations_has_no_eager_node() -> None:
    """``torch.combinations`` is built on ``nonzero_static`` of a mask."""
    x = torch.arange(6.0)
    for r, replace in [(2, False), (3, False), (2, True)]:
        fn = lambda t: torch.combinations(t, r, with_replacement=replace)  # noqa: E731
        assert torch.equal(_compiled(fn, "cpu")(x), fn(x))
        _no_fallback()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("accumulate", [False, True])
def test_put_matches_eager(device, accumulate) -> None:
    """``put`` writes (or adds) at row-major positions; negative positions
    count from the end; repeated positions accumulate."""
    x = torch.randn(4, 6)
    index = torch.tensor([[0, -1, 7], [23, 7, 5]]) if accumulate else torch.tensor([[0, -1, 7], [23, 4, 5]])
    source = torch.randn(2, 3)
    fn = lambda t, i, s: torch.put(t, i, s, accumulate=accumulate)  # noqa: E731
    got, want = _compiled(fn, device)(x, index, source), fn(x, index, source)
    torch.testing.assert_close(got, want)
    _no_fallback()


def test_put_out_of_range_raises() -> None:
    compiled = _compiled(lambda t, i, s: torch.put(t, i, s), "cpu")
    with pytest.raises(IndexError):
        compiled(torch.randn(2, 3), torch.tensor([6]), torch.randn(1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bins,lo,hi", [(17, -2.0, 2.0), (10, -1.5, 0.3), (1, 0.0, 1.0), (100, -3.0, 3.0)])
def test_histc_counts_exactly(device, dtype, bins, lo, hi) -> None:
    """Counts equal eager's exactly: the edges themselves, values just
    inside and outside the range, NaN and infinities (left out)."""
    g = torch.Generator().manual_seed(bins)
    x = (torch.randn(3000, generator=g) * 2).to(dtype)
    x[:6] = torch.tensor([lo, hi, NAN, INF, -INF, (lo + hi) / 2], dtype=dtype)
    x[6] = torch.nextafter(torch.tensor(hi, dtype=dtype), torch.tensor(INF, dtype=dtype))
    fn = lambda t: torch.histc(t, bins=bins, min=lo, max=hi)  # noqa: E731
    got, want = _compiled(fn, device)(x), fn(x)
    assert got.dtype == want.dtype and torch.equal(got, want), (got - want).nonzero()
    _no_fallback()


def test_histc_of_the_data_range_stays_eager() -> None:
    """``min == max`` takes the range from the data, where ATen raises on
    infinities: left to ATen, which still raises."""
    fn = lambda t: torch.histc(t, bins=4)  # noqa: E731
    compiled = _compiled(fn, "cpu")
    x = torch.randn(50)
    assert torch.equal(compiled(x), fn(x))
    assert rdyn.stats()["fallback_ops"] == {"aten.histc.default": 1}
    with pytest.raises(RuntimeError, match="not finite"):
        compiled(torch.tensor([1.0, INF]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.5, INF])
def test_pdist_matches_eager(device, p) -> None:
    """Every pair ``i < j`` in row-major order, a row with itself never;
    duplicate rows are at distance exactly 0."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(9, 4, generator=g)
    x[5] = x[2]
    fn = lambda t: torch.nn.functional.pdist(t, p)  # noqa: E731
    got, want = _compiled(fn, device)(x), fn(x)
    torch.testing.assert_close(got, want)
    assert got[torch.triu_indices(9, 9, 1).t().tolist().index([2, 5])] == 0
    _no_fallback()


def test_pdist_of_one_row_is_empty() -> None:
    fn = lambda t: torch.nn.functional.pdist(t)  # noqa: E731
    assert _compiled(fn, "cpu")(torch.randn(1, 3)).shape == (0,)


@pytest.mark.parametrize("device", DEVICES)
def test_bilinear_layer_forward_and_backward(device) -> None:
    """``nn.Bilinear`` (``_trilinear``): the product is fused into its
    reduction; gradients of input, both operands and weight match eager."""
    torch.manual_seed(0)
    layer = torch.nn.Bilinear(5, 3, 4)
    a, b = torch.randn(6, 5, requires_grad=True), torch.randn(6, 3, requires_grad=True)
    want = layer(a, b)
    want.sum().backward()
    grads = [t.grad.clone() for t in (a, b, layer.weight, layer.bias)]
    for t in (a, b, layer.weight, layer.bias):
        t.grad = None
    got = _compiled(layer, device)(a, b)
    got.sum().backward()
    torch.testing.assert_close(got, want)
    for t, g in zip((a, b, layer.weight, layer.bias), grads):
        torch.testing.assert_close(t.grad, g)
    _no_fallback()


def _assign_mask(t, m, v):
    t[m] = v
    return t


def _assign_cols(t, m, v):
    t[:, m] = v
    return t


MASKED = [
    ("rows_scalar", _assign_mask, (6, 5), 0, ()),
    ("rows_vector", _assign_mask, (6, 5), 0, (5,)),
    ("rows_one_by", _assign_mask, (6, 5), 0, (1, 5)),
    ("cols_column", _assign_cols, (6, 5), 1, (6, 1)),
    ("full_mask", _assign_mask, (6, 5), None, ()),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,fn,shape,dim,vshape", MASKED, ids=[m[0] for m in MASKED])
def test_boolean_mask_assignment_is_a_where(device, name, fn, shape, dim, vshape) -> None:
    """``x[mask] = v`` with ``v`` independent of the number selected is a
    ``where`` over the mask: no eager node, the input's layout kept."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(shape, generator=g)
    m = x > 0.3 if dim is None else torch.rand(shape[dim], generator=g) > 0.5
    v = torch.randn(vshape, generator=g)
    got = _compiled(fn, device)(x.clone(), m, v)
    want = fn(x.clone(), m, v)
    assert torch.equal(got, want) and got.stride() == want.stride()
    _no_fallback()


def test_boolean_mask_accumulate_and_integer_values() -> None:
    """``index_put`` with ``accumulate`` adds where the mask holds and keeps
    -0.0 elsewhere; integer tensors take a cast of float values as eager."""
    x = torch.tensor([[-0.0, 1.0, 2.0], [3.0, -0.0, 5.0]])
    m = torch.tensor([True, False, True])
    fn = lambda t, m, v: torch.ops.aten.index_put(t, [None, m], v, True)  # noqa: E731
    v = torch.tensor([[10.0], [20.0]])
    got, want = _compiled(fn, "cpu")(x, m, v), fn(x, m, v)
    assert torch.equal(got, want) and torch.equal(got.signbit(), want.signbit())
    _no_fallback()
    xi = torch.arange(12).view(3, 4)
    fi = lambda t, m: torch.ops.aten.index_put(t, [m], torch.tensor(2.7))  # noqa: E731
    mi = torch.tensor([[True, False, True, False]] * 3)
    assert torch.equal(_compiled(fi, "cpu")(xi, mi), fi(xi, mi))


def test_boolean_mask_with_one_value_per_selection_stays_eager() -> None:
    """Values with one row per selected position depend on the count,
    which ATen checks: left to ATen, which raises on a wrong count."""
    x, m = torch.randn(6, 5), torch.tensor([True, False, True, True, False, False])
    compiled = _compiled(_assign_mask, "cpu")
    v = torch.randn(3, 5)
    assert torch.equal(compiled(x.clone(), m, v), _assign_mask(x.clone(), m, v))
    assert rdyn.stats()["fallback_ops"] == {"aten.index_put.default": 1}
    with pytest.raises(RuntimeError):
        compiled(x.clone(), torch.ones(6, dtype=torch.bool), v)


def test_integer_shift_operators() -> None:
    """``x >> n`` and ``x << n`` (``__rshift__``/``__lshift__``) of
    integers are the bitwise shifts, by scalars and by tensors."""
    x = torch.tensor([100, -7, 1 << 40, 5])
    for fn in (lambda t: t >> 3, lambda t: t << 2, lambda t: t >> torch.tensor([1, 2, 3, 4])):
        assert torch.equal(_compiled(fn, "cpu")(x), fn(x))
        _no_fallback()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("padding_idx", [None, 0, 7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_backward_matches_eager(device, padding_idx, dtype) -> None:
    """The embedding's gradient: repeated ids add up, the padding row's
    gradient is zero (its rows go to an extra row, cut off), half
    precision sums in float32 and rounds once."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(20, 6, padding_idx=padding_idx).to(dtype)
    ids = torch.tensor([[0, 3, 7, 3], [7, 7, 19, 0], [5, 3, 0, 1]])
    w = torch.randn(3, 4, 6).to(dtype)

    def step(forward):
        emb.weight.grad = None
        (forward(ids) * w).sum().backward()
        return emb.weight.grad

    want = step(emb).clone()
    got = step(_compiled(emb, device))
    tol = dict(rtol=1.6e-2, atol=1e-2) if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(got, want, **tol)
    if padding_idx is not None:
        assert not got[padding_idx].any()
    _no_fallback()


def test_row_scatter_add_is_compiled() -> None:
    """A scatter-add of whole rows (``index_add`` along dim 0) is compiled
    along the row (the row index is computed once per row by the
    executor): duplicate rows add in order, and an index out of range
    raises instead of writing."""
    fn = lambda x, i: torch.zeros(10, 64).index_add(0, i, x)  # noqa: E731
    x, i = torch.randn(300, 64), torch.randint(0, 10, (300,))
    report = rdyn.explain(fn, x, i)
    scatter = [k for k in report.kernels if "serial" in k.source]
    assert scatter and all("[jit]" in k.source for k in scatter), [k.source for k in report.kernels]
    compiled = _compiled(fn, "cpu")
    torch.testing.assert_close(compiled(x, i), fn(x, i))
    _no_fallback()
    with pytest.raises(IndexError):
        compiled(x, torch.full((300,), 10))


def test_nonzero_static_under_dynamic_shapes() -> None:
    torch._dynamo.reset()
    rdyn.reset_stats()
    fn = lambda t: torch.nonzero_static(t, size=4)  # noqa: E731
    compiled = torch.compile(fn, backend="rdyn", dynamic=True)
    for n in (5, 8, 1):
        x = torch.arange(2 * n).view(n, 2) % 3 == 0
        assert torch.equal(compiled(x), fn(x))
    _no_fallback()


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_lowers_with_its_gradient(mode) -> None:
    """``nn.EmbeddingBag`` (sum, mean; a DLRM's sparse features) and its
    weight gradient lower: no eager node, and output and gradient match
    float64 eager with empty bags, a bag of one at the end and repeated
    indices."""
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(50, 8, mode=mode)
    bag64 = torch.nn.EmbeddingBag(50, 8, mode=mode).double()
    bag64.weight.data.copy_(bag.weight.data)
    indices = torch.cat([torch.randint(0, 50, (18,)), torch.tensor([7, 7])])
    offsets = torch.tensor([0, 3, 3, 10, 19, 19])
    scale = torch.linspace(-1, 1, 8)

    def step(module, dtype):
        module.zero_grad()
        out = module(indices, offsets)
        (out * scale.to(dtype)).sum().backward()
        return out, module.weight.grad

    want = step(bag, torch.float32)
    reference = step(bag64, torch.float64)
    rdyn.reset_stats()
    got = step(torch.compile(bag, backend="rdyn"), torch.float32)
    assert rdyn.stats()["fallback_ops"] == {}
    assert_same(got, want, reference, what=f"EmbeddingBag({mode})")
