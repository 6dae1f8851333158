"""Matrix products on the CPU: the library chosen per product shape by
timing both on its first call (``codegen-cpu/src/gemm/choice.rs``), batches
that share their right-hand operand run as one product, and skinny
products split across the threads along their long side."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import rdyn
from helpers import assert_same, compile_aten

_MEASURING = torch.backends.mkl.is_available() and os.environ.get("RDYN_BLAS", "") not in ("0", "1")


def _choices(m: int, n: int, k: int) -> list[tuple]:
    return [c for c in rdyn._rdyn.gemm_choices() if c[:3] == (m, n, k)]


@pytest.mark.skipif(not _MEASURING, reason="needs torch's MKL and measuring on (RDYN_BLAS unset)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_product_runs_on_the_library_its_first_call_measured(dtype) -> None:
    g = torch.Generator().manual_seed(1)
    m, k, n = 200 + (dtype == torch.float64), 160, 136
    a64, b64 = torch.randn(m, k, generator=g, dtype=torch.float64), torch.randn(k, n, generator=g, dtype=torch.float64)
    a, b = a64.to(dtype), b64.to(dtype)
    fn = compile_aten(lambda x, y: x @ y, [a, b])
    [first], [second] = fn(a, b), fn(a, b)
    assert_same(first, a @ b, a64 @ b64)
    # Later calls run the library the first one chose: the same sums.
    assert torch.equal(first, second)
    [(_, _, _, batch, library, blas_us, crate_us)] = _choices(m, n, k)
    assert batch == 1 and library in ("blas", "gemm") and blas_us > 0 and crate_us > 0
    # The crate only where it was faster by the margin.
    assert (library == "gemm") == (crate_us < 0.95 * blas_us)


@pytest.mark.skipif(not _MEASURING, reason="needs torch's MKL and measuring on (RDYN_BLAS unset)")
def test_a_batch_sharing_its_weight_is_one_taller_product() -> None:
    """A 2x2 stride-2 convolution is a product of each image's patches by
    the one weight: the batch of two runs as one product of 2·196 rows."""
    g = torch.Generator().manual_seed(2)
    x64 = torch.randn(2, 96, 28, 28, generator=g, dtype=torch.float64)
    w64 = torch.randn(192, 96, 2, 2, generator=g, dtype=torch.float64) / 20
    x, w = x64.float(), w64.float()
    fn = lambda x, w: F.conv2d(x, w, stride=2)  # noqa: E731
    [got] = compile_aten(fn, [x, w])(x, w)
    assert_same(got, fn(x, w), fn(x64, w64))
    assert [c[3] for c in _choices(2 * 196, 192, 384)] == [1], rdyn._rdyn.gemm_choices()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("m,k,n", [(8, 48, 4096), (4096, 48, 8), (3, 40, 700)])
def test_skinny_products_split_along_their_long_side(m, k, n, dtype) -> None:
    """Few terms per dot product keep these on the crate (the size rules),
    which on ATen's OpenMP team splits the longer of the rows and the
    columns across the threads."""
    g = torch.Generator().manual_seed(3)
    a64, b64 = torch.randn(m, k, generator=g, dtype=torch.float64), torch.randn(k, n, generator=g, dtype=torch.float64)
    a, b = a64.to(dtype), b64.to(dtype)
    [got] = compile_aten(lambda x, y: x @ y, [a, b])(a, b)
    assert_same(got, a @ b, a64 @ b64)


UNMEASURED = textwrap.dedent(
    """
    import torch, rdyn
    a, b = torch.randn(256, 192), torch.randn(192, 160)
    got = torch.compile(lambda a, b: a @ b, backend="rdyn")(a, b)
    assert (got.double() - a.double() @ b.double()).abs().max().item() < 1e-3
    print(rdyn._rdyn.gemm_choices())
    """
)


@pytest.mark.parametrize("setting", ["0", "1"])
def test_rdyn_blas_settings_turn_measuring_off(setting) -> None:
    """`RDYN_BLAS=1`: BLAS wherever its rules allow, untimed; `RDYN_BLAS=0`:
    the crate everywhere. Neither measures."""
    env = dict(os.environ, RDYN_BLAS=setting, RDYN_STRICT="1")
    result = subprocess.run([sys.executable, "-c", UNMEASURED], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"
