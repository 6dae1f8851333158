"""The CPU backend's execution paths, each against eager float64:
torch's BLAS and the gemm crate for matrix products, ATen's OpenMP team and
rayon for kernels, split dimensions for reshaped heads (outer and
reduction ones), `x ** 2`/`x ** 3`
as products, and the per-step profile (`RDYN_PROFILE=1`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import rdyn
from helpers import assert_same, compile_aten, cpu_kernels


def test_kernels_run_on_atens_openmp_team() -> None:
    """With torch on OpenMP (the PyPI wheels) rdyn shares its team."""
    if "OpenMP" not in torch.__config__.parallel_info():
        pytest.skip("torch does not use OpenMP here")
    assert rdyn._rdyn.thread_pool() == "openmp"
    assert rdyn._rdyn.num_threads() == torch.get_num_threads()


def _layouts():
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    a, b = r(96, 80), r(80, 72)
    return {
        "row_major": (lambda x, y: x @ y, (a, b)),
        "b_transposed": (lambda x, y: x @ y.t(), (a, r(72, 80))),
        "a_transposed": (lambda x, y: x.t() @ y, (r(80, 96), b)),
        "strided_rows": (lambda x, y: x[::2] @ y, (r(192, 80), b)),
        "column_slice": (lambda x, y: x[:, 3:83] @ y, (r(96, 90), b)),
        "addmm_scaled": (lambda c, x, y: torch.addmm(c, x, y, beta=0.5, alpha=2.0), (r(72), a, b)),
        "batched": (lambda x, y: torch.bmm(x, y), (r(4, 96, 80), r(4, 80, 72))),
        "batched_broadcast": (lambda x, y: x @ y, (r(4, 96, 80), b)),
        "matrix_vector": (lambda x, y: x @ y, (a, r(80))),
        "many_small_heads": (lambda x, y: x @ y.transpose(-2, -1), (r(16, 24, 8), r(16, 24, 8))),
        "batched_a_transposed": (lambda x, y: x.transpose(1, 2) @ y, (r(4, 80, 96), r(4, 80, 72))),
        "batched_expanded": (lambda x, y: torch.bmm(x, y.expand(4, 80, 72)), (r(4, 96, 80), r(1, 80, 72))),
        "batched_odd_sizes": (lambda x, y: x @ y, (r(3, 17, 5), r(3, 5, 1))),
        "batched_broadcast_a": (lambda x, y: torch.bmm(x.expand(4, 96, 80), y), (r(1, 96, 80), r(4, 80, 72))),
        "batched_one_row": (lambda x, y: torch.bmm(x, y), (r(4, 1, 80), r(4, 80, 72))),
        "baddbmm_scaled": (lambda c, x, y: torch.baddbmm(c, x, y, beta=0.5, alpha=2.0), (r(4, 96, 72), r(4, 96, 80), r(4, 80, 72))),
        "batched_into_slices": (lambda x, y: torch.cat([torch.bmm(x, y), x[..., :72]], dim=1), (r(4, 96, 80), r(4, 80, 72))),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", sorted(_layouts()))
def test_matrix_products_match_eager(case, dtype) -> None:
    fn, args64 = _layouts()[case]
    args = [a.to(dtype) for a in args64]
    got = compile_aten(fn, args)(*args)
    assert_same(got, fn(*args), fn(*args64))


ALTERNATE_PATHS = textwrap.dedent(
    """
    import torch, rdyn
    assert rdyn._rdyn.thread_pool() == "rayon", rdyn._rdyn.thread_pool()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(3, 2, 1), torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 200),
        torch.nn.GELU(), torch.nn.Linear(200, 10),
    ).eval()
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        got = torch.compile(model, backend="rdyn")(x)
        want = model.double()(x.double())
    err = (got.double() - want).abs().max().item()
    assert err < 1e-4, err
    # Products wider than one gemm-crate call (GEMM_COLS, which bounds the
    # crate's own packing buffers): column blocks, plain and transposed.
    a, b = torch.randn(40, 64), torch.randn(5000, 64)
    wide = torch.compile(lambda a, b: (a @ b.t(), a @ b.t().contiguous()), backend="rdyn")(a, b)
    want = a.double() @ b.double().t()
    for w in wide:
        err = (w.double() - want).abs().max().item()
        assert err < 1e-4, err
    print("ok")
    """
)


def test_batched_products_run_as_one_blas_call() -> None:
    """With torch's MKL (the x86-64 wheels), batches go to `sgemm_batch_`."""
    if not torch.backends.mkl.is_available() or os.environ.get("RDYN_BLAS") == "0":
        pytest.skip("torch has no MKL here")
    assert rdyn._rdyn.blas_batched()


def test_rayon_and_gemm_crate_paths() -> None:
    """`RDYN_OPENMP=0 RDYN_BLAS=0`: kernels on rayon, products in the gemm
    crate, still right."""
    env = dict(os.environ, RDYN_OPENMP="0", RDYN_BLAS="0", RDYN_STRICT="1")
    result = subprocess.run([sys.executable, "-c", ALTERNATE_PATHS], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ok" in result.stdout


def test_head_merge_is_split_into_affine_loads() -> None:
    """(B, H, T, D) -> (B, T, H·D): the reshape's `// D` and `% D` become
    split dimensions, so the kernel's loads are affine (no division left)."""

    def merge(x):
        b, h, t, d = x.shape
        return (x.transpose(1, 2).reshape(b, t, h * d) * 2).reshape(b * t, h * d).contiguous()

    x = torch.randn(2, 4, 16, 32, dtype=torch.float64)
    kernels = cpu_kernels(merge, x.float())
    assert len(kernels) == 1
    assert "//" not in kernels[0].source and "%" not in kernels[0].source
    assert_same(compile_aten(merge, [x.float()])(x.float()), merge(x.float()), merge(x))


def test_pooled_windows_read_through_a_flat_view_split_into_affine_loads() -> None:
    """A max pool whose output a matrix product reads as `[n, c, h·w]`
    (SqueezeNet's 1x1 convolutions after its pools): the windows' loads
    reach the flat index as `// w` and `% w`. Compiled float32 stages split
    it into rows of `w` lanes however narrow (6 here), so the loads are
    affine and the JIT runs them, rows at a time; the flat dim had been
    computed lane by lane (the model ran at 0.66x eager, now 1.5x)."""

    def pool(x, w):
        return w @ torch.nn.functional.max_pool2d(x, 3, 2, ceil_mode=True).flatten(2)

    g = torch.Generator().manual_seed(8)
    x, w = torch.randn(2, 8, 13, 13, generator=g), torch.randn(4, 8, generator=g)
    windows = [k for k in cpu_kernels(pool, x, w) if "max" in k.source]
    assert windows, "no window kernel"
    for k in windows:
        assert "//" not in k.source and "jit" in k.source, k.source
    assert_same(compile_aten(pool, [x, w])(x, w), pool(x, w), pool(x.double(), w.double()))


def test_cat_chains_store_their_long_pieces() -> None:
    """ShuffleNet passes half of each block's output on untouched through
    the next block's `cat` and channel shuffle. Fused, every block's kernel
    evaluated all earlier blocks per element (224 ops in the model's last
    one, 0.74x eager); a `cat` piece past `CAT_PIECE_LIMIT` is stored first,
    so no kernel grows with the chain (the model 2.7x eager)."""

    def chain(x, w):
        for _ in range(8):
            a, b = x.chunk(2, dim=1)
            x = torch.cat([a, torch.relu(b * w + 1).sqrt()], 1)
            n, c, h, ww = x.shape
            x = x.view(n, 2, c // 2, h, ww).transpose(1, 2).reshape(n, c, h, ww)
        return x

    g = torch.Generator().manual_seed(9)
    x, w = torch.randn(2, 16, 4, 4, generator=g), torch.randn(1, 8, 1, 1, generator=g)
    lines = [len(k.source.splitlines()) for k in cpu_kernels(chain, x, w)]
    assert max(lines) < 150, lines
    assert_same(compile_aten(chain, [x, w])(x, w), chain(x, w), chain(x.double(), w.double()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_head_gradient_sums_split_their_token_dim(dtype) -> None:
    """Bias gradients of q, k and v summed over the tokens of (B, H, T, D)
    gradients: the token dim `B·T` reaches the index as `// T` and `% T`,
    and splits into two reduction dims (B, then T: the same elements in the
    same order), so the loads are affine and the JIT runs the inner one as
    one call per lane tile."""

    def bias_grads(a, b, c):
        return tuple(t.transpose(1, 2).reshape(-1, t.shape[1] * t.shape[3]).sum(0) for t in (a, b, c))

    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(3, 2, 40, 32, generator=g, dtype=torch.float64) for _ in range(3)]
    low = [x.to(dtype) for x in xs]
    kernels = cpu_kernels(bias_grads, *low)
    assert len(kernels) == 1, kernels
    assert "sum over [3, 40]" in kernels[0].source and "//" not in kernels[0].source, kernels[0].source
    assert_same(compile_aten(bias_grads, low)(*low), bias_grads(*low), bias_grads(*xs))


def test_square_and_cube_are_products() -> None:
    fn = lambda x: x**2 + x**3 + x**2.5  # noqa: E731
    x = torch.rand(64, 48, dtype=torch.float64) * 2 + 0.1
    source = cpu_kernels(fn, x.float())[0].source
    assert source.count("pow") == 1  # only x ** 2.5
    for dtype in (torch.float32, torch.float64):
        xd = x.to(dtype)
        assert_same(compile_aten(fn, [xd])(xd), fn(xd), fn(x))


_SPECIAL = [float("inf"), float("-inf"), float("nan"), -0.0, 0.0, 1e-30, -1e-30, -5.0, -9.0, 30.0, -30.0]


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_gelu_is_one_op_and_matches_float64(approximate, dtype) -> None:
    """aten.gelu is lowered as it is (not decomposed): the exact form is one
    `gelu` instruction, the tanh form a tanh expression; both within
    tolerance of eager and of float64 over [-8, 8] and at inf, NaN, ±0."""
    fn = lambda x: torch.nn.functional.gelu(x, approximate=approximate)  # noqa: E731
    x64 = torch.cat([torch.linspace(-8, 8, 4001, dtype=torch.float64), torch.tensor(_SPECIAL, dtype=torch.float64)])
    x = x64.to(dtype)
    source = "\n".join(k.source for k in cpu_kernels(fn, x))
    if approximate == "none":
        assert "gelu r" in source and "erf" not in source, source
    else:
        assert "tanh r" in source and "gelu" not in source, source
    (got,) = compile_aten(fn, [x])(x)
    want = fn(x.to(torch.float64))
    finite = torch.isfinite(x)
    assert_same(got[finite], fn(x)[finite], want[finite])
    # At ±inf and NaN, float64 eager's values (float32 eager's gelu(+inf)
    # is NaN): +inf at +inf, NaN at -inf and NaN.
    torch.testing.assert_close(got[~finite].double(), want[~finite], equal_nan=True)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_gelu_backward_is_one_op_and_matches_float64(approximate, dtype) -> None:
    """aten.gelu_backward of the exact GELU is lowered whole: the gradient
    times one `gelu_grad` instruction (Φ(x) + x·φ(x)); the tanh form is
    decomposed. Both within tolerance of eager and of float64 over [-8, 8],
    and NaN where float64 eager gives NaN (±inf, NaN)."""
    fn = lambda g, x: torch.ops.aten.gelu_backward(g, x, approximate=approximate)  # noqa: E731
    x64 = torch.cat([torch.linspace(-8, 8, 4001, dtype=torch.float64), torch.tensor(_SPECIAL, dtype=torch.float64)])
    g64 = torch.linspace(-2, 3, x64.numel(), dtype=torch.float64)
    x, g = x64.to(dtype), g64.to(dtype)
    source = "\n".join(k.source for k in cpu_kernels(fn, g, x))
    if approximate == "none":
        assert "gelu_grad r" in source and "erf" not in source and "exp" not in source, source
    else:
        assert "tanh r" in source and "gelu_grad" not in source, source
    (got,) = compile_aten(fn, [g, x])(g, x)
    want = fn(g.to(torch.float64), x.to(torch.float64))
    finite = torch.isfinite(x)
    assert_same(got[finite], fn(g, x)[finite], want[finite])
    torch.testing.assert_close(got[~finite].double(), want[~finite], equal_nan=True)


@pytest.mark.parametrize("op", ["exp", "sigmoid", "tanh", "softmax"])
def test_transcendentals_at_the_edges_of_float32(op) -> None:
    """exp near overflow (finite up to ~88.72, then inf) and through the
    subnormal results down to ~-103.3 (then 0), at ±inf and NaN, and the ops
    built on it, against eager (float32, which rounds as rdyn must) and
    float64 (from which float32 eager is within an ulp)."""
    fn = {
        "exp": torch.exp,
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
        "softmax": lambda x: torch.softmax(x.view(-1, 8), -1),
    }[op]
    edges = [88.3, 88.4, 88.5, 88.7, 88.72, 88.73, 89.5, -87.2, -87.5, -90.0, -100.0, -103.0, -103.5, -105.0]
    x64 = torch.tensor(edges + [-e for e in edges] + _SPECIAL + [1.0], dtype=torch.float64).repeat(8)
    x = x64.float()
    got = torch.compile(fn, backend="rdyn")(x)
    want = fn(x)
    finite = torch.isfinite(want)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got[~finite & ~want.isnan()], want[~finite & ~want.isnan()])
    # Subnormal results: within one unit of the smallest subnormal.
    torch.testing.assert_close(got[finite], want[finite], rtol=1e-6, atol=2e-45)
    assert_same(got[finite], want[finite], fn(x64)[finite])


def test_log_across_float32s_range() -> None:
    """log (and log_softmax's row log) of subnormals down to the smallest,
    of normals up to the largest, of ±0, negatives, ±inf and NaN, against
    float64 (rdyn's log is its own vectorised routine, no libm call)."""

    def fn(x):
        return torch.log(x), torch.log1p(x.abs()) + torch.log(x.abs().sum(-1, keepdim=True))

    tiny = torch.finfo(torch.float32).tiny
    values = [1.4e-45, 1e-44, 3e-42, 1e-40, tiny / 2, tiny, 1e-30, 0.5, 1.0, 2.0, 1e30, 3.4e38]
    specials = [0.0, -0.0, -1.0, -1e-40, float("inf"), -float("inf"), float("nan"), 0.7]
    x64 = torch.tensor(values + specials, dtype=torch.float64).repeat(3).view(3, -1)
    x = x64.float()
    got, want, ref = torch.compile(fn, backend="rdyn")(x), fn(x), fn(x64)
    for g, w, r in zip(got, want, ref):
        assert torch.equal(g.isnan(), w.isnan())
        finite = torch.isfinite(w)
        assert torch.equal(g[~finite & ~w.isnan()], w[~finite & ~w.isnan()])
        assert_same(g[finite], w[finite], r[finite])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_division_by_a_power_of_two_is_exact(dtype) -> None:
    """`x / 256`, `x / 0.125`, `x / -4` run as multiplications by the exact
    reciprocal: bit for bit eager's division, subnormal, overflowing, zero,
    infinite and NaN results included; `x / 3` stays a division."""

    def fn(x):
        return x / 256.0, x / 0.125, x / -4.0, x / 3.0, x.mean(-1)

    tiny = torch.finfo(dtype).tiny
    big = torch.finfo(dtype).max
    edge = [tiny, -tiny, tiny * 3, big, -big, big / 2, 0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1.0, 1 / 3]
    x = torch.cat([torch.tensor(edge, dtype=dtype), torch.randn(51, dtype=dtype) * 1e3]).view(4, 16)
    source = "\n".join(k.source for k in cpu_kernels(fn, x))
    assert source.count("div r") == 1 and "mul r" in source, source
    *quotients, mean = torch.compile(fn, backend="rdyn")(x)
    *want, want_mean = fn(x)
    for got, w in zip(quotients, want):
        nan = w.isnan()
        assert torch.equal(got.isnan(), nan)
        assert torch.equal(got[~nan], w[~nan]) and torch.equal(got.signbit()[~nan], w.signbit()[~nan])
    torch.testing.assert_close(mean, want_mean, equal_nan=True)


def test_layer_norm_gelu_residual_is_one_kernel() -> None:
    """LayerNorm, GELU, scale/shift and a residual add: one kernel, whose
    pointwise stage calls gelu once; matches float64, values and gradients."""
    w, b = torch.randn(64, dtype=torch.float64), torch.randn(64, dtype=torch.float64)
    s, t = torch.randn(64, dtype=torch.float64), torch.randn(64, dtype=torch.float64)

    def block(x, w, b, s, t):
        return x + torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (64,), w, b)) * s + t

    x = torch.randn(4, 33, 64, dtype=torch.float64)
    args32 = [v.float() for v in (x, w, b, s, t)]
    kernels = cpu_kernels(block, *args32)
    assert len(kernels) == 1 and kernels[0].source.count("gelu r") == 1, [k.source for k in kernels]
    assert_same(compile_aten(block, args32)(*args32), block(*args32), block(x, w, b, s, t))
    grads = [v.clone().requires_grad_() for v in args32]
    compiled = torch.compile(block, backend="rdyn")
    compiled(*grads).square().sum().backward()
    ref = [v.clone().requires_grad_() for v in (x, w, b, s, t)]
    block(*ref).square().sum().backward()
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g.grad, r.grad.float(), rtol=1e-4, atol=1e-4)


def test_layer_norm_reads_its_stored_residual_sum_back() -> None:
    """A residual sum that is both returned and layer-normed: its kernel
    stores the sum first and the mean, variance and normalisation load it
    (`lowering/src/passes/reuse.rs`) rather than each adding the three inputs
    again; values against float64."""

    def block(x, bias, r, w, b):
        h = x + bias + r
        return torch.nn.functional.layer_norm(h, (64,), w, b), h

    g = torch.Generator().manual_seed(7)
    args64 = [torch.randn(*shape, generator=g, dtype=torch.float64) for shape in ((96, 64), (64,), (96, 64), (64,), (64,))]
    args32 = [v.float() for v in args64]
    (kernel,) = cpu_kernels(block, *args32)
    stages = kernel.source.split("  stage -> ")[1:]
    stored = re.match(r"buf\d+", stages[0]).group(0)
    assert len(stages) == 4 and "sum over" not in stages[0].splitlines()[0], kernel.source
    for stage in stages[1:]:
        assert f"load {stored}:" in stage and "load buf0:" not in stage and "load buf2:" not in stage, kernel.source
    assert_same(compile_aten(block, args32)(*args32), block(*args32), block(*args64))


def test_moments_of_an_expanded_input_are_exact() -> None:
    """An input expanded along the normalized dims is its own mean, exactly,
    with deviations of exactly 0, as eager's Welford gives: layer norm
    returns the bias, the variance is 0. The rounded `sum / n` would be an
    ulp off, which layer norm scales by `1/sqrt(eps)`. (Equal values that
    are stored, not expanded, still take `sum / n`: fuzz seed 8986.)"""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(6, 1, generator=g) * 100).expand(6, 300)
    w, b = torch.randn(300, generator=g), torch.randn(300, generator=g)

    def fn(x, w, b):
        return torch.nn.functional.layer_norm(x, (300,), w, b), *torch.var_mean(x, -1)

    got = torch.compile(fn, backend="rdyn")(x, w, b)
    for k, (r, e) in enumerate(zip(got, fn(x, w, b))):
        assert torch.equal(r, e), (k, (r - e).abs().max())


PROFILE = textwrap.dedent(
    """
    import torch, rdyn
    f = torch.compile(lambda x, w: torch.relu(x @ w).sum(-1), backend="rdyn")
    x, w = torch.randn(64, 32), torch.randn(32, 16)
    for _ in range(3):
        f(x, w)
    profile = rdyn.stats()["profile"]
    labels = [label for label, calls, seconds in profile]
    assert any(l.startswith("gemm [64, 32] @ [32, 16]") for l in labels), labels
    assert any(l.startswith("kernel ") for l in labels), labels
    assert all(calls == 3 and seconds >= 0 for _, calls, seconds in profile), profile
    rdyn.reset_stats()
    assert "profile" not in rdyn.stats()
    print("ok")
    """
)


def test_profile_times_every_step() -> None:
    env = dict(os.environ, RDYN_PROFILE="1")
    result = subprocess.run([sys.executable, "-c", PROFILE], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ok" in result.stdout


def test_library_inputs_are_reused_between_calls() -> None:
    """A convolution's input that rdyn computes is a torch tensor kept for the
    next call; results stay right call after call, and results the caller
    still holds are never written again."""
    conv = torch.nn.Conv2d(4, 6, 3, padding=1).double()
    fn = lambda x: conv(torch.relu(x) * 2)  # noqa: E731
    compiled = torch.compile(fn, backend="rdyn")
    kept = []
    with torch.no_grad():
        xs = [torch.randn(2, 4, 9, 9, dtype=torch.float64) for _ in range(4)]
        for x in xs:
            kept.append(compiled(x))
        for x, got in zip(xs, kept):
            torch.testing.assert_close(got, fn(x))
    plan = rdyn.explain(fn, xs[0])
    assert any(k.name == "library" for k in plan.kernels)


INPUT_FREE = textwrap.dedent(
    """
    import torch, rdyn

    def fn(x):
        # A packed-sequence causal mask as GPT-2 builds it: from arange only.
        pos = torch.arange(x.shape[1]).expand(x.shape[0], -1)
        seq = (torch.diff(pos, prepend=pos[:, :1] - 1, dim=-1) != 1).cumsum(-1)
        keep = (seq[:, :, None] == seq[:, None, :]) & torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
        bias = torch.where(keep, 0.0, -1e4)
        return torch.softmax(x @ x.transpose(1, 2) + bias, -1) * (x.sum(-1, keepdim=True) + 1)

    compiled = torch.compile(fn, backend="rdyn")
    with torch.no_grad():
        for k in range(4):
            x = torch.randn(3, 16, 8, dtype=torch.float64)
            rdyn.reset_stats()
            got = compiled(x)
            torch.testing.assert_close(got, fn(x))
            labels = [label for label, _, _ in rdyn.stats()["profile"]]
            kernels = sum(label.startswith("kernel") for label in labels)
            if k == 0:
                first = kernels
    # The mask's kernels run on the first call only.
    assert kernels < first, (first, kernels)
    print("ok")
    """
)


INPUT_FREE_LIBRARY = textwrap.dedent(
    """
    import torch, rdyn
    import torch.nn.functional as F

    def fn(x):
        # Filter taps from arange only, read by ATen's convolution (a
        # library call): a tensor kept with its values after the first call.
        taps = torch.cos(torch.arange(3) * (0.1 * x.shape[2]))
        return F.conv1d(x, taps[None, None].expand(4, x.shape[1], 3), padding=1) * 2

    compiled = torch.compile(fn, backend="rdyn", dynamic=True)
    report = rdyn.explain(fn, torch.randn(2, 3, 16))
    assert report.fallback_ops == {}, report.fallback_ops
    assert any(k.name == "library" and "convolution" in k.source for k in report.kernels), report
    counts = []
    with torch.no_grad():
        # Two specializations of one graph, alternating: each keeps its own taps.
        for n in (16, 16, 12, 16, 12, 12):
            x = torch.randn(2, 3, n)
            rdyn.reset_stats()
            got = compiled(x)
            torch.testing.assert_close(got, fn(x))
            labels = [label for label, _, _ in rdyn.stats()["profile"]]
            counts.append(sum(label.startswith("kernel") for label in labels))
    # The taps' kernel runs on each specialization's first call only.
    assert counts[1] < counts[0] and counts[3] == counts[1] and counts[5] < counts[2], counts
    print("ok")
    """
)


def test_input_free_library_inputs_are_kept() -> None:
    """A tensor that input-free kernels compute for a library call (a
    convolution's taps from arange) is kept with its values per specialization:
    its kernels run on that specialization's first call only, and results
    stay right call after call."""
    env = dict(os.environ, RDYN_PROFILE="1")
    result = subprocess.run(
        [sys.executable, "-c", INPUT_FREE_LIBRARY], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ok" in result.stdout


def test_input_free_kernels_run_once_per_arena() -> None:
    """Kernels that read no input (a mask built from arange) run on an arena's
    first call; later calls reuse what they wrote, and results stay right
    while the rest of the graph changes with the input."""
    env = dict(os.environ, RDYN_PROFILE="1")
    result = subprocess.run([sys.executable, "-c", INPUT_FREE], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ok" in result.stdout


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logsumexp_of_infinite_and_nan_rows(dtype) -> None:
    """logsumexp is `max + log(sum(exp(x - max)))`, or the max where it is
    infinite: rows with +inf, all -inf, NaN, empty and ordinary rows, kept
    dims or not, against eager bit for bit where eager's result is not
    finite, and against float64 elsewhere."""
    inf, nan = float("inf"), float("nan")
    rows = [
        [1.0, 2.0, 3.0, -1.0],
        [inf, 1.0, 2.0, 3.0],
        [-inf, -inf, -inf, -inf],
        [inf, -inf, 0.0, 1.0],
        [nan, 1.0, inf, 0.0],
        [-inf, 5.0, -inf, 88.0],
        [100.0, 100.0, -100.0, 0.5],
    ]
    x64 = torch.tensor(rows, dtype=torch.float64)
    x = x64.to(dtype)

    def fn(x):
        return torch.logsumexp(x, -1), torch.logsumexp(x, 1, keepdim=True), torch.logsumexp(x[:, :0], -1)

    got, want, ref = torch.compile(fn, backend="rdyn")(x), fn(x), fn(x64)
    for g, w, r in zip(got, want, ref):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert torch.equal(g.isnan(), w.isnan())
        finite = torch.isfinite(w)
        assert torch.equal(g[~finite & ~w.isnan()], w[~finite & ~w.isnan()])
        assert_same(g[finite], w[finite], r[finite])


def test_log_softmax_and_logsumexp_share_one_exp_pass() -> None:
    """The sum of `exp(x - max)` both need is computed once."""
    kernels = cpu_kernels(lambda x: (torch.log_softmax(x, -1), torch.logsumexp(x, -1)), torch.randn(8, 64))
    assert sum(k.source.count(" exp ") for k in kernels) == 1, "\n".join(k.source for k in kernels)


_NARROW_SCALAR_OPS = {
    "remainder": lambda x: x % -3,
    "floor_divide": lambda x: x // -3,
    "trunc_divide": lambda x: torch.div(x, -3, rounding_mode="trunc"),
    "fmod": lambda x: torch.fmod(x, -3),
    "greater": lambda x: x > -1,
    "less": lambda x: x < 300,
    "add": lambda x: x + 300,
    "bitwise_and": lambda x: x & -2,
    # clamp's bounds are compared as given: no wrapping.
    "clamp": lambda x: torch.clamp(x, -5, 300),
    "clamp_inside": lambda x: torch.clamp(x, -5, 5),
}


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16])
@pytest.mark.parametrize("name", list(_NARROW_SCALAR_OPS))
def test_scalars_meet_narrow_integers_in_their_dtype(name, dtype) -> None:
    """A Python scalar meets a narrow integer tensor converted to the
    tensor's dtype, as ATen converts it: `x % -3` of a uint8 `x` is
    `x % 253`, and `x < 300` of an int8 `x` is `x < 44`. rdyn computed
    with the scalar as written (found by tests/test_fuzz.py). clamp is the
    exception: its bounds are not converted. Exact."""
    fn = _NARROW_SCALAR_OPS[name]
    x = torch.tensor([0, 1, 2, 3, 4, 5, 43, 44, 45, 100, 127, 7], dtype=torch.int64).to(dtype)
    torch._dynamo.reset()
    got, want = torch.compile(fn, backend="rdyn")(x), fn(x)
    assert got.dtype == want.dtype
    assert torch.equal(got, want), f"{got.tolist()} != {want.tolist()}"


_ACCUMULATING_OPS = {
    "index_add": lambda x, i, s: x.index_add(0, i, s),
    "scatter_add": lambda x, i, s: x.scatter_add(0, i[:, None].expand(-1, s.shape[1]), s),
    "index_put_accumulate": lambda x, i, s: x.index_put((i,), s, accumulate=True),
    # Along dim 1: an index_put whose indices start with None (fuzz seed 18548).
    "index_add_dim1": lambda x, i, s: x.t().index_add(1, i, s.t()),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", list(_ACCUMULATING_OPS))
def test_half_scatter_adds_accumulate_in_float32(name, dtype) -> None:
    """2000 values added into 4 rows: rounded to half precision after every add,
    the sum drifts far from float64's (found by tests/test_fuzz.py, seed
    8782); accumulated in float32 and rounded once, it is as close as
    eager's."""
    gen = torch.Generator().manual_seed(0)
    x64 = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    s64 = torch.rand(2000, 3, generator=gen, dtype=torch.float64)
    index = torch.randint(0, 4, (2000,), generator=gen)
    fn = _ACCUMULATING_OPS[name]
    x, s = x64.to(dtype), s64.to(dtype)
    (got,) = compile_aten(fn, [x, index, s])(x, index, s)
    want = fn(x.double(), index, s.double())
    assert got.dtype == dtype
    error = (got.double() - want).abs().max().item()
    # Within an ulp of the largest sum (rounding after every add is off by
    # tens of ulps).
    assert error <= torch.finfo(dtype).eps * want.abs().max().item(), f"max error {error} against float64"
    assert_same(got, fn(x, index, s), want)


_INDEX = torch.tensor([0, 2, 2, 1])
_INDEX_PUTS = {
    # The points written are those of `x[indices]`: index dims in place of
    # adjacent indexed dims, first when a None separates them.
    "leading_none": lambda x: torch.ops.aten.index_put(x, [None, _INDEX], torch.ones(4, 4, 6, 7, dtype=x.dtype), True),
    "adjacent": lambda x: torch.ops.aten.index_put(x, [None, _INDEX, _INDEX], x[:, _INDEX, _INDEX] * 2, True),
    "separated": lambda x: torch.ops.aten.index_put(x, [_INDEX, None, _INDEX], x[_INDEX, :, _INDEX] * 3),
    "broadcast": lambda x: torch.ops.aten.index_put(x, [None, _INDEX[:2, None], _INDEX], x[:, :1, _INDEX] - 1, True),
    "last_dim": lambda x: torch.ops.aten.index_put(x, [None, None, None, _INDEX], x[..., _INDEX] + 5, True),
    "index_copy": lambda x: x.index_copy(3, torch.tensor([6, 0]), x[..., :2] * 10),
    "setitem": lambda x: (lambda y: (y.__setitem__((slice(None), _INDEX), 7.0), y)[1])(x.clone()),
}


@pytest.mark.parametrize("name", list(_INDEX_PUTS))
def test_index_puts_with_whole_dims_lower(name) -> None:
    """index_put with None entries (whole dims, as index_add and index_copy
    along a later dim decompose) runs in rdyn's kernels, not eager's, and
    writes eager's points."""
    fn = _INDEX_PUTS[name]
    x = torch.randn(4, 5, 6, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    compiled = compile_aten(fn, [x.float()])
    rdyn.reset_stats()
    (got,) = compiled(x.float())
    assert rdyn.stats()["fallback_ops"] == {}
    assert_same(got, fn(x.float()), fn(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
@pytest.mark.parametrize("include_self", [True, False], ids=["with_self", "without_self"])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("op", ["scatter_reduce", "index_reduce", "scatter"])
def test_scatter_reductions_lower(op, reduce, include_self, dtype) -> None:
    """scatter_reduce, index_reduce and scatter(reduce=...) run in rdyn's
    serial scatter kernels: points no index names keep `self`; without
    `self`, a point starts from the reduction's identity; a mean divides by
    the count (floored for integers); half precision reduces in float32."""
    if op == "index_reduce" and reduce == "sum":
        pytest.skip("index_reduce has no sum (index_add is one)")
    legacy = {"sum": "add", "prod": "multiply"}
    if op == "scatter" and (reduce not in legacy or not include_self):
        pytest.skip("scatter reduces by add or multiply, with self")
    gen = torch.Generator().manual_seed(1)
    x64 = torch.randn(5, 6, generator=gen, dtype=torch.float64) * 3
    src64 = torch.rand(7, 6, generator=gen, dtype=torch.float64) + 0.5
    if dtype == torch.int64:
        x64, src64 = x64.round(), (src64 * 6 - 3).round()
    index = torch.tensor([0, 3, 3, 1, 0, 3, 1])
    if op == "scatter_reduce":
        index = index[:, None].expand(7, 6).contiguous()
        fn = lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=include_self)  # noqa: E731
    elif op == "scatter":
        index = index[:, None].expand(7, 6).contiguous()
        fn = lambda x, i, s: x.scatter(0, i, s, reduce=legacy[reduce]) + x.scatter(1, i[:5], 1.5, reduce=legacy[reduce])  # noqa: E731
    else:
        fn = lambda x, i, s: x.index_reduce(0, i, s, reduce, include_self=include_self)  # noqa: E731
    x, src = x64.to(dtype), src64.to(dtype)
    compiled = compile_aten(fn, [x, index, src])
    rdyn.reset_stats()
    (got,) = compiled(x, index, src)
    assert rdyn.stats()["fallback_ops"] == {}
    reference = fn(x.double(), index, src.double()) if dtype.is_floating_point else None
    assert_same(got, fn(x, index, src), reference)


SCATTER_DUPLICATES = {
    "index_add": lambda x, i: torch.zeros(7, x.shape[1], dtype=x.dtype).index_add(0, i, x),
    "index_put_accumulate": lambda x, i: torch.zeros(7, x.shape[1], dtype=x.dtype).index_put((i,), x, accumulate=True),
    "scatter_amax": lambda x, i: torch.zeros(7, x.shape[1], dtype=x.dtype).scatter_reduce(
        0, i[:, None].expand(-1, x.shape[1]), x, "amax", include_self=False
    ),
    "scatter_prod": lambda x, i: torch.ones(7, x.shape[1], dtype=x.dtype).scatter_reduce(
        0, i[:, None].expand(-1, x.shape[1]), x, "prod"
    ),
    "scatter_mean": lambda x, i: torch.zeros(7, x.shape[1], dtype=x.dtype).scatter_reduce(
        0, i[:, None].expand(-1, x.shape[1]), x, "mean"
    ),
    # A plain write: the last of the duplicates wins, in index order (eager
    # leaves duplicates undefined; the reference is a loop).
    "index_put_last_wins": lambda x, i: torch.zeros(7, x.shape[1], dtype=x.dtype).index_put((i,), x),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.bfloat16])
@pytest.mark.parametrize("name", list(SCATTER_DUPLICATES))
def test_scatters_with_duplicates_within_a_tile(name, dtype) -> None:
    """Scatter kernels run serially in tiles of many points: lanes of one
    tile that meet at one address all count (a scatter-reduce combines lane
    by lane at the store), and of plain writes the last in index order
    wins. 3000 rows onto 7, so each tile holds many duplicates; against
    eager (float64 for the float sums)."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(3000, 5, generator=g, dtype=torch.float64)
    x = (x * 4).round() if not dtype.is_floating_point else x
    if name == "scatter_prod":
        x = 1 + x.clamp(-1, 1) * 1e-3 if dtype.is_floating_point else x.clamp(1, 1)
    x = x.to(dtype)
    i = torch.randint(0, 7, (3000,), generator=g)
    fn = SCATTER_DUPLICATES[name]
    torch._dynamo.reset()
    rdyn.reset_stats()
    got = torch.compile(fn, backend="rdyn", options={"strict": True})(x, i)
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]
    if dtype.is_floating_point and name != "index_put_last_wins":
        want = fn(x.double(), i)
        tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 1e-2}[dtype]
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol * 30)
    elif name == "index_put_last_wins":
        want = torch.zeros(7, x.shape[1], dtype=dtype)
        for row, at in enumerate(i.tolist()):
            want[at] = x[row]
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    else:
        torch.testing.assert_close(got, fn(x, i), rtol=0, atol=0)



@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int8, torch.bool])
@pytest.mark.parametrize("shape", [(2, 32, 56, 56), (3, 19, 13, 11)])
def test_layout_changes_are_blocked_transposes(dtype, shape) -> None:
    """NCHW to channels-last and back (a convolution's input, its output
    read by NCHW code) are copies that transpose: one kernel run as blocked
    transposes (8 x 8 AVX squares for 4-byte elements, a plain loop for the
    others and the edges), bit for bit eager's values."""
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(shape, generator=gen) * 50).to(dtype)
    for fn, src in (
        (lambda t: t.contiguous(memory_format=torch.channels_last), x),
        (lambda t: t.contiguous(), x.contiguous(memory_format=torch.channels_last)),
    ):
        source = "\n".join(k.source for k in cpu_kernels(fn, src))
        assert source.count("as blocked transposes") == 1, source
        (got,) = compile_aten(fn, [src])(src)
        want = fn(src)
        assert got.stride() == want.stride() and torch.equal(got, want)


_TRANSPOSING_COPIES = {
    "matrix": (lambda x: x.t().contiguous(), lambda: torch.randn(64, 96)),
    "int64": (lambda x: x.t().contiguous(), lambda: torch.randint(-100, 100, (33, 70))),
    "permute_3d": (lambda x: x.permute(2, 0, 1).contiguous(), lambda: torch.randn(5, 40, 24)),
    "float16_rows": (lambda x: x.permute(0, 2, 1).contiguous(), lambda: torch.randn(3, 17, 130).half()),
    "slice": (lambda x: x[:, 3:50].t().contiguous(), lambda: torch.randn(64, 96)),
    "step": (lambda x: x[::2].t().contiguous(), lambda: torch.randn(64, 96)),
    "flipped": (lambda x: x.flip(0).t().contiguous(), lambda: torch.randn(64, 96)),
    "expanded": (lambda x: x.expand(16, 40, 24).transpose(1, 2).contiguous(), lambda: torch.randn(1, 40, 24)),
}


@pytest.mark.parametrize("name", list(_TRANSPOSING_COPIES))
def test_transposing_copies_match_eager(name) -> None:
    """Blocked transposes from sliced, stepped, flipped (negative strides)
    and expanded (zero strides) sources, 2, 4 and 8-byte elements: eager's
    values bit for bit, with eager's strides."""
    fn, make = _TRANSPOSING_COPIES[name]
    x = make()
    source = "\n".join(k.source for k in cpu_kernels(fn, x))
    assert source.count("as blocked transposes") == 1, source
    (got,) = compile_aten(fn, [x])(x)
    want = fn(x)
    assert got.stride() == want.stride() and torch.equal(got, want)
