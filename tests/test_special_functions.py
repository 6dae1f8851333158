"""Special functions defined once in the special-function language
(`rdyn_ir::special`), as the CPU backend runs them in float64, against
mpmath at 40 digits."""

from __future__ import annotations

import pytest
import torch

import rdyn
from helpers import wgpu_available


def _mpmath_reference(name: str, x: torch.Tensor) -> torch.Tensor:
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    f = {
        "digamma": mpmath.digamma,
        "polygamma_1": lambda v: mpmath.polygamma(1, v),
        "polygamma_3": lambda v: mpmath.polygamma(3, v),
        "erfinv": lambda v: mpmath.erfinv(mpmath.tanh(v)),
        "ndtri": lambda v: mpmath.sqrt(2) * mpmath.erfinv(2 / (1 + mpmath.exp(-v)) - 1),
    }[name]
    return torch.tensor([float(f(mpmath.mpf(float(v)))) for v in x], dtype=torch.float64)


@pytest.mark.parametrize(
    "name, fn",
    [
        ("digamma", torch.special.digamma),
        ("polygamma_1", lambda x: torch.special.polygamma(1, x)),
        ("polygamma_3", lambda x: torch.special.polygamma(3, x)),
        ("erfinv", lambda x: torch.special.erfinv(torch.tanh(x))),
        ("ndtri", lambda x: torch.special.ndtri(torch.sigmoid(x))),
    ],
)
def test_float64_special_functions_are_float64_accurate(name: str, fn) -> None:
    """Special functions defined once in the special-function language run
    in float64 to float64 accuracy on the CPU, against mpmath at 40 digits
    (digamma's asymptotic series once stopped at x = 6 with five terms, 1e-11
    relative at x = 1; eager's own polygamma is 5e-10 off at x = 1)."""
    x = torch.cat([torch.linspace(-6.3, 12.0, 121, dtype=torch.float64), torch.tensor([1.0, 0.5, 1e-5, 30.0, 1e3])])
    # Keep away from digamma's roots and poles, where relative error is
    # undefined (the smallest |ψ(x)| left is about 1e-2).
    x = x[(x - x.round()).abs() > 0.05]
    if name in ("erfinv", "ndtri"):
        # tanh and sigmoid saturate (and lose relative accuracy) beyond.
        x = x[x.abs() < 8]
    compiled = torch.compile(fn, backend="rdyn")
    got = compiled(x)
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]
    want = _mpmath_reference(name, x)
    # erfinv(tanh x) and ndtri(sigmoid x) also carry tanh's and sigmoid's
    # float64 rounding, amplified by the inverse's slope.
    rtol = 1e-13 if name not in ("erfinv", "ndtri") else 1e-11
    # (atol: near digamma's roots the reflection's π·cot(πx) leaves ~1e-15.)
    torch.testing.assert_close(got, want, rtol=rtol, atol=1e-14, equal_nan=True)


def _float32_points(name: str) -> torch.Tensor:
    torch.manual_seed(0)
    if name == "erfinv":
        # Both tails to the last float32 below 1 in magnitude, and both sides
        # of the ½ switch between erf's series and erfc.
        steps = torch.arange(1, 100, dtype=torch.float32) * 2**-24
        return torch.cat([torch.rand(1000) * 2 - 1, 1 - steps, steps - 1,
                          torch.tensor([0.0, 1e-30, 0.4999, 0.5, 0.5001, 0.9, -0.99])])
    if name == "digamma":
        # Reflection far from 0 (its argument must be reduced), recurrence, series.
        return torch.cat([torch.rand(1000) * 60 - 30, torch.rand(300) * 2000 - 1000,
                          torch.tensor([1e-5, 0.3, 1.0, 2.0, 1e4, 3.3e5])])
    # lgamma: both sides of ½ (reflection), near the roots 1 and 2, Stirling's range.
    return torch.cat([torch.rand(1000) * 60 - 30, torch.rand(300) * 1e4,
                      torch.tensor([0.5, 0.4999, 1e-5, 0.9963, 0.9999, 1.004, 1.9971, 1.9995, 2.0032, 3.0, 8.0, 1e20, -999.5])])


@pytest.mark.parametrize("device", ["cpu", "cuda-sim", "wgpu"])
@pytest.mark.parametrize("name", ["digamma", "erfinv", "lgamma"])
def test_float32_special_functions_from_one_definition(name: str, device: str) -> None:
    """ψ, erfinv and ln|Γ| in float32, from their one definition on every
    backend (the CPU's machine code, PTX, and WGSL, which evaluates the body
    in float32 on the device), against mpmath at 30 digits. Away from roots
    (|f| > 2e-2, where a float32 formula's cancellation is the function's
    own) the CPU and PTX round the float64 value once; WGSL's float32
    arithmetic stays within 2e-5 (ψ's reflection cancels to ~1e-2 of its
    terms past −600), and erfinv keeps relative accuracy to 2^-24 of ±1."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 30
    if device == "wgpu" and not wgpu_available():
        pytest.skip("no wgpu adapter (install mesa-vulkan-drivers for lavapipe)")
    reference = {"digamma": mpmath.digamma, "erfinv": mpmath.erfinv,
                 "lgamma": lambda v: mpmath.log(abs(mpmath.gamma(v)))}[name]
    fn = torch.lgamma if name == "lgamma" else getattr(torch.special, name)
    x = _float32_points(name)
    want = torch.tensor([float(reference(mpmath.mpf(float(v)))) for v in x], dtype=torch.float64)
    compiled = torch.compile(fn, backend="rdyn", options={"device": device})
    got = compiled(x).double()
    stats = rdyn.stats()
    assert stats["nodes_fallback"] == 0, stats["fallback_ops"]
    if device == "wgpu":
        assert stats.get("wgpu_cpu_kernels", 0) == 0, "the function ran on the CPU, not in WGSL"
    keep = want.abs() > 2e-2
    if name == "lgamma":
        # ln Γ near its roots 1 and 2 is relative-accurate on every backend
        # (WGSL's Taylor series at 2; Stirling's series left 6e-4 at 0.9963).
        keep |= ((x - 1).abs() < 0.01) | ((x - 2).abs() < 0.01)
    rtol = 2e-5 if device == "wgpu" else 1.2e-7
    torch.testing.assert_close(got[keep], want[keep], rtol=rtol, atol=0)


def test_float64_erfinv_tails_and_digamma_poles() -> None:
    """float64 erfinv to the last doubles below ±1 (Giles' estimate is 10%
    off at 1 − 2^-53; Newton's method on ln erfc converges from it, where
    the steps on erf(x) = y once stopped 7% short), and digamma within
    2^-50 of its poles (the reflection reduces x before π·x rounds: eager
    is 1e-3 off at −8 + 2^-50), against mpmath at 40 digits."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    tails = [1 - k * 2.0**-53 for k in (1, 2, 3, 7, 100)] + [1 - 10.0**-e for e in range(3, 16, 3)] + [0.99985, 0.75]
    y = torch.tensor(tails + [-t for t in tails], dtype=torch.float64)
    poles = [-8 + 2.0**-50, -8 - 2.0**-49, -0.9999999999, -3.0000001, -1000.0000000001, -2.5, -30.3]
    x = torch.tensor(poles, dtype=torch.float64)
    for fn, arg, ref in ((torch.special.erfinv, y, mpmath.erfinv), (torch.special.digamma, x, mpmath.digamma)):
        got = torch.compile(fn, backend="rdyn")(arg)
        assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]
        want = torch.tensor([float(ref(mpmath.mpf(float(v)))) for v in arg], dtype=torch.float64)
        torch.testing.assert_close(got, want, rtol=1e-13, atol=0)
