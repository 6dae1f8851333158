"""rdyn's own decompositions (`python/rdyn/_decomp.py`) against eager.

Max pooling is unrolled into strided slices of the padded input; values and
indices must match ATen's kernel exactly, ties, NaN and -inf included, for
every padding, stride, dilation and ceil_mode, and its gradient must too.
1x1 and patch-embedding convolutions become a matrix product; results and
gradients are checked against float64 eager.
"""

from __future__ import annotations

import pytest
import torch

import rdyn
from helpers import assert_same, compile_aten

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


CONVS = [
    # name, (batch, in, out, size), Conv2d keyword arguments
    ("pointwise", (1, 24, 40, 5), dict(kernel_size=1)),
    ("pointwise_batched_bias", (3, 16, 8, 6), dict(kernel_size=1, bias=True)),
    ("pointwise_one_pixel", (1, 96, 12, 1), dict(kernel_size=1, bias=True)),
    ("patches", (1, 3, 16, 8), dict(kernel_size=4, stride=4, bias=True)),
    ("patches_batched_rectangular", (3, 2, 5, 12), dict(kernel_size=(3, 2), stride=(3, 2))),
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


def test_pointwise_convolution_is_a_gemm() -> None:
    conv = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 1), torch.nn.ReLU6())
    report = rdyn.explain(conv, torch.randn(1, 16, 7, 7))
    assert report.fallback_ops == {}
    assert "convolution" not in "\n".join(k.source for k in report.kernels)
    assert any(k.name.startswith("gemm") for k in report.kernels)
