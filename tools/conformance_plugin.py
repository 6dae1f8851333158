"""The pytest plugin of tools/inductor_conformance.py, loaded in each worker
process with ``-p conformance_plugin`` (the runner puts tools/ on the
workers' ``PYTHONPATH``).

``RDYN_CONFORMANCE_BACKEND`` (``rdyn``, ``inductor`` or ``collect``) says
which backend the worker runs (with ``rdyn``, ``compile_fx`` is replaced by
rdyn's backend; without the variable the plugin does nothing),
``RDYN_CONFORMANCE_LOG`` where it writes its events (JSON lines, read by
``conformance_runner.records_from_events``), ``RDYN_CONFORMANCE_TESTFILE``
which file's imports to check against this torch.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from conformance_classify import SHIM_MARKER

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
