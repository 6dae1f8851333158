"""Sorting and selection: sort (argsort, msort), topk, kthvalue, median,
nanmedian.

On the CPU they run rdyn's sort kernel (``codegen-cpu/src/sort.rs``), which
orders ties by position: a stable sort, whatever ``stable`` says. ATen's
default CPU sort is not stable, so where values tie the indices can differ
from eager's while both are right. Every case checks the values exactly
against eager, and the indices exactly against eager's *stable* sort (the
reference for ties: the first of the tied elements in input order), and
against eager's own indices where the line has no ties.
"""

from __future__ import annotations

import pytest
import torch

import rdyn

NAN, INF = float("nan"), float("inf")


def _inputs():
    g = torch.Generator().manual_seed(0)
    return {
        "rows": torch.randn(4, 9, generator=g),
        "nan_inf_ties": torch.tensor(
            [[1.0, 1.0, 3.0, NAN, 2.0, NAN, 5.0], [-INF, -0.0, 1.0, INF, 0.0, INF, -0.0], [NAN] * 7]
        ),
        "int_ties": torch.randint(-3, 3, (3, 40), generator=g),
        "uint8": torch.randint(0, 255, (5, 7), generator=g, dtype=torch.uint8),
        "bool": torch.rand(4, 6, generator=g) > 0.5,
        "half_ties": torch.randn(6, 50, generator=g).half().clamp(-0.5, 0.5),
        "bfloat16": torch.randn(5, 6, generator=g).bfloat16(),
        "float64": torch.randn(5, 6, generator=g, dtype=torch.float64),
        "int64_large": torch.randint(-(1 << 62), 1 << 62, (3, 11), generator=g),
        "3d": torch.randn(3, 5, 7, generator=g),
        "transposed": torch.randn(9, 5, generator=g).t(),
        "long_row": torch.randn(2, 5000, generator=g),
        "scalar": torch.tensor(3.0),
        "empty_rows": torch.randn(0, 4, generator=g),
    }


INPUTS = _inputs()


def _dims(x):
    return [0] if x.dim() == 0 else list(range(-1, x.dim()))


def _stable(x, d, descending=False):
    return torch.sort(x, dim=d, descending=descending, stable=True)


def _median_position(x, d, ignore_nan):
    """The sorted position a median takes along ``d`` (see ``SortSelect``)."""
    n = x.shape[d] if x.dim() else 1
    nans = x.isnan().sum(d, keepdim=True) if x.is_floating_point() else torch.zeros_like(x, dtype=torch.long).sum(d, keepdim=True)
    if ignore_nan:
        return ((n - nans - 1).clamp(min=0)) // 2
    return torch.where(nans > 0, n - nans, torch.full_like(nans, (n - 1) // 2))


def _compile(fn, x, device="cpu"):
    torch._dynamo.reset()
    rdyn.reset_stats()
    return torch.compile(fn, backend="rdyn", options={"device": device, "strict": True})(x)


def _assert_same(got, want, stable_idx, what):
    """Values equal eager's, indices the stable reference's."""
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0, equal_nan=True, msg=what)
    torch.testing.assert_close(got[1], stable_idx, rtol=0, atol=0, msg=what)


def _reference(name, x, d):
    """(fn, stable reference indices) for a case."""
    if name.startswith("sort"):
        descending = name == "sort_descending"
        fn = {
            "sort": lambda x: torch.sort(x, d),
            "sort_descending": lambda x: torch.sort(x, d, descending=True),
            "sort_stable": lambda x: torch.sort(x, dim=d, stable=True),
        }[name]
        return fn, _stable(x, d, descending).indices
    n = x.shape[d] if x.dim() else 1
    if name in ("topk", "topk_smallest"):
        k = min(3, n)
        largest = name == "topk"
        idx = _stable(x, d, largest).indices.narrow(d if x.dim() else 0, 0, k) if x.dim() else torch.tensor(0)
        return (lambda x: torch.topk(x, k, d, largest=largest)), idx
    if name == "kthvalue":
        k = max(1, n // 2)
        idx = _stable(x, d).indices.select(d, k - 1) if x.dim() else torch.tensor(0)
        return (lambda x: torch.kthvalue(x, k, d)), idx
    ignore_nan = name == "nanmedian"
    if x.dim() == 0:
        idx = torch.tensor(0)
    else:
        idx = _stable(x, d).indices.gather(d, _median_position(x, d, ignore_nan)).squeeze(d)
    op = torch.nanmedian if ignore_nan else torch.median
    return (lambda x: op(x, d)), idx


NAMES = ["sort", "sort_descending", "sort_stable", "topk", "topk_smallest", "kthvalue", "median", "nanmedian"]


@pytest.mark.parametrize("device", ["cpu", "cuda-sim", "wgpu"])
@pytest.mark.parametrize("key", list(INPUTS))
@pytest.mark.parametrize("name", NAMES)
def test_sorts(name: str, key: str, device: str) -> None:
    """On the CPU the sort kernel; on GPU devices each element's rank in its
    line (``rank_sort``), for lines of up to 2048."""
    x = INPUTS[key]
    if device != "cpu" and key == "long_row":
        pytest.skip("longer than a GPU device's rank sort (see test_long_lines_run_eagerly_on_gpu_devices)")
    if device == "wgpu" and key == "int64_large":
        pytest.skip("wgpu computes with 32-bit integers (rdyn says so)")
    if x.dtype == torch.bool and name in ("kthvalue", "median", "nanmedian", "topk", "topk_smallest"):
        pytest.skip("eager has no bool selection kernels")
    if name in ("kthvalue", "median", "nanmedian") and x.numel() == 0:
        pytest.skip("a selection of nothing raises in eager")
    for d in _dims(x):
        fn, stable_idx = _reference(name, x, d)
        want = fn(x)
        got = _compile(fn, x, device)
        _assert_same(got, want, stable_idx, f"{name} of {key} along {d} on {device}")
        assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]
        # Without ties eager's indices are the stable ones too.
        if x.dim() and x.dtype.is_floating_point and key in ("rows", "3d", "transposed", "float64"):
            torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)


def test_whole_tensor_medians() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(7, 9, generator=g)
    for op in (torch.median, torch.nanmedian):
        got = _compile(lambda x: op(x), x)
        torch.testing.assert_close(got, op(x), rtol=0, atol=0)
        assert rdyn.stats()["nodes_fallback"] == 0
    x[2, 3] = NAN
    assert torch.isnan(_compile(lambda x: torch.median(x), x))
    torch.testing.assert_close(_compile(lambda x: torch.nanmedian(x), x), torch.nanmedian(x))


def test_sort_fused_with_its_neighbours_and_argsort() -> None:
    """The sort's input is computed by a fused kernel, and what reads the
    sorted values fuses behind it; argsort and msort go through sort."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(16, 33, generator=g)

    def fn(x):
        v, i = torch.sort(x.tanh() * 2 - 1, dim=1, descending=True)
        return v.softmax(1), i * 2, torch.argsort(x, 0), torch.msort(x)

    got = _compile(fn, x)
    want = fn(x.double())
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b.to(a.dtype), rtol=1e-6, atol=1e-6)
    stats = rdyn.stats()
    assert stats["nodes_fallback"] == 0, stats["fallback_ops"]


def test_quantile_runs_natively() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, 101, generator=g)
    got = _compile(lambda x: torch.quantile(x, 0.3, dim=1), x)
    torch.testing.assert_close(got, torch.quantile(x.double(), 0.3, dim=1).float())
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]


def test_sort_gradient() -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 10, generator=g, dtype=torch.float64)
    w = torch.randn(6, 10, generator=g, dtype=torch.float64)

    def loss(x):
        v, _ = torch.sort(x, 1)
        t, _ = torch.topk(x, 4, 1)
        return (v * w).sum() + t.square().sum() + torch.median(x, 1).values.sum()

    xe = x.clone().requires_grad_()
    loss(xe).backward()
    xr = x.clone().requires_grad_()
    torch._dynamo.reset()
    torch.compile(loss, backend="rdyn", options={"strict": True})(xr).backward()
    torch.testing.assert_close(xr.grad, xe.grad)


def test_dynamic_lengths() -> None:
    """A sort along a symbolic dim runs natively; a topk along one needs its
    length to check k against, so it runs eagerly (counted)."""
    g = torch.Generator().manual_seed(5)
    torch._dynamo.reset()
    rdyn.reset_stats()
    fn = torch.compile(lambda x: torch.sort(x, 1, descending=True), backend="rdyn", dynamic=True)
    for n in (5, 9, 17):
        x = torch.randn(3, n, generator=g)
        got, want = fn(x), torch.sort(x, 1, descending=True)
        torch.testing.assert_close(got.values, want.values, rtol=0, atol=0)
        torch.testing.assert_close(got.indices, want.indices, rtol=0, atol=0)
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]


@pytest.mark.parametrize("device", ["cuda-sim", "wgpu"])
def test_long_lines_run_eagerly_on_gpu_devices(device: str) -> None:
    x = INPUTS["long_row"]
    torch._dynamo.reset()
    rdyn.reset_stats()
    got = torch.compile(lambda x: torch.sort(x, 1), backend="rdyn", options={"device": device})(x)
    want = torch.sort(x, 1)
    torch.testing.assert_close(got.values, want.values, rtol=0, atol=0)
    assert rdyn.stats()["fallback_ops"].get("aten.sort.default") == 1


def test_explain_shows_the_sort_kernel() -> None:
    report = rdyn.explain(lambda x: torch.topk(x, 2, 1), torch.randn(4, 40))
    sources = "\n".join(k.source for k in report.kernels)
    assert "descending first 2 (rdyn's sort kernel)" in sources, sources
    assert not report.fallback_ops


def _search_cases():
    g = torch.Generator().manual_seed(6)
    seq = torch.sort(torch.randn(40, generator=g)).values
    ints = torch.tensor([0, 1, 1, 1, 2, 5, 5, 9])
    with_nan = torch.tensor([1.0, 2.0, 2.0, 3.0, NAN])
    rows = torch.sort(torch.randn(3, 4, 17, generator=g), -1).values
    raw = torch.randn(3, 17, generator=g)
    order = torch.argsort(raw, -1)
    return {
        "1d": (lambda s, v: torch.searchsorted(s, v), seq, torch.randn(6, 7, generator=g)),
        "1d_right_int32": (lambda s, v: torch.searchsorted(s, v, right=True, out_int32=True), seq, torch.randn(50, generator=g)),
        "ints_ties": (lambda s, v: torch.searchsorted(s, v), ints, torch.tensor([[1, 5], [0, 10]])),
        "ints_ties_side_right": (lambda s, v: torch.searchsorted(s, v, side="right"), ints, torch.tensor([[1, 5], [0, 10]])),
        "nan": (lambda s, v: torch.searchsorted(s, v), with_nan, torch.tensor([0.0, 2.0, 2.5, 9.0, NAN])),
        "nan_right": (lambda s, v: torch.searchsorted(s, v, right=True), with_nan, torch.tensor([0.0, 2.0, 2.5, 9.0, NAN])),
        "batched": (lambda s, v: torch.searchsorted(s, v), rows, torch.randn(3, 4, 5, generator=g)),
        "sorter": (lambda s, v: torch.searchsorted(s, v, sorter=order), raw, torch.randn(3, 6, generator=g)),
        "empty_sequence": (lambda s, v: torch.searchsorted(s, v), torch.empty(0), torch.randn(4, generator=g)),
        "scalar_value": (lambda s, v: torch.bucketize(v, s), seq, torch.tensor(0.3)),
        "bucketize_right": (lambda s, v: torch.bucketize(v, s, right=True), seq, torch.randn(9, 3, generator=g)),
        "half": (lambda s, v: torch.bucketize(v, s), seq.half(), torch.randn(64, generator=g).half()),
        "transposed_values": (lambda s, v: torch.bucketize(v.t(), s), seq, torch.randn(5, 8, generator=g)),
    }


SEARCH_CASES = _search_cases()


@pytest.mark.parametrize("device", ["cpu", "cuda-sim", "wgpu"])
@pytest.mark.parametrize("case", list(SEARCH_CASES))
def test_searchsorted_and_bucketize(case: str, device: str) -> None:
    """ATen's binary search: the CPU search kernel, and on GPU devices the
    search unrolled into each element's expression; both take ATen's
    midpoints, so NaN in the sequence lands where eager's does."""
    fn, seq, values = SEARCH_CASES[case]
    if device == "wgpu" and seq.dtype == torch.half:
        pytest.skip("covered on the CPU")
    want = fn(seq, values)
    torch._dynamo.reset()
    rdyn.reset_stats()
    got = torch.compile(fn, backend="rdyn", options={"device": device, "strict": True})(seq, values)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    stats = rdyn.stats()
    assert stats["nodes_fallback"] == 0, stats["fallback_ops"]
