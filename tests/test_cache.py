"""rdyn's on-disk graph cache (`python/rdyn/_cache.py`): a warm start loads
the captured ATen graph instead of tracing it through AOTAutograd again.

Hits must give the results a cold compile gives (checked against float64
eager), a change of shape, dtype or constant must miss, and graphs whose
AOTAutograd wrapper does more than call the compiled graph (training,
input mutation, outputs aliasing inputs) are never stored.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch
import torch._dynamo

import rdyn
from helpers import assert_same


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RDYN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("RDYN_CACHE", raising=False)
    return tmp_path


def _entries(path: pathlib.Path) -> list:
    return sorted(path.rglob("*.fxg"))


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(), torch.nn.Linear(32, 8)
    ).eval()


def _compile_and_run(fn, *args):
    torch._dynamo.reset()
    rdyn.reset_stats()
    with torch.no_grad():
        out = torch.compile(fn, backend="rdyn")(*args)
    return out, rdyn.stats()


def test_second_compile_hits_and_matches(cache_dir) -> None:
    model = _model()
    x = torch.randn(4, 16)
    first, stats = _compile_and_run(model, x)
    assert (stats["cache_hits"], stats["cache_misses"]) == (0, 1)
    assert len(_entries(cache_dir)) == 1
    second, stats = _compile_and_run(model, x)
    assert (stats["cache_hits"], stats["cache_misses"]) == (1, 0)
    assert stats["nodes_fallback"] == 0 and stats["kernels"] >= 1
    assert torch.equal(first, second)
    model64 = _model().double()
    with torch.no_grad():
        assert_same(second, model(x), model64(x.double()))


def test_a_cached_graph_rdyn_runs_eagerly_still_runs(cache_dir) -> None:
    """A graph rdyn cannot represent (complex tensors) runs eagerly: loaded
    from the cache it must too. An unpickled graph module had no `forward`
    and raised NotImplementedError instead."""

    def fn(x):
        return torch.view_as_real(torch.view_as_complex(x) * 2).sum(-1) + 1

    x = torch.randn(3, 4, 2)
    first, stats = _compile_and_run(fn, x)
    assert stats["cache_misses"] == 1 and stats["nodes_fallback"] > 0
    second, stats = _compile_and_run(fn, x)
    assert stats["cache_hits"] == 1
    assert_same(second, fn(x), fn(x.double()))
    assert torch.equal(first, second)


def test_shape_dtype_and_constants_miss(cache_dir) -> None:
    fn = lambda x: torch.softmax(x * 2, -1)  # noqa: E731
    _compile_and_run(fn, torch.randn(4, 8))
    for args in ([torch.randn(4, 9)], [torch.randn(4, 8, dtype=torch.float64)], [torch.randn(8, 4).t()]):
        out, stats = _compile_and_run(fn, *args)
        assert stats["cache_hits"] == 0, args[0].shape
        torch.testing.assert_close(out, fn(*args))
    assert len(_entries(cache_dir)) == 4
    # A tensor the function closes over is a graph input: its value is not
    # baked in, so a new value hits and is used.
    x = torch.randn(4, 8)
    for value, hits in ((1.0, 0), (2.0, 1)):
        table = torch.full((8,), value)
        out, stats = _compile_and_run(lambda t: t + table, x)
        assert stats["cache_hits"] == hits
        assert torch.equal(out, x + value)
    # A constant the graph builds is part of the key.
    for value in (3.0, 4.0):
        out, stats = _compile_and_run(lambda t: t + torch.tensor([value] * 8), x)
        assert stats["cache_hits"] == 0
        assert torch.equal(out, x + value)


def test_training_mutation_and_aliases_are_not_stored(cache_dir) -> None:
    w = torch.randn(8, 8, requires_grad=True)
    torch._dynamo.reset()
    out = torch.compile(lambda x: (x @ w).sum(), backend="rdyn")(torch.randn(4, 8))
    out.backward()
    assert w.grad is not None
    assert _entries(cache_dir) == []

    def mutate(x):
        x.add_(1)
        return x * 2

    for _ in range(2):
        x = torch.zeros(4)
        out, stats = _compile_and_run(mutate, x)
        assert torch.equal(x, torch.ones(4)) and torch.equal(out, torch.full((4,), 2.0))
    for _ in range(2):
        x = torch.randn(4, 6)
        (view, plus), stats = _compile_and_run(lambda t: (t.t(), t + 1), x)
        assert view.data_ptr() == x.data_ptr() and torch.equal(plus, x + 1)
    assert _entries(cache_dir) == []


def test_corrupt_entry_is_a_miss_and_disabled_cache_writes_nothing(cache_dir, monkeypatch) -> None:
    fn = lambda x: torch.tanh(x) + 1  # noqa: E731
    x = torch.randn(5, 3)
    _compile_and_run(fn, x)
    (entry,) = _entries(cache_dir)
    entry.write_bytes(b"not a pickled graph")
    out, stats = _compile_and_run(fn, x)
    assert stats["cache_hits"] == 0
    torch.testing.assert_close(out, fn(x))

    monkeypatch.setenv("RDYN_CACHE", "0")
    out, stats = _compile_and_run(lambda t: t * 3, x)
    assert (stats["cache_hits"], stats["cache_misses"]) == (0, 0)
    assert len(_entries(cache_dir)) == 1


def test_warm_start_in_a_fresh_process(cache_dir) -> None:
    """The real warm start: a second process loads what the first stored."""
    script = textwrap.dedent(
        """
        import json, sys, torch, rdyn
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU6(),
                                    torch.nn.Conv2d(8, 4, 1)).eval()
        x = torch.randn(2, 3, 12, 12)
        with torch.no_grad():
            out = torch.compile(model, backend="rdyn")(x)
            ref = model.double()(x.double())
        s = rdyn.stats()
        print(json.dumps({"hits": s["cache_hits"], "misses": s["cache_misses"], "fallback": s["nodes_fallback"],
                          "sum": out.double().sum().item(), "err": (out.double() - ref).abs().max().item()}))
        """
    )
    env = dict(os.environ, RDYN_CACHE_DIR=str(cache_dir))
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert (cold["hits"], cold["misses"]) == (0, 1)
    assert (warm["hits"], warm["misses"]) == (1, 0)
    assert warm["fallback"] == 0 and warm["sum"] == cold["sum"]
    assert warm["err"] < 1e-4
