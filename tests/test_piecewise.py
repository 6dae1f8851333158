"""Piecewise kernels on the CPU (`lowering/src/passes/piecewise.rs`): a `cat` or a
`constant_pad_nd` large enough to be split runs as one unmasked kernel per
source and per padded side; an interleave (`stack(.., -1).flatten(-2)`, the
backward of `x[..., ::2]`) as one per residue of its column. Each case is compared with eager (copies are
exact, so exactly), and its plan is checked to be split into the expected
number of stages (pieces of equal ranges share a kernel), with no masked
load and no select left in any of them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import rdyn
from helpers import assert_same, compile_aten


def _sources(fn, *args):
    gm = make_fx(fn, decomposition_table=rdyn.DECOMPOSITIONS)(*args)
    return [k.source for k in rdyn.describe_graph(gm, list(args)).kernels if k.name.startswith("k")]


def _masked(source: str) -> bool:
    return " if r" in source or "= where " in source


g = torch.Generator().manual_seed(0)


def r(*sizes, dtype=torch.float32):
    return torch.randn(*sizes, generator=g).to(dtype)


def _qkv(dq, dkt, dv):
    b, h, t, d = dq.shape
    parts = [dq.transpose(1, 2), dkt.permute(0, 3, 1, 2), dv.transpose(1, 2)]
    return torch.cat([p.reshape(b, t, h * d) for p in parts], -1)


def _interleave(x, cos, sin):
    """Rotary embeddings on interleaved pairs: `stack(.., -1).flatten(-2)`."""
    a, b = x[..., ::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)


def _deinterleave_grad(g):
    """The backward of `x[..., ::2]` and `x[..., 1::2]`: each half scattered
    back into every other column (two `slice_scatter`s into zeros)."""
    z = torch.zeros(*g.shape[:-1], g.shape[-1] * 2)
    return torch.slice_scatter(z, g * 2, -1, 0, None, 2) + torch.slice_scatter(z, g.neg(), -1, 1, None, 2)


def _cat_rows_through_reshape(x, y):
    """A `cat` along heads read through a `[heads, t, d] -> [t, heads * d]` view."""
    return torch.cat([x, y], 0).transpose(0, 1).reshape(x.shape[1], -1)


def _unbind_backward(g0, g1, g2):
    """The backward of `qkv.view(t, 3, d).unbind(1)`: each gradient
    `select_scatter`ed into zeros at its index, summed."""
    z = torch.zeros(3, *g0.shape)
    total = sum(torch.select_scatter(z, g, 0, k) for k, g in enumerate((g0, g1, g2)))
    return total.transpose(0, 1).reshape(g0.shape[0], -1)


CASES = {
    # Split by residue (`v = 2w + r`): each part one unmasked store.
    "interleave_stack_flatten": (_interleave, (r(4, 128, 64), r(128, 32), r(128, 32)), 2),
    "deinterleave_backward": (_deinterleave_grad, (r(8, 128, 32),), 2),
    # Cut where an equality `i == k` on the unbound dim turns.
    "unbind_backward": (_unbind_backward, (r(256, 64), r(256, 64), r(256, 64)), 3),
    # Cut where a quotient `i // 256` of the index turns.
    "cat_rows_through_reshape": (_cat_rows_through_reshape, (r(4, 64, 32), r(4, 64, 32)), 2),
    "cat_last_dim": (lambda x, y: torch.cat([x, y], 1), (r(256, 300), r(256, 212)), 2),
    "cat_first_dim": (lambda x, y: torch.cat([x, y * 2], 0), (r(300, 64), r(200, 64)), 2),
    "cat_middle_dim_three": (lambda x, y, z: torch.cat([x, y, z], 1), (r(8, 5, 300), r(8, 7, 300), r(8, 1, 300)), 3),
    "cat_transposed_sources": (_qkv, (r(4, 4, 64, 32), r(4, 4, 32, 64), r(4, 4, 64, 32)), 3),
    "cat_then_relu": (lambda x, y: torch.relu(torch.cat([x, y], -1)), (r(64, 100), r(64, 156)), 2),
    "cat_int64": (
        lambda x, y: torch.cat([x, y], 1),
        (torch.randint(-5, 5, (128, 70), generator=g), torch.randint(-5, 5, (128, 90), generator=g)),
        2,
    ),
    "cat_float16": (lambda x, y: torch.cat([x, y], 1), (r(128, 70, dtype=torch.float16), r(128, 90, dtype=torch.float16)), 2),
    "cat_bool": (lambda x, y: torch.cat([x > 0, y < 0], 1), (r(128, 70), r(128, 90)), 2),
    "cat_channels_last": (
        lambda x, y: torch.cat([x, y], 1),
        (
            r(2, 16, 20, 20).contiguous(memory_format=torch.channels_last),
            r(2, 8, 20, 20).contiguous(memory_format=torch.channels_last),
        ),
        2,
    ),
    "pad_2d": (lambda x: F.pad(x, (1, 1, 1, 1)), (r(8, 16, 30, 30),), 5),
    "pad_value_then_mul": (lambda x: F.pad(x, (0, 3), value=-1.5) * 2, (r(512, 509),), 2),
    "pad_negative_and_positive": (lambda x: F.pad(x, (-2, 5)), (r(256, 64),), 2),
    "cat_of_pads": (lambda x, y: F.pad(torch.cat([x, y], 1), (1, 2)), (r(64, 96), r(64, 160)), 4),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_split_matches_eager(name: str) -> None:
    fn, args, pieces = CASES[name]
    sources = _sources(fn, *args)
    assert sum(s.count("stage ->") for s in sources) == pieces, sources
    assert not any(_masked(s) for s in sources), "\n".join(sources)
    compiled = compile_aten(fn, list(args), {"strict": True})
    (got,) = compiled(*args)
    want = fn(*args)
    assert_same(got, want, rtol=0, atol=0)
    assert got.stride() == want.stride()


def test_small_cat_stays_one_kernel() -> None:
    """Below the size where a kernel per piece pays, the masked form stays."""
    fn = lambda x, y: torch.cat([x, y], 1)  # noqa: E731
    args = (r(4, 3), r(4, 5))
    sources = _sources(fn, *args)
    assert len(sources) == 1 and _masked(sources[0])
    (got,) = compile_aten(fn, list(args))(*args)
    assert_same(got, fn(*args), rtol=0, atol=0)


def test_dynamic_sizes_keep_the_masked_form() -> None:
    """Symbolic offsets give no split points: the graph still runs."""
    fn = torch.compile(lambda x, y: torch.cat([x, y.sin()], 1), backend="rdyn", dynamic=True)
    for n in (100, 200):
        x, y = r(64, n), r(64, 300 - n)
        assert_same(fn(x, y), torch.cat([x, y.sin()], 1))


def test_training_step_through_a_split_cat() -> None:
    """The cat's backward is slices; its forward the split copies."""
    w1 = r(300, 64).requires_grad_()
    w2 = r(212, 64).requires_grad_()

    def step(x):
        return torch.cat([x @ w1.t(), (x @ w2.t()).tanh()], 1).square().sum()

    x = r(256, 64)
    compiled = torch.compile(step, backend="rdyn")
    loss = compiled(x)
    loss.backward()
    grads = (w1.grad.clone(), w2.grad.clone())
    w1.grad, w2.grad = None, None
    want = step(x)
    want.backward()
    # The float64 reference: the weight gradients are sums of 256 terms that
    # cancel in places, where eager's BLAS and rdyn's products round apart.
    w1_64, w2_64 = (w.detach().double().requires_grad_() for w in (w1, w2))
    ref = torch.cat([x.double() @ w1_64.t(), (x.double() @ w2_64.t()).tanh()], 1).square().sum()
    ref.backward()
    assert_same(loss, want, ref)
    assert_same(grads, (w1.grad, w2.grad), (w1_64.grad, w2_64.grad))


def test_pieces_reading_one_stored_value() -> None:
    """Two pieces of equal ranges share a kernel with the stage that stores
    a value both read (a tanh GELU has several users): the store must stay,
    not be folded into the first piece only (fuzz seed 40120 at
    `RDYN_PIECEWISE_MIN=1`)."""

    def fn(c):
        v1 = F.gelu(c, approximate="tanh")
        v2 = v1 / (v1 * v1 + 1)
        return torch.cat([v2, v2 * 2], 0)

    c = r(4096)
    sources = _sources(fn, c)
    assert not any(_masked(s) for s in sources), "\n".join(sources)
    (got,) = compile_aten(fn, [c], {"strict": True})(c)
    assert_same(got, fn(c))


def test_unbind_backward_pieces_are_blocked_transposes() -> None:
    """The pieces of `unbind`'s gradient read transposed (attention's `q`,
    `k` and `v` gradients back into the `qkv` projection's, which a GEMM
    reads transposed) are each the load plus `0.0` that the sum of selects
    leaves: blocked transposing copies that add the `0.0` too (the copy's
    own test, in `transpose.rs`, checks that a `-0.0` arrives as `+0.0`)."""

    def fn(g0, g1, g2, x):
        z = torch.zeros(3, *g0.shape)
        total = sum(torch.select_scatter(z, g, 0, k) for k, g in enumerate((g0, g1, g2)))
        b, h, t, d = g0.shape
        return total.permute(1, 3, 0, 2, 4).reshape(b * t, 3 * h * d).t() @ x

    args = [r(2, 4, 128, 64), r(2, 4, 128, 64), r(2, 4, 128, 64), r(256, 16)]
    sources = _sources(fn, *args)
    assert len(sources) == 1 and "as blocked transposes" in sources[0], sources
    (got,) = compile_aten(fn, args, {"strict": True})(*args)
    assert_same(got, fn(*args))
