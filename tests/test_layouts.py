"""Memory layouts: what rdyn writes is written in storage order, and a
library convolution on the CPU runs on channels-last tensors.

A kernel that stores a channels-last (or any permuted) tensor walks it in
memory order, so reading and writing a channels-last tensor are both
contiguous. A float32 convolution with a small weight reads a channels-last
input (written so by the kernel that computes it), a channels-last copy of
its weight, and gives a channels-last result. Each case is compared with
eager and a float64 reference, values and output strides, and gradients
where the layout path also runs in training.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import rdyn
from helpers import assert_same


def _library_layouts(report) -> list[tuple[list[int], list[int]]]:
    """(sizes, strides) of each library call's result, in report order."""
    out = []
    for k in report.kernels:
        if k.name.endswith("library"):
            m = re.search(r"out: buf\d+ \[([\d, ]*)\] strides \[([\d, ]*)\]", k.source)
            assert m, k.source
            out.append(tuple([int(v) for v in g.split(",")] for g in m.groups()))
    return out


def _channels_last(sizes) -> list[int]:
    n, c, h, w = sizes
    return [c * h * w, 1, w * c, c]


@pytest.mark.parametrize("shape", [(2, 5, 9, 7), (1, 16, 4, 4), (3, 1, 6, 2)])
def test_channels_last_pointwise_keeps_layout(shape) -> None:
    """A pointwise result of a channels-last input is channels-last (as
    eager's), and its kernel walks one contiguous range."""
    g = torch.Generator().manual_seed(0)
    x64 = torch.randn(shape, generator=g, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    s64 = torch.randn(shape[1], generator=g, dtype=torch.float64)
    fn = lambda x, s: torch.relu(x * s[None, :, None, None] + 1)  # noqa: E731
    x, s = x64.float(), s64.float()
    got = torch.compile(fn, backend="rdyn")(x, s)
    want = fn(x, s)
    assert got.stride() == want.stride()
    assert_same(got, want, fn(x64, s64))
    report = rdyn.explain(fn, x, s)
    (kernel,) = [k for k in report.kernels if k.name.startswith("k")]
    stores = re.findall(r"store buf\d+\[(.*)\]", kernel.source)
    # The innermost variable moves one element: storage order.
    assert stores and all(re.search(r"(^|\+ )i\d+$", st.split(" + ")[-1]) for st in stores), kernel.source


def test_permuted_result_is_written_in_storage_order() -> None:
    """A result eager lays out transposed (a pointwise op on `x.t()`) is
    written row by row of memory, reading the source contiguously too."""
    x64 = torch.randn(33, 17, dtype=torch.float64)
    fn = lambda x: x.t() * 2 + 1  # noqa: E731
    got = torch.compile(fn, backend="rdyn")(x64.float())
    want = fn(x64.float())
    assert got.stride() == want.stride() == (1, 17)
    assert_same(got, want, fn(x64))
    (kernel,) = [k for k in rdyn.explain(fn, x64.float()).kernels if k.name.startswith("k")]
    assert "outer [561]" in kernel.source, kernel.source


CONVS = [
    # name, input sizes, weight sizes, conv2d keyword arguments, bias
    ("plain", (2, 5, 9, 9), (7, 5, 3, 3), dict(padding=1), False),
    ("bias_stride", (1, 6, 11, 10), (4, 6, 3, 3), dict(stride=2, padding=1), True),
    ("groups", (2, 6, 8, 8), (6, 3, 3, 3), dict(groups=2, padding=1), True),
    ("dilation", (1, 4, 12, 12), (8, 4, 3, 3), dict(dilation=2, padding=2), False),
    ("rectangular", (1, 3, 10, 13), (5, 3, 5, 2), dict(padding=(2, 0)), True),
    ("one_by_one_stride2", (1, 8, 9, 9), (12, 8, 1, 1), dict(stride=2), False),
]


def _conv_args(x_sizes, w_sizes, bias, layout, seed=1):
    g = torch.Generator().manual_seed(seed)
    x64 = torch.randn(x_sizes, generator=g, dtype=torch.float64)
    if layout == "channels_last":
        x64 = x64.contiguous(memory_format=torch.channels_last)
    w64 = torch.randn(w_sizes, generator=g, dtype=torch.float64)
    b64 = torch.randn(w_sizes[0], generator=g, dtype=torch.float64) if bias else None
    s64 = torch.randn(x_sizes[1], generator=g, dtype=torch.float64)
    return x64, w64, b64, s64


@pytest.mark.parametrize("source", ["input", "computed"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("name,x_sizes,w_sizes,kwargs,bias", CONVS, ids=[c[0] for c in CONVS])
def test_library_convolution_runs_channels_last(name, x_sizes, w_sizes, kwargs, bias, layout, source) -> None:
    """The convolution reads its input as given (a graph input) or as a
    computed channels-last tensor, and its result is channels-last; the
    output after it has eager's strides and values."""

    def fn(x, w, b, s):
        if source == "computed":
            x = torch.relu(x * s[None, :, None, None])
        return torch.relu(F.conv2d(x, w, b, **kwargs) + 0.5)

    x64, w64, b64, s64 = _conv_args(x_sizes, w_sizes, bias, layout)
    args = [t.float() if t is not None else None for t in (x64, w64, b64, s64)]
    report = rdyn.explain(fn, *args)
    assert report.fallback_ops == {}
    (layout_out,) = _library_layouts(report)
    assert layout_out[1] == _channels_last(layout_out[0])
    got = torch.compile(fn, backend="rdyn")(*args)
    want = fn(*args)
    assert got.stride() == want.stride()
    assert_same(got, want, fn(x64, w64, b64, s64))


def test_channels_last_convolutions_train() -> None:
    """conv, ReLU, conv: the forward graph runs both convolutions
    channels-last; the gradients match float64 eager."""
    torch.manual_seed(2)
    net64 = torch.nn.Sequential(
        torch.nn.Conv2d(4, 6, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(6, 3, 3, padding=1), torch.nn.Tanh()
    ).double()
    net = torch.nn.Sequential(
        torch.nn.Conv2d(4, 6, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(6, 3, 3, padding=1), torch.nn.Tanh()
    )
    net.load_state_dict({k: v.float() for k, v in net64.state_dict().items()})
    x64 = torch.randn(2, 4, 7, 7, dtype=torch.float64)
    loss = torch.compile(lambda t: net(t).square().sum(), backend="rdyn")(x64.float())
    loss.backward()
    net64(x64).square().sum().backward()
    for p, p64 in zip(net.parameters(), net64.parameters()):
        assert_same(p.grad, p64.grad.float(), p64.grad)


@pytest.mark.parametrize(
    "case",
    ["graph_output", "large_weight", "float64"],
)
def test_convolutions_that_keep_eager_layout(case) -> None:
    """A convolution whose result is a graph output, whose weight is large
    (a copy would cost more than the layout saves) or that is not float32
    keeps the layout eager gives it."""
    dtype = torch.float64 if case == "float64" else torch.float32
    w_sizes = (160, 160, 3, 3) if case == "large_weight" else (6, 4, 3, 3)
    x = torch.randn(1, w_sizes[1], 6, 6, dtype=dtype)
    w = torch.randn(w_sizes, dtype=dtype)
    if case == "graph_output":
        fn = lambda x, w: F.conv2d(x, w, padding=1)  # noqa: E731
    else:
        fn = lambda x, w: torch.relu(F.conv2d(x, w, padding=1))  # noqa: E731
    report = rdyn.explain(fn, x, w)
    (layout_out,) = _library_layouts(report)
    assert layout_out[1] != _channels_last(layout_out[0])
    got = torch.compile(fn, backend="rdyn")(x, w)
    want = fn(x, w)
    assert got.stride() == want.stride()
    assert_same(got, want, fn(x.double(), w.double()))
