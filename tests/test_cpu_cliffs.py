"""Mechanisms that keep CPU kernels off the slow paths, each on a small
graph that isolates it, against eager in float64:

- a reduction over a leading (strided) dim vectorises along the contiguous
  output dim, even when the value reduced reads a per-row statistic;
- a pointwise stage whose indices divide its inner dims (an interleave
  written with `x[..., ::2]`, `x[..., 1::2]` and `stack(..., -1).flatten(-2)`)
  splits them, so every index is affine and the stage compiles;
- a pointwise kernel whose last outer dims a layout change left narrow
  (2x2 patches) tiles along a wide dim instead;
- a concatenation of many sources of one shape (DenseNet) splits into one
  kernel whose stages read a source each, unmasked;
- a reduction over a short window (a 2x2 pool) tiles along whichever of
  the window and the output rows has more lanes.
"""

from __future__ import annotations

import pytest
import torch

import rdyn
from helpers import assert_same, cpu_kernels


def _check(fn, *args64: torch.Tensor) -> dict:
    args = [a.float() for a in args64]
    torch._dynamo.reset()
    rdyn.reset_stats()
    got = torch.compile(fn, backend="rdyn")(*args)
    assert_same(got, fn(*args), fn(*args64))
    return rdyn.stats()


def test_column_reduction_of_a_row_normalised_value_tiles_along_the_columns() -> None:
    fn = lambda x: torch.softmax(x, -1).amax(dim=0)  # noqa: E731
    x = torch.randn(96, 80, dtype=torch.float64)
    _check(fn, x)
    (column,) = [k for k in cpu_kernels(fn, x.float()) if "max over [96]" in k.source]
    assert "tile Outer" in column.source, column.source


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)


@pytest.mark.parametrize("dim", [64, 96])
def test_an_interleave_compiles_with_affine_indices(dim: int) -> None:
    g = torch.Generator().manual_seed(0)
    x, cos, sin = (torch.randn(s, generator=g, dtype=torch.float64) for s in [(2, 12, dim), (12, dim // 2), (12, dim // 2)])
    stats = _check(rotary, x, cos, sin)
    assert stats["cpu_stages_interpreted"] == 0, stats
    sources = "".join(k.source for k in cpu_kernels(rotary, x.float(), cos.float(), sin.float()))
    assert f"inner [2, {dim // 2}]" in sources and "//" not in sources and "%" not in sources, sources


def patches(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """ConvNeXt's downsampling: a per-channel affine, then 2x2 patches."""
    n, c, h, ww = x.shape
    y = x * w[:, None, None]
    return y.reshape(n, c, h // 2, 2, ww // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(n, h // 2, ww // 2, c * 4)


def test_narrow_patches_tile_along_a_wide_dim() -> None:
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 6, 40, 40, generator=g, dtype=torch.float64), torch.randn(6, generator=g, dtype=torch.float64)
    _check(patches, x, w)
    (kernel,) = cpu_kernels(patches, x.float(), w.float())
    outer = kernel.source.split("outer [", 1)[1].split("]", 1)[0]
    assert int(outer.split(",")[-1]) >= 16, kernel.source


@pytest.mark.parametrize("exponent", [0.5, -0.5, -1.0, -2.0, 2.0, 3.0])
def test_pow_by_the_scalars_aten_special_cases_is_eagers_bit_for_bit(exponent: float) -> None:
    # ATen computes these as sqrt, rsqrt and reciprocals (never powf); so
    # does rdyn, which also keeps them compiled.
    x = torch.tensor([0.0, -0.0, 1.0, 2.5, 1e-30, 3e30, -4.0, float("inf"), -float("inf"), float("nan")] * 7)
    torch._dynamo.reset()
    rdyn.reset_stats()
    got = torch.compile(lambda t: torch.pow(t, exponent) * 1.0, backend="rdyn")(x)
    torch.testing.assert_close(got, torch.pow(x, exponent), rtol=0, atol=0, equal_nan=True)
    assert rdyn.stats()["cpu_stages_interpreted"] == 0


def test_weight_norm_compiles() -> None:
    g = torch.Generator().manual_seed(0)
    v, gain = torch.randn(24, 6, 32, generator=g, dtype=torch.float64), torch.randn(1, 1, 32, generator=g, dtype=torch.float64)
    stats = _check(lambda a, b: torch._weight_norm(a, b, 2), v, gain)
    assert stats["cpu_stages_interpreted"] == 0, stats


_BF16_SCRIPT = """
import sys, torch, rdyn
torch.manual_seed(0)
x = torch.randn(64, 96).bfloat16()
x.view(-1)[:10] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, 3.0e38, -3.0e38,
                                1e-40, 2.5]).bfloat16()
w = torch.randn(96).bfloat16()
def f(x, w):
    y = torch.nn.functional.gelu(x * w + 1.5)
    return y, (y.float() * 0.1).to(torch.bfloat16), (x * w).sum(-1), torch.softmax(x, -1)
outs = torch.compile(f, backend="rdyn")(x, w)
torch.save((outs, f(x, w), rdyn.stats()["cpu_stages_interpreted"]), sys.argv[1])
"""


def _interpreted_and_compiled(script: str, tmp_path) -> dict:
    """What `script` saves to the path it is given, run in a fresh process
    with the JIT off (`"0"`) and on (`"1"`)."""
    import os
    import subprocess
    import sys

    results = {}
    for jit in ("0", "1"):
        out = tmp_path / f"jit{jit}.pt"
        env = dict(os.environ, RDYN_JIT=jit)
        subprocess.run([sys.executable, "-c", script, str(out)], check=True, env=env, timeout=300)
        results[jit] = torch.load(out)
    return results


def test_bfloat16_stages_compile_and_match_the_interpreter(tmp_path) -> None:
    """bfloat16 loads widen exactly and roundings to bfloat16 round as the
    interpreter's `half::bf16`; the compiled stages give the interpreter's
    bits (up to a NaN's sign and payload)."""
    results = _interpreted_and_compiled(_BF16_SCRIPT, tmp_path)
    (interpreted, eager, _), (compiled, _, left) = results["0"], results["1"]
    assert left == 0, "every stage compiled"
    for a, b, e in zip(interpreted, compiled, eager):
        both_nan = torch.isnan(a.float()) & torch.isnan(b.float())
        assert torch.equal(a.view(torch.int16)[~both_nan], b.view(torch.int16)[~both_nan])
        # Against eager away from row 0's infinities (where gelu's limits
        # are a separate matter).
        torch.testing.assert_close(b[1:].float(), e[1:].float(), rtol=2e-2, atol=2e-2)


def test_an_interleave_of_heads_tiles_along_a_wide_dim() -> None:
    """Rotary embeddings of per-head queries: the interleave's pair dim (2)
    ends up last among the outer dims, rows of 32 pairs; the kernel tiles
    along the pairs instead, and the pair's source is the same on every lane."""

    def fn(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q = q.view(2, 16, 4, 64).transpose(1, 2)
        q1, q2 = q[..., ::2], q[..., 1::2]
        return torch.stack((q1 * cos - q2 * sin, q1 * sin + q2 * cos), -1).flatten(-2)

    g = torch.Generator().manual_seed(0)
    q, cos, sin = (torch.randn(s, generator=g, dtype=torch.float64) for s in [(2, 16, 256), (16, 32), (16, 32)])
    stats = _check(fn, q, cos, sin)
    assert stats["cpu_stages_interpreted"] == 0, stats
    (kernel,) = cpu_kernels(fn, q.float(), cos.float(), sin.float())
    outer = kernel.source.split("outer [", 1)[1].split("]", 1)[0]
    assert int(outer.split(",")[-1]) >= 16, kernel.source


def _check_training(module: torch.nn.Module, x64: torch.Tensor) -> dict:
    """A training step of `module` (compiled, float32) against eager in
    float64: the output and every gradient; rdyn's stats after it."""
    import copy

    ref = copy.deepcopy(module).double()
    torch._dynamo.reset()
    rdyn.reset_stats()
    x = x64.float().requires_grad_()
    out = torch.compile(module, backend="rdyn")(x)
    out.square().sum().backward()
    x_ref = x64.clone().requires_grad_()
    out_ref = ref(x_ref)
    out_ref.square().sum().backward()
    stats = rdyn.stats()
    torch.testing.assert_close(out, out_ref.float(), rtol=1e-4, atol=1e-4)
    grads = [(x.grad, x_ref.grad)] + [(p.grad, q.grad) for p, q in zip(module.parameters(), ref.parameters())]
    for got, want in grads:
        torch.testing.assert_close(got, want.float(), rtol=1e-3, atol=1e-3)
    for b, c in zip(module.buffers(), ref.buffers()):
        torch.testing.assert_close(b, c.to(b.dtype), rtol=1e-4, atol=1e-4)
    return stats


class _Rotary(torch.nn.Module):
    """The interleave of rotary embeddings, trained: its backward's odd half
    starts at index 1 (a `slice_scatter` of `1::2`)."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.cos = torch.nn.Parameter(torch.randn(12, 32, generator=g))
        self.sin = torch.nn.Parameter(torch.randn(12, 32, generator=g))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack((x1 * self.cos - x2 * self.sin, x1 * self.sin + x2 * self.cos), -1).flatten(-2)


class _Pools(torch.nn.Module):
    """Batch norm (its int64 step counter), a max pool (its argmax indices
    forward, a scatter by them backward) and an average pool (its divisor
    backward): integer arithmetic on positions, and scatters whose row differs
    from lane to lane."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.max_pool2d(self.bn(x).relu(), 3, 2, 1)
        return torch.nn.functional.avg_pool2d(y, 2, ceil_mode=True)


class _Windows(torch.nn.Module):
    """Sums over short windows, unrolled into pointwise sums: a 2x nearest
    upsampling (its gradient sums 2x2 windows of a channels-last gradient)
    and a padded 3x3 average pool, then a sum over a dim of 3."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.interpolate(x, scale_factor=2.0, mode="nearest")
        y = y.contiguous(memory_format=torch.channels_last) * 1.5
        y = torch.nn.functional.avg_pool2d(y, 3, 1, 1)
        return y.unflatten(1, (-1, 3)).sum(2)


class _Decoder(torch.nn.Module):
    """A U-Net decoder step: upsampled, a skip concatenated, a convolution
    rdyn runs channels-last, a ReLU. The backward's ReLU mask of the NCHW
    gradient is computed in NCHW order, then copied channels-last for the
    convolution's backward (`passes/relayout.rs`)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        up = torch.nn.functional.interpolate(x, scale_factor=2.0, mode="nearest")
        return torch.relu(self.conv(torch.cat([up, up * 0.5], 1)))


@pytest.mark.parametrize(
    "module, shape",
    [(_Rotary, (2, 12, 64)), (_Pools, (2, 8, 19, 19)), (_Windows, (2, 6, 16, 16)), (_Decoder, (2, 8, 16, 16))],
    ids=["rotary", "pools", "windows", "decoder"],
)
def test_training_steps_compile_every_stage(module, shape) -> None:
    g = torch.Generator().manual_seed(0)
    stats = _check_training(module(), torch.randn(shape, generator=g, dtype=torch.float64))
    assert stats["cpu_stages_interpreted"] == 0 and stats["nodes_fallback"] == 0, stats
    assert stats["cpu_stages_compiled"] > 0, stats


def test_integer_position_stages_compile() -> None:
    """int64 arithmetic on loaded ids (GPT-2's position ids' differences)
    and a float truncated to int64 (T5's log-scaled buckets, saturating at
    the -inf of log(0)) compile, with eager's values."""
    import math

    def fn(ids: torch.Tensor, n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
        steps = (ids[:, 1:] - ids[:, :-1]) != 1
        rel = torch.arange(n)[None, :] - torch.arange(n)[:, None]
        large = (torch.log(rel.abs().float() / 8) / math.log(16) * 8).to(torch.int64) + 8
        return steps.long() * 3 - ids[:, 1:], large

    ids = torch.tensor([[0, 1, 2, 5, 6, 7, 1 << 40, (1 << 40) + 1]] * 3) * torch.tensor([[1], [-1], [2]])
    torch._dynamo.reset()
    rdyn.reset_stats()
    got = torch.compile(fn, backend="rdyn")(ids)
    want = fn(ids)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and torch.equal(a, b)
    stats = rdyn.stats()
    assert stats["cpu_stages_interpreted"] == 0 and stats["nodes_fallback"] == 0, stats


def test_a_divided_odd_dim_does_not_carry_the_tile() -> None:
    """`repeat_interleave(2)[..., 1:]`: the last dim (63) is read at `(i +
    1) // 2`, which no split makes affine; the tile moves to a wide dim that
    every access walks affinely, and the stage compiles."""
    fn = lambda x, y: x.repeat_interleave(2, -1)[..., 1:] * y  # noqa: E731
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 128, 32, generator=g, dtype=torch.float64), torch.randn(128, 63, generator=g, dtype=torch.float64)
    stats = _check(fn, x, y)
    assert stats["cpu_stages_interpreted"] == 0, stats
    (kernel,) = cpu_kernels(fn, x.float(), y.float())
    assert kernel.source.split("outer [", 1)[1].split("]", 1)[0].endswith("128"), kernel.source


@pytest.mark.parametrize("beside_a_cat", [False, True])
def test_pairwise_lookups_read_each_row_id(beside_a_cat: bool) -> None:
    """`t[:, a, b]` with index tensors: two lane-varying row ids, loaded into
    one reused register, each read where its own bounds check read it (a
    silent wrong answer once); alone and as one input of a `cat` (masked)."""

    def fn(x: torch.Tensor, t: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        g = t.view(8, 5, 5)[:, a, b]
        return torch.cat([x.relu(), g], 1) if beside_a_cat else g * 2

    g = torch.Generator().manual_seed(0)
    x, t = torch.randn(8, 32, generator=g), torch.randn(8, 25, generator=g)
    a, b = torch.randint(-5, 5, (10,), generator=g), torch.randint(0, 5, (10,), generator=g)
    torch._dynamo.reset()
    rdyn.reset_stats()
    got = torch.compile(fn, backend="rdyn")(x, t, a, b)
    torch.testing.assert_close(got, fn(x, t, a, b), rtol=0, atol=0)
    assert rdyn.stats()["cpu_stages_interpreted"] == 0


def test_bool_and_integer_reductions_compile() -> None:
    """`any`/`all` of a comparison (attention's "is any score not -inf"),
    an int64 count of a mask (softmax's backward through `amax`), and a sum
    divided by an int64 count read back as float: every stage compiles,
    with eager's values."""

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        counts = (x == x.amax(0)).sum(0)
        positive = (x > 0).sum(0)
        return (x != float("-inf")).any(-1), (x > -1).all(-1), counts, x.clamp(min=0).sum(0) / positive

    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 24, generator=g).round()
    x[3] = float("-inf")
    x[:, 5] = 2.0
    torch._dynamo.reset()
    rdyn.reset_stats()
    got = torch.compile(fn, backend="rdyn")(x)
    for a, b in zip(got, fn(x)):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=1e-6, atol=0)
    stats = rdyn.stats()
    assert stats["cpu_stages_interpreted"] == 0 and stats["nodes_fallback"] == 0, stats


@pytest.mark.parametrize("train", [False, True])
def test_row_ids_computed_from_loaded_ids_gather_lane_by_lane(train: bool) -> None:
    """A relative-position bias (T5's) added to per-head scores: rows
    picked by `where(causal, clamp(ids, max=31), offset)` (int64 arithmetic
    on a loaded id, negative ids counted from the end) differ along the
    tile (the key position), so the table is gathered lane by lane;
    trained, the table's gradient scatters by the same rows."""

    def fn(ids: torch.Tensor, table: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        i = torch.arange(32)
        rel = i[None, :] - i[:, None]
        row = torch.where(rel <= 0, ids.clamp(max=31), rel + 31)
        return scores + table[row].permute(2, 0, 1)

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(-40, 60, (32, 32), generator=g)
    table64 = torch.randn(64, 4, generator=g, dtype=torch.float64, requires_grad=train)
    table = table64.detach().float().requires_grad_(train)
    scores = torch.randn(4, 32, 32, generator=g)
    torch._dynamo.reset()
    rdyn.reset_stats()
    got = torch.compile(fn, backend="rdyn")(ids, table, scores)
    want = fn(ids, table64, scores.double())
    torch.testing.assert_close(got, want.float(), rtol=1e-6, atol=1e-6)
    (kernel,) = [k for k in cpu_kernels(fn, ids, table.detach(), scores) if "buf" in k.source]
    assert "outer [4, 32, 32]" in kernel.source, kernel.source
    if train:
        w = torch.randn(4, 32, 32, generator=g, dtype=torch.float64)
        (got * w.float()).sum().backward()
        (want * w).sum().backward()
        torch.testing.assert_close(table.grad, table64.grad.float(), rtol=1e-5, atol=1e-5)
    stats = rdyn.stats()
    assert stats["cpu_stages_interpreted"] == 0 and stats["nodes_fallback"] == 0, stats


def test_batch_norm_training_kernels_run_by_rows() -> None:
    """A batch norm trained at batch 1 over small images (MobileNet's last
    layers): the per-channel sums and the point stages beside them (one
    value per channel, `inner []`) run by rows, many channels a call,
    instead of one call per stage and channel; with eager's gradients."""
    g = torch.Generator().manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(16, 64, 1), torch.nn.BatchNorm2d(64), torch.nn.ReLU6())
    x = torch.randn(1, 16, 4, 4, generator=g, dtype=torch.float64)
    stats = _check_training(module, x)
    assert stats["cpu_stages_interpreted"] == 0, stats
    explained = rdyn.explain(module, x.float().requires_grad_())
    reducing = [k.source for k in explained.kernels if "sum over" in k.source]
    assert reducing, [k.source for k in explained.kernels]
    for source in reducing:
        stages = [line for line in source.splitlines() if "stage ->" in line]
        assert all("[jit rows]" in line for line in stages), source


class _Upsample(torch.nn.Module):
    """Nearest 2x upsampling written as a gather (`F.interpolate` would be
    rewritten into a broadcast, `rdyn._rewrite`), trained: its backward
    scatter-adds each gradient to `[row, column]`, the row the same on
    every lane of a tile (computed before the compiled call) and the column
    not (read per lane after it)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(0.5, 1.5, 4)[:, None, None])
        self.register_buffer("index", torch.arange(16) // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.w)[:, :, self.index[:, None], self.index]


def test_a_scatter_with_a_row_fixed_per_tile_adds_to_every_lanes_row() -> None:
    """A scatter whose store has an executor-computed row (lane 0 only)
    beside a lane-varying column: every lane adds at the computed row (the
    other lanes once read stale rows: wrong gradients, and out-of-bounds
    writes that crashed a larger decoder)."""
    g = torch.Generator().manual_seed(0)
    stats = _check_training(_Upsample(), torch.randn(2, 4, 8, 8, generator=g, dtype=torch.float64))
    assert stats["cpu_stages_interpreted"] == 0 and stats["nodes_fallback"] == 0, stats


def test_a_reduction_over_a_divided_dim_compiles() -> None:
    """A per-channel sum of a value read through a patch permutation (the
    input gradient of a 2x2 patch convolution, `[n, c, kh, kw, oh, ow]`,
    summed by a LayerNorm's weight gradient): the last reduction dim (28)
    is read at `(w // 2, w % 2)`; it splits, its 2 moved to the front, and
    the stage compiles (it was interpreted: 5.6 ms for 150 K elements)."""

    def fn(cols, y):
        n, c, _, _, oh, ow = cols.shape
        x = cols.permute(0, 1, 4, 2, 5, 3).reshape(n, c, oh * 2, ow * 2)
        return (x * y).sum((0, 2, 3)), x.sum((0, 2, 3))

    g = torch.Generator().manual_seed(0)
    cols, y = torch.randn(2, 24, 2, 2, 14, 14, generator=g, dtype=torch.float64), torch.randn(2, 24, 28, 28, generator=g, dtype=torch.float64)
    stats = _check(fn, cols, y)
    assert stats["cpu_stages_interpreted"] == 0, stats
    sources = "".join(k.source for k in cpu_kernels(fn, cols.float(), y.float()))
    assert "//" not in sources and "%" not in sources, sources


COLUMN_REDUCTIONS = {
    "sum": lambda x: x.sum(0),
    "mean_of_product": lambda x: (x * x.flip(1)).mean(0),
    "amax": lambda x: x.amax(0),
    "amin_keepdim": lambda x: x.amin(0, keepdim=True),
    "prod": lambda x: (1 + x / 4096).prod(0),
    "two_sums": lambda x: (x.sum(0), (x * 2 + 1).sum(0)),
}


@pytest.mark.parametrize("name", sorted(COLUMN_REDUCTIONS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_narrow_column_reductions_split_into_row_blocks(name: str, dtype: torch.dtype) -> None:
    """A reduction over the leading dim of a narrow layout (`[2048, 256]`)
    runs as partials over 16 blocks of 128 rows, each streaming whole rows,
    then a kernel combining the blocks (`passes/split_reduce.rs`); NaN in
    one block still wins a max or min."""
    fn = COLUMN_REDUCTIONS[name]
    x = torch.randn(2048, 256, dtype=torch.float64)
    x[1500, 7] = float("nan")
    args = [x.to(dtype)]
    torch._dynamo.reset()
    rdyn.reset_stats()
    got = torch.compile(fn, backend="rdyn")(*args)
    assert rdyn.stats()["nodes_fallback"] == 0
    assert_same(got, fn(*args), fn(x))
    sources = [k.source for k in cpu_kernels(fn, *args)]
    assert any("outer [16, 256]" in s and "over [128]" in s for s in sources), sources
    assert any("over [16]" in s for s in sources), sources


def test_column_reduction_split_keeps_what_it_cannot_split_whole() -> None:
    """Wide rows (whole cache lines per tile already), a prime number of
    rows, and a reduction reading what its kernel writes stay one kernel."""
    for fn, x in [
        (lambda a: a.sum(0), torch.randn(256, 2048)),
        (lambda a: a.sum(0), torch.randn(2039, 256)),
        (lambda a: a.argmax(0), torch.randn(2048, 256)),
    ]:
        _check(fn, x.double())
        sources = [k.source for k in cpu_kernels(fn, x)]
        assert not any("outer [16, " in s for s in sources), sources


def _layer_norm_pair():
    """A LayerNorm(256) with random affine parameters in float64 and its
    float32 copy, an input and an output gradient of `[16, 128, 256]`."""
    torch.manual_seed(0)
    ln = torch.nn.LayerNorm(256).double()
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    x = torch.randn(16, 128, 256, dtype=torch.float64)
    g = torch.randn(16, 128, 256, dtype=torch.float64)
    ln32 = torch.nn.LayerNorm(256)
    ln32.load_state_dict({k: v.float() for k, v in ln.state_dict().items()})
    return ln, ln32, x, g


def _layer_norm_grads(ln, x, g):
    ln.zero_grad()
    x = x.detach().requires_grad_()
    (ln(x) * g.to(x.dtype)).sum().backward()
    return [x.grad.clone(), ln.weight.grad.clone(), ln.bias.grad.clone()]


def test_layer_norm_weight_gradients_split_into_row_blocks(monkeypatch) -> None:
    """A LayerNorm's weight and bias gradients over a `[16, 128, 256]`
    activation (column sums over two reduction dims, split by the batch)
    through the split, against float64 eager; the partials in a kernel of
    their own (`RDYN_HOST_PARTIALS=0`)."""
    monkeypatch.setenv("RDYN_HOST_PARTIALS", "0")
    ln, ln32, x, g = _layer_norm_pair()
    want64 = _layer_norm_grads(ln, x, g)[1:]
    want32 = _layer_norm_grads(ln32, x.float(), g)[1:]
    torch._dynamo.reset()
    rdyn.reset_stats()
    got = _layer_norm_grads(torch.compile(ln32, backend="rdyn"), x.float(), g)[1:]
    assert rdyn.stats()["nodes_fallback"] == 0
    assert_same(got, want32, want64)
    report = str(rdyn.explain(ln32, x.float().requires_grad_()))
    assert "outer [16, 256]" in report and "over [16]" in report, report


_HOSTED_SCRIPT = r"""
import sys, torch, rdyn
torch.manual_seed(0)
ln = torch.nn.LayerNorm(256)
with torch.no_grad():
    ln.weight.normal_(); ln.bias.normal_()
x = torch.randn(16, 128, 256, requires_grad=True)
g = torch.randn(16, 128, 256)
f = torch.compile(ln, backend="rdyn")
(f(x) * g).sum().backward()
torch.save((x.grad, ln.weight.grad, ln.bias.grad), sys.argv[1])
"""


def test_layer_norm_weight_gradients_run_in_the_row_kernel() -> None:
    """The LayerNorm backward's row kernel (the input's gradient) runs by
    blocks of 64 rows and sums each block's weight and bias gradients while
    its rows are in cache: one kernel over the blocks (column partials
    along the columns, `sum over [64]`) and one combining the 32 blocks,
    instead of a second pass over the activations. Against float64 eager."""
    ln, ln32, x, g = _layer_norm_pair()
    want64 = _layer_norm_grads(ln, x, g)
    want32 = _layer_norm_grads(ln32, x.float(), g)
    torch._dynamo.reset()
    got = _layer_norm_grads(torch.compile(ln32, backend="rdyn"), x.float(), g)
    assert_same(got, want32, want64)
    backward = _backward_kernels(ln32, x.float().requires_grad_())
    assert len(backward) == 2, backward
    hosted, combine = backward
    assert "outer [32] tile Inner" in hosted and "inner [256] sum over [64]" in hosted, hosted
    assert "sum over [32]" in combine, combine


def test_hosted_column_partials_match_the_interpreter(tmp_path) -> None:
    """The blocked row kernel with its column partials gives, compiled, what
    the interpreter gives (`RDYN_JIT=0`) to within 1e-6: both sum each
    column over the block's rows in row order."""
    results = _interpreted_and_compiled(_HOSTED_SCRIPT, tmp_path)
    for a, b in zip(results["0"], results["1"]):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def _backward_kernels(fn, *args: torch.Tensor) -> list[str]:
    report = rdyn.explain(fn, *args)
    return [k.source for k in report.kernels if k.name.startswith("g1.k")]


def test_scatter_gradients_run_in_parallel_over_disjoint_dims() -> None:
    """The gradient of a gather along inner dims (nearest interpolation by
    1.5, `[n, c]` slices each scattered into only by their own points) runs
    in parallel across `n·c`, in index order within a slice; an embedding's
    gradient, whose rows any token may pick, stays on one thread."""
    g = torch.Generator().manual_seed(0)
    x64 = torch.randn(4, 16, 40, 40, generator=g, dtype=torch.float64)
    w64 = torch.randn(4, 16, 60, 60, generator=g, dtype=torch.float64)
    fn = lambda x, w: (torch.nn.functional.interpolate(x, scale_factor=1.5) * w).sum()  # noqa: E731
    x = x64.clone().requires_grad_()
    (want,) = torch.autograd.grad(fn(x, w64), x)
    xf = x64.float().requires_grad_()
    torch._dynamo.reset()
    (got,) = torch.autograd.grad(torch.compile(fn, backend="rdyn")(xf, w64.float()), xf)
    assert_same(got, want.float(), want)
    scatters = [k for k in _backward_kernels(fn, xf, w64.float()) if "per lane" in k]
    assert scatters and all("serial within 2 parallel dims" in k for k in scatters), scatters

    table = torch.randn(50, 8, generator=g, dtype=torch.float64)
    tokens = torch.randint(0, 50, (64, 32), generator=g)
    emb = lambda t: torch.nn.functional.embedding(tokens, t).square().sum()  # noqa: E731
    t = table.clone().requires_grad_()
    (want,) = torch.autograd.grad(emb(t), t)
    tf = table.float().requires_grad_()
    torch._dynamo.reset()
    (got,) = torch.autograd.grad(torch.compile(emb, backend="rdyn")(tf), tf)
    assert_same(got, want.float(), want)
    scatters = [k for k in _backward_kernels(emb, tf) if "per lane" in k]
    assert scatters and all(" serial" in k and "within" not in k for k in scatters), scatters


def test_a_scatter_along_the_last_dim_runs_in_parallel_over_rows() -> None:
    """`scatter_add` along dim 1 writes row `n` only from row `n` of the
    index: parallel across rows, duplicates within a row all counted."""
    g = torch.Generator().manual_seed(1)
    src = torch.randn(512, 96, generator=g, dtype=torch.float64)
    index = torch.randint(0, 24, (512, 96), generator=g)
    fn = lambda s, i: torch.zeros(512, 24, dtype=s.dtype).scatter_add(1, i, s)  # noqa: E731
    torch._dynamo.reset()
    got = torch.compile(fn, backend="rdyn")(src.float(), index)
    assert_same(got, fn(src.float(), index), fn(src, index))
    scatters = [k.source for k in cpu_kernels(fn, src.float(), index) if "per lane" in k.source]
    assert scatters and all("serial within 1 parallel dims" in k for k in scatters), scatters


def test_a_gather_at_fractional_positions_tiles_along_the_image() -> None:
    """Nearest interpolation by 1.5 reads row `(2·i) // 3`: split as
    `i = 3·q + r`, the read is affine in `q`, so the tile runs along the
    image's columns (loads two apart), not across the `n·c` planes (every
    lane a plane away: 5 ms where eager takes 0.5 for `[4, 32, 64, 64]`)."""
    fn = lambda x: torch.nn.functional.interpolate(x, scale_factor=1.5)  # noqa: E731
    x = torch.randn(4, 40, 64, 64, dtype=torch.float64)
    _check(fn, x)
    (kernel,) = cpu_kernels(fn, x.float())
    outer = kernel.source.split("outer [", 1)[1].split("]", 1)[0]
    assert outer.endswith(", 32"), kernel.source


def dense_layer_input(scale: torch.Tensor, shift: torch.Tensor, *features: torch.Tensor) -> torch.Tensor:
    """A DenseNet layer's input: the concatenation of every earlier layer's
    features, batch-normed (per channel) and ReLU'd."""
    x = torch.cat(features, 1)
    return torch.relu(x * scale[:, None, None] + shift[:, None, None])


def test_a_concatenation_of_many_equal_sources_splits_into_one_kernel() -> None:
    """Twenty sources of 32 channels after a 64-channel one: 21 pieces of
    two shapes, so two kernels whose stages read one source each, unmasked
    (as one masked stage, every element evaluated all 21 reads and selects:
    half of DenseNet-121's kernel time)."""
    g = torch.Generator().manual_seed(2)
    features = [torch.randn(1, 64, 6, 6, generator=g, dtype=torch.float64)]
    features += [torch.randn(1, 32, 6, 6, generator=g, dtype=torch.float64) for _ in range(20)]
    c = 64 + 20 * 32
    scale, shift = torch.randn(c, generator=g, dtype=torch.float64), torch.randn(c, generator=g, dtype=torch.float64)
    _check(dense_layer_input, scale, shift, *features)
    kernels = cpu_kernels(dense_layer_input, scale.float(), shift.float(), *[f.float() for f in features])
    assert len(kernels) == 2, [k.source for k in kernels]
    assert all(" if r" not in k.source for k in kernels), kernels[0].source
    assert sorted(k.source.count("stage ->") for k in kernels) == [1, 20]


def test_a_pool_over_a_small_map_tiles_along_its_rows() -> None:
    """A 2x2 average pool of a 12x12 map: a tile along the 2-wide window had
    2 lanes (0.5 ms for DenseNet's last transition); along the 6-wide output
    rows it has 6."""
    fn = lambda x: torch.nn.functional.avg_pool2d(x, 2)  # noqa: E731
    x = torch.randn(1, 256, 12, 12, dtype=torch.float64)
    _check(fn, x)
    (kernel,) = cpu_kernels(fn, x.float())
    assert "tile Outer" in kernel.source, kernel.source
