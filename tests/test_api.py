"""rdyn's user-facing Python API: stats, explain, options, errors, fallbacks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any, Callable

import pytest
import torch

import rdyn
from helpers import assert_same, compile_aten, exception_chain, no_rust_panic, tensor_outputs, wgpu_available

COUNTERS = [
    "graphs",
    "specializations",
    "kernels",
    "nodes_native",
    "nodes_extern",
    "nodes_fallback",
    "guard_hits",
    "guard_misses",
    "graphs_failed",
    "generic_programs",
]


def small_graph(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ y + 1).sum(dim=-1)


def compiled_small_graph() -> tuple[torch.Tensor, torch.Tensor]:
    x, y = torch.randn(5, 7), torch.randn(7, 3)
    fn = torch.compile(small_graph, backend="rdyn")
    with no_rust_panic():
        return fn(x, y), small_graph(x, y)


# --------------------------------------------------------------------------
# stats / reset_stats


def test_stats_keys_and_types() -> None:
    stats = rdyn.stats()
    for key in COUNTERS:
        assert isinstance(stats[key], int), f"stats()[{key!r}] = {stats[key]!r}"
    assert isinstance(stats["compile_seconds"], float)
    assert isinstance(stats["fallback_ops"], dict)


def test_stats_count_a_compile() -> None:
    actual, expected = compiled_small_graph()
    assert_same(actual, expected)
    stats = rdyn.stats()
    assert stats["graphs"] >= 1, stats
    assert stats["specializations"] >= 1, stats
    assert stats["kernels"] >= 1, stats
    assert stats["nodes_native"] + stats["nodes_extern"] >= 1, stats
    assert stats["compile_seconds"] > 0, stats
    assert stats["graphs_failed"] == 0, stats
    # The graph is mm + add + relu + sum: nothing needs an eager fallback.
    assert stats["nodes_fallback"] == 0, stats
    assert stats["fallback_ops"] == {}, stats


def test_reset_stats() -> None:
    compiled_small_graph()
    rdyn.reset_stats()
    stats = rdyn.stats()
    for key in COUNTERS:
        assert stats[key] == 0, f"stats()[{key!r}] = {stats[key]!r} after reset_stats()"
    assert stats["compile_seconds"] == 0
    assert stats["fallback_ops"] == {}


def test_stats_returns_a_copy() -> None:
    stats = rdyn.stats()
    stats["graphs"] = 12345
    stats["fallback_ops"]["nonsense"] = 1
    assert rdyn.stats()["graphs"] != 12345
    assert "nonsense" not in rdyn.stats()["fallback_ops"]


# --------------------------------------------------------------------------
# explain


def test_explain_report(capsys: pytest.CaptureFixture[str]) -> None:
    x, y = torch.randn(5, 7), torch.randn(7, 3)
    report = rdyn.explain(small_graph, x, y)
    assert isinstance(report.graphs, list) and report.graphs, report.graphs
    assert all(isinstance(graph, str) for graph in report.graphs)
    assert any("aten." in graph for graph in report.graphs), report.graphs[0]
    assert report.kernels, "explain() produced no kernels"
    for kernel in report.kernels:
        assert isinstance(kernel.name, str) and kernel.name
        assert "cpu" in str(kernel.device).lower(), kernel.device
        assert isinstance(kernel.source, str) and kernel.source
    assert isinstance(report.fallback_ops, dict)
    assert report.fallback_ops == {}

    text = str(report)
    assert report.kernels[0].name in text
    print(report)
    assert capsys.readouterr().out.strip() == text.strip()


def test_explain_with_device_and_fallback() -> None:
    x = torch.randn(6, 4)
    report = rdyn.explain(lambda t: torch.linalg.svdvals(t).exp(), x, device="cpu")
    assert report.graphs
    assert any("svd" in op for op in report.fallback_ops), report.fallback_ops
    assert "svd" in str(report)


# --------------------------------------------------------------------------
# Options


def test_device_option_accepted() -> None:
    x = torch.randn(4, 4)
    fn = torch.compile(lambda t: t.tanh() * 3, backend="rdyn", options={"device": "cpu"})
    with no_rust_panic():
        assert_same(fn(x), x.tanh() * 3)


def _raised_value_error(error: BaseException, word: str) -> bool:
    return any(isinstance(e, ValueError) and word in str(e) for e in exception_chain(error))


@pytest.mark.parametrize(
    "options,word",
    [
        pytest.param({"no_such_option": 1}, "no_such_option", id="unknown-option"),
        pytest.param({"device": "no-such-device"}, "device", id="bad-device"),
        pytest.param({"index_checks": "later"}, "index_checks", id="bad-index-checks"),
    ],
)
def test_bad_option_raises_value_error(options: dict[str, Any], word: str) -> None:
    x = torch.randn(4, 4)
    fn = torch.compile(lambda t: t + 1, backend="rdyn", options=options)
    # Dynamo wraps a backend's exception in BackendCompilerFailed; the
    # ValueError must be underneath, naming the option.
    with pytest.raises(Exception) as info:
        with no_rust_panic():
            fn(x)
    assert _raised_value_error(info.value, word), f"no ValueError naming {word!r} in: {info.value!r}"


def test_bad_option_to_compile_graph_raises_value_error() -> None:
    x = torch.randn(4, 4)
    with pytest.raises(ValueError, match="no_such_option"):
        with no_rust_panic():
            compile_aten(lambda t: t + 1, [x], options={"no_such_option": True})


# --------------------------------------------------------------------------
# Errors and unusual graphs: never a panic, never a wrong answer


@torch.library.custom_op("rdyn_test::weird", mutates_args=())
def weird(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + x.flip(0)


@weird.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


_CONSTANT = torch.tensor([1.0, -2.0, 3.0])


UNUSUAL_GRAPHS: dict[str, tuple[Callable[..., Any], Callable[[], list[torch.Tensor]]]] = {
    "custom-op": (lambda x: torch.ops.rdyn_test.weird(x.sin()) + 1, lambda: [torch.randn(5, 3)]),
    "complex": (
        lambda x: torch.view_as_real(torch.view_as_complex(x) * (1 + 2j)),
        lambda: [torch.randn(4, 2)],
    ),
    "identity": (lambda x: x, lambda: [torch.randn(3)]),
    "returns-input-view": (lambda x: (x.t(), x[1:]), lambda: [torch.randn(3, 4)]),
    "same-output-twice": (lambda x: (x.exp(), x.exp()), lambda: [torch.randn(3)]),
    "constant-tensor": (lambda x: x + _CONSTANT, lambda: [torch.randn(2, 3)]),
    "no-inputs": (lambda: torch.arange(6).reshape(2, 3) * 2, lambda: []),
    "int-and-bool": (lambda x, i: ((x > 0) & (i % 3 == 0), i // 2 - i), lambda: [torch.randn(7), torch.arange(-3, 4)]),
    "integer-division": (lambda i, j: (i // j, i % j, torch.div(i, j, rounding_mode="trunc")),
                         lambda: [torch.arange(-6, 6), torch.tensor([4, -3] * 6)]),
    "zero-size": (lambda x: (x.sum(0), x * 2, x.amax(1)), lambda: [torch.randn(0, 5)]),
}


@pytest.mark.parametrize("name", list(UNUSUAL_GRAPHS))
def test_unusual_graph_gives_eager_results(name: str) -> None:
    fn, make_inputs = UNUSUAL_GRAPHS[name]
    inputs = make_inputs()
    expected = tensor_outputs(fn)(*inputs)
    with no_rust_panic():
        compiled = compile_aten(tensor_outputs(fn), inputs)
        actual = compiled(*inputs)
    assert_same(tuple(actual), expected)


def test_custom_op_falls_back_through_torch_compile() -> None:
    fn, make_inputs = UNUSUAL_GRAPHS["custom-op"]
    (x,) = make_inputs()
    with no_rust_panic():
        actual = torch.compile(fn, backend="rdyn", fullgraph=True)(x)
    assert_same(actual, fn(x))
    assert any("weird" in op for op in rdyn.stats()["fallback_ops"]), rdyn.stats()


@pytest.mark.parametrize(
    "fn",
    [
        pytest.param(lambda x: x + torch.tensor([1.0, -2.0, 3.0]), id="tensor-literal"),
        pytest.param(lambda x: x * _CONSTANT, id="global-tensor"),
        pytest.param(lambda x: torch.where(x > 0, x, torch.tensor(0.5)), id="scalar-tensor-literal"),
    ],
)
def test_constant_tensors_through_torch_compile(fn: Callable[..., Any]) -> None:
    x = torch.randn(2, 3)
    with no_rust_panic():
        actual = torch.compile(fn, backend="rdyn")(x)
    assert_same(actual, fn(x))


def test_wrong_number_of_inputs_is_a_python_error() -> None:
    x = torch.randn(3)
    compiled = compile_aten(lambda t: t + 1, [x])
    with pytest.raises(Exception):
        with no_rust_panic():
            compiled(x, x)
    with pytest.raises(Exception):
        with no_rust_panic():
            compiled()


# --------------------------------------------------------------------------
# Graph breaks and fallbacks through torch.compile


def test_graph_break(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = torch.sin(x) * 2
        print("graph break here")
        return torch.softmax(y + 1, dim=-1)

    x = torch.randn(4, 9)
    with no_rust_panic():
        actual = torch.compile(fn, backend="rdyn")(x)
    assert_same(actual, fn(x))
    assert capsys.readouterr().out.count("graph break here") == 2
    assert rdyn.stats()["graphs"] >= 2, rdyn.stats()


@pytest.mark.parametrize(
    "fn,op_word",
    [
        pytest.param(lambda x: torch.linalg.svdvals(x) * 2 + 1, "svd", id="svdvals"),
        pytest.param(lambda x: torch.mode(x * 3, dim=1).values.sum(0), "mode", id="mode"),
    ],
)
def test_unlowered_op_falls_back_and_is_counted(fn: Callable[..., Any], op_word: str) -> None:
    x = torch.randn(6, 6, dtype=torch.float64)
    with no_rust_panic():
        actual = torch.compile(fn, backend="rdyn")(x)
    assert_same(actual, fn(x))
    stats = rdyn.stats()
    assert stats["nodes_fallback"] >= 1, stats
    assert any(op_word in op for op in stats["fallback_ops"]), stats["fallback_ops"]
    # The pointwise work around the fallback is still rdyn's.
    assert stats["nodes_native"] >= 1, stats


def test_graph_with_effect_tokens_runs_eagerly_and_is_counted() -> None:
    """linalg.inv's error checks make AOTAutograd thread effect tokens through
    the graph; rdyn runs such a graph eagerly, counted, even when strict."""
    fn = lambda x: torch.linalg.inv(x @ x.mT + torch.eye(x.shape[0], dtype=x.dtype)).sum(0)  # noqa: E731
    x = torch.randn(6, 6, dtype=torch.float64)
    actual = torch.compile(fn, backend="rdyn")(x)
    assert_same(actual, fn(x))
    stats = rdyn.stats()
    assert stats["graphs_unsupported"] >= 1, stats
    assert any("inv" in op for op in stats["fallback_ops"]), stats["fallback_ops"]


def test_cumsum_is_correct() -> None:
    x = torch.randn(5, 40)
    fn = lambda t: torch.cumsum(t.exp(), dim=1) - t  # noqa: E731
    with no_rust_panic():
        actual = torch.compile(fn, backend="rdyn")(x)
    assert_same(actual, fn(x), fn(x.double()))


@pytest.mark.parametrize("device", ["cpu", "wgpu"])
@pytest.mark.parametrize("op", [torch.fmod, torch.remainder, torch.floor_divide])
def test_float_modulo_is_exact(op: Callable[..., Any], device: str) -> None:
    """fmod, remainder and floor_divide where a - b*trunc(a/b) is wrong:
    quotients that round to an integer, huge quotients, infinite divisors."""
    if device == "wgpu" and not wgpu_available():
        pytest.skip("no wgpu adapter")
    a = torch.tensor([1.0, 5.0, 1e8, 1.0, -1.0, -7.5, 7.5, 0.3, 3.0, -0.0, 1e30, 2.5])
    b = torch.tensor([0.1, 0.1, 3.7, float("inf"), float("inf"), 2.0, -2.0, 0.1, 0.3, 1.0, 1e-3, -0.5])
    with no_rust_panic():
        actual = torch.compile(op, backend="rdyn", options={"device": device})(a, b)
    assert_same(actual, op(a, b), what=f"{op.__name__} on {device}")


@pytest.mark.parametrize("device", ["cpu", "wgpu"])
def test_inference_mode_inputs(device: str) -> None:
    """Tensors made under ``torch.inference_mode`` have no version counter
    (reading it raises); calls with them, repeated, still run."""
    if device == "wgpu" and not wgpu_available():
        pytest.skip("no wgpu adapter")
    fn = lambda t, w: torch.relu(t @ w) + 1  # noqa: E731
    compiled = torch.compile(fn, backend="rdyn", options={"device": device})
    with torch.inference_mode():
        x, w = torch.randn(8, 16), torch.randn(16, 4)
        with no_rust_panic():
            for _ in range(3):
                actual = compiled(x, w)
        expected = fn(x, w)
    assert_same(actual, expected, what=f"output on {device}")


# --------------------------------------------------------------------------
# Installation


def test_backend_is_registered_without_import() -> None:
    """The ``torch_dynamo_backends`` entry point finds rdyn with no import."""
    script = textwrap.dedent(
        """
        import sys
        import torch
        assert "rdyn" not in sys.modules
        x = torch.randn(8)
        out = torch.compile(lambda t: t.cos() + 1, backend="rdyn")(x)
        torch.testing.assert_close(out, x.cos() + 1)
        assert "rdyn" in sys.modules
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RDYN_STRICT": "1"},
        cwd="/",
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_gemm_is_native_and_matches_eager(dtype: torch.dtype) -> None:
    """Half-precision mm/addmm/bmm run through the float32 GEMM (float32
    accumulation, one rounding — ATen's numerics), not eagerly."""
    a = torch.randn(33, 64, dtype=dtype)
    b = torch.randn(64, 17, dtype=dtype)
    bias = torch.randn(17, dtype=dtype)
    fn = lambda a, b, bias: (torch.addmm(bias, a, b, alpha=0.5, beta=2.0), a @ b, torch.bmm(a[None], b[None]))  # noqa: E731
    actual = torch.compile(fn, backend="rdyn")(a, b, bias)
    expected = fn(a, b, bias)
    reference = fn(a.double(), b.double(), bias.double())
    for got, want, ref in zip(actual, expected, reference):
        assert got.dtype == dtype
        assert (got.double() - ref).abs().max() <= 1.01 * (want.double() - ref).abs().max() + 1e-6
    stats = rdyn.stats()
    assert stats["nodes_fallback"] == 0, stats
    assert stats["nodes_extern"] == 3, stats
