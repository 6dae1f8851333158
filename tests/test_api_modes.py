"""torch.compile's modes, optimizer steps, `rdyn.explain` beside compiled
models and for training steps, and the compile-time / eager-frame counters
of `rdyn.stats()`. Results are checked against PyTorch eager."""

from __future__ import annotations

import copy

import pytest
import torch
import torch._dynamo

import rdyn
from rdyn import _cache, config
from rdyn.config import Options
from helpers import assert_same, exception_chain, no_rust_panic

MODES = ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


@pytest.fixture
def rdyn_log(monkeypatch):
    """Set RDYN_LOG for one test; the topics are re-read after it."""

    def set_topics(topics: str) -> None:
        monkeypatch.setenv("RDYN_LOG", topics)
        config.refresh()

    yield set_topics
    monkeypatch.undo()
    config.refresh()


# --------------------------------------------------------------------------
# An optimizer step, and a graph cache that never fails a compile (item 9)


def test_adamw_step_compiles_and_matches_eager() -> None:
    """AdamW's step graph holds 0-dim constants; hashing them for the cache
    key raised and failed the compile."""
    model = _mlp()
    reference = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2, weight_decay=0.1)
    step = torch.compile(opt.step, backend="rdyn")
    for _ in range(3):
        x = torch.randn(5, 6)
        for m, o, s in ((model, opt, step), (reference, ref_opt, ref_opt.step)):
            o.zero_grad()
            m(x).square().mean().backward()
            with no_rust_panic():
                s()
    stats = rdyn.stats()
    assert stats["graphs"] >= 1 and stats["graphs_failed"] == 0, stats
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6)


def _graph_with_constant(value: torch.Tensor) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    c = graph.get_attr("c")
    graph.output(graph.call_function(torch.add, (x, c)))
    return torch.fx.GraphModule({"c": value}, graph)


def test_cache_key_of_0dim_and_any_dtype_constants(monkeypatch) -> None:
    monkeypatch.delenv("RDYN_CACHE", raising=False)
    x = [torch.randn(3)]
    keys = {}
    for value in (torch.tensor(2.0), torch.tensor(3.0), torch.tensor(True), torch.tensor(1 + 2j), torch.ones(2, dtype=torch.bfloat16)):
        k = _cache.key(_graph_with_constant(value), x, Options())
        assert isinstance(k, str), value
        keys[k] = value
    assert len(keys) == 5, "different constants must give different keys"
    assert _cache.key(_graph_with_constant(torch.tensor(2.0)), x, Options()) in keys


@pytest.mark.parametrize("broken", ["key", "directory", "dumps"])
def test_a_cache_error_is_a_miss_not_a_compile_failure(broken, monkeypatch, tmp_path) -> None:
    from torch.fx._graph_pickler import GraphPickler

    monkeypatch.setenv("RDYN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("RDYN_CACHE", raising=False)

    def fail(*args, **kwargs):
        raise RuntimeError("broken cache")

    target = {"key": (_cache, "_key"), "directory": (_cache, "directory"), "dumps": (GraphPickler, "dumps")}[broken]
    monkeypatch.setattr(*target, fail)
    fn = lambda t: torch.tanh(t) * 2 + 1  # noqa: E731
    x = torch.randn(4, 5)
    with torch.no_grad(), no_rust_panic():
        out = torch.compile(fn, backend="rdyn")(x)
    assert_same(out, fn(x), fn(x.double()))
    stats = rdyn.stats()
    assert stats["graphs"] == 1 and stats["cache_hits"] == 0, stats
    assert list(tmp_path.rglob("*.fxg")) == []


# --------------------------------------------------------------------------
# torch.compile's modes (item 17)


@pytest.mark.parametrize("mode", MODES)
def test_modes_are_accepted(mode) -> None:
    fn = lambda t: torch.softmax(t * 3, -1)  # noqa: E731
    x = torch.randn(4, 7)
    with no_rust_panic():
        out = torch.compile(fn, backend="rdyn", mode=mode)(x)
        assert_same(out, fn(x), fn(x.double()))
        torch._dynamo.reset()
        # With other options, only inside them (torch refuses both).
        out = torch.compile(fn, backend="rdyn", options={"mode": mode, "device": "cpu"})(x)
    assert_same(out, fn(x), fn(x.double()))
    assert rdyn.stats()["graphs"] == 2


def test_unknown_mode_raises_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match="fastest") as info:
        Options.parse({"mode": "fastest"})
    assert all(m in str(info.value) for m in MODES), info.value
    with pytest.raises(Exception) as info:
        torch.compile(lambda t: t + 1, backend="rdyn", mode="fastest")(torch.randn(3))
    errors = [e for e in exception_chain(info.value) if isinstance(e, ValueError)]
    assert errors and "fastest" in str(errors[0]) and "max-autotune" in str(errors[0]), info.value


def test_what_a_mode_ignores_is_logged_once(rdyn_log, monkeypatch, capsys) -> None:
    rdyn_log("options")
    monkeypatch.setattr(config, "_modes_noted", set())
    x = torch.randn(3, 4)
    for fn in (lambda t: t.sin() + 1, lambda t: t.cos() * 2, lambda t: t.exp() - 1):
        with no_rust_panic():
            assert_same(torch.compile(fn, backend="rdyn", mode="max-autotune")(x), fn(x))
    err = capsys.readouterr().err
    assert err.count("mode='max-autotune'") == 1, err
    assert "autotuning" in err
    torch.compile(lambda t: t.tan(), backend="rdyn", mode="reduce-overhead")(x)
    err = capsys.readouterr().err
    assert err.count("mode='reduce-overhead'") == 1 and "CUDA graphs" in err, err


# --------------------------------------------------------------------------
# explain (items 18 and 19)


def test_explain_leaves_compiled_models_alone() -> None:
    model = _mlp()
    x = torch.randn(4, 6)
    compiled = torch.compile(model, backend="rdyn")
    with no_rust_panic():
        assert_same(compiled(x), model(x))
    report = rdyn.explain(lambda t: torch.relu(t) * 2, torch.randn(5))
    assert report.graphs
    # explain describes graphs (counted) but must not discard the model's.
    before = rdyn.stats()
    frames = dict(torch._dynamo.utils.counters["frames"])
    with no_rust_panic():
        assert_same(compiled(x), model(x))
    after = rdyn.stats()
    assert after["graphs"] == before["graphs"], "the compiled model was compiled again"
    assert after["guard_misses"] == before["guard_misses"]
    assert dict(torch._dynamo.utils.counters["frames"]) == frames


def test_explain_of_a_compiled_function_and_repeated() -> None:
    """Explaining the very function a model compiled, again and again, still
    reports its graph each time and leaves the compiled one working."""
    fn = lambda t: torch.sigmoid(t) + t  # noqa: E731
    x = torch.randn(6)
    compiled = torch.compile(fn, backend="rdyn")
    compiled(x)
    for _ in range(torch._dynamo.config.recompile_limit + 2):
        assert len(rdyn.explain(fn, x).graphs) == 1
    graphs = rdyn.stats()["graphs"]
    with no_rust_panic():
        assert_same(compiled(x), fn(x))
    assert rdyn.stats()["graphs"] == graphs


def _grads(model: torch.nn.Module) -> list:
    return [p.grad.clone() for p in model.parameters()]


def test_explain_of_a_training_step_shows_the_backward() -> None:
    model = _mlp()
    reference = copy.deepcopy(model)
    x = torch.randn(4, 6)
    report = rdyn.explain(lambda t: model(t).sum().backward(), x)
    assert report.kinds == ["forward", "backward"], report.kinds
    assert "aten.mm" in report.graphs[1]
    assert any(k.name.startswith("g1.") for k in report.kernels), [k.name for k in report.kernels]
    assert "(ATen, backward)" in str(report)
    # explain ran the step once: its gradients are eager's.
    reference(x).sum().backward()
    for got, want in zip(_grads(model), _grads(reference)):
        torch.testing.assert_close(got, want)


def test_explain_shows_a_backward_not_run_and_its_fallbacks() -> None:
    """An input that requires grad: the backward graph is reported without
    a backward call, with its own eager fallbacks (det's backward solves)."""
    x = torch.randn(4, 4, requires_grad=True)
    report = rdyn.explain(lambda t: torch.linalg.det(t * 2), x)
    assert report.kinds == ["forward", "backward"], report.kinds
    backward = report.graph_fallbacks[1]
    assert any("lu_solve" in op for op in backward), report.graph_fallbacks
    assert set(backward) <= set(report.fallback_ops)
    header = next(line for line in str(report).splitlines() if "backward" in line)
    assert "lu_solve" in header, header
    with torch.no_grad():
        assert rdyn.explain(lambda t: torch.linalg.det(t * 2), x).kinds == ["inference"]


# --------------------------------------------------------------------------
# stats: frames Dynamo runs eagerly, compile wall time (item 21)


def test_frames_eager_counts_frames_dynamo_gave_up_on() -> None:
    def fn(t):
        return t * 2 + 1

    compiled = torch.compile(fn, backend="rdyn", dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=2), no_rust_panic():
        for n in range(1, 5):
            x = torch.randn(n)
            assert_same(compiled(x), fn(x))
    assert rdyn.stats()["frames_eager"] == 1

    def loop(t):
        for _ in range(2):
            t = t + 1
            torch._dynamo.graph_break()
        return t

    x = torch.randn(3)
    assert_same(torch.compile(loop, backend="rdyn")(x), loop(x))
    assert rdyn.stats()["frames_eager"] == 2
    rdyn.reset_stats()
    assert rdyn.stats()["frames_eager"] == 0


def test_frames_dynamo_gives_up_on_while_explaining_are_noted_not_counted() -> None:
    def loop(t):
        for _ in range(2):
            t = t + 1
            torch._dynamo.graph_break()
        return t

    report = rdyn.explain(loop, torch.randn(3))
    assert any("gave up on 1 frame" in note for note in report.notes), report.notes
    assert rdyn.stats()["frames_eager"] == 0


def test_compile_wall_seconds_include_aot_autograd_and_a_lazy_backward() -> None:
    model = _mlp()
    reference = copy.deepcopy(model)
    x = torch.randn(4, 6)
    compiled = torch.compile(model, backend="rdyn")
    with no_rust_panic():
        out = compiled(x)
    assert_same(out, reference(x))
    forward = rdyn.stats()
    assert forward["compile_wall_seconds"] > forward["compile_seconds"] > 0, forward
    with no_rust_panic():
        out.sum().backward()
    reference(x).sum().backward()
    for got, want in zip(_grads(model), _grads(reference)):
        torch.testing.assert_close(got, want)
    backward = rdyn.stats()
    # The backward is compiled at its first call: the caller waited for it.
    assert backward["compile_seconds"] > forward["compile_seconds"]
    assert backward["compile_wall_seconds"] - forward["compile_wall_seconds"] >= (
        backward["compile_seconds"] - forward["compile_seconds"]
    ) > 0
    rdyn.reset_stats()
    stats = rdyn.stats()
    assert stats["compile_wall_seconds"] == 0 and stats["compile_seconds"] == 0


def test_torch_compile_name_is_accepted() -> None:
    """torch.compile passes ``name=`` to a custom backend when given."""
    x = torch.randn(4, 3)
    fn = lambda t: (t * 2).relu()  # noqa: E731
    assert torch.equal(torch.compile(fn, backend="rdyn", name="region")(x), fn(x))
    with pytest.raises(ValueError, match="name"):
        Options.parse({"name": 3})


def test_guard_log_names_the_graph_and_labels_each_input() -> None:
    """``RDYN_LOG=guards`` (read once per process, so a child process):
    each call's guard decision names its graph, says hit or miss, and
    labels dtype, sizes and strides per input."""
    import os
    import subprocess
    import sys

    script = (
        "import torch, rdyn\n"
        "f = torch.compile(lambda x, y: x + y, backend='rdyn', dynamic=False)\n"
        "a, b = torch.ones(2, 3), torch.ones(3)\n"
        "f(a, b); f(a, b); f(torch.ones(4, 3), b)\n"
        "print('calls', rdyn.stats()['guard_hits'], rdyn.stats()['guard_misses'])\n"
    )
    env = dict(os.environ, RDYN_LOG="guards,graph")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("[rdyn guards]")]
    assert any(" miss, new specialization for input 0: float32 sizes [2, 3] strides [3, 1]" in line for line in lines), lines
    assert any("input 1: float32 sizes [3] strides [1]" in line for line in lines), lines
    assert any(" hit" in line for line in lines), lines
    names = {line.split()[2] for line in lines}
    assert all(name.startswith("g") and name[1:].isdigit() for name in names), names
    # The graph log names each graph the same way.
    assert any(line.startswith(name + ":") for name in names for line in proc.stderr.splitlines()), proc.stderr[-2000:]
