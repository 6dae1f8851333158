"""Memory layouts: what rdyn writes is written in storage order, and a
channels-last model stays channels-last.

A kernel that stores a channels-last (or any permuted) tensor walks it in
memory order, so reading and writing a channels-last tensor are both
contiguous; library convolutions read and return tensors in eager's
layouts. Each case is compared with eager and a float64 reference, values
and output strides, and gradients in training.
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
]


def _conv_args(x_sizes, w_sizes, bias, layout, seed=1):
    g = torch.Generator().manual_seed(seed)
    x64 = torch.randn(x_sizes, generator=g, dtype=torch.float64)
    w64 = torch.randn(w_sizes, generator=g, dtype=torch.float64)
    if layout == "channels_last":
        x64 = x64.contiguous(memory_format=torch.channels_last)
        w64 = w64.contiguous(memory_format=torch.channels_last)
    b64 = torch.randn(w_sizes[0], generator=g, dtype=torch.float64) if bias else None
    s64 = torch.randn(x_sizes[1], generator=g, dtype=torch.float64)
    return x64, w64, b64, s64


@pytest.mark.parametrize("source", ["input", "computed"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("name,x_sizes,w_sizes,kwargs,bias", CONVS, ids=[c[0] for c in CONVS])
def test_library_convolution_keeps_eager_layout(name, x_sizes, w_sizes, kwargs, bias, layout, source) -> None:
    """The convolution reads a graph input as given, or an input rdyn
    computes (written in storage order in eager's layout), and its result
    has eager's layout; so does the output after it, with eager's values."""

    def fn(x, w, b, s):
        if source == "computed":
            x = torch.relu(x * s[None, :, None, None])
        return torch.relu(F.conv2d(x, w, b, **kwargs) + 0.5)

    x64, w64, b64, s64 = _conv_args(x_sizes, w_sizes, bias, layout)
    args = [t.float() if t is not None else None for t in (x64, w64, b64, s64)]
    report = rdyn.explain(fn, *args)
    assert report.fallback_ops == {}
    (sizes, strides) = _library_layouts(report)[0]
    conv = F.conv2d(args[0], args[1], args[2], **kwargs)
    assert (sizes, strides) == (list(conv.shape), list(conv.stride()))
    if source == "computed":
        first = next(k for k in report.kernels if k.name.startswith("k"))
        store = re.search(r"store buf\d+\[(.*)\]", first.source).group(1)
        assert re.fullmatch(r"(.* \+ )?i\d+", store), first.source
    got = torch.compile(fn, backend="rdyn")(*args)
    want = fn(*args)
    assert got.stride() == want.stride()
    assert_same(got, want, fn(x64, w64, b64, s64))


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_convolutions_train_in_either_layout(layout) -> None:
    """conv, ReLU, conv, tanh: gradients of every parameter match float64
    eager, the model and input contiguous or channels-last."""
    torch.manual_seed(2)

    def net():
        return torch.nn.Sequential(
            torch.nn.Conv2d(4, 6, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(6, 3, 3, padding=1), torch.nn.Tanh()
        )

    net64, net32 = net().double(), net()
    net32.load_state_dict({k: v.float() for k, v in net64.state_dict().items()})
    x64 = torch.randn(2, 4, 7, 7, dtype=torch.float64)
    if layout == "channels_last":
        net64, net32 = (n.to(memory_format=torch.channels_last) for n in (net64, net32))
        x64 = x64.contiguous(memory_format=torch.channels_last)
    loss = torch.compile(lambda t: net32(t).square().sum(), backend="rdyn")(x64.float())
    loss.backward()
    net64(x64).square().sum().backward()
    for p, p64 in zip(net32.parameters(), net64.parameters()):
        assert_same(p.grad, p64.grad.float(), p64.grad)


def _stored(x):
    """A value rdyn stores (expensive, several users)."""
    return x.exp().sin().cos().tanh().exp()


_ALIAS_CASES = {
    "clone": lambda x: x.clone(),
    "contiguous_of_transpose": lambda x: x.t().contiguous(),
    "channels_last_copy": lambda x: x.view(1, 4, 6, 1).contiguous(memory_format=torch.channels_last),
    "copy_into_new": lambda x: torch.empty_like(x).copy_(x),
    "clone_beside_a_sum": lambda x: (x.clone(), x.sum()),
    "view": lambda x: x.view(24),
    "transpose": lambda x: x.t(),
    "detach": lambda x: x.detach(),
    "output_and_its_views": lambda x: (lambda y: (y, y.t()[1:], y.view(-1)))(x + 1),
    "views_of_one_intermediate": lambda x: (lambda y: (y.t(), y[0]))(x * 3),
    "stored_value_and_its_clone": lambda x: (lambda y: (y, y.clone(), y + 1))(_stored(x)),
    "clone_then_view_of_stored": lambda x: (lambda y: (y.clone(), y.t(), y + 1))(_stored(x)),
    "product_and_its_clone": lambda x: (lambda y: (y, y.clone()))(x @ x.t()),
    "views_of_a_product": lambda x: (lambda y: (y.t(), y.view(-1)))(x @ x.t()),
}


def _sharing(outputs, x):
    """Per output: which outputs (and whether the input) share its storage."""
    ptr = lambda t: t.untyped_storage().data_ptr()  # noqa: E731
    return [([j for j, u in enumerate(outputs) if ptr(u) == ptr(o)], ptr(o) == ptr(x)) for o in outputs]


@pytest.mark.parametrize("name", list(_ALIAS_CASES))
def test_outputs_share_storage_exactly_where_eager_does(name) -> None:
    """Outputs share storage with the input and with each other exactly as
    eager's do: a copy (clone, contiguous, copy_) comes back as a new
    tensor with eager's strides, so writing to it changes nothing else; a
    view comes back as a view, of the input or of the output it views."""
    fn = _ALIAS_CASES[name]
    torch._dynamo.reset()
    x = torch.randn(4, 6)
    before = x.clone()
    got, want = torch.compile(fn, backend="rdyn")(x), fn(x)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert [t.stride() for t in got] == [t.stride() for t in want]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert _sharing(got, x) == _sharing(want, x)
    for k, (shared, with_input) in enumerate(_sharing(want, x)):
        if shared == [k] and not with_input:
            others = [t.clone() for t in got]
            got[k].add_(1)
            assert torch.equal(x, before), f"writing to output {k} changed the input"
            assert all(torch.equal(t, o) for j, (t, o) in enumerate(zip(got, others)) if j != k)


def _conv_bn_block(channels: int) -> torch.nn.Module:
    """conv, batch norm, ReLU, conv, batch norm, residual add, ReLU, with
    non-trivial running statistics."""

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            self.bn1 = torch.nn.BatchNorm2d(channels)
            self.conv2 = torch.nn.Conv2d(channels, channels, 3, padding=1)
            self.bn2 = torch.nn.BatchNorm2d(channels)

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(x + self.bn2(self.conv2(y)))

    block = Block()
    with torch.no_grad():
        for bn in (block.bn1, block.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 1.5)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
    return block


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_small_weight_convolutions_run_channels_last(train) -> None:
    """A 3x3 convolution whose weight is small beside its NCHW input runs
    channels-last (its input and weight copied so, its result read so by
    the batch norm and the residual add); the output is NCHW like eager's,
    with float64 eager's values, and in training so are the gradients."""
    torch.manual_seed(3)
    block64 = _conv_bn_block(16).double()
    block32 = _conv_bn_block(16)
    block32.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in block64.state_dict().items()})
    block64.train(train)
    block32.train(train)
    x64 = torch.randn(2, 16, 24, 24, dtype=torch.float64)
    x32 = x64.float()
    if not train:
        with torch.no_grad():
            report = rdyn.explain(block32, x32)
        layouts = _library_layouts(report)
        assert layouts and all(strides[1] == 1 for _, strides in layouts), layouts
        assert report.fallback_ops == {}
        with torch.no_grad():
            got = torch.compile(block32, backend="rdyn")(x32)
            want = block32(x32)
            assert got.stride() == want.stride()
            assert_same(got, want, block64(x64))
        return
    loss = torch.compile(lambda t: block32(t).square().mean(), backend="rdyn")(x32)
    loss.backward()
    block64(x64).square().mean().backward()
    for (name, p), p64 in zip(block32.named_parameters(), block64.parameters()):
        assert_same(p.grad, p64.grad.float(), p64.grad, what=name)


@pytest.mark.parametrize("on", [True, False], ids=["chosen", "eager_layout"])
def test_saved_activations_keep_the_convolution_layout(on, monkeypatch) -> None:
    """In training, the activations the forward saves for the backward are
    laid out as rdyn computes them (a channels-last convolution's result
    and input stay channels-last; the strides are reported to
    AOTAutograd), and the backward's convolutions run channels-last on
    them; `RDYN_CONV_LAYOUT=0` keeps eager's layouts. Gradients match
    float64 eager's either way."""
    if not on:
        monkeypatch.setenv("RDYN_CONV_LAYOUT", "0")
    reported = []
    report_strides = rdyn.backend._report_strides
    monkeypatch.setattr(rdyn.backend, "_report_strides", lambda s: reported.extend(s) or report_strides(s))
    torch.manual_seed(4)
    block64 = _conv_bn_block(16).double()
    block32 = _conv_bn_block(16)
    block32.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in block64.state_dict().items()})
    x64 = torch.randn(2, 16, 24, 24, dtype=torch.float64)
    torch._dynamo.reset()
    loss = torch.compile(lambda t: block32(t).square().mean(), backend="rdyn")(x64.float())
    loss.backward()
    block64(x64).square().mean().backward()
    for (name, p), p64 in zip(block32.named_parameters(), block64.parameters()):
        assert_same(p.grad, p64.grad.float(), p64.grad, what=name)
    channels_last = [s for s in reported if s is not None and len(s) == 4 and s[1] == 1 and s[3] != 1]
    assert bool(channels_last) == on, reported
    report = rdyn.explain(block32, x64.float())
    calls = [k for k in report.kernels if k.name.endswith("library")]
    backward = [lay for k, lay in zip(calls, _library_layouts(report)) if "convolution_backward" in k.source]
    assert backward and all((strides[1] == 1) == on for sizes, strides in backward if len(sizes) == 4), backward


@pytest.mark.parametrize(
    "src,dst", [(torch.float32, torch.int32), (torch.int32, torch.float32), (torch.float16, torch.int16)]
)
def test_view_as_another_dtype_reinterprets_bits(src, dst) -> None:
    """`x.view(dtype)` is the same bits read as another type (it used to
    convert the values): the result and what is computed from it match
    eager bit for bit; the view itself runs as ATen's, counted."""

    def fn(x):
        v = x.view(dst)
        return v, v * 2 + 1

    x = torch.randn(4, 6).mul(100).to(src)
    torch._dynamo.reset()
    rdyn.reset_stats()
    got, want = torch.compile(fn, backend="rdyn")(x), fn(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
    assert got[0].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert rdyn.stats()["fallback_ops"].get("aten.view.dtype") == 1


def _stats(x):
    """Running mean and variance for a batch norm of ``x``."""
    return torch.zeros(x.shape[1], dtype=x.dtype), torch.ones(x.shape[1], dtype=x.dtype)


# Ops whose result eager lays out by its own rule, not by the input's: a
# decomposition into pointwise ops follows the input, so rdyn's gave a
# transposed softmax of a transposed input (found by tests/test_fuzz.py).
_LAID_OUT_BY_ATEN = {
    "softmax": lambda x: torch.softmax(x, -1),
    "softmax_dim0": lambda x: torch.softmax(x, 0),
    "repeat": lambda x: x.repeat(2, 1, 1),
    "index_select": lambda x: torch.index_select(x, 1, torch.tensor([2, 0, 1])),
    "roll": lambda x: torch.roll(x, (1, -2), (1, 2)),
    "roll_flat": lambda x: torch.roll(x, 3),
    "logsigmoid": lambda x: F.logsigmoid(x),
    "max_pool1d": lambda x: F.max_pool1d(x, 2),
    "max_pool2d": lambda x: F.max_pool2d(x.unsqueeze(0), 2),
    "adaptive_avg_pool1d": lambda x: F.adaptive_avg_pool1d(x, 3),
    "xlogy_mixed_layouts": lambda x: torch.xlogy(x.contiguous().abs(), x * x + 1),
    "xlog1py_mixed_layouts": lambda x: torch.special.xlog1py(x, x.contiguous().abs()),
    "batch_norm_training": lambda x: F.batch_norm(x, None, None, training=True),
    "batch_norm_running_stats": lambda x: F.batch_norm(x, *_stats(x), training=True),
    "batch_norm_inference": lambda x: F.batch_norm(x, *_stats(x)),
}


# max_pool1d of a transposed input: AOTAutograd's own metadata (ATen's meta
# kernel) differs from eager's result there, for every backend.
_LAYOUT_CASES = [(n, lay) for n in _LAID_OUT_BY_ATEN for lay in ("transposed", "permuted")]
_LAYOUT_CASES.remove(("max_pool1d", "transposed"))


@pytest.mark.parametrize("name,layout", _LAYOUT_CASES)
def test_results_laid_out_as_aten_lays_them_out(name, layout) -> None:
    """Softmax, repeat, index_select and logsigmoid are contiguous whatever the
    input; pooling, batch norm and roll follow the input's suggested memory
    format (a flattened roll is contiguous); xlogy and xlog1py the
    layout of their first operand: as eager's, values against a float64 reference.
    (Batch norm's fake kernel follows the input: rdyn takes eager's layout,
    not the metadata's.)"""
    fn = _LAID_OUT_BY_ATEN[name]
    g = torch.Generator().manual_seed(3)
    base = torch.randn(3, 5, 8, generator=g, dtype=torch.float64)
    x64 = base.transpose(1, 2) if layout == "transposed" else base.permute(2, 1, 0).contiguous().permute(2, 1, 0)
    x = x64.float()
    torch._dynamo.reset()
    got, want = torch.compile(fn, backend="rdyn")(x), fn(x)
    assert got.stride() == want.stride()
    assert_same(got, want, fn(x64))


def test_index_select_of_channels_last_is_contiguous() -> None:
    """ATen's index_select writes a contiguous result; its decomposition
    (an `index`) follows a channels-last input's layout (found by
    tests/test_fuzz.py, seed 15102)."""
    x = torch.randn(3, 3, 8, 13).contiguous(memory_format=torch.channels_last)
    fn = lambda x: torch.index_select(x, 2, torch.tensor([7, 6, 4])).asinh()  # noqa: E731
    torch._dynamo.reset()
    got, want = torch.compile(fn, backend="rdyn")(x), fn(x)
    assert got.stride() == want.stride()
    assert_same(got, want, fn(x.double()))


def test_logsigmoid_in_training_is_contiguous() -> None:
    """ATen's log_sigmoid_forward writes contiguous results; its
    decomposition followed a transposed input (found by tests/test_fuzz.py,
    seed 2719); the gradient against a float64 reference."""
    x64 = torch.randn(4, 13, 2, dtype=torch.float64).transpose(1, 2)
    fn = lambda x: F.logsigmoid(x) * 3  # noqa: E731
    torch._dynamo.reset()
    x, x_ref = x64.float().requires_grad_(), x64.clone().requires_grad_()
    got = torch.compile(fn, backend="rdyn")(x)
    want = fn(x64.float())
    assert got.stride() == want.stride()
    assert_same(got, want, fn(x64))
    got.sum().backward()
    fn(x_ref).sum().backward()
    assert_same(x.grad, x_ref.grad.float(), x_ref.grad)


@pytest.mark.parametrize(
    "sizes,dims",
    [((2, 3, 5, 7), (1, 3)), ((2, 3, 5, 7), ()), ((2, 3, 5, 7), (2,)), ((7, 4, 13, 1), (3,)), ((2, 3, 5, 7), (3,))],
    ids=["channels_and_width", "flat", "height", "size_1_width", "by_its_size"],
)
def test_roll_of_channels_last_keeps_aten_layout(sizes, dims) -> None:
    """ATen's roll keeps a channels-last input's layout when it rolls along
    dims, except where a dim rolls by a multiple of its size (one of the two
    slices it concatenates is empty), and is contiguous when it rolls the
    flattened tensor; the decomposition followed the input every time
    (found by tests/test_fuzz.py, seeds 12865 and 10379)."""
    x = torch.randn(sizes, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    shifts = tuple(range(1, len(dims) + 1)) if dims else 4
    if sizes[-1] == 7 and dims == (3,):
        shifts = (14,)
    fn = lambda x: torch.roll(x.sin(), shifts, dims) * 2  # noqa: E731
    torch._dynamo.reset()
    got, want = torch.compile(fn, backend="rdyn")(x.float()), fn(x.float())
    assert got.stride() == want.stride()
    assert_same(got, want, fn(x))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize(
    "name,fn",
    [
        ("unfold", lambda x: (x * 2).unfold(0, 2, 2)),
        ("unfold_of_transpose", lambda x: (x * 2).t().unfold(1, 3, 2)),
        ("as_strided", lambda x: torch.as_strided(x * 2, (3, 3), (1, 2), 1)),
        ("as_strided_of_slice", lambda x: torch.as_strided((x * 2)[1:], (3, 3), (1, 2))),
        ("as_strided_of_slice_at", lambda x: (lambda y: torch.as_strided(y, (3, 3), (1, 2), y.storage_offset() + 5))((x * 2)[1:])),
    ],
)
def test_strided_views_of_computed_values(name, fn, dynamic) -> None:
    """`as_strided` (and `unfold`, which decomposes to it) addresses the
    storage as eager lays its input out. For a computed value that eager
    holds transposed, rdyn used to store it row-major and read the view
    from that: every element of `(x * 2).unfold(0, 2, 2)` was wrong.
    With dynamic sizes the view of a computed value runs as ATen's (its
    reach cannot be checked), counted."""
    x64 = torch.randn(31, 16, dtype=torch.float64).t()
    x = x64.float()
    torch._dynamo.reset()
    rdyn.reset_stats()
    got, want = torch.compile(fn, backend="rdyn", dynamic=dynamic)(x), fn(x)
    assert got.stride() == want.stride()
    assert_same(got, want, fn(x64))
    fallbacks = rdyn.stats()["fallback_ops"]
    assert not fallbacks if not dynamic else set(fallbacks) <= {"aten.as_strided.default"}


def test_a_transposed_gemm_operand_is_a_view_of_its_copy() -> None:
    """A gathered value two GEMMs read, one as [tokens, dim] and the other
    transposed (as a linear layer's backward reads its output gradient for
    the input's and the weight's gradients), is copied once: the transposed
    operand is a strided view of that copy, which the GEMM reads as such
    (`lowering/src/passes/permuted.rs`)."""

    def f(x, w1, w2):
        tokens_major = x.transpose(1, 2).reshape(256, 64)
        transposed = x.permute(1, 3, 0, 2).reshape(64, 256)
        return tokens_major @ w1, transposed @ w2

    g = torch.Generator().manual_seed(3)
    args = (torch.randn(4, 2, 64, 32, generator=g), torch.randn(64, 48, generator=g), torch.randn(256, 40, generator=g))
    report = rdyn.explain(f, *args)
    assert [k.name for k in report.kernels] == ["k0", "gemm", "gemm"], report
    torch._dynamo.reset()
    got = torch.compile(f, backend="rdyn")(*args)
    assert_same(got, f(*args), f(*(a.double() for a in args)))
