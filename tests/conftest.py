"""pytest configuration for the rdyn tests.

* ``RDYN_STRICT=1`` by default, so a graph rdyn fails to compile is an error
  rather than a silent eager fallback (``tools/test.sh`` sets it too).
* Every test starts with Dynamo's caches and rdyn's counters cleared.
* The OpInfo conformance tests record one result per op; at the end of the
  session they are written to ``build/opinfo_summary.json`` and summarised in
  the terminal.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import sys
import time
from typing import Any

os.environ.setdefault("RDYN_STRICT", "1")
# rdyn's on-disk graph cache: a fresh one per session, so no test reads an
# entry an older build or session wrote (tests/test_cache.py covers it).
if "RDYN_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["RDYN_CACHE_DIR"] = tempfile.mkdtemp(prefix="rdyn-test-cache-")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch._dynamo  # noqa: E402

import rdyn  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
OPINFO_SUMMARY = ROOT / "build" / "opinfo_summary.json"
_OPINFO_RESULTS = pytest.StashKey[list]()

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

# torch's structured-trace logger emits a DEBUG record for every fake tensor,
# which pytest would attach to every failure report.  It only matters when
# TORCH_TRACE is set.
if not os.environ.get("TORCH_TRACE"):
    logging.getLogger("torch.__trace").setLevel(logging.INFO)


@pytest.fixture(autouse=True)
def fresh_state() -> None:
    """Clear Dynamo's compiled code and rdyn's counters; fix the RNG."""
    torch._dynamo.reset()
    rdyn.reset_stats()
    torch.manual_seed(0)


@pytest.fixture
def opinfo_results(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    """The session's list of per-op conformance records (see test_opinfo.py)."""
    return request.config.stash.setdefault(_OPINFO_RESULTS, [])


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_OPINFO_RESULTS] = []
    session.config._rdyn_start = time.monotonic()  # type: ignore[attr-defined]


def _opinfo_summary(all_results: list[dict[str, Any]]) -> dict[str, Any]:
    """Headline figures over the CPU float32 ops; the same over wgpu float32
    ops when they ran; pass rates for the other dtypes."""
    cpu = [r for r in all_results if r.get("device", "cpu") == "cpu"]
    summary = _headline(cpu, all_results)
    wgpu = [r for r in all_results if r.get("device") == "wgpu"]
    if wgpu:
        summary["wgpu"] = {k: v for k, v in _headline(wgpu, wgpu).items() if k not in ("results", "by_dtype")}
    for device in ("cuda", "cuda-sim"):
        runs = [r for r in all_results if r.get("device") == device]
        if runs:
            summary[device] = {k: v for k, v in _headline(runs, runs).items() if k != "results"}
    summary["results"] = all_results
    return summary


def _headline(device_results: list[dict[str, Any]], all_results: list[dict[str, Any]]) -> dict[str, Any]:
    results = [r for r in device_results if r.get("dtype", "float32") == "float32"]
    by_dtype: dict[str, dict[str, int]] = {}
    for record in device_results:
        counts = by_dtype.setdefault(record.get("dtype", "float32"), {"pass": 0, "fail": 0, "skip": 0})
        counts[record["status"]] += 1
    passed = [r for r in results if r["status"] == "pass"]
    failed = [r for r in results if r["status"] == "fail"]
    skipped = [r for r in results if r["status"] == "skip"]
    tested = len(passed) + len(failed)
    # On wgpu, a kernel that ran on the CPU (no WGSL form) counts as a fallback.
    zero_fallback = [r for r in passed if r.get("nodes_fallback", 0) == 0 and r.get("wgpu_cpu_kernels", 0) == 0]
    fallback_ops: dict[str, int] = {}
    native = extern = fallback = 0
    for record in results:
        native += record.get("nodes_native", 0)
        extern += record.get("nodes_extern", 0)
        fallback += record.get("nodes_fallback", 0)
        for op, count in record.get("fallback_ops", {}).items():
            fallback_ops[op] = fallback_ops.get(op, 0) + count
    nodes = native + extern + fallback
    return {
        "torch": torch.__version__,
        "ops": len(results),
        "tested": tested,
        "passed": len(passed),
        "failed": len(failed),
        "skipped": len(skipped),
        "pass_percent": round(100.0 * len(passed) / tested, 2) if tested else 0.0,
        "zero_fallback": len(zero_fallback),
        "zero_fallback_percent_of_passed": round(100.0 * len(zero_fallback) / len(passed), 2) if passed else 0.0,
        "nodes_native": native,
        "nodes_extern": extern,
        "nodes_fallback": fallback,
        "native_or_extern_percent": round(100.0 * (native + extern) / nodes, 2) if nodes else 0.0,
        "fallback_ops": dict(sorted(fallback_ops.items(), key=lambda item: -item[1])),
        "by_dtype": by_dtype,
        "failures": {r["op"]: r.get("reason", "") for r in failed},
        "failures_other_dtypes": {
            f"{r['op']}-{r['dtype']}": r.get("reason", "")
            for r in device_results
            if r["status"] == "fail" and r.get("dtype", "float32") != "float32"
        },
    }


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    results = session.config.stash.get(_OPINFO_RESULTS, [])
    if not results:
        return
    summary = _opinfo_summary(results)
    OPINFO_SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    OPINFO_SUMMARY.write_text(json.dumps(summary, indent=1, default=str) + "\n")
    session.config._rdyn_opinfo_summary = summary  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    summary = getattr(config, "_rdyn_opinfo_summary", None)
    if summary is None:
        return
    terminalreporter.write_sep("-", "rdyn OpInfo conformance (CPU float32)")
    terminalreporter.write_line(
        f"{summary['ops']} ops, {summary['tested']} tested, {summary['skipped']} skipped: "
        f"pass {summary['pass_percent']}% ({summary['passed']}/{summary['tested']}), "
        f"zero-fallback {summary['zero_fallback_percent_of_passed']}% of passing ops, "
        f"native+extern nodes {summary['native_or_extern_percent']}%"
    )
    others = {dtype: counts for dtype, counts in summary["by_dtype"].items() if dtype != "float32"}
    if others:
        terminalreporter.write_line(
            "other dtypes: "
            + ", ".join(f"{dtype} {counts['pass']}/{counts['pass'] + counts['fail']} pass" for dtype, counts in others.items())
        )
    wgpu = summary.get("wgpu")
    if wgpu:
        terminalreporter.write_line(
            f"wgpu: {wgpu['ops']} ops, {wgpu['tested']} tested: pass {wgpu['pass_percent']}% "
            f"({wgpu['passed']}/{wgpu['tested']}), zero-fallback (no eager node, no CPU kernel) "
            f"{wgpu['zero_fallback_percent_of_passed']}% of passing ops"
        )
    for device in ("cuda-sim", "cuda"):
        cuda = summary.get(device)
        if not cuda:
            continue
        terminalreporter.write_line(
            f"{device}: {cuda['ops']} ops, {cuda['tested']} tested: pass {cuda['pass_percent']}% "
            f"({cuda['passed']}/{cuda['tested']}), zero-fallback {cuda['zero_fallback_percent_of_passed']}% of passing ops; "
            + ", ".join(
                f"{dtype} {c['pass']}/{c['pass'] + c['fail']} pass" for dtype, c in cuda["by_dtype"].items() if dtype != "float32"
            )
        )
    top = list(summary["fallback_ops"].items())[:10]
    if top:
        terminalreporter.write_line("most frequent fallback ops: " + ", ".join(f"{op} ({n})" for op, n in top))
    terminalreporter.write_line(f"written to {OPINFO_SUMMARY.relative_to(ROOT)}")
