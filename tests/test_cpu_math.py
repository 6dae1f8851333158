"""float32 math on the CPU: the functions whose scalar forms were libm calls
(5-50x slower than eager) now run as vector loops (`codegen-cpu`'s
`fastmath.rs`, `fastmath64.rs`, `binary64.rs`), each checked here through
`torch.compile` against eager in float64:

- unary functions and the activations built on them are compiled stages,
  within a couple of float32 ulps of the float64 value, with eager's
  zeros, infinities and NaNs (and the trigonometric functions' arguments
  beyond the vector loop's reduction, which libm recomputes);
- `fmod`, `remainder` and floor division, exact ops, give eager's bits
  (and the exact value where eager's vector `fmod` gives NaN: a
  subnormal divisor, a quotient beyond float32's range);
  `pow`, `atan2` and `hypot` are within an ulp of the float64 value, and
  every special-value pair matches eager;
- `logaddexp`'s stage (bool products from its decomposition) compiles;
- int64 division (through float64 lanes within int32) gives eager's values.
"""

from __future__ import annotations

import math

import pytest
import torch

import rdyn

F = torch.nn.functional


def _compiled(fn, *args: torch.Tensor) -> tuple[torch.Tensor, dict]:
    torch._dynamo.reset()
    rdyn.reset_stats()
    got = torch.compile(fn, backend="rdyn")(*args)
    return got, rdyn.stats()


def _specials() -> torch.Tensor:
    return torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-30, -1e-30, 1e-40, 1.0, -1.0, 0.5, -0.5])


def _points(lo: float, hi: float, n: int = 4000) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.cat([torch.linspace(lo, hi, n), torch.rand(n, generator=g) * (hi - lo) + lo, _specials()])


def _assert_within_ulps(got: torch.Tensor, fn, x: torch.Tensor, ulps: float, *args) -> None:
    """`got` (float32) against `fn` in float64: equal NaN positions and
    infinities, equal signs of zero where eager's are, and within `ulps`
    float32 ulps of the float64 value (or as close as eager is)."""
    want = fn(x.double(), *[a.double() for a in args])
    eager = fn(x, *args)
    assert torch.equal(got.isnan(), eager.isnan()), (x[got.isnan() != eager.isnan()], got[got.isnan() != eager.isnan()])
    finite = want.isfinite() & (want.abs() <= torch.finfo(torch.float32).max)
    assert torch.equal(got[~finite & ~want.isnan()], eager[~finite & ~want.isnan()])
    zero = eager == 0
    assert torch.equal(got[zero].signbit(), eager[zero].signbit()), x[zero]
    ulp = want[finite].abs().clamp_min(torch.finfo(torch.float32).tiny) * 2.0**-23
    err = (got[finite].double() - want[finite]).abs()
    eager_err = (eager[finite].double() - want[finite]).abs()
    bad = err > torch.maximum(ulps * ulp, eager_err)
    assert not bad.any(), list(zip(x[finite][bad][:5].tolist(), got[finite][bad][:5].tolist(), want[finite][bad][:5].tolist()))


# (name, function, domain, ulps): ulps 0.51 for the float64-lane functions
# (rounded once), 2-3 for the float32 ones.
UNARY = [
    ("expm1", torch.expm1, (-20.0, 90.0), 0.51),
    ("log1p", torch.log1p, (-1.0, 1e6), 2.0),
    ("exp2", torch.exp2, (-150.0, 130.0), 3.0),
    ("log2", torch.log2, (0.0, 1e30), 0.51),
    ("log10", torch.log10, (0.0, 1e30), 0.51),
    ("sin", torch.sin, (-300.0, 300.0), 0.51),
    ("cos", torch.cos, (-300.0, 300.0), 0.51),
    ("tan", torch.tan, (-300.0, 300.0), 0.51),
    ("asin", torch.asin, (-1.1, 1.1), 0.51),
    ("acos", torch.acos, (-1.1, 1.1), 0.51),
    ("atan", torch.atan, (-1e4, 1e4), 0.51),
    ("sinh", torch.sinh, (-100.0, 100.0), 0.51),
    ("cosh", torch.cosh, (-100.0, 100.0), 0.51),
    ("asinh", torch.asinh, (-1e5, 1e5), 0.51),
    ("acosh", torch.acosh, (0.5, 1e5), 0.51),
    ("atanh", torch.atanh, (-1.1, 1.1), 0.51),
]


@pytest.mark.parametrize("name,fn,domain,ulps", UNARY, ids=[u[0] for u in UNARY])
def test_unary_functions_compile_and_round_like_float64(name, fn, domain, ulps) -> None:
    x = _points(*domain)
    got, stats = _compiled(fn, x)
    assert stats["cpu_stages_interpreted"] == 0 and stats["cpu_stages_compiled"] >= 1, stats
    _assert_within_ulps(got, fn, x, ulps)


@pytest.mark.parametrize("fn", [torch.sin, torch.cos, torch.tan], ids=["sin", "cos", "tan"])
def test_trigonometric_arguments_beyond_the_reduction_use_libm(fn) -> None:
    # Beyond 1e5 the vector loop's reduction is not exact: those lanes (and
    # inf/NaN) are recomputed, mixed into tiles of ordinary ones.
    x = torch.cat([torch.tensor([1e5, 1.00001e5, -3e6, 1e20, 3.4e38, math.inf, math.nan]), torch.linspace(-7, 7, 50)])
    x = x[torch.randperm(len(x), generator=torch.Generator().manual_seed(1))]
    got, _ = _compiled(fn, x)
    _assert_within_ulps(got, fn, x, 1.0)


ACTIVATIONS = {
    "elu": F.elu,
    "selu": F.selu,
    "celu": lambda x: F.celu(x, alpha=0.7),
    "softplus": F.softplus,
    "mish": F.mish,
    "logsigmoid": F.logsigmoid,
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activations_built_on_expm1_and_log1p_compile(name) -> None:
    fn = ACTIVATIONS[name]
    x = _points(-30.0, 30.0)
    got, stats = _compiled(fn, x)
    assert stats["cpu_stages_interpreted"] == 0, stats
    _assert_within_ulps(got, fn, x, 4.0)


def _pairs() -> tuple[torch.Tensor, torch.Tensor]:
    """Every pair of special values, and random magnitudes over 1e-6..1e6
    of both signs (quotients beyond 2^24 among them)."""
    s = torch.cat([_specials(), torch.tensor([2.0, -3.0, 0.7, 1e20])])
    a, b = torch.cartesian_prod(s, s).unbind(1)
    g = torch.Generator().manual_seed(2)
    n = 20000
    mag = lambda: 10.0 ** (torch.rand(n, generator=g) * 12 - 6) * torch.randn(n, generator=g).sign()  # noqa: E731
    return torch.cat([a, mag(), torch.randint(-20, 20, (n,), generator=g).float()]), torch.cat([b, mag(), mag()])


EXACT = {"fmod": torch.fmod, "remainder": torch.remainder, "floor_divide": torch.floor_divide}


@pytest.mark.parametrize("name", list(EXACT))
def test_exact_binary_ops_give_eagers_bits(name) -> None:
    fn = EXACT[name]
    x, y = _pairs()
    got, _ = _compiled(fn, x, y)
    want = fn(x, y)
    # Eager's vector fmod gives NaN for a subnormal divisor or a quotient
    # beyond float32's range; rdyn gives the exact value there (float64's,
    # which is float32's exactly).
    exact = fn(x.double(), y.double()).float()
    want = torch.where(want.isnan() & ~exact.isnan(), exact, want)
    same = (got == want) & (got.signbit() == want.signbit()) | (got.isnan() & want.isnan())
    assert same.all(), list(zip(x[~same][:5].tolist(), y[~same][:5].tolist(), got[~same][:5].tolist(), want[~same][:5].tolist()))


ROUNDED = {"pow": torch.pow, "atan2": torch.atan2, "hypot": torch.hypot}


@pytest.mark.parametrize("name", list(ROUNDED))
def test_rounded_binary_ops_are_within_an_ulp(name) -> None:
    fn = ROUNDED[name]
    x, y = _pairs()
    if name == "pow":
        y = y.clamp(-40, 40)
    got, _ = _compiled(fn, x, y)
    _assert_within_ulps(got, fn, x, 1.0, y)


def test_pow_by_a_constant_and_logaddexp_compile() -> None:
    x, y = torch.randn(5000).abs() + 0.01, torch.randn(5000)
    got, _ = _compiled(lambda x: x**2.5, x)
    _assert_within_ulps(got, lambda x: x**2.5, x, 1.0)
    got, stats = _compiled(torch.logaddexp, x, y)
    assert stats["cpu_stages_interpreted"] == 0, stats
    _assert_within_ulps(got, torch.logaddexp, x, 2.0, y)


@pytest.mark.parametrize("op", [torch.floor_divide, torch.remainder, torch.fmod, lambda a, b: torch.div(a, b, rounding_mode="trunc")],
                         ids=["floor_divide", "remainder", "fmod", "trunc_div"])
def test_integer_division_matches_eager(op) -> None:
    # Operands within int32 go through float64 lanes; the rest (and int64
    # extremes) through the scalar form, mixed in one tile.
    g = torch.Generator().manual_seed(3)
    a = torch.cat([torch.randint(-(2**31), 2**31, (5000,), generator=g), torch.randint(-50, 50, (5000,), generator=g),
                   torch.tensor([2**40 + 7, -(2**62), 2**63 - 1, -(2**63), 7, -7])])
    b = torch.cat([torch.randint(1, 2**31, (5000,), generator=g) * torch.randint(0, 2, (5000,), generator=g).mul(2).sub(1),
                   torch.randint(1, 9, (5000,), generator=g), torch.tensor([3, -5, 2**33, 7, -(2**40), 3])])
    got, _ = _compiled(op, a, b)
    assert torch.equal(got, op(a, b))

