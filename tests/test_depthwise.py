"""Depthwise convolutions (one filter per channel) run rdyn's own CPU kernel.

Every configuration is checked against eager and a float64 reference:
strides, padding, dilation, rectangular kernels, bias, channels-last inputs
and float64; its gradient (ATen's convolution_backward) too. The report
must show the kernel and no fallback; a grouped convolution that is not
depthwise stays a library call.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import rdyn
from helpers import assert_same

CONFIGS = [
    # name, (n, c, h, w), kernel, stride, padding, dilation, bias
    ("mobilenet_3x3", (1, 24, 14, 14), 3, 1, 1, 1, True),
    ("stride2", (2, 16, 15, 12), 3, 2, 1, 1, False),
    ("efficientnet_5x5", (1, 40, 9, 9), 5, 2, 2, 1, True),
    ("tiny_planes", (1, 64, 3, 3), 5, 1, 2, 1, False),
    ("wide_rows", (1, 4, 5, 37), 3, 1, 1, 1, True),
    ("rectangular", (2, 6, 10, 11), (3, 2), (1, 2), (0, 1), (2, 1), True),
    ("no_padding", (1, 8, 7, 7), 3, 1, 0, 1, False),
    ("one_by_one", (1, 8, 5, 5), 1, 1, 0, 1, True),
]


def _kernels(fn, *inputs) -> list[str]:
    """The kernels of the inference graph (`explain` shows a backward too
    where parameters need gradients)."""
    with torch.no_grad():
        report = rdyn.explain(fn, *inputs)
    assert report.fallback_ops == {}
    return [k.name for k in report.kernels]


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name,shape,k,stride,padding,dilation,bias", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_depthwise_matches_eager(name, shape, k, stride, padding, dilation, bias, dtype, layout) -> None:
    n, c, h, w = shape
    g = torch.Generator().manual_seed(len(name))
    kh, kw = (k, k) if isinstance(k, int) else k
    x64 = torch.randn(shape, generator=g, dtype=torch.float64)
    w64 = torch.randn(c, 1, kh, kw, generator=g, dtype=torch.float64)
    b64 = torch.randn(c, generator=g, dtype=torch.float64) if bias else None
    if layout == "channels_last":
        x64 = x64.contiguous(memory_format=torch.channels_last)

    def fn(x, weight, b):
        return F.conv2d(x, weight, b, stride=stride, padding=padding, dilation=dilation, groups=c)

    x, wt = x64.to(dtype), w64.to(dtype)
    b = b64.to(dtype) if bias else None
    assert "depthwise_conv2d" in _kernels(fn, x, wt, b)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="rdyn")(x, wt, b)
    want = fn(x, wt, b)
    assert got.stride() == want.stride()
    assert_same(got, want, fn(x64, w64, b64))


def test_depthwise_gradients_match_eager() -> None:
    conv64 = torch.nn.Conv2d(12, 12, 3, padding=1, stride=2, groups=12).double()
    conv = torch.nn.Conv2d(12, 12, 3, padding=1, stride=2, groups=12)
    conv.load_state_dict({k: v.float() for k, v in conv64.state_dict().items()})
    x64 = torch.randn(2, 12, 9, 9, dtype=torch.float64, requires_grad=True)
    x = x64.detach().float().requires_grad_()
    rdyn.reset_stats()
    out = torch.compile(conv, backend="rdyn")(x)
    assert rdyn.stats()["fallback_ops"] == {}
    assert_same(out, conv(x.detach()), conv64(x64))
    out.square().sum().backward()
    conv64(x64).square().sum().backward()
    assert_same(x.grad, x64.grad.float(), x64.grad)
    assert_same(conv.weight.grad, conv64.weight.grad.float(), conv64.weight.grad)
    assert_same(conv.bias.grad, conv64.bias.grad.float(), conv64.bias.grad)


def test_batch_norm_and_relu6_fuse_after_the_depthwise_kernel() -> None:
    block = torch.nn.Sequential(
        torch.nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False),
        torch.nn.BatchNorm2d(32),
        torch.nn.ReLU6(),
    ).eval()
    block[1].running_mean.uniform_(-1, 1)
    block[1].running_var.uniform_(0.5, 2)
    x = torch.randn(1, 32, 14, 14)
    # The convolution, then one kernel for the scale, shift and clamp.
    assert _kernels(block, x) == ["depthwise_conv2d", "k0"]
    with torch.no_grad():
        got = torch.compile(block, backend="rdyn")(x)
        want = block(x)
        want64 = block.double()(x.double())
    assert_same(got, want, want64)


def test_grouped_convolution_that_is_not_depthwise_stays_a_library_call() -> None:
    conv = torch.nn.Conv2d(8, 8, 3, padding=1, groups=2)
    names = _kernels(conv, torch.randn(1, 8, 6, 6))
    assert "depthwise_conv2d" not in names and "library" in names
