"""CPU flash attention (`python/rdyn/_attention.py`) against ATen's kernels.

On the CPU device ATen's flash kernels run as library calls (not eager
fallbacks), forward and backward. Elsewhere, and with
``RDYN_ATTENTION=decompose``, the forward and the backward are decomposed
into batched matrix products around fused kernels. Each must give ATen's
outputs: values, dtypes and strides (the forward's output follows the
query's layout, the log-sum-exp is stored [batch, query, head], the
gradients [batch, tokens, head, dim]), rows whose scores are all -inf
included. Through `torch.compile`, results and gradients are checked against
float64 eager, and no attention kernel of ATen's runs where the
decomposition applies.
"""

from __future__ import annotations

import pytest
import torch

import rdyn
from helpers import assert_same

aten = torch.ops.aten
sdpa = torch.nn.functional.scaled_dot_product_attention

_FLASH = aten._scaled_dot_product_flash_attention_for_cpu.default


@pytest.fixture
def decompose(monkeypatch):
    """rdyn's decomposition in place of ATen's kernels on the CPU device."""
    monkeypatch.setenv("RDYN_ATTENTION", "decompose")


def _attention_inputs(case, g):
    b, h, l, s, e = 2, 3, 5, 7 if case in ("cross_lengths", "mask", "mask_inf_row", "mask_broadcast") else 5, 8
    dtype = {"float64": torch.float64, "bfloat16": torch.bfloat16}.get(case, torch.float32)
    q, k, v = (torch.randn(b, h, n, e, generator=g).to(dtype) for n in (l, s, s))
    if case == "tokens_major":
        q, k, v = (torch.randn(b, n, h, e, generator=g).transpose(1, 2) for n in (l, s, s))
    if case == "channels_last_grad":
        v = torch.randn(b, s, e, h, generator=g).permute(0, 3, 1, 2)
    kwargs = {"is_causal": case == "causal"}
    if case == "scale":
        kwargs["scale"] = 0.3
    if case == "mask":
        kwargs["attn_mask"] = torch.randn(l, s, generator=g)
    if case == "mask_broadcast":
        kwargs["attn_mask"] = torch.randn(b, 1, 1, s, generator=g)
    if case == "mask_inf_row":
        mask = torch.zeros(b, h, l, s)
        mask[1, 2, 3] = -float("inf")
        mask[0, :, :, 4] = -float("inf")
        kwargs["attn_mask"] = mask
    return q, k, v, kwargs


CASES = ["plain", "causal", "scale", "tokens_major", "channels_last_grad", "cross_lengths", "float64", "bfloat16",
         "mask", "mask_broadcast", "mask_inf_row"]


@pytest.mark.parametrize("case", [*CASES, "inf_keys"])
def test_flash_attention_decomposition_matches_aten(case) -> None:
    """`flash_attention_cpu` gives ATen's two outputs: values, dtypes and
    strides (the output follows the query's layout; the log-sum-exp is
    stored [batch, query, head]), with an additive mask or without, rows
    of -inf scores included."""
    from rdyn._attention import flash_attention_cpu

    g = torch.Generator().manual_seed(3)
    q, k, v, kwargs = _attention_inputs(case, g)
    if case == "inf_keys":
        q[0, 1, 2] = 0.0
        k[0, 1, :, 0] = -float("inf")
        q[0, 1, 2, 0] = 1.0
    want = _FLASH(q, k, v, **kwargs)
    got = flash_attention_cpu(q, k, v, **kwargs)
    tol = {"rtol": 2e-2, "atol": 2e-2} if q.dtype == torch.bfloat16 else {}
    for name, a, w in zip(("output", "logsumexp"), got, want):
        assert a.dtype == w.dtype and a.shape == w.shape and a.stride() == w.stride(), name
        torch.testing.assert_close(a, w, equal_nan=True, **tol)


def test_flash_attention_compiles_without_fallback(decompose) -> None:
    """SDPA, causal or with an additive mask, runs in rdyn's kernels (no
    ATen attention kernel, no eager fallback) and matches float64 eager."""

    def fn(q, k, v, mask):
        return sdpa(q, k, v, attn_mask=mask, is_causal=mask is None).transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)

    g = torch.Generator().manual_seed(4)
    q64, k64, v64 = (torch.randn(2, 4, 16, 8, generator=g, dtype=torch.float64) for _ in range(3))
    args = [t.float() for t in (q64, k64, v64)]
    mask64 = torch.randn(16, 16, generator=g, dtype=torch.float64)
    for mask, ref_mask in ((None, None), (mask64.float(), mask64)):
        report = rdyn.explain(lambda q, k, v: fn(q, k, v, mask), *args)
        assert report.fallback_ops == {}
        assert "flash_attention" not in "\n".join(report.graphs)
        assert not [k for k in report.kernels if k.name == "library"], report
        torch._dynamo.reset()
        assert_same(torch.compile(fn, backend="rdyn")(*args, mask), fn(*args, mask), fn(q64, k64, v64, ref_mask))


def test_attention_is_two_gemms_around_one_kernel(decompose) -> None:
    """Inference SDPA lowers to the scores' GEMM, one fused softmax kernel,
    and the product with the values: the probabilities are stored in the
    order the second GEMM reads them (the softmax's per-row max and sum,
    read once per row, once had them stored transposed, by a kernel of its
    own reading the exponentials across rows)."""
    q, k, v = (torch.randn(4, 2, 64, 32) for _ in range(3))
    for causal in (False, True):
        report = rdyn.explain(lambda q, k, v: sdpa(q, k, v, is_causal=causal), q, k, v)
        assert [kernel.name[0] for kernel in report.kernels] == ["g", "k", "g"], report
        with torch.no_grad():
            torch._dynamo.reset()
            got = torch.compile(lambda q, k, v: sdpa(q, k, v, is_causal=causal), backend="rdyn")(q, k, v)
        torch.testing.assert_close(got, sdpa(q, k, v, is_causal=causal))


def test_training_forward_computes_the_probabilities_once(decompose) -> None:
    """The backward builds its probabilities from the scores as the
    forward does (``exps / sum``), so that AOTAutograd's
    common-subexpression pass leaves one computation of them (saved, or
    recomputed in the backward): one exp per score with gradients as
    without, and no log-sum-exp form ``exp(scores - lse)`` beside it."""
    q, k, v = (torch.randn(4, 2, 64, 32, requires_grad=True) for _ in range(3))
    for causal in (False, True):
        report = rdyn.explain(lambda q, k, v: sdpa(q, k, v, is_causal=causal), q, k, v)
        assert report.kinds == ["forward", "backward"], report.kinds
        graph = report.graphs[0]
        assert graph.count("aten.exp.default") == 1 and "aten.reciprocal" in graph, graph
        with torch.no_grad():
            (graph,) = rdyn.explain(lambda q, k, v: sdpa(q, k, v, is_causal=causal), q, k, v).graphs
        assert graph.count("aten.exp.default") == 1 and "aten.reciprocal" in graph, graph


_FLASH_BACKWARD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default


@pytest.mark.parametrize("case", CASES)
def test_flash_attention_backward_decomposition_matches_aten(case) -> None:
    """`flash_attention_cpu_backward` gives ATen's three gradients from the
    forward's output and log-sum-exp: values, dtypes and strides, with an
    additive mask (a row of -inf included) or without."""
    from rdyn._attention import flash_attention_cpu_backward

    g = torch.Generator().manual_seed(5)
    q, k, v, kwargs = _attention_inputs(case, g)
    out, lse = _FLASH(q, k, v, **kwargs)
    grad = torch.randn(out.shape, generator=g).to(q.dtype)
    causal = kwargs.pop("is_causal")
    want = _FLASH_BACKWARD(grad, q, k, v, out, lse, 0.0, causal, **kwargs)
    got = flash_attention_cpu_backward(grad, q, k, v, out, lse, 0.0, causal, **kwargs)
    tol = {"rtol": 2e-2, "atol": 2e-2} if q.dtype == torch.bfloat16 else {}
    for name, a, w in zip(("query", "key", "value"), got, want):
        assert a.dtype == w.dtype and a.shape == w.shape and a.stride() == w.stride(), name
        torch.testing.assert_close(a, w, **tol, msg=lambda m: f"gradient of the {name}: {m}")


def test_flash_attention_backward_declines_dropout() -> None:
    """Dropout is ATen's: the decomposition returns NotImplemented."""
    from rdyn._attention import flash_attention_cpu_backward

    q = k = v = torch.randn(1, 2, 4, 8)
    out, lse = _FLASH(q, k, v)
    assert flash_attention_cpu_backward(out, q, k, v, out, lse, 0.1, False) is NotImplemented


def _graph_targets(fn, *args):
    """The ops of the forward and backward ATen graphs rdyn is given for
    `fn` (AOTAutograd with rdyn's decompositions)."""
    from functorch.compile import aot_function, make_boxed_func

    targets = []

    def record(gm, example_inputs):
        targets.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return make_boxed_func(gm)

    aot_function(fn, fw_compiler=record, bw_compiler=record, decompositions=rdyn.DECOMPOSITIONS)(*args).sum().backward()
    return targets


def _gradients_match(fn, leaves, inputs64, mask, mask64):
    """A training step of `fn` compiled with rdyn on `leaves` runs no eager
    fallback, and its gradients match eager's and float64 eager's."""
    torch._dynamo.reset()
    rdyn.reset_stats()
    torch.compile(fn, backend="rdyn")(*leaves, mask).square().sum().backward()
    assert rdyn.stats()["fallback_ops"] == {}
    eager = [t.float().requires_grad_() for t in inputs64]
    fn(*eager, mask).square().sum().backward()
    ref = [t.clone().requires_grad_() for t in inputs64]
    fn(*ref, mask64).square().sum().backward()
    for name, a, e, r in zip("qkv", leaves, eager, ref):
        assert_same(a.grad, e.grad, r.grad, what=f"grad of {name}")


@pytest.mark.parametrize("masked", [False, True])
def test_attention_gradients_run_in_rdyn(masked, decompose) -> None:
    """A training step through SDPA, causal or with an additive mask: the
    graphs have no ATen attention kernel, and the gradients match float64
    eager."""
    g = torch.Generator().manual_seed(6)
    q64, k64, v64 = (torch.randn(2, 4, 16, 8, generator=g, dtype=torch.float64) for _ in range(3))
    mask64 = torch.randn(16, 16, generator=g, dtype=torch.float64) if masked else None

    def fn(q, k, v, mask):
        causal = mask is None
        return sdpa(q, k, v, attn_mask=mask, is_causal=causal).transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)

    mask = None if mask64 is None else mask64.float()
    leaves = [t.float().requires_grad_() for t in (q64, k64, v64)]
    targets = _graph_targets(fn, *leaves, mask) if masked else _graph_targets(lambda q, k, v: fn(q, k, v, None), *leaves)
    assert not any("flash_attention" in t for t in targets), targets

    leaves = [t.float().requires_grad_() for t in (q64, k64, v64)]
    _gradients_match(fn, leaves, (q64, k64, v64), mask, mask64)


@pytest.mark.parametrize("masked", [False, True])
def test_cpu_attention_runs_as_aten_library_calls(masked) -> None:
    """By default on the CPU device, SDPA's forward and backward are ATen's
    flash kernels called as library steps (`benches/attention_shapes.py`:
    they beat the decomposition at most shapes): no eager fallback, no
    decomposed softmax kernel, and results and gradients match float64
    eager."""
    g = torch.Generator().manual_seed(7)
    q64, k64, v64 = (torch.randn(2, 4, 16, 8, generator=g, dtype=torch.float64) for _ in range(3))
    mask64 = torch.randn(16, 16, generator=g, dtype=torch.float64) if masked else None
    mask = None if mask64 is None else mask64.float()

    def fn(q, k, v, mask):
        return sdpa(q, k, v, attn_mask=mask, is_causal=mask is None)

    leaves = [t.float().requires_grad_() for t in (q64, k64, v64)]
    report = rdyn.explain(lambda q, k, v: fn(q, k, v, mask), *leaves)
    assert report.kinds == ["forward", "backward"] and report.fallback_ops == {}, report
    calls = [k.source for k in report.kernels if k.name.endswith("library")]
    assert any("flash_attention_for_cpu.default" in c for c in calls), report
    assert any("flash_attention_for_cpu_backward" in c for c in calls), report
    _gradients_match(fn, leaves, (q64, k64, v64), mask, mask64)


def test_attention_choice_is_checked(monkeypatch) -> None:
    """An unknown ``RDYN_ATTENTION`` names the variable and its values."""
    from rdyn.backend import decompositions

    monkeypatch.setenv("RDYN_ATTENTION", "fast")
    with pytest.raises(ValueError, match="RDYN_ATTENTION='fast' is not one of"):
        decompositions("cpu")
