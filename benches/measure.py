"""Benchmark worker: the part of the suite that imports torch and measures.

`suite.py` (the orchestrator) never imports torch itself: it starts this file
as a subprocess, ``python benches/measure.py TASK.json``, and reads one JSON
event per line from its stdout (lines starting with ``@@rdyn-bench@@``).  That
keeps a crash or a hang in a backend (a segfault in native code, say) from
taking the whole suite down: the orchestrator notes which model and backend
were running, records the failure, and starts a new worker for the rest.

Four kinds of task (``task["kind"]``):

``main``
    For one device and mode: the per-call overhead probe for each backend,
    then for each model: build, first compile per backend, correctness
    against eager, and interleaved timing rounds.
``cold``
    One model, one backend, in a fresh process with caches disabled: the
    first-compile time. Not taken from ``main``, where the backends compile
    each model one after the other and the later ones find Dynamo's
    per-function analyses of the model already done.
``populate``
    Compile each model once with on-disk caches enabled (and empty), so that
    a later ``warm`` process starts from a full cache.
``warm``
    One model, one backend, in a fresh process: the warm-start compile time
    (first call with the cache that ``populate`` filled) and the peak RSS
    increase of compiling and running the model.

Everything printed by libraries goes to stderr (the orchestrator sends it to
a log file): stdout carries only events.
"""

from __future__ import annotations

import copy
import gc
import json
import math
import os
import signal
import statistics
import sys
import time
import traceback

EVENT_MARK = "@@rdyn-bench@@ "
OVERHEAD_PROBE = "(overhead probe)"

# The orchestrator sets the cache environment (TORCHINDUCTOR_FORCE_DISABLE_CACHES
# and friends) before starting us, so it is in place before torch is imported.

_events = None  # a file object on the original stdout


def _setup_event_stream() -> None:
    """Keep the real stdout for events and send fd 1 (library prints) to stderr."""
    global _events
    fd = os.dup(1)
    os.dup2(2, 1)
    _events = os.fdopen(fd, "w", buffering=1)
    sys.stdout = sys.stderr


def emit(event: str, **data) -> None:
    payload = json.dumps({"event": event, **data}, default=_json_default, allow_nan=False)
    _events.write(EVENT_MARK + payload + "\n")
    _events.flush()


def _json_default(obj):
    try:
        return float(obj)
    except Exception:
        return repr(obj)


def _short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    text = text.split("Set TORCHDYNAMO_VERBOSE=1")[0].strip()  # Dynamo's boilerplate
    lines = [line for line in text.splitlines() if line.strip()]
    text = " ".join(lines[:3])
    return text if len(text) <= 500 else text[:497] + "..."


import torch  # noqa: E402  (after the docstring on purpose: env is set by the parent)

import models as zoo  # noqa: E402
from steps import TOLERANCE, compare, flatten, json_number, make_step, observed, prepare, tensor_device  # noqa: E402


# --------------------------------------------------------------------------
# Backends and devices
# --------------------------------------------------------------------------


class Unavailable(Exception):
    """A backend or device that cannot run here (reported as `skipped`)."""


_rdyn_module = None


def _rdyn():
    global _rdyn_module
    if _rdyn_module is None:
        import rdyn  # noqa: F401  (raises ImportError when not built)

        _rdyn_module = rdyn
    return _rdyn_module


def _rdyn_backend():
    """The object to pass as ``backend=``: the entry-point name, or the function."""
    rdyn = _rdyn()
    from torch._dynamo import list_backends

    if "rdyn" in list_backends(exclude_tags=()):
        return "rdyn"
    backend_mod = getattr(rdyn, "backend", None)
    fn = getattr(backend_mod, "rdyn_backend", None) or getattr(rdyn, "rdyn_backend", None)
    if fn is None:
        raise RuntimeError("rdyn is importable but registers no 'rdyn' dynamo backend")
    return fn


def check_device(device: str, backends=("rdyn",)) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        raise Unavailable("CUDA is not available (torch.cuda.is_available() is False)")
    if device not in ("cpu", "cuda", "wgpu"):
        raise Unavailable(f"unknown device {device!r}")
    if device == "wgpu":
        # Only rdyn targets wgpu: probe it once rather than fail on every model.
        if "rdyn" not in backends:
            raise Unavailable("the wgpu device is rdyn's: add rdyn to --backends")
        try:
            fn, inputs = zoo.tiny_graph()
            make_compiler("rdyn", "wgpu")(fn)(*inputs)
        except Exception as exc:
            raise Unavailable(f"rdyn on wgpu is unavailable: {_short_error(exc)}") from exc
        finally:
            reset_compilers()


def make_compiler(backend: str, device: str):
    """Return ``compile(module_or_fn) -> callable`` for a backend on a device."""
    if backend == "eager":
        return lambda fn: fn
    if backend == "inductor":
        if device == "wgpu":
            raise Unavailable("Inductor has no wgpu target")
        return lambda fn: torch.compile(fn, backend="inductor")
    if backend == "rdyn":
        try:
            target = _rdyn_backend()
        except Exception as exc:  # ImportError, or a broken build
            raise RuntimeError(f"rdyn unavailable: {_short_error(exc)}") from exc
        options = {"device": "wgpu"} if device == "wgpu" else None
        if options:
            return lambda fn: torch.compile(fn, backend=target, options=options)
        return lambda fn: torch.compile(fn, backend=target)
    raise Unavailable(f"unknown backend {backend!r}")


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _looks_unavailable(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(w in text for w in ("not available", "unavailable", "no adapter", "no suitable", "not compiled with"))


def reset_compilers() -> None:
    torch._dynamo.reset()
    try:
        torch._dynamo.utils.counters.clear()
    except Exception:
        pass


def rdyn_stats_reset() -> None:
    if _rdyn_module is not None and hasattr(_rdyn_module, "reset_stats"):
        _rdyn_module.reset_stats()


def rdyn_stats() -> dict | None:
    if _rdyn_module is None or not hasattr(_rdyn_module, "stats"):
        return None
    stats = dict(_rdyn_module.stats())
    out = {}
    for key, value in stats.items():
        if isinstance(value, dict):
            out[key] = {str(k): v for k, v in value.items()}
        elif isinstance(value, (int, float, str, bool)) or value is None:
            out[key] = json_number(value) if isinstance(value, float) else value
        else:
            out[key] = repr(value)
    return out


def native_pct(stats: dict | None) -> float | None:
    """Share of ATen nodes run by rdyn (its kernels or its extern GEMM/conv)."""
    if not stats:
        return None
    native = stats.get("nodes_native", 0) or 0
    extern = stats.get("nodes_extern", 0) or 0
    fallback = stats.get("nodes_fallback", 0) or 0
    total = native + extern + fallback
    return 100.0 * (native + extern) / total if total else None


def dynamo_counters() -> dict:
    counters = torch._dynamo.utils.counters
    return {
        "graphs": int(counters["stats"].get("unique_graphs", 0)),
        "graph_breaks": int(sum(counters["graph_break"].values())),
    }


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------


def time_calls(step, inputs, n: int, device: str) -> float:
    """Seconds per call, averaged over ``n`` back-to-back calls."""
    sync(device)
    t0 = time.perf_counter()
    for _ in range(n):
        step(*inputs)
    sync(device)
    return (time.perf_counter() - t0) / n


def calibrate(step, inputs, target_s: float, device: str) -> int:
    """Calls per round so that one round takes about ``target_s``."""
    one = min(time_calls(step, inputs, 1, device) for _ in range(3))
    if one <= 0:
        return 1000
    return int(max(1, min(20000, round(target_s / one))))


def interleaved_rounds(steps: dict, inputs_by_backend: dict, rounds: int, target_s: float, device: str, model: str):
    """Median per-call time (s) of each backend over rounds taken in turn."""
    iters = {b: calibrate(s, inputs_by_backend[b], target_s, device) for b, s in steps.items()}
    samples = {b: [] for b in steps}
    gc_was_enabled = gc.isenabled()
    try:
        for r in range(rounds):
            for backend, step in steps.items():
                emit("phase", model=model, backend=backend, phase=f"timing round {r + 1}/{rounds}")
                gc.collect()
                gc.disable()
                try:
                    samples[backend].append(time_calls(step, inputs_by_backend[backend], iters[backend], device))
                finally:
                    if gc_was_enabled:
                        gc.enable()
    finally:
        if gc_was_enabled:
            gc.enable()
    return iters, samples


# --------------------------------------------------------------------------
# Task: main
# --------------------------------------------------------------------------


def overhead_probe(backend: str, device: str, repeats: int = 7, calls: int = 2000) -> dict:
    """Per-call overhead on ``x + 1`` over a one-element tensor.

    Also the first compile of the process for this backend: its time is
    reported as ``startup_s`` (one-time costs such as Inductor's first g++
    run), so that the per-model compile times that follow are not charged
    for it.
    """
    fn, inputs = zoo.tiny_graph()
    dev = tensor_device(device)
    inputs = tuple(x.to(dev) for x in inputs)
    record = {"backend": backend, "device": device}
    try:
        compiled = make_compiler(backend, device)(fn)
        reset_compilers()
        t0 = time.perf_counter()
        out = compiled(*inputs)
        sync(device)
        record["startup_s"] = time.perf_counter() - t0 if backend != "eager" else None
        ok = compare([out], [fn(*inputs)], "float32")["correct"]

        def per_call(f):
            best = []
            for _ in range(repeats):
                sync(device)
                t = time.perf_counter()
                for _ in range(calls):
                    f(*inputs)
                sync(device)
                best.append((time.perf_counter() - t) / calls)
            return statistics.median(best)

        for _ in range(100):
            compiled(*inputs)
        eager_s = per_call(fn)
        compiled_s = per_call(compiled)
        record.update(status="ok", correct=ok, eager_us=eager_s * 1e6, call_us=compiled_s * 1e6,
                      overhead_us=(compiled_s - eager_s) * 1e6)
    except Unavailable as exc:
        record.update(status="skipped", error=str(exc))
    except Exception as exc:
        status = "skipped" if (device == "wgpu" and _looks_unavailable(exc)) else "error"
        record.update(status=status, error=_short_error(exc))
    return record


def run_model(task: dict, model: str, backends: list[str]) -> None:
    device, mode, dtype_name = task["device"], task["mode"], task.get("dtype") or "float32"
    base = {"model": model, "device": device, "mode": mode, "dtype": dtype_name}
    results = {b: dict(base, backend=b, status="ok", error=None) for b in backends}

    def fail(backend, exc, status="error"):
        results[backend].update(status=status, error=exc if isinstance(exc, str) else _short_error(exc))
        if status == "error":
            traceback.print_exc()

    emit("phase", model=model, backend="eager", phase="build")
    # Reset Dynamo between models, not between backends: a reset drops every
    # compiled entry, and the backends compiled before it would silently
    # recompile inside the timing rounds.
    reset_compilers()
    gc.collect()
    torch.manual_seed(0)
    eager_module, inputs = prepare(model, device, task.get("dtype"), mode)
    ref_module = copy.deepcopy(eager_module)
    ref_step = make_step(ref_module, ref_module, mode)
    reference = observed(ref_module, mode, ref_step(*inputs))
    tol = TOLERANCE.get(dtype_name, 1e-3)
    high = {}

    def high_reference():
        """The same step in higher precision (float64, or float32 for half), once."""
        if "ref" not in high:
            hi_dtype = "float64" if dtype_name == "float32" else "float32"
            m_hi, in_hi = prepare(model, device, hi_dtype, mode)
            high["dtype"] = hi_dtype
            high["ref"] = observed(m_hi, mode, make_step(m_hi, m_hi, mode)(*in_hi))
        return high["ref"]

    def judge(got):
        """Correct if close to eager; failing that, if no further from a
        higher-precision run than eager itself is (per output, RMS error within
        2x eager's plus a small floor): eager's own rounding is not the truth,
        and near-zero gradients make any relative measure explode."""
        check = compare(got, reference, dtype_name)
        if check["correct"] or "mismatch" in check:
            return check
        try:
            hi = high_reference()
        except Exception as exc:  # e.g. an op with no float64 kernel
            check["high_precision_error"] = _short_error(exc)
            return check
        worst = 0.0
        for g, r, h in zip(got, reference, hi):
            if not h.is_floating_point() or h.numel() == 0:
                continue
            h64 = h.detach().cpu().double()
            e_got = (g.detach().cpu().double() - h64).pow(2).mean().sqrt().item()
            e_eager = (r.detach().cpu().double() - h64).pow(2).mean().sqrt().item()
            floor = 0.01 * tol * h64.abs().max().item() + 1e-30
            worst = max(worst, e_got / (2.0 * e_eager + floor))
        check["rms_err_ratio_vs_eager"] = json_number(worst)
        if math.isfinite(worst) and worst <= 1.0:
            check["correct"] = True
            check["judged_by"] = f"{high['dtype']} reference: RMS error within 2x eager's"
        return check

    steps, modules = {}, {}
    for backend in backends:
        emit("phase", model=model, backend=backend, phase="compile")
        if os.environ.get("RDYN_BENCH_CRASH_AT") == f"{model}/{backend}":
            # Test hook: die the way a native crash would, to exercise recovery.
            os.kill(os.getpid(), signal.SIGSEGV)
        try:
            module = copy.deepcopy(eager_module)
            compiled = make_compiler(backend, device)(module)
            step = make_step(compiled, module, mode)
            counters_before = dynamo_counters()
            if backend == "rdyn":
                rdyn_stats_reset()
            sync(device)
            backend_before, capture_before = _backend_seconds(), _capture_seconds()
            t0 = time.perf_counter()
            first = step(*inputs)
            sync(device)
            compile_s = time.perf_counter() - t0
            backend_compile_s = _backend_seconds() - backend_before
            capture_s = _capture_seconds() - capture_before
            check_first = judge(observed(module, mode, first))
            for _ in range(2):
                later = step(*inputs)
            check_later = judge(observed(module, mode, later))
            check = check_first if not check_first["correct"] else check_later
            if check_first["correct"] and check_later["correct"]:
                check["max_abs_err"] = max(check_first["max_abs_err"] or 0, check_later["max_abs_err"] or 0)
                check["max_rel_err"] = max(check_first["max_rel_err"] or 0, check_later["max_rel_err"] or 0)
            results[backend].update(check)
            if backend != "eager":
                results[backend]["compile_s"] = compile_s
                results[backend]["backend_compile_s"] = backend_compile_s
                results[backend]["capture_s"] = capture_s
                after = dynamo_counters()
                results[backend].update({k: after[k] - counters_before[k] for k in after})
            if backend == "rdyn":
                stats = rdyn_stats()
                results[backend]["rdyn_stats"] = stats
                results[backend]["native_pct"] = native_pct(stats)
                # CPU stages rdyn's JIT compiled vs left to its interpreter
                # (counted at compile time, like the node counts above).
                for key in ("cpu_stages_interpreted", "cpu_stages_compiled"):
                    results[backend][key] = (stats or {}).get(key)
            steps[backend], modules[backend] = step, module
        except Unavailable as exc:
            fail(backend, str(exc), "skipped")
        except Exception as exc:
            status = "skipped" if (device == "wgpu" and backend == "rdyn" and _looks_unavailable(exc)) else "error"
            fail(backend, exc, status)
        emit("step", model=model, backend=backend, phase="compile")

    if "eager" not in steps:
        # No eager baseline on this device: nothing to compare the speed with.
        for b in steps:
            results[b]["speedup"] = None
    timed = {b: s for b, s in steps.items()}
    if timed:
        emit("phase", model=model, backend=next(iter(timed)), phase="timing")
        try:
            iters, samples = interleaved_rounds(
                timed, {b: inputs for b in timed}, task["rounds"], task["target_s"], device, model
            )
            eager_ms = statistics.median(samples["eager"]) * 1e3 if "eager" in samples else None
            for b in timed:
                ms = statistics.median(samples[b]) * 1e3
                results[b].update(
                    time_ms=ms,
                    time_ms_rounds=[s * 1e3 for s in samples[b]],
                    iters_per_round=iters[b],
                    speedup=(eager_ms / ms) if (eager_ms and ms > 0) else None,
                )
        except Exception as exc:
            for b in timed:
                fail(b, f"timing failed: {_short_error(exc)}")
    emit("step", model=model, backend="*", phase="timing")
    for b in backends:
        emit("result", data=results[b])
    del steps, modules
    reset_compilers()


def task_main(task: dict) -> None:
    device = task["device"]
    try:
        check_device(device, task["overhead_backends"])
    except Unavailable as exc:
        emit("device_unavailable", device=device, error=str(exc))
        return
    torch.set_grad_enabled(True)
    # The probe is also every backend's first compile in this process: it pays
    # one-time start-up costs (reported as startup_s) before the first model.
    how = task.get("overhead", "measure")
    if how != "skip":
        for backend in task["overhead_backends"]:
            emit("phase", model=OVERHEAD_PROBE, backend=backend, phase="x + 1")
            record = overhead_probe(backend, device)
            if how == "measure":
                emit("overhead", data=record)
            emit("step", model=OVERHEAD_PROBE, backend=backend, phase="overhead")
    for item in task["models"]:
        emit("model_start", model=item["model"])
        run_model(task, item["model"], item["backends"])
        emit("model_done", model=item["model"])


# --------------------------------------------------------------------------
# Tasks: cold, populate and warm (each in a fresh process)
# --------------------------------------------------------------------------


def _clear_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (Linux >= 4.0) so a later peak is ours."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return _peak_rss_mb()


def _probe(compiler, device: str) -> float:
    """Compile and run the one-op probe: the backend's one-time process
    start-up (imports, a first C++ compile, opening a cache), so that the
    model's figure that follows is the model's own. Returns its seconds."""
    fn, probe_inputs = zoo.tiny_graph()
    probe_inputs = tuple(x.to(tensor_device(device)) for x in probe_inputs)
    t0 = time.perf_counter()
    compiler(fn)(*probe_inputs)
    sync(device)
    seconds = time.perf_counter() - t0
    reset_compilers()
    return seconds


def _fresh_start(task: dict):
    """The start of a fresh-process task: the model, its inputs, the
    backend's compiler, and the seconds of the backend's start-up probe
    (None for eager, which has none)."""
    device, backend = task["device"], task["backend"]
    check_device(device)
    module, inputs = prepare(task["model"], device, task.get("dtype"), task["mode"])
    compiler = make_compiler(backend, device)
    startup = _probe(compiler, device) if backend != "eager" else None
    return module, inputs, compiler, startup


def _timed_call(step, inputs, device: str) -> float:
    """Seconds of one call, synchronised with the device."""
    t0 = time.perf_counter()
    step(*inputs)
    sync(device)
    return time.perf_counter() - t0


def _backend_seconds() -> float:
    """Seconds this process has spent in backends' compilers (Dynamo's
    ``call_user_compiler``: AOTAutograd and the backend itself, after
    Dynamo's capture), for the share of a first compile a backend controls."""
    from torch._dynamo.utils import compilation_time_metrics

    return float(sum(compilation_time_metrics.get("OutputGraph.call_user_compiler", [])))


def _capture_seconds() -> float:
    """Seconds this process has spent in Dynamo's own work on frames: its
    compile of a frame (bytecode tracing, guards) less the backend's
    compiler inside it. What no backend shortens."""
    from torch._dynamo.utils import compilation_time_metrics

    inner = float(sum(compilation_time_metrics.get("_compile.compile_inner", [])))
    return inner - _backend_seconds()


def task_cold(task: dict) -> None:
    """First compile of one model and backend in this fresh process, caches
    disabled (the environment says so).

    In a fresh process because Dynamo keeps per-function analyses across
    compiles: a backend that compiles a model after another backend did
    pays less for Dynamo. The model runs eagerly once first, as in ``main``
    (the eager reference), so that first-use costs of ATen kernels (oneDNN
    primitives, thread pools) are not charged to the compiler."""
    mode = task["mode"]
    record = {"model": task["model"], "backend": task["backend"]}
    try:
        module, inputs, compiler, record["cold_startup_s"] = _fresh_start(task)
        eager = copy.deepcopy(module)
        make_step(eager, eager, mode)(*inputs)
        del eager
        gc.collect()
        before, capture_before = _backend_seconds(), _capture_seconds()
        first = _timed_call(make_step(compiler(module), module, mode), inputs, task["device"])
        record.update(status="ok", compile_s=first, backend_compile_s=_backend_seconds() - before,
                      capture_s=_capture_seconds() - capture_before)
    except Exception as exc:
        record.update(status="error", error=_short_error(exc))
    emit("cold", data=record)


def task_populate(task: dict) -> None:
    """Compile each model once with on-disk caches enabled and empty, to fill
    them for ``warm``; nothing here is reported as a figure."""
    device, mode = task["device"], task["mode"]
    check_device(device)
    for item in task["models"]:
        for backend in item["backends"]:
            emit("phase", model=item["model"], backend=backend, phase="fill cache")
            try:
                module, inputs = prepare(item["model"], device, task.get("dtype"), mode)
                make_step(make_compiler(backend, device)(module), module, mode)(*inputs)
                sync(device)
                reset_compilers()
            except Exception:
                traceback.print_exc()
            emit("step", model=item["model"], backend=backend, phase="populate")


def task_warm(task: dict) -> None:
    """Warm start and peak memory of one model and backend in this fresh process."""
    device, mode, backend = task["device"], task["mode"], task["backend"]
    record = {"model": task["model"], "backend": backend}
    try:
        module, inputs, compiler, startup = _fresh_start(task)
        if startup is not None:
            record["warm_startup_s"] = startup
        gc.collect()
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        exact = _clear_peak_rss()
        base = _rss_mb() if exact else _peak_rss_mb()
        step = make_step(compiler(module), module, mode)
        first = _timed_call(step, inputs, device)
        step(*inputs)
        sync(device)
        first_peak = _peak_rss_mb()
        gc.collect()
        # Transient memory of one steady-state call: reset the mark again.
        before_calls = _rss_mb()
        exact_run = exact and _clear_peak_rss()
        for _ in range(3):
            step(*inputs)
        sync(device)
        run_peak = _peak_rss_mb()
        record.update(
            status="ok",
            # Peak RSS over the pre-compile baseline: compile + first calls included.
            peak_mem_mb=max(0.0, max(first_peak, run_peak) - base),
            # Peak RSS of steady-state calls over the RSS just before them.
            run_mem_mb=max(0.0, run_peak - before_calls) if exact_run else None,
            # What stays resident after compiling and running (code, caches, weights copies).
            rss_growth_mb=_rss_mb() - base,
            peak_rss_mb=max(first_peak, run_peak),
            mem_method="VmHWM reset via /proc/self/clear_refs" if exact else "ru_maxrss delta (may include import peak)",
        )
        if backend != "eager":
            record["warm_compile_s"] = first
            if backend == "rdyn":
                record["warm_rdyn_stats"] = rdyn_stats()
        if device == "cuda":
            record["cuda_peak_mem_mb"] = torch.cuda.max_memory_allocated() / 2**20
    except Exception as exc:
        record.update(status="error", error=_short_error(exc))
    emit("warm", data=record)


def main() -> int:
    _setup_event_stream()
    with open(sys.argv[1]) as f:
        task = json.load(f)
    torch.manual_seed(0)
    if task.get("threads"):
        torch.set_num_threads(int(task["threads"]))
    kind = task["kind"]
    try:
        {"main": task_main, "cold": task_cold, "populate": task_populate, "warm": task_warm}[kind](task)
    except Exception as exc:
        traceback.print_exc()
        emit("fatal", error=_short_error(exc))
        return 1
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
