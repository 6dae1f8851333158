#!/usr/bin/env python3
"""Run PyTorch's Inductor tests with rdyn in Inductor's place, and sort the failures.

PyTorch's ``test/inductor/test_torchinductor.py`` checks Inductor through
``compile_fx`` (its ``check_model`` wraps ``torch._inductor.compile_fx.compile_fx``
in a Dynamo backend; other tests call ``torch.compile``, whose default
backend imports ``compile_fx`` when it compiles). This runner replaces
``compile_fx`` (the module attribute and the name the test module imported)
with a function that calls ``rdyn.rdyn_backend(gm, example_inputs)``, sets
``RDYN_STRICT=1`` (a graph rdyn cannot compile is an error, not a silent
eager run), runs the selected test class, and then reruns every test that
failed under rdyn with Inductor itself, to tell rdyn's failures from the
test file's own. Each failure is then put in one category:

=====================  ====================================================
pass / skip / xfail    passed; skipped; an expected failure (the test file's
                       own annotation) that failed as expected
xpass                  marked as an expected failure for Inductor, passed
inductor-internal      checks Inductor's internals, not results: generated
                       code (``run_and_get_code``, ``FileCheck``), kernel
                       counts and other ``torch._inductor.metrics``,
                       Inductor's code caches or IR
rng                    a value mismatch in a test whose compiled code draws
                       random numbers (or uses ``fallback_random``): rdyn's
                       random numbers are not eager's, as Inductor's are not
rdyn-only              any other failure of a test that passes under Inductor
                       (or, with ``--baseline none``, of any test)
inductor-fails-too     fails (or crashes) under Inductor as well
version-mismatch       used a name the test file imports that this torch
                       lacks (the test file is from another PyTorch version;
                       the runner stubs such names so the file still loads)
crash                  the worker process died (segfault, abort) in the test
timeout                no result within ``--timeout`` seconds
=====================  ====================================================

Tests run in pytest worker processes, ``--chunk`` tests each; the runner
watches each worker's per-test event log, so a test that kills its worker is
recorded as a crash (and one that hangs as a timeout) and the rest of its
chunk goes on in a new worker. No pytest plugin beyond pytest itself is
needed.

Usage (PyTorch's sources are not part of this repository: use the
``test/inductor/test_torchinductor.py`` of the PyTorch version installed in
``.venv``, stored anywhere outside the repository)::

    .venv/bin/python tools/inductor_conformance.py /tmp/pt/test/inductor/test_torchinductor.py \\
        --out build/conformance                   # the whole CpuTests class
    .venv/bin/python tools/inductor_conformance.py FILE --out DIR -k "softmax or cat"
    .venv/bin/python tools/inductor_conformance.py FILE --out DIR --classes CpuTests,SweepInputsCpuTest
    .venv/bin/python tools/inductor_conformance.py FILE --out DIR --baseline none   # no Inductor reruns
    .venv/bin/python tools/inductor_conformance.py --summarize DIR/results.json  # print a summary again
    .venv/bin/python tools/inductor_conformance.py --reclassify DIR   # classify a run again (no test runs)

Options: ``--jobs N`` workers at once (default 1), ``--chunk N`` tests per
worker (default 40), ``--timeout S`` seconds per test (default 300),
``--baseline failures|all|none`` which tests also run under Inductor
(default: those that fail under rdyn), ``--limit N`` the first N tests only.

It writes ``DIR/results.json`` (every test: category, outcomes under rdyn
and Inductor, first line of the error, duration; the counts; the
rdyn-only failures), ``DIR/summary.txt`` (the counts and the rdyn-only
failures, one line each) and ``DIR/logs/`` (each worker's output and event
log). Progress goes to stdout. Each test's record also says what rdyn
compiled for it (graphs, nodes run eagerly), and the summary counts the
passes that compiled no rdyn graph or ran nodes eagerly. The CPU class (769
tests in the copy used in November 2026) took 14 minutes on 2 cores: 9.4
under rdyn, 4 to rerun its 47 failures under Inductor; run it with ``nice
-n 19``.

The code is in four files in tools/: this one (the command line, the
results and their summary), ``conformance_runner.py`` (the worker processes
and their event logs), ``conformance_classify.py`` (the categories) and
``conformance_plugin.py``, the pytest plugin loaded in each worker (``-p
conformance_plugin``): ``RDYN_CONFORMANCE_BACKEND`` (``rdyn`` or
``inductor``) says which backend the worker runs, ``RDYN_CONFORMANCE_LOG``
where it writes its events, ``RDYN_CONFORMANCE_TESTFILE`` which file's
imports to check against this torch. This file re-exports the plugin's
hooks, so ``-p inductor_conformance`` (how workers loaded it before) loads
the same plugin.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from conformance_classify import CATEGORIES, SHIM_MARKER, classify, error_message, first_line  # noqa: F401

# The plugin's hooks, so that ``-p inductor_conformance`` still loads the plugin.
from conformance_plugin import (  # noqa: F401
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_logfinish,
    pytest_runtest_logreport,
    pytest_runtest_logstart,
    pytest_runtest_makereport,
)
from conformance_runner import ROOT, _match, collect, records_from_events, run_tests  # noqa: F401


def _git_commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except Exception:
        return None


def build_results(
    nodeids: list[str],
    rdyn: dict[str, dict[str, Any]],
    inductor: dict[str, dict[str, Any]],
    meta: dict[str, Any],
) -> dict[str, Any]:
    tests = []
    for nodeid in nodeids:
        r = rdyn.get(nodeid) or {"nodeid": nodeid, "outcome": "error", "message": "no result"}
        i = inductor.get(nodeid)
        category = classify(r, i)
        tests.append(
            {
                "test": nodeid.split("::")[-1],
                "nodeid": nodeid,
                "category": category,
                "rdyn": r.get("outcome"),
                "inductor": None if i is None else i.get("outcome"),
                "error": first_line(error_message(r)) if r.get("outcome") not in ("passed",) else "",
                "duration_s": round(float(r.get("duration") or 0.0), 3),
                "detail": (r.get("longrepr") or "")[-4000:] if category in ("rdyn-only", "crash") else "",
                # What rdyn compiled in this test (absent where the worker died).
                "rdyn_stats": r.get("stats"),
            }
        )
    counts = Counter(t["category"] for t in tests)
    # Passes say less where rdyn compiled nothing (the test never reached
    # compile_fx) or ran nodes eagerly (constructs rdyn does not lower).
    passes = [t for t in tests if t["category"] == "pass" and t["rdyn_stats"] is not None]
    eager_ops: Counter = Counter()
    for t in passes:
        eager_ops.update(t["rdyn_stats"].get("fallback_ops") or {})
    return {
        "meta": meta,
        "counts": {c: counts.get(c, 0) for c in CATEGORIES},
        "total": len(tests),
        "passes": {
            "without_rdyn_graph": sum(1 for t in passes if not t["rdyn_stats"].get("graphs")),
            "with_eager_nodes": sum(1 for t in passes if t["rdyn_stats"].get("nodes_fallback")),
            "with_unsupported_graphs": sum(1 for t in passes if t["rdyn_stats"].get("graphs_unsupported")),
            "eager_ops": dict(eager_ops.most_common()),
        },
        "rdyn_only": [{"test": t["test"], "error": t["error"]} for t in tests if t["category"] == "rdyn-only"],
        "crashes": [{"test": t["test"], "error": t["error"]} for t in tests if t["category"] == "crash"],
        "tests": tests,
    }


def summary_text(results: dict[str, Any]) -> str:
    meta = results.get("meta", {})
    lines = [
        f"Inductor conformance of rdyn: {meta.get('test_file', '?')} ({', '.join(meta.get('classes', []))})",
        f"torch {meta.get('torch', '?')}, rdyn {meta.get('rdyn_commit', '?')}, {meta.get('date', '')}",
    ]
    if meta.get("k"):
        lines.append(f"-k {meta['k']}")
    if meta.get("stubbed"):
        lines.append("names the test file imports that this torch lacks (stubbed): " + ", ".join(meta["stubbed"]))
    lines.append(f"{results['total']} tests:")
    for c in CATEGORIES:
        lines.append(f"  {c:<20} {results['counts'].get(c, 0)}")
    p = results.get("passes")
    if p:
        lines.append(
            f"of the passes: {p['without_rdyn_graph']} compiled no rdyn graph, "
            f"{p['with_eager_nodes']} ran nodes eagerly ({p['with_unsupported_graphs']} a whole graph)"
        )
        if p["eager_ops"]:
            top = list(p["eager_ops"].items())[:12]
            lines.append("  eager nodes in passes: " + ", ".join(f"{op} {n}" for op, n in top))
    for title, key in (("rdyn-only failures", "rdyn_only"), ("crashes", "crashes")):
        if results.get(key):
            lines.append(f"\n{title} ({len(results[key])}):")
            for t in results[key]:
                lines.append(f"  {t['test']}: {t['error'][:300]}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("test_file", nargs="?", help="PyTorch's test/inductor/test_torchinductor.py")
    ap.add_argument("--out", help="output folder (results.json, summary.txt, logs/)")
    ap.add_argument("--classes", default="CpuTests", help="test classes, comma-separated (default CpuTests)")
    ap.add_argument("-k", dest="k", help="pytest -k expression selecting tests")
    ap.add_argument("--limit", type=int, help="run only the first N selected tests")
    ap.add_argument("--chunk", type=int, default=40, help="tests per worker process (default 40)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes at once (default 1)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per test (default 300)")
    ap.add_argument(
        "--baseline",
        choices=("failures", "all", "none"),
        default="failures",
        help="which tests also run under Inductor (default: those failing under rdyn)",
    )
    ap.add_argument("--summarize", metavar="RESULTS_JSON", help="print the summary of an earlier run")
    ap.add_argument(
        "--reclassify", metavar="DIR", help="classify an earlier run's results again from DIR/logs (no test runs)"
    )
    args = ap.parse_args(argv)

    if args.summarize:
        print(summary_text(json.loads(Path(args.summarize).read_text())), end="")
        return 0
    if args.reclassify:
        return reclassify(Path(args.reclassify))
    if not args.test_file or not args.out:
        ap.error("TEST_FILE and --out are required")
    test_file = Path(args.test_file).resolve()
    if not test_file.is_file():
        ap.error(f"no such file: {test_file}")
    out = Path(args.out)
    logs = out / "logs"
    out.mkdir(parents=True, exist_ok=True)
    classes = [c.strip() for c in args.classes.split(",") if c.strip()]

    import torch

    started = time.time()
    nodeids = collect(test_file, classes, args.k, logs)
    if args.limit:
        nodeids = nodeids[: args.limit]
    (logs / "selected.json").write_text(json.dumps(nodeids))
    print(f"{len(nodeids)} tests selected from {test_file.name} ({', '.join(classes)})", flush=True)

    rdyn_results = run_tests(
        "rdyn", test_file, nodeids, logs, chunk=args.chunk, jobs=args.jobs, timeout=args.timeout
    )
    if args.baseline == "all":
        rerun = nodeids
    elif args.baseline == "failures":
        rerun = [
            n
            for n in nodeids
            if rdyn_results.get(n, {}).get("outcome") in ("failed", "error")
            and classify(rdyn_results[n]) not in ("version-mismatch", "xpass")
        ]
    else:
        rerun = []
    if rerun:
        print(f"rerunning {len(rerun)} tests under Inductor", flush=True)
    inductor_results = {}
    if rerun:
        inductor_results = run_tests(
            "inductor", test_file, rerun, logs, chunk=args.chunk, jobs=args.jobs, timeout=args.timeout
        )
    stubbed = []
    collect_events = logs / "collect.events"
    if collect_events.exists():
        for line in collect_events.read_text().splitlines():
            ev = json.loads(line)
            if ev.get("event") == "configure":
                stubbed = ev.get("stubbed", [])
    meta = {
        "test_file": str(test_file),
        "classes": classes,
        "k": args.k,
        "limit": args.limit,
        "baseline": args.baseline,
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "rdyn_commit": _git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "wall_s": round(time.time() - started, 1),
        "stubbed": stubbed,
    }
    (logs / "meta.json").write_text(json.dumps(meta))
    _write(out, build_results(nodeids, rdyn_results, inductor_results, meta))
    print(f"({meta['wall_s'] / 60:.1f} min)")
    return 0


def _write(out: Path, results: dict[str, Any]) -> None:
    (out / "results.json").write_text(json.dumps(results, indent=1))
    text = summary_text(results)
    (out / "summary.txt").write_text(text)
    print(text, end="")
    print(f"wrote {out / 'results.json'} and {out / 'summary.txt'}")


def _saved_records(logs: Path, backend: str) -> dict[str, dict[str, Any]]:
    records: dict[str, dict[str, Any]] = {}
    for f in sorted(logs.glob(f"{backend}-*.records.json")):  # later workers (retries) last
        records.update(json.loads(f.read_text()))
    return records


def reclassify(out: Path) -> int:
    """Classify an earlier run again from its saved records (after the
    classifier changed), rewriting results.json and summary.txt."""
    logs = out / "logs"
    nodeids = json.loads((logs / "selected.json").read_text())
    meta_file = logs / "meta.json"
    if meta_file.exists():
        meta = json.loads(meta_file.read_text())
    else:
        meta = json.loads((out / "results.json").read_text())["meta"] if (out / "results.json").exists() else {}
    rdyn = _saved_records(logs, "rdyn")
    inductor = _saved_records(logs, "inductor")
    _write(out, build_results(nodeids, {n: rdyn[k] for n in nodeids if (k := _match(n, rdyn))}, inductor, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
