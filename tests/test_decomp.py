"""rdyn's own decompositions (`python/rdyn/_decomp.py`) against eager.

Max pooling is unrolled into strided slices of the padded input; values and
indices must match ATen's kernel exactly, ties, NaN and -inf included, for
every padding, stride, dilation and ceil_mode, and its gradient must too.
1x1 and patch-embedding convolutions become a matrix product (in the
lowering, `lowering/src/rules/conv.rs`); results and gradients are checked against
float64 eager. The gradients of 1x1 convolutions are GEMMs and those of
depthwise ones rdyn's own kernels (`python/rdyn/_decomp_conv.py`).

Ops rdyn lowers whole (layer norm, clamps and ReLU6, SiLU, transposes and
squeezes) reach it undecomposed: each decomposed op costs PyTorch's tracer
about 0.6 ms, so keeping them whole is most of what capture time rdyn can
save.
"""

from __future__ import annotations

import copy

import pytest
import torch

import rdyn
from helpers import assert_same, compile_aten, wgpu_available

aten = torch.ops.aten

CONFIGS = [
    # kernel, stride, padding, dilation, ceil_mode
    (3, 2, 1, 1, False),
    (2, 2, 0, 1, False),
    (3, 1, 1, 1, False),
    ((3, 2), (2, 1), (1, 0), 1, False),
    (3, 2, 1, 2, False),
    (3, 2, 0, 1, True),
    (3, 3, 1, 1, True),
    (2, 3, 1, 1, True),
]


def _input(shape, kind):
    g = torch.Generator().manual_seed(hash(kind) % 1000)
    if kind == "ties":
        # Few distinct values: the first maximum must be the one reported.
        return torch.randint(0, 3, shape, generator=g).float()
    x = torch.randn(shape, generator=g)
    if kind == "special":
        flat = x.view(-1)
        flat[::7] = float("nan")
        flat[3::11] = float("-inf")
        flat[5::13] = float("inf")
    if kind == "all_neg_inf":
        x.fill_(float("-inf"))
    return x


@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("kind", ["random", "ties", "special", "all_neg_inf"])
def test_max_pool2d_with_indices_matches_eager(config, kind) -> None:
    k, s, p, d, ceil = config
    x = _input((2, 3, 11, 10), kind)

    def fn(x):
        return aten.max_pool2d_with_indices(x, k, s, p, d, ceil)

    values, indices = compile_aten(fn, [x])(x)
    want_values, want_indices = fn(x)
    torch.testing.assert_close(values, want_values, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(indices, want_indices)


def test_max_pool2d_unbatched_and_half() -> None:
    for x in (torch.randn(4, 9, 9), torch.randn(1, 2, 9, 9).half()):
        fn = lambda x: aten.max_pool2d_with_indices(x, 3, 2, 1)  # noqa: E731
        values, indices = compile_aten(fn, [x])(x)
        want_values, want_indices = fn(x)
        torch.testing.assert_close(values, want_values, rtol=0, atol=0)
        assert torch.equal(indices, want_indices)


def test_max_pool2d_is_one_pointwise_kernel_without_gathers() -> None:
    pool = torch.nn.MaxPool2d(3, 2, 1)
    report = rdyn.explain(lambda x: pool(torch.relu(x)), torch.randn(1, 8, 16, 16))
    assert report.fallback_ops == {}
    source = "\n".join(k.source for k in report.kernels)
    # No window gather (a division of the reduction index) is left.
    assert " max over " not in source
    assert "//" not in source


def test_max_pool2d_training_gradient() -> None:
    pool = torch.nn.MaxPool2d(3, 2, 1)
    x = torch.randn(2, 4, 12, 12, dtype=torch.float64)
    x1 = x.clone().requires_grad_()
    x2 = x.clone().requires_grad_()
    compiled = torch.compile(lambda t: (pool(t) ** 2).sum(), backend="rdyn")
    compiled(x1).backward()
    (pool(x2) ** 2).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 1)])
def test_addbmm_is_one_matrix_product(beta, alpha) -> None:
    """``addbmm`` as one GEMM over the batches side by side, against
    float64 eager; with beta = 0 a NaN in ``self`` is ignored, as ATen
    does. No eager node."""
    g = torch.Generator().manual_seed(3)
    s, b1, b2 = torch.randn(5, 7, generator=g), torch.randn(4, 5, 6, generator=g), torch.randn(4, 6, 7, generator=g)
    s[1, 2] = float("nan") if beta == 0 else s[1, 2]
    fn = lambda s, b1, b2: torch.addbmm(s, b1, b2, beta=beta, alpha=alpha)  # noqa: E731
    got = torch.compile(fn, backend="rdyn")(s, b1, b2)
    want = fn(s.double(), b1.double(), b2.double())
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 2.0, 3.0, float("inf")])
def test_cdist_from_differences(p) -> None:
    """``torch.cdist`` from coordinate differences for every p, against
    float64 eager's direct (non-GEMM) computation: a point's distance to
    itself is exactly 0 (ATen's GEMM form for p = 2 left the square root of
    its rounding error, 2e-4, found by fuzz seed 33648), batch dims
    broadcast, and the gradients of both inputs match eager, zero distances
    and zero coordinate differences included. No eager node."""
    g = torch.Generator().manual_seed(6)
    a = torch.randn(31, 32, generator=g)
    fn = lambda a: torch.cdist(a, a[:3], p=p)  # noqa: E731
    got = torch.compile(fn, backend="rdyn")(a)
    want = torch.cdist(a.double(), a[:3].double(), p=p, compute_mode="donot_use_mm_for_euclid_dist")
    torch.testing.assert_close(got.double(), want, rtol=2e-6, atol=1e-6)
    assert torch.equal(got[:3, :3].diagonal(), torch.zeros(3))
    x = torch.randn(2, 5, 4, dtype=torch.float64, generator=g)
    y = torch.randn(1, 6, 4, dtype=torch.float64, generator=g)
    y[0, 0] = x[0, 0]  # a zero distance
    y[0, 1, 0] = x[1, 1, 0]  # a zero coordinate difference
    mine = [x.clone().requires_grad_(), y.clone().requires_grad_()]
    ref = [x.clone().requires_grad_(), y.clone().requires_grad_()]
    loss = lambda a, b: (torch.cdist(a, b, p=p) ** 2).sum()  # noqa: E731
    torch.compile(loss, backend="rdyn")(*mine).backward()
    loss(*ref).backward()
    for m, r in zip(mine, ref):
        torch.testing.assert_close(m.grad, r.grad)
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]


@pytest.mark.parametrize("device", ["cpu", "cuda-sim"])
def test_masked_scatter_takes_source_in_order(device) -> None:
    """``masked_scatter`` by a cumulative count of the mask: a broadcast
    mask over a transposed input, as eager; a source shorter than the
    selection is an IndexError (ATen raises too), never silent values; an
    empty source with nothing selected returns the input. No eager node."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(5, 4, generator=g).t()
    m = torch.rand(1, 5, generator=g) > 0.4
    fn = lambda x, m, s: torch.masked_scatter(x, m, s)  # noqa: E731
    compiled = torch.compile(fn, backend="rdyn", options={"device": device})
    s = torch.randn(25, generator=g)
    got, want = compiled(x, m, s), fn(x, m, s)
    assert torch.equal(got, want) and got.stride() == want.stride()
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]
    with pytest.raises(IndexError):
        compiled(x, m, torch.randn(int(m.expand_as(x).sum()) - 1))
    torch._dynamo.reset()
    empty = torch.compile(fn, backend="rdyn", options={"device": device})
    assert torch.equal(empty(x, torch.zeros_like(m), torch.randn(0)), x)


POOL3D = [
    ((2, 3, 7, 10, 9), (3, 4, 5)),  # windows of unequal lengths
    ((3, 6, 6, 6), (2, 3, 6)),  # unbatched, one dim unchanged
    ((1, 2, 4, 4, 4), (1, 1, 1)),  # global
    ((2, 2, 5, 6, 7), (8, 9, 10)),  # larger than the input: windows repeat
]


@pytest.mark.parametrize("shape,out", POOL3D, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last_3d"])
def test_adaptive_avg_pool3d_as_matrix_products(shape, out, layout) -> None:
    """3-D adaptive average pooling as one averaging matrix product per dim:
    values within float32 rounding of eager, eager's layouts (a contiguous
    result even for a channels-last input; the gradient in the input's),
    the gradient against float64 eager, and no eager node."""
    g = torch.Generator().manual_seed(8)
    x = torch.randn(*shape, generator=g)
    if layout == "channels_last_3d" and x.dim() == 5:
        x = x.contiguous(memory_format=torch.channels_last_3d)
    fn = lambda t: torch.nn.functional.adaptive_avg_pool3d(t, out)  # noqa: E731
    got, want = torch.compile(fn, backend="rdyn")(x), fn(x)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert got.stride() == want.stride()
    x1, x2 = x.double().requires_grad_(), x.double().requires_grad_()
    loss = lambda t: (fn(t) ** 2).sum()  # noqa: E731
    torch.compile(loss, backend="rdyn")(x1).backward()
    loss(x2).backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    assert x1.grad.stride() == x2.grad.stride()
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]


AVG_POOLS = [
    # kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    (2, 2, 0, False, True, None),
    (3, 2, 1, False, True, None),
    (3, 2, 1, True, False, None),
    ((3, 2), (1, 2), (1, 0), True, True, None),
    (4, 3, 2, True, False, 5),
    (3, 1, 0, False, True, None),
]


@pytest.mark.parametrize("config", AVG_POOLS, ids=str)
@pytest.mark.parametrize("device", ["cpu", "cuda-sim", "wgpu"])
def test_avg_pool_gradient_lowers(config, device) -> None:
    """``avg_pool2d_backward`` (DenseNet's transitions in training) is a
    reduction over the windows covering each input element: every padding,
    ceil mode, count and divisor as ATen computes them, against float64
    eager (float32 on wgpu), the input's layout (channels-last too), no
    eager node. It used to run eagerly."""
    if device == "wgpu" and not wgpu_available():
        pytest.skip("no wgpu adapter")
    kernel, stride, padding, ceil_mode, count_include_pad, divisor = config
    dtype = torch.float32 if device == "wgpu" else torch.float64
    g = torch.Generator().manual_seed(3)
    for x in (torch.randn(2, 3, 9, 8, generator=g), torch.randn(2, 5, 7, 7, generator=g).to(memory_format=torch.channels_last)):
        x = x.to(dtype)
        y = torch.nn.functional.avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor)
        grad = torch.randn(y.shape, generator=g, dtype=dtype)
        pair = lambda v: [v, v] if isinstance(v, int) else list(v)  # noqa: E731
        args = (pair(kernel), pair(stride), pair(padding), ceil_mode, count_include_pad, divisor)
        fn = lambda gr, t: aten.avg_pool2d_backward(gr, t, *args)  # noqa: E731
        torch._dynamo.reset()
        got, want = torch.compile(fn, backend="rdyn", options={"device": device})(grad, x), fn(grad, x)
        assert_same(got, want, fn(grad.double(), x.double()), what=f"gradient of {config}")
        assert got.stride() == want.stride()
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]


def test_avg_pool3d_gradient_and_adaptive_pool2d_gradient_lower() -> None:
    """``avg_pool3d_backward`` lowers as the 2-D one does; 2-D adaptive
    pooling's gradient (GoogLeNet's global pool in training) is average
    pooling's gradient where the windows tile the input, else the
    transposed averaging products: all against float64 eager, no eager node."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 5, 7, 6, generator=g, dtype=torch.float64)
    grad = torch.randn(2, 3, 6, 4, 3, generator=g, dtype=torch.float64)
    fn = lambda gr, t: aten.avg_pool3d_backward(gr, t, [2, 3, 2], [1, 2, 2], [1, 1, 0], True, False, None)  # noqa: E731
    torch.testing.assert_close(torch.compile(fn, backend="rdyn")(grad, x), fn(grad, x))
    for shape, out in (((2, 16, 7, 7), (1, 1)), ((2, 3, 8, 6), (4, 3)), ((2, 3, 7, 9), (3, 4))):
        pool = torch.nn.AdaptiveAvgPool2d(out)
        x = torch.randn(*shape, generator=g, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        loss = lambda t: (pool(t * 2) ** 2).sum()  # noqa: E731
        torch._dynamo.reset()
        torch.compile(loss, backend="rdyn")(x1).backward()
        loss(x2).backward()
        torch.testing.assert_close(x1.grad, x2.grad)
        assert x1.grad.stride() == x2.grad.stride()
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]


@pytest.mark.parametrize(
    "size,stride,offset",
    [((2, 3), (1, 2), 0), ((3,), (4,), 1), ((2, 2), (5, 1), 2), ((4, 2), (2, 1), None), ((4, 1, 3), (3, 9, 1), 0)],
    ids=str,
)
def test_as_strided_scatter_into_contiguous(size, stride, offset) -> None:
    """``as_strided_scatter`` into a contiguous tensor (what the gradients
    of views build) as an ``index_put`` at the view's storage positions,
    or the source itself where the view covers the tensor in order (the
    last case), against eager, with no eager node; a transposed tensor
    keeps the op."""
    g = torch.Generator().manual_seed(9)
    x, src = torch.randn(3, 4, generator=g), torch.randn(size, generator=g)
    fn = lambda x, s: torch.as_strided_scatter(x, s, size, stride, offset)  # noqa: E731
    assert torch.equal(torch.compile(fn, backend="rdyn")(x, src), fn(x, src))
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]
    torch._dynamo.reset()
    t = torch.randn(4, 3, generator=g).t()
    assert torch.equal(torch.compile(fn, backend="rdyn")(t, src), fn(t, src))


CONVS = [
    # name, (batch, in, out, size), Conv2d keyword arguments
    ("pointwise", (1, 24, 40, 5), dict(kernel_size=1)),
    ("pointwise_batched_bias", (3, 16, 8, 6), dict(kernel_size=1, bias=True)),
    ("pointwise_one_pixel", (1, 96, 12, 1), dict(kernel_size=1, bias=True)),
    ("patches", (1, 3, 16, 8), dict(kernel_size=4, stride=4, bias=True)),
    ("patches_batched_rectangular", (3, 2, 5, 12), dict(kernel_size=(3, 2), stride=(3, 2))),
    ("patches_vit", (2, 3, 24, 32), dict(kernel_size=16, stride=16, bias=True)),
]


@pytest.mark.parametrize("name,shape,kwargs", CONVS, ids=[c[0] for c in CONVS])
def test_convolution_decompositions_match_eager(name, shape, kwargs) -> None:
    n, cin, cout, size = shape
    kwargs.setdefault("bias", False)
    torch.manual_seed(0)
    conv64 = torch.nn.Conv2d(cin, cout, **kwargs).double()
    conv = torch.nn.Conv2d(cin, cout, **kwargs)
    conv.load_state_dict({k: v.float() for k, v in conv64.state_dict().items()})
    x64 = torch.randn(n, cin, size, size, dtype=torch.float64, requires_grad=True)
    x = x64.detach().float().requires_grad_()

    rdyn.reset_stats()
    out = torch.compile(conv, backend="rdyn")(x)
    assert rdyn.stats()["fallback_ops"] == {}
    want = conv(x.detach())
    assert out.stride() == want.stride()
    assert_same(out, want, conv64(x64))

    out.square().sum().backward()
    conv64(x64).square().sum().backward()
    assert_same(x.grad, x64.grad.float(), x64.grad)
    assert_same(conv.weight.grad, conv64.weight.grad.float(), conv64.weight.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "transposed"])
@pytest.mark.parametrize("kernel", [1, 4])
def test_convolution_gemm_layouts_and_dtypes(kernel, layout, dtype) -> None:
    """The GEMM form reads any input layout through views, and half
    precision multiplies in float32 as ATen does."""
    g = torch.Generator().manual_seed(1)
    x64 = torch.randn(2, 6, 8, 12, generator=g, dtype=torch.float64)
    if layout == "channels_last":
        x64 = x64.contiguous(memory_format=torch.channels_last)
    elif layout == "transposed":
        x64 = x64.transpose(2, 3).contiguous().transpose(2, 3)
    w64 = torch.randn(10, 6, kernel, kernel, generator=g, dtype=torch.float64)
    b64 = torch.randn(10, generator=g, dtype=torch.float64)
    fn = lambda x, w, b: torch.nn.functional.conv2d(x, w, b, stride=kernel)  # noqa: E731
    args = [t.to(dtype) for t in (x64, w64, b64)]
    report = rdyn.explain(fn, *args)
    assert report.fallback_ops == {}
    assert any(k.name.startswith("gemm") for k in report.kernels)
    assert_same(torch.compile(fn, backend="rdyn")(*args), fn(*args), fn(x64, w64, b64))


def test_composites_reach_rdyn_whole() -> None:
    """Layer norm, clamps, ReLU6, transposes and squeezes are single nodes
    of the graph rdyn imports, and match float64 eager; clamps keep the sign
    of zero and NaN exactly as ATen's kernel does."""
    ln = torch.nn.functional.layer_norm

    def fn(x, w, b, lo):
        y = ln(x, (x.shape[-1],), w, b).transpose(0, 1)[2].t()
        clamps = (
            torch.nn.functional.relu6(x),
            torch.nn.functional.hardtanh(x, -0.5, 0.25),
            x.clamp(min=lo),
            x.clamp(max=0.3),
            x.unsqueeze(0).squeeze(0).clamp(-0.1, 0.2),
        )
        return (y, torch.nn.functional.silu(x), *clamps)

    g = torch.Generator().manual_seed(2)
    x64 = torch.randn(5, 7, 16, generator=g, dtype=torch.float64)
    x64[0, 0, :4] = torch.tensor([0.0, -0.0, float("nan"), -float("inf")], dtype=torch.float64)
    w64, b64, lo64 = (torch.randn(16, generator=g, dtype=torch.float64) for _ in range(3))
    args = [t.float() for t in (x64, w64, b64, lo64)]
    report = rdyn.explain(fn, *args)
    graph = "\n".join(report.graphs)
    for op in ("native_layer_norm", "hardtanh", "silu", "clamp.default", "clamp.Tensor", "transpose.int", "t.default", "squeeze"):
        assert f"aten.{op}" in graph, op
    assert "var_mean" not in graph and "where" not in graph
    assert report.fallback_ops == {}
    got = torch.compile(fn, backend="rdyn")(*args)
    assert_same(got, fn(*args), fn(x64, w64, b64, lo64))
    for a, e in zip(got[2:], fn(*args)[2:]):
        nan = e.isnan()
        assert torch.equal(a.isnan(), nan)
        assert torch.equal(a[~nan], e[~nan]) and torch.equal(torch.signbit(a[~nan]), torch.signbit(e[~nan]))


def test_pointwise_convolution_is_a_gemm() -> None:
    conv = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 1), torch.nn.ReLU6())
    with torch.no_grad():  # the inference graph (a backward has its own convolution)
        report = rdyn.explain(conv, torch.randn(1, 16, 7, 7))
    assert report.fallback_ops == {}
    assert "convolution" not in "\n".join(k.source for k in report.kernels)
    assert any(k.name.startswith("gemm") for k in report.kernels)


def _conv_gradients_match(conv64, x64, layout):
    """One compiled training step of ``relu(conv(x))²`` in float32 against
    eager's and float64 eager's: the input's, the weight's and the bias's
    gradients, and the input gradient's strides. Returns the backward
    graph's kernels (from `rdyn.explain`). ``layout``: "contiguous",
    "channels_last", or "weight_channels_last" (an NCHW input, whose gradient
    ATen lays out channels-last then)."""
    cl, nchw = torch.channels_last, torch.contiguous_format
    conv64 = conv64.to(memory_format=nchw if layout == "contiguous" else cl)
    conv, eager = (copy.deepcopy(conv64).float() for _ in range(2))
    x64 = x64.contiguous(memory_format=cl if layout == "channels_last" else nchw).requires_grad_()
    x, xe = (x64.detach().float().requires_grad_() for _ in range(2))
    report = rdyn.explain(lambda x: torch.relu(conv(x)), x)
    assert report.fallback_ops == {}
    loss = lambda c, x: torch.relu(c(x)).square().sum()  # noqa: E731
    loss(torch.compile(conv, backend="rdyn"), x).backward()
    loss(eager, xe).backward()
    loss(conv64, x64).backward()
    assert x.grad.stride() == xe.grad.stride()
    assert_same(x.grad, xe.grad, x64.grad, what="input gradient")
    for name, p64 in conv64.named_parameters():
        got, want = conv.get_parameter(name).grad, eager.get_parameter(name).grad
        assert got.stride() == want.stride(), name
        assert_same(got, want, p64.grad, what=f"{name} gradient")
    return [k for k in report.kernels if k.name.startswith("g1.")]


POINTWISE_BACKWARDS = [
    # batch, in, out, size, per-image temporary limit: one image; per image
    # then summed; over copies (a large weight beside few pixels, over the
    # limit).
    (1, 24, 40, 5, None),
    (3, 16, 8, 9, None),
    (2, 64, 48, 2, 0),
]


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "weight_channels_last"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", POINTWISE_BACKWARDS, ids=str)
def test_pointwise_convolution_gradients_are_gemms(shape, bias, layout, monkeypatch) -> None:
    """A 1x1 convolution's backward is GEMMs (and a sum for the bias), not
    ATen's ``convolution_backward`` (`_decomp_conv.py`), in any layout."""
    n, cin, cout, size, limit = shape
    if limit is not None:
        monkeypatch.setattr(rdyn._decomp_conv, "PER_IMAGE_MAX", limit)
    torch.manual_seed(0)
    conv64 = torch.nn.Conv2d(cin, cout, 1, bias=bias).double()
    backward = _conv_gradients_match(conv64, torch.randn(n, cin, size, size + 1, dtype=torch.float64), layout)
    assert not any("convolution" in k.source for k in backward)
    assert any(k.name.startswith("g1.gemm") for k in backward)


PATCHWISE_BACKWARDS = [
    # batch, in, out, input size, kernel = stride: ConvNeXt's 2x2 downsampling;
    # a ViT-style 4x4 stem whose stride leaves pixels out; a 2x3 patch.
    (2, 8, 16, (12, 12), (2, 2)),
    (1, 3, 12, (18, 17), (4, 4)),
    (3, 5, 7, (9, 10), (2, 3)),
]


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "weight_channels_last"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", PATCHWISE_BACKWARDS, ids=str)
def test_patchwise_convolution_gradients_are_gemms(shape, bias, layout) -> None:
    """A convolution whose kernel is its stride (no padding, no dilation, one
    group) has GEMMs over its patches for a backward, not ATen's
    ``convolution_backward``; pixels its stride leaves out get zeros."""
    n, cin, cout, (h, w), k = shape
    torch.manual_seed(2)
    conv64 = torch.nn.Conv2d(cin, cout, k, stride=k, bias=bias).double()
    backward = _conv_gradients_match(conv64, torch.randn(n, cin, h, w, dtype=torch.float64), layout)
    assert not any("convolution" in k.source for k in backward)
    assert any(k.name.startswith("g1.gemm") for k in backward)


DEPTHWISE_BACKWARDS = [
    # channels, size, kernel, stride, padding, dilation
    (16, 6, 3, 1, 1, 1),
    (12, 9, 3, 2, 1, 1),
    (8, 10, 3, 3, 1, 1),
    (8, 11, 4, 2, 1, 1),
    (6, 9, 3, 2, 1, 2),
    (10, 14, 7, 1, 3, 1),
    (5, 7, 5, 1, 2, 1),
]


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "weight_channels_last"])
@pytest.mark.parametrize("geometry", DEPTHWISE_BACKWARDS, ids=str)
def test_depthwise_convolution_gradients_run_rdyns_kernels(geometry, layout) -> None:
    """A depthwise convolution's input gradient is rdyn's depthwise kernel
    (over the spread gradient, the flipped filter) and its weight gradient
    rdyn's own kernel, for strides 1-3, dilation, odd and even kernels."""
    c, size, k, stride, padding, dilation = geometry
    torch.manual_seed(1)
    conv64 = torch.nn.Conv2d(c, c, k, stride=stride, padding=padding, dilation=dilation, groups=c).double()
    backward = _conv_gradients_match(conv64, torch.randn(2, c, size, size + 1, dtype=torch.float64), layout)
    names = [k.name for k in backward]
    assert "g1.depthwise_weight_grad" in names and "g1.depthwise_conv2d" in names
    assert not any("convolution_backward" in k.source for k in backward)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_nearest_upsampling_needs_no_float64(mode) -> None:
    """PyTorch's decomposition computes nearest upsampling's source index
    as `arange(n).to(float64) * 1.0 + 0.0` rounded to float32; rdyn drops
    the identities and the float64 detour (an index is exact in either),
    so the kernel is float32 only and runs on GPUs without float64 (wgpu).
    The result is eager's, bit for bit."""
    x = torch.randn(2, 3, 5, 7)

    def fn(t):
        return torch.nn.functional.interpolate(t, scale_factor=1.7, mode=mode)

    kernels = [k for k in rdyn.explain(fn, x).kernels if k.name.startswith("k")]
    assert kernels and not any("F64" in k.source for k in kernels), [k.source for k in kernels]
    (got,) = compile_aten(fn, [x])(x)
    assert torch.equal(got, fn(x))


@pytest.mark.parametrize(
    "kwargs", [dict(scale_factor=2.0), dict(scale_factor=3.0), dict(scale_factor=1.5), dict(size=(13, 9))], ids=str
)
def test_nearest_upsampling_reads_its_source_as_a_view(kwargs) -> None:
    """Nearest upsampling's source index `trunc(float(i) * c)` is the index
    `(p * i) // q` wherever that gives the same value for every `i` of the
    kernel (checked one by one): the kernel reads a view of its source, no
    bounds-checked gather, and for an integer factor no division either
    (the split makes rows of `factor` lanes). A 2x upsampling of
    `[2, 64, 32, 32]` took 2.4 ms (eager 1.2), now 0.22. Eager's values bit
    for bit."""
    x = torch.randn(2, 3, 9, 7, generator=torch.Generator().manual_seed(12))

    def fn(t):
        return torch.nn.functional.interpolate(t, mode="nearest", **kwargs) * 2

    kernels = [k for k in rdyn.explain(fn, x).kernels if k.name.startswith("k")]
    source = "\n".join(k.source for k in kernels)
    assert len(kernels) == 1 and "bounded" not in source, source
    if "scale_factor" in kwargs and kwargs["scale_factor"] == int(kwargs["scale_factor"]):
        assert "//" not in source and "jit" in source, source
    (got,) = compile_aten(fn, [x])(x)
    assert torch.equal(got, fn(x))


def test_adding_zero_keeps_the_sign_of_zero() -> None:
    """`x + 0.0` is `x` only where `x` cannot be -0.0 (-0.0 + 0.0 is +0.0);
    `x * 1.0` and `x + -0.0` are always `x`."""
    x = torch.tensor([-0.0, 0.0, -1.5, float("inf"), float("nan")])

    def fn(t):
        return t * 1.0 + 0.0, t + -0.0, t * 1.0

    for got, want in zip(compile_aten(fn, [x])(x), fn(x)):
        assert torch.equal(got.signbit(), want.signbit()) and torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got[~want.isnan()], want[~want.isnan()])


@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_weight_norm_gradients_lower(dim, dtype) -> None:
    """A weight-normed convolution's training step (wav2vec2's positional
    convolution): ``_weight_norm_interface_backward`` lowers instead of
    running eagerly, and the gradients of ``v`` and ``g`` match float64
    eager, with ``dim`` the first or the last dim and half-precision weights
    (whose norms ATen keeps in float32)."""
    from torch.nn.utils.parametrizations import weight_norm

    def build(dt):
        torch.manual_seed(0)
        return weight_norm(torch.nn.Conv1d(8, 6, 3, padding=1), dim=dim).to(dt)

    def step(module, x):
        module.zero_grad()
        (module(x) * torch.linspace(-1, 1, x.shape[-1], dtype=x.dtype)).sum().backward()
        p = module.parametrizations.weight
        return p.original0.grad, p.original1.grad, module.bias.grad

    x64 = torch.randn(2, 8, 11, dtype=torch.float64)
    eager, reference = build(dtype), build(torch.float64)
    compiled_module = build(dtype)
    rdyn.reset_stats()
    got = step(torch.compile(compiled_module, backend="rdyn"), x64.to(dtype))
    assert rdyn.stats()["fallback_ops"] == {}
    assert_same(got, step(eager, x64.to(dtype)), step(reference, x64), what="weight-norm gradients")
