"""The benchmark suite and its dashboard (issue 3).

- The runner on ``--quick`` with eager and rdyn: the JSON record has the
  fields and sane values.
- The dashboard page in headless Chromium (Debian's ``chromium``): it loads
  without console errors, its charts are drawn, and the data they plot is the
  JSON's. A screenshot is kept at ``build/bench-test/dashboard.png``.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "bench-test"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def quick_run() -> dict:
    """One ``--quick`` run into a fresh folder; its history record."""
    if OUT.exists():
        shutil.rmtree(OUT)
    cmd = [
        sys.executable,
        str(ROOT / "benches" / "suite.py"),
        "--quick",
        "--backends",
        "eager,rdyn",
        "--rounds",
        "1",
        "--target-ms",
        "20",
        "--no-warm",
        "--no-progress",
        "--out",
        str(OUT),
    ]
    env = dict(os.environ, RDYN_STRICT="1")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"suite failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "dashboard" in proc.stdout, proc.stdout[-2000:]
    history = json.loads((OUT / "history.json").read_text())
    assert isinstance(history, list) and history, "history.json holds no run"
    return history[-1]


def test_quick_run_record_has_fields_and_sane_values(quick_run: dict) -> None:
    for key in ("timestamp", "commit", "machine", "versions", "options", "results", "summary"):
        assert key in quick_run, f"record lacks {key}"
    rows = quick_run["results"]
    models = {r["model"] for r in rows}
    assert len(models) == 3, models
    for row in rows:
        assert row.get("error") in (None, ""), row
        assert row["correct"] is True, row
        assert 0.0 < row["speedup"] < 1000.0, row
        if row["backend"] == "rdyn":
            assert 0.0 < row["compile_s"] < 120.0, row
            # AOTAutograd and rdyn after Dynamo's capture: part of the first call.
            assert 0.0 < row["backend_compile_s"] < row["compile_s"], row
            # Dynamo's own share of it, beside the backend's.
            assert 0.0 < row["capture_s"] < row["compile_s"] - row["backend_compile_s"], row
            assert row["rdyn_stats"]["nodes_native"] > 0, row
            assert row["rdyn_stats"]["graphs_failed"] == 0, row
    for summary in quick_run["summary"]:
        if summary["backend"] == "rdyn":
            assert 0.0 < summary["median_capture_s"] < summary["median_compile_s"], summary


def _dump_dom(page: Path, screenshot: Path) -> tuple[str, str]:
    profile = OUT / "chromium-profile"
    profile.mkdir(parents=True, exist_ok=True)
    common = CHROMIUM_FLAGS + [f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0"]
    dom = subprocess.run(
        [CHROMIUM, *common, "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    shot = subprocess.run(
        [CHROMIUM, *common, "--window-size=1400,2400", "--virtual-time-budget=10000", f"--screenshot={screenshot}", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return dom.stdout, dom.stderr + shot.stderr


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_dashboard_renders_the_json_in_chromium(quick_run: dict) -> None:
    page = OUT / "dashboard.html"
    assert page.exists(), "the quick run built no dashboard"
    screenshot = OUT / "dashboard.png"
    dom, log = _dump_dom(page, screenshot)
    errors = [line for line in log.splitlines() if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)]
    assert not errors, "console errors:\n" + "\n".join(errors)
    # plotly draws each chart as an svg inside a .js-plotly-plot element.
    charts = dom.count("js-plotly-plot")
    assert charts >= 4, f"only {charts} charts rendered"
    assert dom.count("main-svg") >= charts
    # The data the charts plot is the run's JSON.
    match = re.search(r'<script type="application/json" id="rdyn-data">(.*?)</script>', dom, re.S)
    assert match, "no embedded data"
    data = json.loads(html.unescape(match.group(1)))
    assert data["latest"]["id"] == quick_run["id"]
    assert data["latest"]["results"] == quick_run["results"]
    # Every chart's points come from the run: each speedup plotted is one the
    # JSON holds.
    speedups = {round(r["speedup"], 6) for r in quick_run["results"]}
    chart = data["charts"]["chart-speedup"]
    plotted = {round(y, 6) for trace in chart["traces"] for y in trace["y"] if isinstance(y, (int, float))}
    assert plotted and plotted <= speedups, (plotted, speedups)
    for row in quick_run["results"]:
        assert row["model"] in dom, f"{row['model']} not on the page"
    assert screenshot.exists() and screenshot.stat().st_size > 10_000, "no screenshot"


def test_ops_benchmark_checks_and_times_each_case() -> None:
    """``benches/ops.py`` with eager and rdyn on four cases (one random):
    every case is checked (against eager, or by its statistics) and timed,
    and the JSON holds the times."""
    out = OUT / "ops.json"
    cmd = [
        sys.executable,
        str(ROOT / "benches" / "ops.py"),
        "--backends",
        "eager,rdyn",
        "--cases",
        "sort rows,bucketize,index_add,dropout 0.1 after",
        "--rounds",
        "1",
        "--target-ms",
        "10",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, RDYN_STRICT="1"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "differs from eager" not in proc.stderr, proc.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert [r["case"] for r in results] == [
        "sort rows 256x1024",
        "bucketize 1M in 16",
        "index_add 2048x64 into 100",
        "dropout 0.1 after relu 8x64x128",
    ]
    assert all(r["eager"] > 0 and r["rdyn"] > 0 for r in results), results


def test_extra_models_are_opt_in() -> None:
    """The opt-in models (SqueezeNet, ShuffleNet, an upsampling decoder)
    stay out of the default suite and of `--quick`; `--models extra` names
    them all, alongside others, each once."""
    sys.path.insert(0, str(ROOT / "benches"))
    try:
        import suite
    finally:
        sys.path.pop(0)
    catalog = suite.model_catalog()
    extra = [m["name"] for m in catalog if m.get("extra")]
    assert extra == ["squeezenet", "shufflenet", "upsample_decoder"], extra
    default = suite.resolve_plan(suite.parse_args([]), catalog)["models"]
    assert "mlp" in default and not set(extra) & set(default), default
    quick = suite.resolve_plan(suite.parse_args(["--quick"]), catalog)["models"]
    assert not set(extra) & set(quick), quick
    chosen = suite.resolve_plan(suite.parse_args(["--models", "extra,mlp,shufflenet"]), catalog)["models"]
    assert chosen == [*extra, "mlp"], chosen
    with pytest.raises(SystemExit, match="unknown model"):
        suite.resolve_plan(suite.parse_args(["--models", "nosuch"]), catalog)
