"""The benchmark CLI for your own model (``python -m rdyn.bench``) and the
wide corpus (``benches/suite.py --suite wide``, issue 37).

- ``python -m rdyn.bench MODULE:make`` on a tiny model, eager and rdyn, one
  round, runs the suite's worker and writes the table, the history (with
  rdyn's interpreted and compiled CPU stages) and the dashboard, labelled
  with what ran.
- A bad target is one line on stderr saying what is wrong, no traceback.
- ``--suite wide --list`` lists the corpus (at least 30 models).
- Every wide-corpus model builds and runs one eager forward at its size.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
BENCHES = ROOT / "benches"

HELPER = '''
import torch
from torch import nn


def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)), torch.randn(8, 16)


def one_tensor_fn():
    return (lambda x: torch.softmax(x, -1) * 2), (torch.randn(4, 8),)


def wrong_type():
    return 42


def wrong_inputs():
    return nn.Linear(2, 2), [1, 2]


def three():
    return nn.Linear(2, 2), torch.randn(1, 2), None


def raises():
    raise ValueError("no weights here")


not_a_function = 3
'''


@pytest.fixture(scope="module")
def helper_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bench_cli")
    (folder / "tests_helper_module.py").write_text(textwrap.dedent(HELPER))
    (folder / "imports_missing.py").write_text("import no_such_package_rdyn_test\n")
    return folder


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("XDG_RUNTIME_DIR", "/tmp")
    env.pop("RDYN_BENCH_CWD", None)
    # Python finds `rdyn` as installed (the venv), not through PYTHONPATH tricks.
    return env


def _bench(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rdyn.bench", *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=timeout)


def test_rdyn_bench_runs_a_model_and_writes_the_dashboard(helper_dir: Path) -> None:
    out = helper_dir / "out"
    proc = _bench(["tests_helper_module:make", "--backends", "eager,rdyn", "--rounds", "1", "--target-ms", "10",
                   "--no-warm", "--no-progress", "--out", str(out)], helper_dir)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    # The table: one row per backend, with the interpreted-stages column.
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("model "))
    assert "speedup" in header and "interp. stages" in header, header
    rows = [line for line in lines if line.startswith("tests_helper_module:make ")]
    assert [r.split()[1] for r in rows] == ["eager", "rdyn"], proc.stdout
    assert "dashboard:" in proc.stdout
    record = json.loads((out / "latest.json").read_text())
    assert record["suite"] == "custom"
    assert record["options"]["targets"] == ["tests_helper_module:make"]
    by_backend = {r["backend"]: r for r in record["results"]}
    assert set(by_backend) == {"eager", "rdyn"}
    for r in by_backend.values():
        assert r["status"] == "ok" and r["correct"] is True, r
        assert r["speedup"] > 0, r
    rdyn_row = by_backend["rdyn"]
    assert rdyn_row["compile_s"] > 0
    assert isinstance(rdyn_row["cpu_stages_interpreted"], int), rdyn_row
    assert isinstance(rdyn_row["cpu_stages_compiled"], int), rdyn_row
    assert rdyn_row["cpu_stages_interpreted"] + rdyn_row["cpu_stages_compiled"] >= 1, rdyn_row
    summary = next(s for s in record["summary"] if s["backend"] == "rdyn")
    assert summary["cpu_stages_interpreted"] == rdyn_row["cpu_stages_interpreted"]
    assert summary["cpu_stages_compiled"] == rdyn_row["cpu_stages_compiled"]
    history = json.loads((out / "history.json").read_text())
    assert history[-1]["id"] == record["id"]
    page = (out / "dashboard.html").read_text()
    assert "tests_helper_module:make" in page
    assert "interpreted stages" in page
    assert "your model: tests_helper_module:make" in page


def _zoo():
    sys.path.insert(0, str(BENCHES))
    try:
        import models
    finally:
        sys.path.remove(str(BENCHES))
    return models


@pytest.fixture
def in_helper_dir(helper_dir: Path, monkeypatch):
    """Targets resolved in this process as a worker would: from the user's folder."""
    monkeypatch.setenv("RDYN_BENCH_CWD", str(helper_dir))
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield _zoo()
    for name in [m for m in sys.modules if m in ("tests_helper_module", "imports_missing")
                 or m.startswith("_rdyn_bench_target_")]:
        del sys.modules[name]


def test_target_from_a_file_with_a_plain_function(in_helper_dir, helper_dir: Path) -> None:
    """``path/to/file.py:FUNCTION`` whose model is a function and whose
    inputs a 1-tuple: built as a module, described for the catalog."""
    models = in_helper_dir
    target = f"{helper_dir / 'tests_helper_module.py'}:one_tensor_fn"
    module, inputs = models.spec(target).build()
    assert isinstance(module, torch.nn.Module) and len(inputs) == 1
    assert module(*inputs).shape == (4, 8)
    described = models.describe_target(target)
    assert "error" not in described, described
    assert described["train"] is False and "4x8" in described["description"], described
    described = models.describe_target("tests_helper_module:make")
    assert described["train"] is True and "Sequential" in described["description"], described


@pytest.mark.parametrize(
    "target, expected",
    [
        ("no_such_module_xyz:make", "no module named 'no_such_module_xyz'"),
        ("tests_helper_module:nope", "tests_helper_module has no 'nope'"),
        ("tests_helper_module:not_a_function", "is an int, not a function"),
        ("tests_helper_module:wrong_type", "returned an int; it must return (model, inputs)"),
        ("tests_helper_module:wrong_inputs", "returned inputs holding an int"),
        ("tests_helper_module:three", "returned a 3-tuple"),
        ("tests_helper_module:raises", "raises() raised ValueError: no weights here"),
        ("imports_missing:make", "importing 'imports_missing' failed: ModuleNotFoundError"),
        ("missing_file.py:make", "no file"),
        ("tests_helper_module:", "expected MODULE:FUNCTION"),
    ],
)
def test_bad_target_message(in_helper_dir, target: str, expected: str) -> None:
    """What the catalog reports (and the CLI prints) for each kind of bad target."""
    described = in_helper_dir.describe_target(target)
    assert set(described) == {"name", "error"}, described
    message = described["error"]
    assert expected in message, message
    assert "\n" not in message and len(message) < 400, message


@pytest.mark.parametrize(
    "target, expected",
    [
        ("no_such_module_xyz", "error: no_such_module_xyz:make: no module named 'no_such_module_xyz'"),
        ("tests_helper_module:wrong_inputs", "error: tests_helper_module:wrong_inputs: wrong_inputs() returned "
         "inputs holding an int"),
    ],
)
def test_rdyn_bench_bad_target_is_one_clear_line(helper_dir: Path, target: str, expected: str) -> None:
    """The CLI end to end: the message on stderr, one line, no traceback,
    a non-zero exit, nothing written."""
    proc = _bench([target, "--no-progress", "--out", str(helper_dir / "never")], helper_dir, timeout=180)
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(expected), err
    assert not (helper_dir / "never").exists()


def test_rdyn_bench_options_match_the_suite() -> None:
    """rdyn.bench's options become benches/suite.py's (no process started)."""
    from rdyn import bench

    args = bench.parse_args(["my_model", "--backends", "eager,rdyn", "--rounds", "2", "--train", "--no-warm"])
    assert bench.suite_argv(args) == ["--target", "my_model:make", "--backends", "eager,rdyn", "--rounds", "2",
                                      "--train", "--no-warm"]
    assert (bench.find_benches() / "suite.py").is_file()


def test_wide_suite_lists_at_least_30_models() -> None:
    proc = subprocess.run([sys.executable, str(BENCHES / "suite.py"), "--suite", "wide", "--list"], cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines[-1].endswith("models in the wide suite"), lines[-1]
    names = [line.split()[0] for line in lines[:-1]]
    assert len(names) >= 30, names
    assert len(names) == int(lines[-1].split()[0])
    for name in ("resnet50", "densenet121", "llama", "whisper_encoder", "weight_norm_conv", "softmax_amax",
                 "convnext_downsample", "dense_block", "whisper_layer_750", "rotary", "recommender", "lstm"):
        assert name in names, name


def test_wide_suite_plan_trains_what_has_parameters() -> None:
    """``--suite wide`` is inference and training, 9 rounds of 100 ms; the models with
    no parameters run inference only; the default suite is unchanged."""
    sys.path.insert(0, str(BENCHES))
    try:
        import suite
    finally:
        sys.path.remove(str(BENCHES))
    catalog = suite.model_catalog()
    plan = suite.resolve_plan(suite.parse_args(["--suite", "wide"]), catalog)
    assert plan["suite"] == "wide" and len(plan["models"]) >= 30
    modes = {c["mode"]: c["models"] for c in plan["configs"]}
    assert set(modes) == {"inference", "train"}
    assert "reduction" in modes["inference"] and "reduction" not in modes["train"]
    assert "resnet50" in modes["train"]
    wide = suite.parse_args(["--suite", "wide"])
    assert (wide.rounds, wide.target_ms) == (9, 100.0)
    assert (suite.parse_args([]).rounds, suite.parse_args([]).target_ms) == (7, 200.0)
    assert [c["mode"] for c in suite.resolve_plan(suite.parse_args(["--suite", "wide", "--no-train"]),
                                                  catalog)["configs"]] == ["inference"]
    default = suite.resolve_plan(suite.parse_args([]), catalog)
    assert default["suite"] == "default" and len(default["models"]) == 11
    assert [c["mode"] for c in default["configs"]] == ["inference"]


def _wide_names() -> list[str]:
    return _zoo().SUITES["wide"]


def test_every_wide_model_builds_and_runs_one_eager_forward() -> None:
    """Each constructor at its configured size, one eager forward: finite
    outputs, batch sizes 1-8 for the corpus. Models whose package (timm,
    transformers) is missing are skipped."""
    models = _zoo()
    skipped, slow = [], []
    t_all = time.monotonic()
    for name in _wide_names():
        spec = models.MODELS[name]
        missing = [p for p in models.packages(spec) if importlib.util.find_spec(p) is None]
        if missing:
            skipped.append(f"{name} ({', '.join(missing)})")
            continue
        t0 = time.monotonic()
        module, inputs = spec.build()
        assert isinstance(module, torch.nn.Module) and isinstance(inputs, tuple), name
        assert all(isinstance(x, torch.Tensor) for x in inputs), name
        with torch.no_grad():
            out = module(*inputs)
        outs = [out] if isinstance(out, torch.Tensor) else list(out)
        assert outs and all(torch.isfinite(o).all() for o in outs), name
        if spec.wide:
            # Batch 1-8 (softmax_amax's rows are 256 tokens of one sequence).
            assert 1 <= inputs[0].shape[0] <= 8 or name == "softmax_amax", (name, inputs[0].shape)
        assert spec.train == any(p.requires_grad for p in module.parameters()), name
        slow.append((time.monotonic() - t0, name))
    if skipped:
        print("skipped (package missing):", ", ".join(skipped))
    print(f"{len(slow)} models in {time.monotonic() - t_all:.1f} s; slowest:",
          ", ".join(f"{n} {s:.1f}s" for s, n in sorted(slow, reverse=True)[:5]))
    if not slow:
        pytest.skip("no wide model could be built: " + ", ".join(skipped))
