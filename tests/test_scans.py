"""Scans: cumsum, cumprod, cummax, cummin and logcumsumexp.

On the CPU they run rdyn's scan kernel (``codegen-cpu/src/scan.rs``): one
sequential pass per line, or per block of adjacent lines when the scan runs
across memory (dim 0 of a row-major matrix). On GPU devices (wgpu, and the
CUDA generator through ``cuda-sim``) they are reductions over each element's
prefix. Every case is checked against eager: values in float64 where they
are sums, and cummax/cummin's indices exactly (the last tie, the last NaN).
"""

from __future__ import annotations

import pytest
import torch

import rdyn
from helpers import assert_same

NAN, INF = float("nan"), float("inf")


def _inputs():
    g = torch.Generator().manual_seed(0)
    return {
        "rows": torch.randn(4, 9, generator=g),
        "nan_inf_ties": torch.tensor([[1.0, 1.0, 3.0, NAN, 2.0, NAN, 5.0], [-INF, -INF, 1.0, INF, 2.0, INF, 0.0]]),
        "ints": torch.randint(-3, 3, (3, 8), generator=g),
        "ties": torch.tensor([[2.0, 2.0, 2.0, 1.0]]),
        "scalar": torch.tensor(3.0),
        "half": torch.randn(5, 6, generator=g).half(),
        # 70 lanes: a block of 64 and one of 6 along dim 1.
        "wide": torch.randn(6, 70, generator=g),
        "3d": torch.randn(3, 5, 7, generator=g),
        "transposed": torch.randn(9, 5, generator=g).t(),
    }


INPUTS = _inputs()
SCANS = {
    "cumsum": lambda x, d: torch.cumsum(x, d),
    "cumprod": lambda x, d: torch.cumprod(x * 0.5 + 0.7 if x.is_floating_point() else x, d),
    "cummax": lambda x, d: torch.cummax(x, d),
    "cummin": lambda x, d: torch.cummin(x, d),
    "logcumsumexp": lambda x, d: torch.logcumsumexp(x, d),
}


def _dims(x):
    return [0] if x.dim() == 0 else list(range(-1, x.dim()))


def _check(name, key, device):
    x = INPUTS[key]
    if name == "logcumsumexp" and not x.is_floating_point():
        pytest.skip("logcumsumexp takes floats")
    for d in _dims(x):
        fn = lambda x, d=d: SCANS[name](x, d)  # noqa: E731
        torch._dynamo.reset()
        rdyn.reset_stats()
        got = torch.compile(fn, backend="rdyn", options={"device": device, "strict": True})(x)
        want = fn(x)
        if isinstance(want, tuple):
            torch.testing.assert_close(got[0], want[0], equal_nan=True)
            torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
        else:
            # Half precision: eager's rounding of each op (its scalars
            # included) is not rdyn's, so a result may instead be as close
            # to float64 as eager's.
            ref = fn(x.double()) if x.is_floating_point() else None
            assert_same(got, want, ref, what=f"{name} dim {d}")
        assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]


@pytest.mark.parametrize("key", list(INPUTS))
@pytest.mark.parametrize("name", list(SCANS))
def test_scans_on_cpu(name: str, key: str) -> None:
    _check(name, key, "cpu")


@pytest.mark.parametrize("key", ["rows", "nan_inf_ties", "ints", "half"])
@pytest.mark.parametrize("name", list(SCANS))
@pytest.mark.parametrize("device", ["cuda-sim", "wgpu"])
def test_scans_as_prefix_reductions(name: str, key: str, device: str) -> None:
    _check(name, key, device)


def test_cpu_scans_are_one_kernel_step() -> None:
    text = str(rdyn.explain(lambda x: torch.cumsum(x, 0) * 2, torch.randn(300, 40)))
    assert "cumsum (rdyn's scan kernel) along dim 0" in text


def test_scans_with_dynamic_sizes() -> None:
    fn = lambda x: torch.cummax(x, 1)[1] + torch.cumsum(x, 0)  # noqa: E731
    torch._dynamo.reset()
    rdyn.reset_stats()
    g = torch.compile(fn, backend="rdyn", dynamic=True, options={"strict": True})
    for n in (5, 9, 13):
        x = torch.randn(n, n + 2)
        torch.testing.assert_close(g(x), fn(x))
    assert rdyn.stats()["nodes_fallback"] == 0
