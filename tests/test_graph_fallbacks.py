"""Graphs that once failed to compile or to run, each against PyTorch eager.

Each case here raised (under ``RDYN_STRICT=1``, as the tests run) or gave a
wrong result: an LSTM layer's eager node (``mkldnn_rnn_layer``) returning an
undefined workspace, scalars read with ``.item()`` that the eager runner
could not evaluate, an adaptive pool to an empty output, ``torch.eye``'s
uint16 positions, custom ops that need contiguous inputs, grouped-query
attention's backward running as ATen's kernel, a view with no elements, and
``_embedding_bag``'s empty results on the Rust fast path.
Where the fix is a lowering, `rdyn.stats()` shows no eager node.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import rdyn


def _compiled(fn):
    return torch.compile(fn, backend="rdyn")


# -- 10: nn.LSTM under allow_rnn (aten.mkldnn_rnn_layer) ----------------------


def _lstm_and_input():
    torch.manual_seed(0)
    return torch.nn.LSTM(4, 8, num_layers=2, batch_first=True), torch.randn(3, 5, 4)


def test_lstm_inference_runs_its_layers_eagerly() -> None:
    """The layer's eager node returns no workspace in inference (grad mode
    off): its output stands in as an empty tensor, the node counted."""
    model, x = _lstm_and_input()
    with torch._dynamo.config.patch(allow_rnn=True), torch.no_grad():
        want = model(x)
        got = _compiled(model)(x)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    assert rdyn.stats()["fallback_ops"].get("aten.mkldnn_rnn_layer.default") == 2


def test_lstm_training_matches_eager_gradients() -> None:
    """Training: the forward's layer writes its workspace (run in grad
    mode), which the backward's layer reads; outputs and every parameter's
    gradient match eager."""
    model, x = _lstm_and_input()
    out, (h, c) = model(x)
    (out.square().sum() + h.sum() + c.sum()).backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with torch._dynamo.config.patch(allow_rnn=True):
        got_out, (got_h, got_c) = _compiled(model)(x)
    (got_out.square().sum() + got_h.sum() + got_c.sum()).backward()
    torch.testing.assert_close(got_out, out)
    for name, (p, w) in zip([n for n, _ in model.named_parameters()], zip(model.parameters(), want)):
        torch.testing.assert_close(p.grad, w, msg=lambda m: f"gradient of {name}: {m}")
    assert rdyn.stats()["fallback_ops"].get("aten.mkldnn_rnn_layer_backward.default") == 2


@pytest.mark.parametrize("mode", ["max", "sum_weighted"])
def test_embedding_bag_with_empty_results_is_called_from_rust(mode, monkeypatch) -> None:
    """``_embedding_bag`` where it runs eagerly (max, per-sample weights:
    sum and mean lower, `_decomp_index.py`) returns results its metadata
    sizes 0 (the fast path's ``offset2bag`` and ``max_indices``): it is
    called through the Rust fast path all the same (the runner's general
    `run_node`, about 30 µs a call more, is never reached), and a training
    step matches eager."""
    from rdyn._runner import GraphRunner

    general = []
    run_node = GraphRunner.run_node
    monkeypatch.setattr(GraphRunner, "run_node", lambda self, *a: general.append(1) or run_node(self, *a))
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(50, 8, mode=mode.split("_")[0])
    indices, offsets = torch.randint(0, 50, (20,)), torch.tensor([0, 3, 3, 9, 15])
    weights = torch.rand(20) if mode == "sum_weighted" else None
    want = bag(indices, offsets, per_sample_weights=weights)
    want.square().sum().backward()
    want_grad, bag.weight.grad = bag.weight.grad.clone(), None
    rdyn.reset_stats()
    got = _compiled(bag)(indices, offsets, per_sample_weights=weights)
    got.square().sum().backward()
    assert "aten._embedding_bag.default" in rdyn.stats()["fallback_ops"]
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(bag.weight.grad, want_grad)
    assert not general


# -- 11: scalars read with .item() (aten._local_scalar_dense) -----------------


def _split_arange(x):
    n = x.sum().item()
    return torch.split(torch.arange(n), [5, 5, 10])


def test_item_sizes_compile_and_are_checked() -> None:
    """``.item()`` used as a size that the graph pins (``split`` asserts it
    is 20): the graph's ``_assert_scalar`` nodes read the value from the
    tensor each call, so another value raises as in eager."""
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        fn = _compiled(_split_arange)
        got = fn(torch.tensor([20]))
        for g, w in zip(got, _split_arange(torch.tensor([20]))):
            torch.testing.assert_close(g, w)
        with pytest.raises(RuntimeError, match="u0 <= 20"):
            fn(torch.tensor([21]))


def _scaled(x, y):
    n = x.sum().item()
    return y * n + 1, y.new_full((3,), n)


def test_item_values_feed_eager_nodes() -> None:
    """A float read with ``.item()`` as an eager node's argument (``full``):
    read from its tensor per call, never a constant of the first call."""
    y = torch.randn(4)
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        fn = _compiled(_scaled)
        for value in (2.5, -1.25):
            x = torch.tensor([value])
            for g, w in zip(fn(x, y), _scaled(x, y)):
                torch.testing.assert_close(g, w)


# -- 13: adaptive average pooling to an empty output -------------------------


@pytest.mark.parametrize(
    "module, shape",
    [
        (torch.nn.AdaptiveAvgPool1d(0), (2, 3, 8)),
        (torch.nn.AdaptiveAvgPool2d((0, 3)), (2, 3, 5, 8)),
        (torch.nn.AdaptiveAvgPool2d((2, 0)), (2, 3, 5, 8)),
    ],
)
def test_adaptive_avg_pool_to_no_elements(module, shape) -> None:
    """An output size of 0 gives eager's empty result (and a zero gradient),
    natively: PyTorch's decomposition divided by the output size."""
    x = torch.randn(shape, requires_grad=True)
    got = _compiled(module)(x)
    want = module(x)
    assert got.shape == want.shape and got.stride() == want.stride()
    got.sum().backward()
    torch.testing.assert_close(x.grad, torch.zeros(shape))
    assert rdyn.stats()["nodes_fallback"] == 0


# -- 14: torch.eye ------------------------------------------------------------


@pytest.mark.parametrize(
    "n, m, dtype",
    [(256, None, torch.float32), (300, 257, torch.int64), (5, 7, torch.bool), (3, 2, torch.float16), (1, None, torch.float64)],
)
def test_eye_runs_natively(n, m, dtype) -> None:
    """``torch.eye`` compares int64 positions: PyTorch's reference used
    uint16 ones above 255, which rdyn ran eagerly, where ATen has no uint16
    ``arange``."""
    fn = (lambda: torch.eye(n, dtype=dtype)) if m is None else (lambda: torch.eye(n, m, dtype=dtype))
    got = _compiled(fn)()
    want = fn()
    assert got.dtype == want.dtype and got.stride() == want.stride()
    assert torch.equal(got, want)
    assert rdyn.stats()["nodes_fallback"] == 0


def test_eye_of_dynamic_size() -> None:
    """Sizes from an input (symbolic under ``dynamic=True``), 0 included."""
    fn = torch.compile(lambda x: torch.eye(x.shape[0], device=x.device), backend="rdyn", dynamic=True)
    for n in (0, 3, 300):
        x = torch.zeros(n)
        torch.testing.assert_close(fn(x), torch.eye(n))
    assert rdyn.stats()["nodes_fallback"] == 0


# -- 15: custom ops tagged needs_contiguous_strides --------------------------

_LIB = torch.library.Library("rdyn_fallbacks_test", "DEF")
_LIB.define("double(Tensor x) -> Tensor", tags=(torch.Tag.needs_contiguous_strides,))
_LIB.define("double_sum(Tensor[] xs) -> Tensor", tags=(torch.Tag.needs_contiguous_strides,))


def _double(x):
    assert x.is_contiguous(), f"non-contiguous input, strides {x.stride()}"
    return x * 2


def _double_sum(xs):
    assert all(x.is_contiguous() for x in xs), [x.stride() for x in xs]
    return sum(x * 2 for x in xs)


_LIB.impl("double", _double, "CompositeExplicitAutograd")
_LIB.impl("double_sum", _double_sum, "CompositeExplicitAutograd")
_LIB._register_fake("double", lambda x: torch.empty_like(x))
_LIB._register_fake("double_sum", lambda xs: torch.empty_like(xs[0]))


def test_custom_op_needing_contiguous_strides_gets_them() -> None:
    """rdyn's eager runner hands a ``needs_contiguous_strides`` op
    contiguous tensors (a transpose, a slice), through both its paths: the
    direct call (a tensor argument) and the general one (a list)."""
    ops = torch.ops.rdyn_fallbacks_test

    def fn(x):
        t = x.t()
        return ops.double(t) + 1, ops.double_sum([t, (x + 1).t()])

    x = torch.randn(4, 6)
    got = _compiled(fn)(x)
    t = x.t().contiguous()
    want = (t * 2 + 1, t * 2 + (t + 1) * 2)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert rdyn.stats()["fallback_ops"].get("rdyn_fallbacks_test.double.default") == 1


# -- 20: grouped-query attention's backward ----------------------------------


@pytest.mark.parametrize("kv_heads", [2, 8, 1])
def test_sdpa_backward_lowered_with_and_without_gqa(kv_heads) -> None:
    """Causal SDPA with ``enable_gqa`` (8 query heads over ``kv_heads``),
    forward and gradients, runs in rdyn's kernels: no ATen flash attention,
    forward or backward; values match eager."""

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    g = torch.Generator().manual_seed(0)
    base = [torch.randn(2, h, 6, 16, generator=g) for h in (8, kv_heads, kv_heads)]
    grad = torch.randn(2, 8, 6, 16, generator=g)
    leaves = [t.clone().requires_grad_() for t in base]
    eager = [t.clone().requires_grad_() for t in base]
    got = _compiled(fn)(*leaves)
    want = fn(*eager)
    (got * grad).sum().backward()
    (want * grad).sum().backward()
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for name, a, w in zip("qkv", leaves, eager):
        torch.testing.assert_close(a.grad, w.grad, atol=1e-5, rtol=1e-5, msg=lambda m: f"gradient of {name}: {m}")
    assert not [op for op in rdyn.stats()["fallback_ops"] if "flash_attention" in op]
    assert rdyn.stats()["nodes_fallback"] == 0


def test_gqa_decompositions_match_aten() -> None:
    """The decompositions against ATen's kernels under grouped-query
    attention: values, the log-sum-exp, and the gradients' strides."""
    from rdyn._attention import flash_attention_cpu, flash_attention_cpu_backward

    aten = torch.ops.aten
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 5, 6, 16, generator=g).transpose(1, 2)
    k, v = (torch.randn(2, 3, 7, 16, generator=g) for _ in range(2))
    mask = torch.randn(5, 7, generator=g)
    want = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, attn_mask=mask)
    got = flash_attention_cpu(q, k, v, 0.0, False, attn_mask=mask)
    for a, w in zip(got, want):
        assert a.stride() == w.stride()
        torch.testing.assert_close(a, w)
    grad = torch.randn(want[0].shape, generator=g)
    want = aten._scaled_dot_product_flash_attention_for_cpu_backward(grad, q, k, v, *want, 0.0, False, attn_mask=mask)
    got = flash_attention_cpu_backward(grad, q, k, v, *got, 0.0, False, attn_mask=mask)
    for a, w in zip(got, want):
        assert a.shape == w.shape and a.stride() == w.stride()
        torch.testing.assert_close(a, w)


# -- 12: a view with no elements ----------------------------------------------


def test_view_with_no_elements() -> None:
    """``x[:, 4:].view(len(x), -1, 4)`` of a 4x4x4x4 input: [4, 0, 4], a
    view at the slice's storage offset."""

    def fn(x):
        return x[:, 4:].view(len(x), -1, 4)

    x = torch.randn(4, 4, 4, 4)
    got = _compiled(fn)(x)
    want = fn(x)
    assert got.shape == want.shape and got.storage_offset() == want.storage_offset()
