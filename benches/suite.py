#!/usr/bin/env python3
"""rdyn's model benchmark suite: rdyn against eager PyTorch and Inductor.

    python benches/suite.py                      # the CPU suite (eager, inductor, rdyn)
    python benches/suite.py --quick              # CI: 3 small models, eager + rdyn, 2 rounds
    python benches/suite.py --models mlp,bert --backends eager,rdyn --rounds 5
    python benches/suite.py --train --half       # add a training step; bfloat16 on CPU
    python benches/suite.py --devices cpu,wgpu,cuda
    python benches/suite.py --models extra       # the opt-in models (squeezenet, shufflenet, a decoder)
    python benches/suite.py --suite wide         # the wide corpus: 43 models, inference and training
    python benches/suite.py --target my_model:make   # your own model (python -m rdyn.bench my_model:make)
    python benches/suite.py --list               # the models (--suite wide --list: the corpus)

For every model x backend x device it measures correctness against eager,
speedup over eager (medians of interleaved rounds), the first compile time
(Inductor's on-disk caches disabled), the warm-start compile time in a second
process (caches enabled and filled), per-call overhead on a one-element
``x + 1``, the peak memory of compiling and running, and rdyn's native vs
fallback node counts and how many of its CPU stages ran compiled or
interpreted.  Each run is appended to ``build/bench/history.json``;
``build/bench/dashboard.html`` and ``build/bench/*.png`` are rebuilt from it.
See benches/README.md for what each figure means exactly.

This process does not import torch: each measurement runs in a worker
subprocess (benches/measure.py), so a backend that crashes or hangs costs one
model, not the run.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

from report import (  # noqa: E402,F401 - after the path insert; re-exported as suite.*
    ALL_BACKENDS,
    _cpu_busy_s,
    _loadavg,
    _own_cpu_s,
    fmt,
    geomean,
    git_info,
    load_history,
    machine_info,
    median,
    print_summary,
    summarise,
    table,
    versions,
    write_json,
)

# Marks an event line on a worker's stdout; the same string as measure.EVENT_MARK
# (not imported from there: measure.py imports torch, this process does not).
EVENT_MARK = "@@rdyn-bench@@ "

SUITES = ("default", "wide")
ALL_DEVICES = ("cpu", "wgpu", "cuda")
COMPILED = ("inductor", "rdyn")
OVERHEAD_PROBE = "(overhead probe)"  # the model name measure.py reports for the probe


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def model_catalog(targets=()) -> list[dict]:
    """The model list, read without importing torch in this process.

    One entry per model (``name``, ``description``, ``cost``, ``extra``,
    ``wide``, ``train``, ``packages``, ``missing``: the packages its builder
    needs that are not installed), one per ``MODULE:FUNCTION`` target (built
    once to check it: ``description``, or the one-line ``error`` that says
    why it cannot run), then ``{"quick": [...]}`` and ``{"suites": {...}}``.
    """
    code = (
        "import json, importlib.util, sys, models\n"
        "have = {p: importlib.util.find_spec(p) is not None for p in ('torchvision', 'timm', 'transformers')}\n"
        "rows = [{'name': s.name, 'description': s.description, 'cost': s.cost, 'extra': s.extra, 'wide': s.wide, "
        "'train': s.train, 'packages': list(models.packages(s)), "
        "'missing': [p for p in models.packages(s) if not have[p]]} for s in models.MODELS.values()]\n"
        "rows += [models.describe_target(t) for t in sys.argv[1:]]\n"
        "print(json.dumps(rows + [{'quick': models.QUICK_MODELS}, {'suites': models.SUITES}]))"
    )
    out = subprocess.run([sys.executable, "-c", code, *targets], cwd=BENCH_DIR, capture_output=True, text=True)
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines or not lines[-1].startswith("["):
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        what = f"building {', '.join(targets)}" if targets else "reading the model list (benches/models.py)"
        status = f"signal {-out.returncode}" if out.returncode < 0 else f"status {out.returncode}"
        sys.exit(f"error: {what} failed ({status}): {last}")
    return json.loads(lines[-1])


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Benchmark rdyn against eager PyTorch and Inductor on a model suite.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n")[1],
    )
    p.add_argument("--suite", choices=SUITES, default="default",
                   help="which models: 'default' (11 models, a few minutes) or 'wide' (the corpus of benches/corpus.py "
                   "plus every other model: 43, inference and training, 9 rounds of 100 ms; see benches/README.md for how long)")
    p.add_argument("--models", help="comma-separated model names (default: the suite's; 'extra' names the opt-in "
                   "ones; see --list)")
    p.add_argument("--target", action="append", default=[], metavar="MODULE:FUNCTION",
                   help="your own model: FUNCTION() in MODULE (a module importable from here, or a .py file) returns "
                   "(model, inputs); runs instead of the suite's models (repeatable; python -m rdyn.bench is the "
                   "short form)")
    p.add_argument("--backends", help=f"comma-separated, from {','.join(ALL_BACKENDS)} (default: all; "
                   "--quick: eager,rdyn). eager is always run: it is the baseline")
    p.add_argument("--devices", default="cpu", help="comma-separated, from cpu,wgpu,cuda, or 'all' (default: cpu)")
    p.add_argument("--rounds", type=int, help="interleaved timing rounds per model (default 7; --quick 2; "
                   "--suite wide 9)")
    p.add_argument("--target-ms", type=float, help="length of one timing round per backend (default 200; --quick 50; "
                   "--suite wide 100)")
    p.add_argument("--train", action="store_true", help="also run a training step (forward + backward) per model "
                   "(the models that have parameters; on by default with --suite wide)")
    p.add_argument("--no-train", action="store_true", help="inference only, also with --suite wide")
    p.add_argument("--half", nargs="?", const="auto", choices=["auto", "bf16", "fp16"],
                   help="run in half precision instead of float32 (auto: bfloat16 on CPU/wgpu, float16 on CUDA)")
    p.add_argument("--quick", action="store_true",
                   help="CI mode: the 3 smallest models, 2 rounds, eager + rdyn unless --backends says otherwise")
    p.add_argument("--no-warm", action="store_true", help="skip the fresh-process measurements (first compile, warm start, memory); "
                   "first compiles are then timed in the shared worker, after the other backends")
    p.add_argument("--no-overhead", action="store_true", help="skip the per-call overhead probe")
    p.add_argument("--no-dashboard", action="store_true", help="do not rebuild the dashboard")
    p.add_argument("--timeout", type=float, default=900,
                   help="seconds without progress after which a worker is killed (default 900)")
    p.add_argument("--threads", type=int, help="torch.set_num_threads in the workers (default: torch's choice)")
    p.add_argument("--out", default=str(ROOT / "build" / "bench"), help="output folder (default build/bench)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--list", action="store_true", help="list the models and exit")
    args = p.parse_args(argv)
    # The wide suite takes more, shorter rounds (9 x 100 ms rather than
    # 3 x 200 ms, 1.5x the timing, which is a tenth of its run): on a shared
    # machine a burst of load spoils a round, and a median of 3 rounds
    # follows two spoiled ones (lstm's training step read 0.63x and 0.90x
    # of eager in runs an hour apart).
    args.rounds = args.rounds or (2 if args.quick else 9 if args.suite == "wide" else 7)
    args.train = (args.train or args.suite == "wide") and not args.no_train
    args.target_ms = args.target_ms or (50.0 if args.quick else 100.0 if args.suite == "wide" else 200.0)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


def suite_name(args) -> str:
    """The label of what ran: 'custom' (--target), 'quick', 'default' or 'wide'."""
    return "custom" if args.target else "quick" if args.quick else args.suite


def resolve_plan(args, catalog: list[dict]) -> dict:
    names = [m["name"] for m in catalog if "name" in m and not m.get("target")]
    extra = [m["name"] for m in catalog if m.get("extra")]
    quick = next(m["quick"] for m in catalog if "quick" in m)
    suites = next((m["suites"] for m in catalog if "suites" in m), {"default": [n for n in names if n not in extra]})
    entries = {m["name"]: m for m in catalog if "name" in m}
    notes = []
    if args.target:
        for t in args.target:
            if entries.get(t, {}).get("error"):
                sys.exit(f"error: {entries[t]['error']}")
            if t not in entries:
                sys.exit(f"error: {t}: not in the catalog (pass it to model_catalog)")
    if args.models:
        models = []
        for m in (m.strip() for m in args.models.split(",")):
            for name in extra if m == "extra" else [m] if m else []:
                if name not in models:
                    models.append(name)
        unknown = [m for m in models if m not in names]
        if unknown:
            sys.exit(f"unknown model(s): {', '.join(unknown)}; known: {', '.join(names)}, or 'extra'")
    elif not args.target:
        models = quick if args.quick else list(suites[args.suite])
    else:
        models = []
    models += [t for t in args.target if t not in models]
    missing = [m for m in models if entries.get(m, {}).get("missing")]
    if missing:
        packages = sorted({p for m in missing for p in entries[m]["missing"]})
        notes.append(f"skipped {len(missing)} model(s) whose packages are not installed ({', '.join(packages)}; "
                     f"pip install {' '.join(packages)}): {', '.join(missing)}")
        models = [m for m in models if m not in missing]
    if not models:
        sys.exit("error: no model to run" + (f" ({notes[0]})" if notes else ""))
    if args.backends:
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    else:
        backends = ["eager", "rdyn"] if args.quick else list(ALL_BACKENDS)
    unknown = [b for b in backends if b not in ALL_BACKENDS]
    if unknown:
        sys.exit(f"unknown backend(s): {', '.join(unknown)}; known: {', '.join(ALL_BACKENDS)}")
    if "eager" not in backends:
        backends.insert(0, "eager")
    backends = [b for b in ALL_BACKENDS if b in backends]
    devices = list(ALL_DEVICES) if args.devices == "all" else [d.strip() for d in args.devices.split(",") if d.strip()]
    unknown = [d for d in devices if d not in ALL_DEVICES]
    if unknown:
        sys.exit(f"unknown device(s): {', '.join(unknown)}; known: {', '.join(ALL_DEVICES)}")
    modes = ["inference"] + (["train"] if args.train else [])
    # A training step needs parameters: the models without (train False) run inference only.
    trainable = [m for m in models if entries.get(m, {}).get("train", True)]
    if args.train and len(trainable) < len(models):
        notes.append("no training step for the models without parameters: "
                     + ", ".join(m for m in models if m not in trainable))
    configs = []
    for device in devices:
        if args.half:
            dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(args.half) or (
                "float16" if device == "cuda" else "bfloat16")
        else:
            dtype = "float32"
        for mode in modes:
            configs.append({"device": device, "mode": mode, "dtype": dtype,
                            "models": trainable if mode == "train" else list(models)})
    if not any(c["models"] for c in configs):
        sys.exit("error: no model to run")
    return {"models": models, "backends": backends, "configs": configs, "notes": notes,
            "suite": suite_name(args),
            "suite_size": len(models) if (args.target or args.quick) else len(suites[args.suite])}


# --------------------------------------------------------------------------
# Workers
# --------------------------------------------------------------------------


class Progress:
    """A tqdm bar on a terminal; elsewhere (CI logs) one plain line per phase."""

    def __init__(self, total: int, enabled: bool):
        self.bar = None
        self.enabled = enabled
        if enabled and sys.stderr.isatty():
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="step", dynamic_ncols=True, file=sys.stderr,
                                bar_format="{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                                           "[{elapsed}<{remaining}]")
            except ImportError:
                pass
        self.total, self.done = total, 0
        self._last = None
        self._t0 = time.monotonic()

    def describe(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_description_str(text[:70], refresh=True)
            return
        # Plain mode: skip the per-round chatter, print each new phase once.
        if " timing round " in text:
            return
        short = text
        if self.enabled and short != self._last:
            self._last = short
            print(f"[bench {time.monotonic() - self._t0:5.0f}s {self.done}/{self.total}] {short}",
                  file=sys.stderr, flush=True)

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)

    def grow(self, n: int) -> None:
        self.total += n
        if self.bar is not None:
            self.bar.total += n
            self.bar.refresh()

    def note(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_worker(task: dict, env: dict, log_path: Path, timeout: float, on_event) -> tuple[int | None, str | None]:
    """Run measure.py on ``task``; call ``on_event`` for each event.

    Returns ``(returncode, problem)``: ``problem`` says how the worker died
    (a signal, a non-zero exit, or no progress for ``timeout`` seconds) or is None.
    """
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, dir=log_path.parent) as f:
        json.dump(task, f)
        task_path = f.name
    lines: queue.Queue = queue.Queue()
    with open(log_path, "a") as log:
        log.write(f"\n===== {time.strftime('%H:%M:%S')} task {task['kind']}: {json.dumps(task)[:400]}\n")
        log.flush()
        proc = subprocess.Popen(
            [sys.executable, str(BENCH_DIR / "measure.py"), task_path],
            stdout=subprocess.PIPE, stderr=log, env=env, cwd=ROOT, text=True, bufsize=1,
        )

        def pump():
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        last_progress = time.monotonic()
        problem = None
        while True:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                if time.monotonic() - last_progress > timeout:
                    proc.kill()
                    problem = f"no progress for {timeout:.0f} s (killed)"
                    break
                continue
            if line is None:
                break
            if line.startswith(EVENT_MARK):
                last_progress = time.monotonic()
                on_event(json.loads(line[len(EVENT_MARK):]))
        rc = proc.wait()
        reader.join(timeout=5)
    os.unlink(task_path)
    if problem is None and rc != 0:
        problem = f"worker killed by signal {-rc}" if rc < 0 else f"worker exited with status {rc}"
    return rc, problem


def worker_env(cache_root: Path, cold: bool) -> dict:
    """Environment of a worker: cold (caches disabled / empty) or warm (shared cache)."""
    env = os.environ.copy()
    env.setdefault("XDG_RUNTIME_DIR", "/tmp")
    env["PYTHONUNBUFFERED"] = "1"
    # glibc gives large freed blocks back to the kernel and faults them in
    # again on the next allocation, unless an earlier free raised its dynamic
    # thresholds; which backend ran before decided that. Eager's
    # layernorm_gelu training step took 7.0 ms in a worker of its own and
    # 4.1 ms after Inductor's rounds (rdyn's, which reuses its scratch, 4.9
    # ms either way). Fixed thresholds give every backend the kept memory.
    env.setdefault("MALLOC_MMAP_THRESHOLD_", str(64 << 20))
    env.setdefault("MALLOC_TRIM_THRESHOLD_", str(256 << 20))
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(BENCH_DIR), env.get("PYTHONPATH", "")] if p)
    if cold:
        env["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_root / "cold-inductor")
        env["RDYN_CACHE_DIR"] = str(cache_root / "cold-rdyn")
        env["RDYN_CACHE"] = "0"
    else:
        env.pop("RDYN_CACHE", None)
        env.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
        env.pop("TORCH_COMPILE_FORCE_DISABLE_CACHES", None)
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_root / "inductor")
        env["RDYN_CACHE_DIR"] = str(cache_root / "rdyn")
    return env


def key_of(r: dict) -> tuple:
    return (r["model"], r["backend"], r["device"], r["mode"], r["dtype"])


def run_config(cfg: dict, plan: dict, args, paths: dict, progress: Progress, results: dict, overhead: list,
               notes: list, phases: dict) -> None:
    """Measure every model and backend for one (device, mode, dtype)."""
    device, mode, dtype = cfg["device"], cfg["mode"], cfg["dtype"]
    label = f"{device}/{mode}/{dtype}"
    phase_t0 = time.monotonic()

    def phase_done(name):
        nonlocal phase_t0
        now = time.monotonic()
        phases[f"{label} {name}"] = round(now - phase_t0, 1)
        phase_t0 = now
    base = {"device": device, "mode": mode, "dtype": dtype}

    def blank(model, backend, status, error):
        return dict(base, model=model, backend=backend, status=status, error=error)

    models = cfg.get("models", plan["models"])
    if not models:
        return
    # ---- main worker (cold compile, correctness, timing), restarted after a crash
    pending = [{"model": m, "backends": list(plan["backends"])} for m in models]
    state = {"phase": None, "unavailable": None}
    # "measure" the per-call overhead; "warmup": run the probe only to pay the
    # backends' one-time start-up before the first model (a restarted worker).
    overhead_mode = "warmup" if args.no_overhead else "measure"

    def on_event(ev):
        kind = ev["event"]
        if kind == "phase":
            state["phase"] = (ev["model"], ev["backend"], ev["phase"])
            progress.describe(f"{label} {ev['model']} {ev['backend']}: {ev['phase']}")
        elif kind == "step":
            progress.advance()
        elif kind == "result":
            results[key_of(ev["data"])] = ev["data"]
        elif kind == "overhead":
            overhead.append(dict(ev["data"], mode=mode, dtype=dtype))
        elif kind == "model_done":
            pending.pop(0)
        elif kind == "device_unavailable":
            state["unavailable"] = ev["error"]

    while pending:
        task = {"kind": "main", "device": device, "mode": mode, "dtype": dtype, "rounds": args.rounds,
                "target_s": args.target_ms / 1e3, "models": pending, "threads": args.threads,
                "overhead": overhead_mode, "overhead_backends": plan["backends"]}
        state["phase"] = None
        _, problem = run_worker(task, worker_env(paths["cache"], cold=True), paths["log"], args.timeout, on_event)
        if state["unavailable"]:
            notes.append(f"{label}: skipped ({state['unavailable']})")
            for item in pending:
                for b in item["backends"]:
                    results[(item["model"], b, device, mode, dtype)] = blank(item["model"], b, "skipped",
                                                                           state["unavailable"])
                progress.advance(len(item["backends"]) + 1)
            pending.clear()
            return
        if problem is None or not pending:
            break
        # The worker died: blame the model and backend it was running, then go on without them.
        model, backend, phase = state["phase"] or (pending[0]["model"], None, "start")
        where = f"{model}/{backend} ({phase})"
        progress.note(f"[bench] {label}: {problem} during {where}; see {paths['log']}")
        notes.append(f"{label}: {problem} during {where}")
        if model == OVERHEAD_PROBE:
            overhead_mode = "skip"   # the probe itself crashed: do not try it again
            continue
        overhead_mode = "skip" if overhead_mode == "skip" else "warmup"
        item = pending[0]
        if backend in item["backends"] and backend != "eager" and phase == "compile":
            results[(item["model"], backend, device, mode, dtype)] = blank(item["model"], backend, "error",
                                                                         f"{problem} during {phase}")
            item["backends"].remove(backend)
            progress.grow(len(item["backends"]) + 1)
        else:
            # Crashed while timing, or in eager: drop the model, keep whatever is known.
            for b in item["backends"]:
                results.setdefault((item["model"], b, device, mode, dtype),
                                   blank(item["model"], b, "error", f"{problem} during {phase}"))
            pending.pop(0)

    phase_done("main")
    if args.no_warm:
        return
    compiled = [b for b in plan["backends"] if b in COMPILED]

    def fresh(kind: str, model: str, backend: str, cold: bool):
        """One model and backend in a fresh worker: the timing worker's
        record and the fresh worker's (or an error), or None when the timing
        worker had no result to add to."""
        r = results.get((model, backend, device, mode, dtype))
        if r is None or r.get("status") != "ok":
            progress.advance()
            return None
        progress.describe(f"{label} {model} {backend}: {kind}")
        got = {}
        task = {"kind": kind, "device": device, "mode": mode, "dtype": dtype, "model": model,
                "backend": backend, "threads": args.threads}
        _, problem = run_worker(task, worker_env(paths["cache"], cold=cold), paths["log"], args.timeout,
                                lambda ev: got.update(ev["data"]) if ev["event"] == kind else None)
        progress.advance()
        if problem or got.get("status") != "ok":
            return r, {"status": "error", "error": problem or got.get("error") or "no result"}
        return r, got

    # ---- first compile, caches disabled, one fresh process per model x backend
    for model in models:
        for backend in compiled:
            measured = fresh("cold", model, backend, cold=True)
            if measured is None:
                continue
            r, got = measured
            r["compile_in_run_s"] = r.get("compile_s")
            if got["status"] == "ok":
                r["compile_s"] = got["compile_s"]
                r["backend_compile_s"] = got.get("backend_compile_s")
                r["capture_s"] = got.get("capture_s")
                r["cold_startup_s"] = got.get("cold_startup_s")
            else:
                r["cold_error"] = got["error"]
                notes.append(f"{label}: {model}/{backend}: fresh-process first compile failed ({got['error']}); "
                             "compile_s is the shared worker's")
    phase_done("first compile")
    # ---- fill the on-disk caches in one process, then warm start + memory, one fresh process each
    todo = [{"model": m, "backends": [b for b in compiled if results.get((m, b, device, mode, dtype), {}).get("status") == "ok"]}
            for m in models]
    todo = [t for t in todo if t["backends"]]
    progress.advance(len(compiled) * len(models) - sum(len(t["backends"]) for t in todo))
    if todo:
        def on_populate(ev):
            if ev["event"] == "phase":
                progress.describe(f"{label} {ev['model']} {ev['backend']}: {ev['phase']}")
            elif ev["event"] == "step":
                progress.advance()

        task = {"kind": "populate", "device": device, "mode": mode, "dtype": dtype, "models": todo,
                "threads": args.threads}
        _, problem = run_worker(task, worker_env(paths["cache"], cold=False), paths["log"], args.timeout, on_populate)
        if problem:
            notes.append(f"{label}: cache fill worker: {problem}")
    phase_done("fill caches")
    for model in models:
        for backend in plan["backends"]:
            measured = fresh("warm", model, backend, cold=False)
            if measured is None:
                continue
            r, got = measured
            if got["status"] != "ok":
                r["warm_error"] = got["error"]
            else:
                for k in ("warm_compile_s", "warm_startup_s", "peak_mem_mb", "run_mem_mb", "rss_growth_mb", "peak_rss_mb", "mem_method",
                          "cuda_peak_mem_mb", "warm_rdyn_stats"):
                    if k in got:
                        r[k] = got[k]
    phase_done("warm start + memory")


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def list_models(args, catalog: list[dict]) -> None:
    """``--list``: every model, or with ``--suite wide`` the wide suite's."""
    quick = next(m["quick"] for m in catalog if "quick" in m)
    suites = next((m["suites"] for m in catalog if "suites" in m), {})
    chosen = set(suites.get("wide", [])) if args.suite == "wide" else None
    rows = [m for m in catalog if "name" in m and (chosen is None or m["name"] in chosen or m.get("target"))]
    width = max([16] + [len(m["name"]) for m in rows])
    for m in rows:
        if m.get("error"):
            print(f"{m['name']:<{width}} (cannot run) {m['error']}")
            continue
        tag = ("(quick) " if m["name"] in quick else "(extra) " if m.get("extra") else
               "(wide) " if m.get("wide") and chosen is None else "(yours) " if m.get("target") else "")
        flags = ("" if m.get("train", True) else " [inference only]") + (
            f" [needs {', '.join(m['missing'])}: not installed]" if m.get("missing") else "")
        print(f"{m['name']:<{width}} {tag}{m['description']}{flags}")
    if chosen is not None:
        print(f"{len(chosen)} models in the wide suite")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.target:
        # The workers run in the repository root: they find a target's module from the user's folder.
        os.environ.setdefault("RDYN_BENCH_CWD", os.getcwd())
    catalog = model_catalog(args.target)
    if args.list:
        list_models(args, catalog)
        return 0
    plan = resolve_plan(args, catalog)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc)
    run_id = stamp.strftime("%Y%m%dT%H%M%SZ")
    paths = {"cache": out / "cache", "log": out / "logs" / f"{run_id}.log"}
    shutil.rmtree(paths["cache"], ignore_errors=True)
    paths["cache"].mkdir(parents=True)

    nb, nm = len(plan["backends"]), len(plan["models"])
    n_compiled = sum(1 for b in plan["backends"] if b in COMPILED)
    total = sum(len(c["models"]) * (nb + 1) + nb + (0 if args.no_warm else len(c["models"]) * (2 * n_compiled + nb))
                for c in plan["configs"] if c["models"])
    progress = Progress(total, enabled=not args.no_progress)
    modes = " and ".join(sorted({c["mode"] for c in plan["configs"]}))
    print(f"[bench] {plan['suite']} suite: {nm} models x {', '.join(plan['backends'])} on "
          f"{', '.join(sorted({c['device'] for c in plan['configs']}))}, {modes}; "
          f"{args.rounds} rounds; worker log: {paths['log']}", file=sys.stderr, flush=True)
    for note in plan["notes"]:
        print(f"[bench] note: {note}", file=sys.stderr, flush=True)

    results: dict = {}
    overhead: list = []
    notes: list = list(plan["notes"])
    phases: dict = {}  # seconds spent per config and phase
    load_before = _loadavg()
    busy_before, own_before = _cpu_busy_s(), _own_cpu_s()
    t0 = time.monotonic()
    try:
        for cfg in plan["configs"]:
            run_config(cfg, plan, args, paths, progress, results, overhead, notes, phases)
    except KeyboardInterrupt:
        notes.append("interrupted by the user: partial results")
        progress.note("[bench] interrupted: saving partial results")
    finally:
        progress.close()
        shutil.rmtree(paths["cache"], ignore_errors=True)
    duration = time.monotonic() - t0
    # CPU used by other processes during the run, in cores: the suite's workers
    # are our children, so what /proc/stat counts beyond them is someone else's.
    busy_after = _cpu_busy_s()
    foreign_load = None
    if busy_before is not None and busy_after is not None and duration > 0:
        foreign_load = max(0.0, (busy_after - busy_before) - (_own_cpu_s() - own_before)) / duration

    order = {m: i for i, m in enumerate(plan["models"])}
    border = {b: i for i, b in enumerate(ALL_BACKENDS)}
    ordered = sorted(results.values(), key=lambda r: (r["device"], r["mode"], r["dtype"], order.get(r["model"], 99),
                                                      border.get(r["backend"], 9)))
    if args.no_warm:
        notes.append("--no-warm: warm start and memory not measured; first compiles timed in the shared worker, "
                     "where a backend that compiles a model after another one finds Dynamo's analyses of it done")
    cores = os.cpu_count() or 1
    if foreign_load is not None and foreign_load > 0.25:
        notes.append(f"other processes used {foreign_load:.1f} of the {cores} cores on average during the run: "
                     "timings are unreliable (eager's OpenMP threads suffer most from a busy machine)")
    record = {
        "schema": 1,
        "id": run_id,
        # Which models ran: 'default', 'wide' (the corpus), 'quick', or 'custom' (--target, rdyn.bench).
        "suite": plan["suite"],
        "timestamp": stamp.isoformat(timespec="seconds"),
        **git_info(),
        # Load averages (1, 5, 15 min) before and after: timings from a busy machine mean little.
        "machine": dict(machine_info(), load_before=load_before, load_after=_loadavg(),
                        foreign_load=None if foreign_load is None else round(foreign_load, 2)),
        "versions": versions(),
        "options": {"models": plan["models"], "backends": plan["backends"],
                    "devices": sorted({c["device"] for c in plan["configs"]}),
                    "modes": sorted({c["mode"] for c in plan["configs"]}),
                    "dtypes": sorted({c["dtype"] for c in plan["configs"]}),
                    "suite": plan["suite"], "suite_size": plan["suite_size"], "targets": list(args.target),
                    "rounds": args.rounds, "target_ms": args.target_ms, "quick": args.quick,
                    "warm": not args.no_warm, "threads": args.threads,
                    "argv": sys.argv[1:] if argv is None else list(argv)},
        "duration_s": duration,
        "phase_s": phases,
        "results": ordered,
        "overhead": overhead,
        "summary": summarise(ordered, overhead),
        "notes": notes,
        "log": str(paths["log"]),
    }
    history_path = out / "history.json"
    history = load_history(history_path)
    history.append(record)
    write_json(history_path, history)
    write_json(out / "latest.json", record)

    dashboard = None
    if not args.no_dashboard:
        try:
            import dashboard as dash

            dashboard = str(dash.build(history_path, out))
        except ImportError as exc:
            record["notes"].append(f"dashboard not built: {exc} (pip install -r benches/requirements.txt)")
        except Exception as exc:  # the measurements are saved; a chart bug must not lose them
            record["notes"].append(f"dashboard failed: {type(exc).__name__}: {exc}")
    print_summary(record, dashboard, history_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
