"""What a benchmark run records and prints: the machine and versions it ran
on, the per-configuration summary (geomeans, compile times, interpreted
stages), the history file, and the printed tables. `suite.py` runs the
measurements; this module only reads their results.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALL_BACKENDS = ("eager", "inductor", "rdyn")


def git_info() -> dict:
    def git(*a):
        try:
            out = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, timeout=10)
            return out.stdout.strip() if out.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            return None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def machine_info() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gb = None
    try:
        with open("/proc/meminfo") as f:
            mem_gb = round(int(f.readline().split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": mem_gb, "platform": platform.platform(),
            "hostname": platform.node()}


def _cpu_busy_s():
    """Seconds of CPU time all processes on this machine have used (from /proc/stat)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
        return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _own_cpu_s():
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in ("torch", "torchvision", "transformers", "numpy", "rdyn", "plotly", "matplotlib"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def geomean(xs):
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _total(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) if xs else None


def interpreted_cell(interpreted, compiled) -> str:
    """'3/17': CPU stages left to rdyn's interpreter, of all its CPU stages."""
    if interpreted is None:
        return "-"
    return f"{interpreted}/{interpreted + (compiled or 0)}"


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarise(results: list[dict], overhead: list[dict]) -> list[dict]:
    """One row per (device, mode, dtype, backend): the run's headline figures."""
    groups: dict = {}
    for r in results:
        groups.setdefault((r["device"], r["mode"], r["dtype"], r["backend"]), []).append(r)
    rows = []
    for (device, mode, dtype, backend), rs in groups.items():
        ok = [r for r in rs if r.get("status") == "ok"]
        speedups = [(r["model"], r.get("speedup")) for r in ok if r.get("speedup")]
        slowest = min(speedups, key=lambda x: x[1]) if speedups else (None, None)
        nodes = {k: sum((r.get("rdyn_stats") or {}).get(k, 0) or 0 for r in ok)
                 for k in ("nodes_native", "nodes_extern", "nodes_fallback")}
        total_nodes = sum(nodes.values())
        oh = next((o for o in overhead if o["backend"] == backend and o["device"] == device and o["mode"] == mode
                   and o["dtype"] == dtype and o.get("status") == "ok"), None)
        rows.append({
            "device": device, "mode": mode, "dtype": dtype, "backend": backend,
            "models": len(rs), "ok": len(ok), "correct": sum(1 for r in ok if r.get("correct")),
            "errors": sum(1 for r in rs if r.get("status") == "error"),
            "skipped": sum(1 for r in rs if r.get("status") == "skipped"),
            "geomean_speedup": geomean([s for _, s in speedups]),
            "min_speedup": slowest[1], "slowest_model": slowest[0],
            "median_compile_s": median([r.get("compile_s") for r in ok]),
            # The part after Dynamo's capture: AOTAutograd and the backend.
            "median_backend_compile_s": median([r.get("backend_compile_s") for r in ok]),
            # Dynamo's own share (bytecode tracing, guards), which no
            # backend shortens.
            "median_capture_s": median([r.get("capture_s") for r in ok]),
            "median_warm_compile_s": median([r.get("warm_compile_s") for r in ok]),
            "median_warm_startup_s": median([r.get("warm_startup_s") for r in ok]),
            "median_peak_mem_mb": median([r.get("peak_mem_mb") for r in ok]),
            "overhead_us": oh.get("overhead_us") if oh else None,
            "startup_s": oh.get("startup_s") if oh else None,
            "native_pct": (100.0 * (nodes["nodes_native"] + nodes["nodes_extern"]) / total_nodes) if total_nodes else None,
            **({"nodes": nodes} if backend == "rdyn" else {}),
            # rdyn's CPU stages over the run's models: compiled by its JIT, or left to its interpreter.
            **({k: _total([r.get(k) for r in ok]) for k in ("cpu_stages_interpreted", "cpu_stages_compiled")}
               if backend == "rdyn" else {}),
        })
    order = {b: i for i, b in enumerate(ALL_BACKENDS)}
    rows.sort(key=lambda r: (r["device"], r["mode"], r["dtype"], order.get(r["backend"], 9)))
    return rows


def load_history(path: Path) -> list:
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, list) else []
    except json.JSONDecodeError:
        backup = path.with_suffix(f".corrupt-{int(time.time())}.json")
        shutil.copy(path, backup)
        print(f"[bench] warning: {path} was not valid JSON; kept a copy at {backup} and started a new history",
              file=sys.stderr)
        return []


def write_json(path: Path, data) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, allow_nan=False))
    tmp.replace(path)


# --------------------------------------------------------------------------
# The summary table
# --------------------------------------------------------------------------


def fmt(x, spec=".2f", none="-"):
    return none if x is None else format(x, spec)


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) if i == 0 or i == 1 else str(c).rjust(w)
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def print_summary(record: dict, dashboard: str | None, history_path: Path) -> None:
    results = record["results"]
    multi = len({(r["device"], r["mode"], r["dtype"]) for r in results}) > 1
    header = ["model", "backend"] + (["config"] if multi else []) + [
        "speedup", "ms/call", "compile s", "warm s", "mem MB", "correct", "native %", "interp. stages"]
    # A config where nothing ran (no CUDA here, say) is one note, not a row per model.
    live = {(r["device"], r["mode"], r["dtype"]) for r in results if r.get("status") != "skipped"}
    rows = []
    for r in results:
        if (r["device"], r["mode"], r["dtype"]) not in live:
            continue
        if r.get("status") == "ok":
            correct = "yes" if r.get("correct") else f"NO ({fmt(r.get('max_rel_err'), '.1e')})"
            cells = [fmt(r.get("speedup"), ".2f") + "x" if r.get("speedup") else "-", fmt(r.get("time_ms"), ".3f"),
                     fmt(r.get("compile_s")), fmt(r.get("warm_compile_s")), fmt(r.get("peak_mem_mb"), ".0f"),
                     correct, fmt(r.get("native_pct"), ".0f"),
                     interpreted_cell(r.get("cpu_stages_interpreted"), r.get("cpu_stages_compiled"))]
        else:
            err = (r.get("error") or "")[:70]
            cells = [r.get("status", "?").upper(), err, "", "", "", "", "", ""]
        config = [f"{r['device']}/{r['mode']}/{r['dtype']}"] if multi else []
        rows.append([r["model"], r["backend"]] + config + cells)
    print()
    print(table(rows, header))
    print()
    srows = []
    for s in record["summary"]:
        if s["ok"] == 0 and s["skipped"] == s["models"]:
            continue
        srows.append([s["backend"], f"{s['device']}/{s['mode']}/{s['dtype']}",
                      fmt(s["geomean_speedup"], ".2f") + ("x" if s["geomean_speedup"] else ""),
                      f"{fmt(s['min_speedup'], '.2f')} ({s['slowest_model'] or '-'})",
                      fmt(s["median_compile_s"]), fmt(s.get("median_capture_s"), ".3f"),
                      fmt(s.get("median_backend_compile_s"), ".3f"), fmt(s["median_warm_compile_s"], ".3f"),
                      fmt(s["overhead_us"], ".1f"), f"{s['correct']}/{s['models']}", fmt(s["native_pct"], ".1f"),
                      interpreted_cell(s.get("cpu_stages_interpreted"), s.get("cpu_stages_compiled"))])
    print(table(srows, ["backend", "config", "geomean", "slowest", "median compile s", "capture s", "after capture s", "median warm s",
                        "overhead us", "correct", "native %", "interp. stages"]))
    for note in record["notes"]:
        print(f"note: {note}")
    print()
    n = len({r["model"] for r in results})
    print(f"suite: {record.get('suite', 'default')} ({n} model{'s' if n != 1 else ''}); "
          "interp. stages: rdyn's CPU stages left to its interpreter / all its CPU stages")
    print(f"run took {record['duration_s']:.0f} s; history: {history_path}")
    if dashboard:
        print(f"dashboard: {dashboard}")
