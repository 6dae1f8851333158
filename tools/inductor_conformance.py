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

This file is also the pytest plugin loaded in each worker (``-p
inductor_conformance``): ``RDYN_CONFORMANCE_BACKEND`` (``rdyn`` or
``inductor``) says which backend the worker runs, ``RDYN_CONFORMANCE_LOG``
where it writes its events, ``RDYN_CONFORMANCE_TESTFILE`` which file's
imports to check against this torch.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

import pytest

CATEGORIES = (
    "pass",
    "skip",
    "xfail",
    "xpass",
    "inductor-internal",
    "rng",
    "rdyn-only",
    "inductor-fails-too",
    "version-mismatch",
    "crash",
    "timeout",
)
SHIM_MARKER = "rdyn-conformance: not in this torch:"


# --------------------------------------------------------------------------
# Classification (pure functions: tests/test_inductor_conformance.py)
# --------------------------------------------------------------------------

# Failing lines or frames that show a test checking Inductor's internals.
_INTERNAL_PATTERNS = [
    r"\brun_and_get_(?:code|cpp_code|triton_code|kernels|graph_lowering)\b",
    r"\brun_fw_bw_and_get_code\b",
    r"\bget_(?:code|cpp_code|triton_code)\b",
    r"\bFileCheck\b",
    r"\bmetrics\.\w+",
    r"\bgenerated_(?:kernel|cpp_vec_kernel)_count\b",
    r"\bnum_bytes_accessed\b",
    r"\bir_nodes_pre_fusion\b",
    r"\bcpp_to_dtype_count\b",
    r"\bcount_bytes_inductor\b",
    r"\bPyCodeCache\b",
    r"\bCppCodeCache\b",
    r"\bV\.graph\b",
    r"\bGraphLowering\b",
    r"\bcompile_fx_inner\b",
    r"\badd_scheduler_init_hook\b",
    r"\bassertExpectedInline\b",
    r"\bcodecache\.",
    r"counters\[[\"']inductor[\"']\]",  # Inductor's own event counters
    r"\binductor_wrapper_call\b",  # the profiler event of Inductor's wrapper
    r"Expected to find .* but did not find it|Expected not to find|From CHECK",  # FileCheck's errors
    r"(?<![a-z])aoti|\bAOTI\b|\baot_compile\b|\baot_inductor\b|AOTInductor",  # Inductor's AOT compiler
]
_INTERNAL_RE = re.compile("|".join(_INTERNAL_PATTERNS))
# Inductor hooks whose effects a test may check with a plain assertion.
_INTERNAL_SOURCE_RE = re.compile(
    r"\badd_scheduler_init_hook\b|\bV\.graph\b|\binner_fn_str\b|\bprofiler_mark_wrapper_call\b|"
    r"\b(?:post_grad|joint)_custom_(?:pre|post)_pass\b|\bregister_lowering\b|\bcompile_fx_inner\b"
)
# Frames in Inductor's own code that only run when Inductor compiled the
# graph (its caches, its code generators, its scheduler, its IR).
_INTERNAL_FRAME_RE = re.compile(
    r"torch/_inductor/(?:codecache|codegen/|scheduler|graph|ir|lowering|"
    r"runtime/|output_code|metrics|select_algorithm|kernel/)[\w/]*\.py:\d+"
)
# Random ops (called inside the test's compiled function).
RANDOM_CALLS = frozenset(
    {
        "rand",
        "randn",
        "randint",
        "rand_like",
        "randn_like",
        "randint_like",
        "randperm",
        "dropout",
        "dropout1d",
        "dropout2d",
        "dropout3d",
        "alpha_dropout",
        "feature_alpha_dropout",
        "native_dropout",
        "Dropout",
        "Dropout1d",
        "Dropout2d",
        "Dropout3d",
        "AlphaDropout",
        "bernoulli",
        "bernoulli_",
        "multinomial",
        "normal",
        "normal_",
        "uniform_",
        "exponential_",
        "geometric_",
        "log_normal_",
        "cauchy_",
        "random_",
        "poisson",
        "rrelu",
        "rrelu_",
        "RReLU",
        "seed",
        "manual_seed",
        "inductor_random",
        "inductor_seeds",
        "philox_rand",
    }
)
_RNG_TEXT_RE = re.compile(r"\bfallback_random\b|\binductor_random\b|\binductor_seeds?\b|\bphilox\w*")
# Messages of a value mismatch (rather than an exception in rdyn or torch).
_MISMATCH_RE = re.compile(
    r"Tensor-likes are not (?:close|equal)|Scalars are not (?:close|equal)|"
    r"not close|not equal|Mismatched elements|Greatest absolute difference|"
    r"^AssertionError: (?:False|True) is not (?:true|false)|AssertionError: \S+ != \S+|"
    r"allclose",
    re.M,
)


def first_line(text: str | None) -> str:
    """The first non-empty line of an error message."""
    for line in (text or "").splitlines():
        line = line.strip()
        if line:
            return line
    return ""


def error_message(record: dict[str, Any]) -> str:
    """A failure's error (``ExcType: message``), from pytest's crash
    message or else from the ``E   `` lines of its traceback."""
    if record.get("message"):
        return str(record["message"])
    lines = [ln[1:].strip() for ln in (record.get("longrepr") or "").splitlines() if ln.startswith("E ")]
    return "\n".join(ln for ln in lines if ln)


_DEF_RE = re.compile(r"^[ >]   \s*(?:@|(?:async\s+)?def\s)")


def _source_start(lines: list[str], at: int) -> int:
    """Where the source of a frame that pytest prints begins: its function's
    first decorator or ``def`` line (the lines before it show the frame's
    arguments, whose values may span several indented lines)."""
    start = at
    while start > 0 and (lines[start - 1].startswith("    ") or lines[start - 1] == ""):
        start -= 1
    for i in range(start, at + 1):
        if _DEF_RE.match(lines[i]):
            return i
    return start


def frame_source(block: str) -> str:
    """The source shown for one frame of a long traceback (prefix removed)."""
    lines = block.splitlines()
    marks = [i for i, ln in enumerate(lines) if ln.startswith(">")]
    if not marks:
        return ""
    at = marks[-1]
    start = _source_start(lines, at)
    end = at + 1
    while end < len(lines) and (lines[end].startswith("    ") or lines[end] == ""):
        end += 1
    return "\n".join(ln[4:] for ln in lines[start:end])


def _failing_statement(lines: list[str], at: int) -> list[str]:
    """The whole statement around line `at` (the ``>`` line) of a frame's
    source as pytest prints it (4-column prefix, then the source): pytest
    marks one line of a statement that spans several."""
    start = _source_start(lines, at)
    end = at + 1
    while end < len(lines) and (lines[end].startswith("    ") or lines[end] == ""):
        end += 1
    block = [ln[4:] for ln in lines[start:end]]
    rel = at - start + 1
    try:
        tree = ast.parse(textwrap.dedent("\n".join(block)))
    except SyntaxError:
        return [ln.strip() for ln in block[max(0, rel - 3) : rel + 2]]
    best = None
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        first = node.lineno
        last = node.end_lineno or first
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            last = body[0].lineno - 1  # a compound statement: its header
            decorators = getattr(node, "decorator_list", [])
            if decorators:
                first = min(d.lineno for d in decorators)
        if first <= rel <= last and (best is None or last - first < best[1] - best[0]):
            best = (first, last)
    if best is None:
        return [block[rel - 1].strip()]
    return [ln.strip() for ln in block[best[0] - 1 : best[1]]]


def failing_lines(longrepr: str, errors: bool = True) -> list[str]:
    """The failing statement of each frame (pytest marks a line of it with
    ``>``) and, with `errors`, the ``E`` lines (the exception) and the frame
    locations (``path:line: Exc``) of a long-style traceback."""
    out = []
    for block in re.split(r"\n_ _ _[ _]*\n", longrepr):
        lines = block.splitlines()
        for i, line in enumerate(lines):
            if line.startswith(">"):
                out += _failing_statement([" " * 4 + ln[4:] if j == i else ln for j, ln in enumerate(lines)], i)
            elif not errors:
                continue
            elif line.startswith("E "):
                out.append(line[1:].strip())
            elif re.match(r"^\S+\.py:\d+:", line):
                out.append(line)
    return out


_CODE_GETTER_RE = re.compile(r"^(?:run_and_get_\w+|run_fw_bw_and_get_code|get_(?:cpp_|triton_)?code|get_code\w*)$")


def _names_bound_to_code(source: str) -> set[str]:
    """Names the test binds to Inductor's generated code: the targets of
    ``_, code = run_and_get_code(...)`` and the like."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or not isinstance(node.value, ast.Call):
            continue
        f = node.value.func
        fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if not _CODE_GETTER_RE.match(fname):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Name) and sub.id != "_":
                    names.add(sub.id)
    return names


def is_inductor_internal(record: dict[str, Any]) -> bool:
    """Whether a failure comes from checking Inductor's internals: the
    failing statements call a code/metrics helper or read a value the test
    took from one (``_, code = run_and_get_code(...)``), the error is
    FileCheck's, or a frame of the traceback is in Inductor's code
    generation, caches or IR."""
    longrepr = record.get("longrepr") or ""
    name = (record.get("nodeid") or "").split("::")[-1]
    failing = failing_lines(longrepr)
    text = "\n".join(failing + [error_message(record), name])
    if _INTERNAL_RE.search(text):
        return True
    # Per frame: does its failing statement read what it took from a code getter?
    for block in re.split(r"\n_ _ _[ _]*\n", longrepr):
        source = frame_source(block)
        names = _names_bound_to_code(source)
        if "def test_" in source:
            names |= _names_bound_to_code(record.get("source") or "")
        statements = "\n".join(failing_lines(block, errors=False))
        if names and re.search(r"\b(?:%s)\b" % "|".join(map(re.escape, sorted(names))), statements):
            return True
    if _INTERNAL_FRAME_RE.search(longrepr):
        return True
    # A test that hooks into Inductor (its scheduler, graph, IR, wrapper)
    # and then fails a plain assertion (not a value mismatch, not an error
    # from rdyn) is checking what its hook saw.
    message = error_message(record)
    source = (record.get("source") or "") + "\n" + longrepr
    return bool(
        _INTERNAL_SOURCE_RE.search(source)
        and re.match(r"(?:AssertionError|assert\b)", message)
        and not re.search(r"Tensor-likes are not|Mismatched elements", message)
        and "rdyn" not in message
    )


def _calls_in_nested_functions(source: str) -> set[str]:
    """Names of the functions called inside functions (and lambdas) nested
    in the test function: the code the test compiles."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return set()
    names: set[str] = set()
    tops = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for top in tops or [tree]:
        for node in ast.walk(top):
            if node is top or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call):
                    f = sub.func
                    if isinstance(f, ast.Attribute):
                        names.add(f.attr)
                    elif isinstance(f, ast.Name):
                        names.add(f.id)
    return names


def uses_random(record: dict[str, Any]) -> bool:
    """Whether the test's compiled code draws random numbers: its source
    names ``fallback_random`` (or Inductor's rng ops), or a function nested
    in it (what it compiles) calls a random op."""
    source = record.get("source") or ""
    if _RNG_TEXT_RE.search(source) or _RNG_TEXT_RE.search(record.get("longrepr") or ""):
        return True
    return bool(_calls_in_nested_functions(source) & RANDOM_CALLS)


def is_value_mismatch(record: dict[str, Any]) -> bool:
    return bool(_MISMATCH_RE.search(error_message(record)))


def _failed(record: dict[str, Any] | None) -> bool:
    return record is not None and record.get("outcome") in ("failed", "error", "crash", "timeout")


def classify(rdyn: dict[str, Any], inductor: dict[str, Any] | None = None) -> str:
    """The category of one test, from its record under rdyn and (for a
    failure) under Inductor. A record has ``outcome`` (passed, failed,
    error, skipped, xfailed, xpassed, crash, timeout), ``longrepr`` (pytest's
    long traceback), ``message`` (pytest's one-paragraph crash message) and
    ``source`` (the test function's source, decorators included)."""
    outcome = rdyn.get("outcome")
    if outcome == "passed":
        return "pass"
    if outcome == "skipped":
        return "skip"
    if outcome == "xfailed":
        return "xfail"
    if outcome == "xpassed":
        return "xpass"
    if outcome == "crash":
        return "crash"
    if outcome == "timeout":
        return "timeout"
    text = error_message(rdyn) + "\n" + (rdyn.get("longrepr") or "")
    if "Unexpected success" in text:
        return "xpass"
    if SHIM_MARKER in text:
        return "version-mismatch"
    if _failed(inductor):
        return "inductor-fails-too"
    if is_inductor_internal(rdyn):
        return "inductor-internal"
    if uses_random(rdyn) and is_value_mismatch(rdyn):
        return "rng"
    return "rdyn-only"


# --------------------------------------------------------------------------
# Worker event logs
# --------------------------------------------------------------------------


def records_from_events(lines: Iterable[str]) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Per-test records from a worker's event log (JSON lines: ``start``,
    ``report`` per phase, ``finish``), and the test that started but did
    not finish (the one running when the worker died), if any."""
    records: dict[str, dict[str, Any]] = {}
    running = None
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut off by the worker's death
        nodeid = ev.get("nodeid")
        kind = ev.get("event")
        if kind == "start":
            running = nodeid
            records[nodeid] = {"nodeid": nodeid, "outcome": None, "duration": 0.0}
        elif kind == "report":
            rec = records.setdefault(nodeid, {"nodeid": nodeid, "outcome": None, "duration": 0.0})
            rec["duration"] = rec.get("duration", 0.0) + float(ev.get("duration") or 0.0)
            outcome = ev.get("outcome")
            when = ev.get("when")
            if ev.get("wasxfail") is not None:
                outcome = "xfailed" if outcome == "skipped" else "xpassed"
            elif outcome == "failed" and when != "call":
                outcome = "error"
            # The first phase that did not pass decides (setup error, call
            # failure, teardown error); a pass needs the call phase.
            if rec["outcome"] in (None, "passed") and (outcome != "passed" or when == "call"):
                rec["outcome"] = outcome
                for key in ("longrepr", "message", "source"):
                    if ev.get(key):
                        rec[key] = ev[key]
        elif kind == "stats" and nodeid in records:
            records[nodeid]["stats"] = {k: v for k, v in ev.items() if k not in ("event", "nodeid")}
        elif kind == "finish":
            if running == nodeid:
                running = None
            rec = records.get(nodeid)
            if rec is not None and rec["outcome"] is None:
                rec["outcome"] = "passed"
    return records, running


# --------------------------------------------------------------------------
# The pytest plugin (loaded in each worker with -p inductor_conformance)
# --------------------------------------------------------------------------

_log_file = None


class _Missing:
    """Stands for a name the test file imports that this torch lacks. Used
    as a decorator (``@name``) it skips the test; called otherwise, or read
    from, it raises an error the classifier recognises."""

    def __init__(self, qualname: str):
        self._qualname = qualname

    def __repr__(self) -> str:
        return f"<{SHIM_MARKER} {self._qualname}>"

    def _error(self) -> AttributeError:
        return AttributeError(f"{SHIM_MARKER} {self._qualname}")

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            import unittest

            return unittest.skip(f"{SHIM_MARKER} {self._qualname}")(args[0])
        raise self._error()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise self._error()


def shim_missing_imports(path: str) -> list[str]:
    """Give the modules the test file imports from (``from M import a``)
    each name it imports that this torch lacks, as a `_Missing`; returns
    the names so stubbed."""
    import importlib

    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError):
        return []
    stubbed = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
            continue
        if not node.module.startswith("torch"):
            continue
        try:
            module = importlib.import_module(node.module)
        except Exception:
            continue
        for alias in node.names:
            if alias.name == "*" or hasattr(module, alias.name):
                continue
            try:
                importlib.import_module(f"{node.module}.{alias.name}")
                continue
            except Exception:
                pass
            setattr(module, alias.name, _Missing(f"{node.module}.{alias.name}"))
            stubbed.append(f"{node.module}.{alias.name}")
    return stubbed


def rdyn_compile_fx(model_, example_inputs_, *args, **kwargs):
    """Stands in for ``torch._inductor.compile_fx.compile_fx``: rdyn's
    backend (Inductor's options, inner compilers and config patches are
    ignored)."""
    import rdyn

    return rdyn.rdyn_backend(model_, example_inputs_)


def _install_rdyn() -> None:
    os.environ["RDYN_STRICT"] = "1"
    import torch._inductor.compile_fx as cfx

    import rdyn  # noqa: F401

    cfx.compile_fx = rdyn_compile_fx
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) and Path(module.__file__).name.startswith("test_"):
            if getattr(module, "compile_fx", None) is not None:
                module.compile_fx = rdyn_compile_fx


def _emit(event: dict[str, Any]) -> None:
    if _log_file is not None:
        _log_file.write(json.dumps(event) + "\n")
        _log_file.flush()


def pytest_configure(config) -> None:
    global _log_file
    backend = os.environ.get("RDYN_CONFORMANCE_BACKEND")
    if backend is None:
        return
    import logging

    # torch's structured-trace logger emits a DEBUG record per fake tensor,
    # which pytest would attach to every failure (tests/conftest.py does the same).
    logging.getLogger("torch.__trace").setLevel(logging.INFO)
    testfile = os.environ.get("RDYN_CONFORMANCE_TESTFILE")
    stubbed = shim_missing_imports(testfile) if testfile else []
    if os.environ.get("RDYN_CONFORMANCE_LOG"):
        _log_file = open(os.environ["RDYN_CONFORMANCE_LOG"], "a")
    _emit({"event": "configure", "backend": backend, "stubbed": stubbed})
    if backend == "rdyn":
        _install_rdyn()


def pytest_collection_modifyitems(session, config, items) -> None:
    # The test module imported `compile_fx` by name: point that name at rdyn too.
    if os.environ.get("RDYN_CONFORMANCE_BACKEND") == "rdyn":
        _install_rdyn()


def pytest_runtest_logstart(nodeid, location) -> None:
    _emit({"event": "start", "nodeid": nodeid})
    if os.environ.get("RDYN_CONFORMANCE_BACKEND") == "rdyn" and "rdyn" in sys.modules:
        sys.modules["rdyn"].reset_stats()


def _test_source(item) -> str | None:
    import inspect

    fn = getattr(item, "obj", None)
    seen = 0
    while fn is not None and hasattr(fn, "__wrapped__") and seen < 10:
        fn = fn.__wrapped__
        seen += 1
    # copy_tests' wrappers keep the template method as a default argument.
    defaults = getattr(fn, "__defaults__", None) or ()
    for d in defaults:
        if callable(d) and getattr(d, "__name__", "").startswith("test_"):
            fn = d
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and os.environ.get("RDYN_CONFORMANCE_BACKEND"):
        report.conformance_source = _test_source(item)
    return report


def pytest_runtest_logreport(report) -> None:
    event = {
        "event": "report",
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "duration": report.duration,
        "wasxfail": getattr(report, "wasxfail", None),
    }
    if report.outcome != "passed":
        event["longrepr"] = getattr(report, "longreprtext", "") or str(report.longrepr)
        crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
        if crash is not None:
            event["message"] = crash.message
        elif isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            event["message"] = str(report.longrepr[2])  # a skip: (file, line, reason)
        if getattr(report, "conformance_source", None):
            event["source"] = report.conformance_source
    _emit(event)


def pytest_runtest_logfinish(nodeid, location) -> None:
    # What rdyn compiled for this test: graphs, and nodes it ran eagerly.
    if os.environ.get("RDYN_CONFORMANCE_BACKEND") == "rdyn" and "rdyn" in sys.modules:
        stats = sys.modules["rdyn"].stats()
        keys = ("graphs", "graphs_unsupported", "graphs_failed", "nodes_native", "nodes_extern", "nodes_fallback")
        event = {k: stats.get(k, 0) for k in keys}
        event.update(event="stats", nodeid=nodeid, fallback_ops=dict(stats.get("fallback_ops", {})))
        _emit(event)
    _emit({"event": "finish", "nodeid": nodeid})




# --------------------------------------------------------------------------
# The runner
# --------------------------------------------------------------------------

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent


def _pytest_cmd(test_file: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "inductor_conformance",
        "-p",
        "no:cacheprovider",
        "--noconftest",
        "-c",
        os.devnull,
        "--rootdir",
        str(test_file.parent),
        "-q",
        "--tb=long",
        "-W",
        "ignore",
    ]


def _env(backend: str, test_file: Path, log: Path, cache_dir: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TOOLS), str(test_file.parent), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    env["RDYN_CONFORMANCE_BACKEND"] = backend
    env["RDYN_CONFORMANCE_LOG"] = str(log)
    env["RDYN_CONFORMANCE_TESTFILE"] = str(test_file)
    env["RDYN_CACHE_DIR"] = cache_dir
    env["PYTORCH_PRINT_REPRO_ON_FAILURE"] = "0"  # no repro hint appended to each error
    if backend == "rdyn":
        env["RDYN_STRICT"] = "1"
    return env


def collect(test_file: Path, classes: list[str], kexpr: str | None, logs: Path) -> list[str]:
    """The node ids of the selected tests."""
    logs.mkdir(parents=True, exist_ok=True)
    cmd = _pytest_cmd(test_file) + ["--collect-only"]
    cmd += [f"{test_file}::{c}" for c in classes]
    if kexpr:
        cmd += ["-k", kexpr]
    with tempfile.TemporaryDirectory() as cache:
        env = _env("collect", test_file, logs / "collect.events", cache)
        proc = subprocess.run(cmd, env=env, cwd=test_file.parent, capture_output=True, text=True)
    (logs / "collect.out").write_text(proc.stdout + proc.stderr)
    ids = [ln.strip() for ln in proc.stdout.splitlines() if "::" in ln and not ln.startswith(" ")]
    if proc.returncode not in (0, 5) or (not ids and proc.returncode != 5):
        raise SystemExit(
            f"collection failed (exit {proc.returncode}); see {logs / 'collect.out'}:\n{proc.stdout[-3000:]}"
        )
    return ids  # relative to the rootdir, the test file's folder


class _Worker:
    def __init__(self, backend, test_file, nodeids, logs, index, cache_dir):
        self.nodeids = nodeids
        self.events = logs / f"{backend}-{index:04d}.events"
        self.out = logs / f"{backend}-{index:04d}.out"
        self.events.write_text("")
        cmd = _pytest_cmd(test_file) + nodeids
        self._out = open(self.out, "w")
        self.proc = subprocess.Popen(
            cmd,
            env=_env(backend, test_file, self.events, cache_dir),
            cwd=test_file.parent,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: killed as one
        )
        self.started = time.monotonic()
        self.graphs = 0
        self.current = None
        self.current_since = self.started
        self.timed_out = None

    def poll(self, timeout: float) -> bool:
        """Whether the worker is done; kills it when its current test has
        run for longer than `timeout`."""
        if self.proc.poll() is not None:
            return True
        _, running = records_from_events(self.events.read_text().splitlines())
        now = time.monotonic()
        if running != self.current:
            self.current, self.current_since = running, now
        limit = timeout if self.current is not None else timeout + 120  # start-up and collection
        if now - self.current_since > limit:
            self.timed_out = self.current
            self.kill()
            return True
        return False

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker's own group only
        except ProcessLookupError:
            pass
        self.proc.wait()

    def results(self) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """The records of this worker's tests, and those it did not reach."""
        self._out.close()
        lines = self.events.read_text().splitlines()
        records, running = records_from_events(lines)
        self.graphs += sum(r.get("stats", {}).get("graphs", 0) for r in records.values())
        if running is not None:
            rc = self.proc.returncode
            rec = records[running]
            if self.timed_out == running:
                rec["outcome"] = "timeout"
                rec["message"] = "no result within the time limit"
            else:
                rec["outcome"] = "crash"
                how = f"signal {-rc} ({signal.Signals(-rc).name})" if rc is not None and rc < 0 else f"exit {rc}"
                tail = self.out.read_text(errors="replace")[-2000:]
                rec["message"] = f"worker died: {how}"
                rec["longrepr"] = tail
            rec["duration"] = time.monotonic() - self.current_since
        # Tests the worker never reported on: rerun them in a new worker.
        # (If it reached none of them, it failed before running any test.)
        left = [n for n in self.nodeids if _match(n, records) is None]
        return records, left


def _match(nodeid: str, records: dict[str, dict[str, Any]]) -> str | None:
    if nodeid in records:
        return nodeid
    tail = nodeid.split("/")[-1]
    for key in records:
        if key.split("/")[-1] == tail:
            return key
    return None


def run_tests(
    backend: str,
    test_file: Path,
    nodeids: list[str],
    logs: Path,
    *,
    chunk: int,
    jobs: int,
    timeout: float,
    progress=lambda msg: print(msg, flush=True),
) -> dict[str, dict[str, Any]]:
    """Run the tests in workers of `chunk` tests, `jobs` at once; returns
    a record per node id."""
    logs.mkdir(parents=True, exist_ok=True)
    queue = [nodeids[i : i + chunk] for i in range(0, len(nodeids), chunk)]
    running: list[_Worker] = []
    results: dict[str, dict[str, Any]] = {}
    index = 0
    start = time.monotonic()
    stalled: dict[str, int] = {}
    graphs = 0
    with tempfile.TemporaryDirectory(prefix="rdyn-conformance-cache-") as cache_dir:
        while queue or running:
            while queue and len(running) < jobs:
                running.append(_Worker(backend, test_file, queue.pop(0), logs, index, cache_dir))
                index += 1
            time.sleep(0.5)
            for w in list(running):
                if not w.poll(timeout):
                    continue
                running.remove(w)
                records, left = w.results()
                graphs += w.graphs
                w.events.with_suffix(".records.json").write_text(json.dumps(records))
                for nodeid in w.nodeids:
                    key = _match(nodeid, records)
                    if key is not None:
                        results[nodeid] = records[key]
                if left:
                    if len(left) == len(w.nodeids):
                        # The worker reached none of its tests: retry once,
                        # then record them as errors.
                        k = left[0]
                        stalled[k] = stalled.get(k, 0) + 1
                        if stalled[k] > 1:
                            tail = w.out.read_text(errors="replace")[-2000:]
                            for n in left:
                                results[n] = {
                                    "nodeid": n,
                                    "outcome": "error",
                                    "message": f"the worker ran no test (exit {w.proc.returncode})",
                                    "longrepr": tail,
                                }
                            left = []
                    if left:
                        queue.insert(0, left)
                counts = Counter(r["outcome"] for r in results.values())
                elapsed = time.monotonic() - start
                progress(
                    f"[{backend}] {len(results)}/{len(nodeids)} tests, {elapsed / 60:.1f} min: "
                    + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                    + (f"; rdyn compiled {graphs} graphs" if backend == "rdyn" else "")
                )
    if backend == "rdyn" and results and graphs == 0:
        progress("WARNING: rdyn compiled no graph: was compile_fx replaced? (see the workers' logs)")
    return results


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
