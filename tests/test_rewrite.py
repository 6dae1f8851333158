"""Rewrites of the captured graph before AOTAutograd (`rdyn._rewrite`):
nearest interpolation as views and a copy, against eager in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import rdyn
from helpers import assert_same

# (input shape, interpolate kwargs, whether every dim repeats or strides)
CASES = [
    ((2, 3, 5, 7), dict(scale_factor=2.0), True),
    ((2, 3, 5, 7), dict(scale_factor=(3, 1)), True),
    ((2, 3, 5, 7), dict(size=(10, 21)), True),
    ((1, 2, 4, 6), dict(scale_factor=2.0, mode="nearest-exact"), True),
    ((1, 2, 8, 12), dict(scale_factor=0.5), True),
    ((1, 2, 9, 13), dict(scale_factor=0.5), True),
    ((1, 2, 8, 12), dict(scale_factor=0.5, mode="nearest-exact"), True),
    ((1, 2, 9, 12), dict(size=(3, 4)), True),
    ((2, 4, 6), dict(scale_factor=4.0), True),
    ((1, 2, 3, 4, 5), dict(scale_factor=(2, 1, 3)), True),
    ((1, 2, 5, 7), dict(scale_factor=1.5), False),
    ((1, 2, 5, 7), dict(size=(8, 8)), False),
]


def _ids(case):
    shape, kwargs, _ = case
    return "x".join(map(str, shape)) + "-" + "-".join(f"{k}={v}" for k, v in kwargs.items())


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_nearest_interpolation_forward_and_gradient(case):
    shape, kwargs, rewritten = case

    def f(x):
        return F.interpolate(x, **kwargs).sin()

    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    want = f(x)
    (want_grad,) = torch.autograd.grad(want, x, torch.cos(want))
    torch._dynamo.reset()
    got = torch.compile(f, backend="rdyn")(x)
    (got_grad,) = torch.autograd.grad(got, x, torch.cos(got))
    assert got.shape == want.shape
    assert_same(got, want)
    assert_same(got_grad, want_grad)
    # The rewritten gradient is a window sum or a strided store, not a
    # scatter-add at saved indices.
    report = rdyn.explain(f, x)
    backward = "\n".join(g for g, kind in zip(report.graphs, report.kinds) if kind == "backward")
    assert backward
    assert ("index_put" in backward) is not rewritten, backward


def test_nearest_interpolation_keeps_eager_layout_and_is_a_copy():
    x = torch.randn(2, 8, 5, 6).to(memory_format=torch.channels_last)

    def f(x, scale):
        y = F.interpolate(x, scale_factor=scale)
        y.add_(1.0)  # must not write into x, whatever the map
        return y

    for scale in (2.0, 1.0, 0.5):
        before = x.clone()
        torch._dynamo.reset()
        got = torch.compile(f, backend="rdyn")(x, scale)
        want = f(x.clone(), scale)
        assert torch.equal(x, before)
        assert got.stride() == want.stride()
        assert torch.equal(got, want)


def test_nearest_interpolation_of_integers():
    x = torch.randint(0, 255, (1, 3, 4, 4), dtype=torch.uint8)

    def f(x):
        return F.interpolate(x, scale_factor=2.0)

    torch._dynamo.reset()
    assert torch.equal(torch.compile(f, backend="rdyn")(x), f(x))


def _opinfo_samples():
    from torch.testing._internal.common_methods_invocations import op_db

    for op in op_db:
        if op.name == "nn.functional.interpolate" and op.variant_test_name in ("nearest", "nearest-exact"):
            for k, s in enumerate(op.sample_inputs("cpu", torch.float64, requires_grad=True)):
                yield pytest.param(s, id=f"{op.variant_test_name}-{k}")


@pytest.mark.parametrize("sample", list(_opinfo_samples()))
def test_nearest_interpolation_opinfo_samples_through_dynamo(sample):
    """PyTorch's own samples (sizes and scales that repeat, stride or
    neither; recomputed scales) through torch.compile, where the rewrite
    runs (the OpInfo suite traces without Dynamo)."""

    def f(x):
        return F.interpolate(x, *sample.args, **sample.kwargs)

    x = sample.input.detach().requires_grad_()
    want = f(x)
    (want_grad,) = torch.autograd.grad(want, x, torch.ones_like(want))
    torch._dynamo.reset()
    got = torch.compile(f, backend="rdyn", dynamic=False)(x)
    (got_grad,) = torch.autograd.grad(got, x, torch.ones_like(got))
    assert_same(got, want)
    assert_same(got_grad, want_grad)
