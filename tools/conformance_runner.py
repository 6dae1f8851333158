"""The worker processes of tools/inductor_conformance.py: collecting the
selected tests, running them in pytest workers (each loads
``conformance_plugin``), and reading the workers' event logs, so that a test
that kills its worker is recorded as a crash and one that hangs as a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent


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


def _pytest_cmd(test_file: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "conformance_plugin",
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

