#!/usr/bin/env python3
"""Build the benchmark dashboard from the suite's JSON history.

    python benches/dashboard.py                      # build/bench/history.json -> build/bench/dashboard.html + *.png
    python benches/dashboard.py --history H.json --out DIR
    python benches/dashboard.py --publish benches/img   # also copy the PNGs there (for a README)

The page is one self-contained HTML file (plotly.js is inlined; it needs no
network).  Every chart is built from a *chart spec*, a small dict of traces
(``name``, ``x``, ``y``) derived from the history; the same specs drive the
PNG charts (matplotlib), and they are embedded in the page as JSON::

    <script type="application/json" id="rdyn-data">
      {"latest": <the latest run record>, "runs": [<per-run summaries>],
       "charts": {"chart-speedup": {"title": ..., "traces": [{"name", "x", "y"}, ...]}, ...}}
    </script>

so a test can check that each plotly chart (``document.getElementById(id).data``)
holds exactly the numbers of the JSON.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BACKEND_ORDER = ("eager", "inductor", "rdyn")
COLORS = {"eager": "#7f7f7f", "inductor": "#1f77b4", "rdyn": "#d62728"}
EXTRA_COLORS = ["#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]


# --------------------------------------------------------------------------
# Chart specs: plain data, shared by the HTML page, the PNGs and the tests
# --------------------------------------------------------------------------


def _num(x):
    if x is None:
        return None
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _configs(results: list[dict]) -> list[tuple]:
    seen = []
    for r in results:
        c = (r["device"], r["mode"], r["dtype"])
        if c not in seen:
            seen.append(c)
    return seen


def _models(results: list[dict]) -> list[str]:
    seen = []
    for r in results:
        if r["model"] not in seen:
            seen.append(r["model"])
    return seen


def _backends(results: list[dict]) -> list[str]:
    present = {r["backend"] for r in results}
    return [b for b in BACKEND_ORDER if b in present] + sorted(present - set(BACKEND_ORDER))


def _series_name(backend: str, config: tuple, multi: bool, suffix: str = "") -> str:
    name = backend + (f" {suffix}" if suffix else "")
    return f"{name} ({'/'.join(config)})" if multi else name


def _lookup(results: list[dict]) -> dict:
    return {(r["model"], r["backend"], r["device"], r["mode"], r["dtype"]): r for r in results}


def _per_model_chart(record: dict, chart_id: str, title: str, ylabel: str, field: str, backends=None,
                     log: bool = False, ref_line=None, suffix: str = "") -> dict:
    results = record["results"]
    configs = _configs(results)
    multi = len(configs) > 1
    models = _models(results)
    table = _lookup(results)
    traces = []
    for config in configs:
        for backend in backends or _backends(results):
            if backend not in _backends(results):
                continue
            ys, texts = [], []
            for m in models:
                r = table.get((m, backend, *config))
                ok = r is not None and r.get("status") == "ok"
                ys.append(_num(r.get(field)) if ok else None)
                texts.append("" if ok else (f"{r.get('status')}: {r.get('error') or ''}"[:120] if r else "not run"))
            traces.append({"name": _series_name(backend, config, multi, suffix), "backend": backend,
                           "config": list(config), "field": field, "x": list(models), "y": ys, "text": texts})
    return {"id": chart_id, "title": title, "kind": "bar", "xlabel": "model", "ylabel": ylabel, "log": log,
            "ref_line": ref_line, "traces": traces}


def speedup_chart(record: dict) -> dict:
    compiled = [b for b in _backends(record["results"]) if b != "eager"]
    return _per_model_chart(record, "chart-speedup", "Speedup over eager (higher is better)",
                            "speedup over eager (x)", "speedup", backends=compiled, ref_line=1.0)


def compile_chart(record: dict) -> dict:
    compiled = [b for b in _backends(record["results"]) if b != "eager"]
    cold = _per_model_chart(record, "chart-compile", "", "", "compile_s", backends=compiled, suffix="first compile")
    warm = _per_model_chart(record, "chart-compile", "", "", "warm_compile_s", backends=compiled, suffix="warm start")
    traces = [t for pair in zip(cold["traces"], warm["traces"]) for t in pair]
    return {"id": "chart-compile", "kind": "bar", "xlabel": "model", "ylabel": "seconds (log scale)", "log": True,
            "ref_line": None, "traces": traces,
            "title": "Compile time: first compile and warm start (lower is better)",
            "subtitle": "first call, caches off; warm: first call in a second process with filled caches"}


def memory_chart(record: dict) -> dict:
    return _per_model_chart(record, "chart-memory",
                            "Peak memory of compiling + running (MB, lower is better)",
                            "MB over the pre-compile baseline", "peak_mem_mb")


def _config_of(o: dict) -> tuple:
    return (o["device"], o.get("mode", "inference"), o.get("dtype", "float32"))


def overhead_chart(record: dict) -> dict:
    """One bar per backend (per backend and config when there are several)."""
    rows = [o for o in record.get("overhead", []) if o.get("status") == "ok"]
    configs = []
    for o in rows:
        if _config_of(o) not in configs:
            configs.append(_config_of(o))
    multi = len(configs) > 1
    rows.sort(key=lambda o: (configs.index(_config_of(o)),
                             BACKEND_ORDER.index(o["backend"]) if o["backend"] in BACKEND_ORDER else 9))
    label = (lambda o: f"{o['backend']} ({'/'.join(_config_of(o))})") if multi else (lambda o: o["backend"])
    trace = {"name": "call time", "field": "call_us", "backends": [o["backend"] for o in rows],
             "configs": [list(_config_of(o)) for o in rows], "x": [label(o) for o in rows],
             "y": [_num(o.get("call_us")) for o in rows],
             "text": [f"overhead over eager: {(_num(o.get('overhead_us')) or 0):.2f} us" for o in rows]}
    return {"id": "chart-overhead", "kind": "bar", "xlabel": "backend", "ylabel": "microseconds per call",
            "log": False, "ref_line": None, "traces": [trace] if rows else [],
            "title": "Per-call time of x + 1 on one element (µs, lower is better)",
            "subtitle": "eager's bar is the floor; the rest is the backend's per-call overhead"}


def coverage_chart(record: dict) -> dict:
    """Stacked node counts per model (per model and config when there are several)."""
    results = [r for r in record["results"] if r["backend"] == "rdyn"]
    configs = _configs(results)
    multi = len(configs) > 1
    table = _lookup(results)
    models = _models(record["results"])
    cells = [(m, c) for c in configs for m in models] if multi else [(m, configs[0]) for m in models] if configs else []
    xs = [f"{m} ({'/'.join(c)})" if multi else m for m, c in cells]
    labels = {"nodes_native": "native (rdyn kernels)", "nodes_extern": "extern (GEMM / conv library)",
              "nodes_fallback": "eager fallback"}
    traces = []
    for field, label in labels.items():
        ys = []
        for m, c in cells:
            r = table.get((m, "rdyn", *c))
            stats = (r or {}).get("rdyn_stats") or {}
            ys.append(_num(stats.get(field)) if (r and r.get("status") == "ok" and stats) else None)
        traces.append({"name": label, "field": field, "configs": [list(c) for _, c in cells],
                       "models": [m for m, _ in cells], "x": xs, "y": ys})
    return {"id": "chart-coverage", "kind": "stack", "xlabel": "model", "ylabel": "ATen nodes", "log": False,
            "ref_line": None, "traces": traces,
            "title": "rdyn native coverage: ATen nodes by how they ran",
            "subtitle": "from rdyn.stats(); native and extern count as covered"}


def suite_name(record: dict) -> str:
    """'default', 'wide', 'quick' or 'custom' (your model); older records only say --quick."""
    o = record.get("options") or {}
    return record.get("suite") or o.get("suite") or ("quick" if o.get("quick") else "default")


def suite_label(record: dict) -> str:
    """What ran, for the page's title: 'wide suite, 43 models', 'your model: my_model:make'."""
    o = record.get("options") or {}
    name = suite_name(record)
    n = len(o.get("models") or _models(record.get("results", [])))
    if name == "custom":
        targets = o.get("targets") or o.get("models") or []
        return f"your model{'s' if len(targets) > 1 else ''}: {', '.join(targets)}"
    size = o.get("suite_size")
    if size and n < size:
        return f"{name} suite, {n} of its {size} models"
    return f"{name} suite, {n} model{'s' if n != 1 else ''}"


def run_label(record: dict) -> str:
    ts = record.get("timestamp", "")[:16].replace("T", " ")
    commit = (record.get("commit") or "")[:7]
    return f"{ts} {commit}{'+' if record.get('dirty') else ''}".strip() + f" #{record.get('id', '')[-7:]}"


def comparable_runs(history: list[dict]) -> list[dict]:
    """Runs over the same models as the latest: a geomean over other models is another number."""
    models = sorted((history[-1].get("options") or {}).get("models") or [])
    return [h for h in history if h.get("summary") and sorted((h.get("options") or {}).get("models") or []) == models]


def history_charts(history: list[dict]) -> list[dict]:
    runs = comparable_runs(history)
    subtitle = (f"the {len(runs)} of {len(history)} runs over the same models as the latest "
                f"({len((history[-1].get('options') or {}).get('models') or [])} models)")
    keys = []
    for h in runs:
        for s in h["summary"]:
            k = (s["backend"], s["device"], s["mode"], s["dtype"])
            if k not in keys:
                keys.append(k)
    multi = len({k[1:] for k in keys}) > 1
    labels = [run_label(h) for h in runs]
    charts = []
    for chart_id, field, title, ylabel, skip_eager in (
        ("chart-history-speedup", "geomean_speedup", "History: geomean speedup over eager", "geomean speedup (x)", True),
        ("chart-history-compile", "median_compile_s", "History: median first-compile time", "seconds", True),
    ):
        traces = []
        for k in keys:
            if skip_eager and k[0] == "eager":
                continue
            ys = []
            for h in runs:
                s = next((s for s in h["summary"] if (s["backend"], s["device"], s["mode"], s["dtype"]) == k), None)
                ys.append(_num(s.get(field)) if s else None)
            traces.append({"name": _series_name(k[0], k[1:], multi), "backend": k[0], "config": list(k[1:]),
                           "field": field, "x": labels, "y": ys})
        charts.append({"id": chart_id, "kind": "line", "xlabel": "run", "ylabel": ylabel, "log": False,
                       "ref_line": 1.0 if field == "geomean_speedup" else None, "title": title,
                       "subtitle": subtitle, "traces": traces})
    return charts


def chart_specs(history: list[dict]) -> list[dict]:
    latest = history[-1]
    return [speedup_chart(latest), compile_chart(latest), overhead_chart(latest), memory_chart(latest),
            coverage_chart(latest)] + history_charts(history)


def _trace_color(trace: dict, index: int) -> str:
    """Backends keep their colour across charts; further configs get other colours."""
    field = trace.get("field")
    if field in ("nodes_native", "nodes_extern", "nodes_fallback"):
        return {"nodes_native": "#2ca02c", "nodes_extern": "#1f77b4", "nodes_fallback": "#d62728"}[field]
    backend = trace.get("backend")
    config = trace.get("config") or []
    first_config = not config or tuple(config[1:]) == ("inference", "float32") and config[0] == "cpu"
    if backend in COLORS and first_config:
        return COLORS[backend]
    return EXTRA_COLORS[index % len(EXTRA_COLORS)]


# --------------------------------------------------------------------------
# Plotly (the page)
# --------------------------------------------------------------------------


def plotly_figure(spec: dict):
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, t in enumerate(spec["traces"]):
        warm = "warm start" in t["name"]
        color = _trace_color(t, i)
        if spec["kind"] == "line":
            fig.add_trace(go.Scatter(name=t["name"], x=t["x"], y=t["y"], mode="lines+markers",
                                     line={"color": color}, connectgaps=False))
        else:
            if spec["id"] == "chart-overhead":  # one bar per backend, in the backend's colour
                color = [COLORS.get(b, color) for b in t["backends"]]
            fig.add_trace(go.Bar(name=t["name"], x=t["x"], y=t["y"], hovertext=t.get("text"),
                                 marker={"color": color, "pattern": {"shape": "/" if warm else ""},
                                         "opacity": 0.6 if warm else 1.0}))
    title = {"text": spec["title"], "font": {"size": 15}}
    if spec.get("subtitle"):
        title["subtitle"] = {"text": spec["subtitle"], "font": {"size": 11, "color": "#666"}}
    fig.update_layout(
        title=title, autosize=True, height=440,
        barmode="stack" if spec["kind"] == "stack" else "group",
        template="plotly_white", margin={"l": 60, "r": 20, "t": 70, "b": 90},
        legend={"orientation": "h", "y": -0.25},
        xaxis_title=None, yaxis_title=spec["ylabel"],
    )
    if spec["log"]:
        fig.update_yaxes(type="log", minorloglabels="complete")
    if spec.get("ref_line") is not None:
        fig.add_hline(y=spec["ref_line"], line_dash="dash", line_color="#444", annotation_text="eager",
                      annotation_position="top left")
    if not any(y is not None for t in spec["traces"] for y in t["y"]):
        fig.add_annotation(text="no data in this run", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                           font={"size": 18, "color": "#888"})
    return fig


# --------------------------------------------------------------------------
# Matplotlib (the PNGs)
# --------------------------------------------------------------------------


def png_chart(spec: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter

    traces = spec["traces"]
    xs = []
    for t in traces:
        for x in t["x"]:
            if x not in xs:
                xs.append(x)
    fig, ax = plt.subplots(figsize=(max(7.0, 0.75 * len(xs) + 3), 4.2), dpi=110)
    pos = {x: i for i, x in enumerate(xs)}
    if spec["kind"] == "line":
        for i, t in enumerate(traces):
            pts = [(pos[x], y) for x, y in zip(t["x"], t["y"]) if y is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=t["name"], color=_trace_color(t, i))
    elif spec["kind"] == "stack":
        ax.margins(y=0.15)
        bottom = [0.0] * len(xs)
        for i, t in enumerate(traces):
            ys = [0.0] * len(xs)
            for x, y in zip(t["x"], t["y"]):
                ys[pos[x]] = y or 0.0
            ax.bar(range(len(xs)), ys, bottom=bottom, label=t["name"], color=_trace_color(t, i))
            bottom = [b + y for b, y in zip(bottom, ys)]
    else:
        n = max(1, len(traces))
        width = 0.8 / n
        for i, t in enumerate(traces):
            warm = "warm start" in t["name"]
            idx = [pos[x] - 0.4 + width * (i + 0.5) for x, y in zip(t["x"], t["y"]) if y is not None]
            ys = [y for y in t["y"] if y is not None]
            color = _trace_color(t, i)
            if spec["id"] == "chart-overhead":
                color = [COLORS.get(b, color) for b, y in zip(t["backends"], t["y"]) if y is not None]
            ax.bar(idx, ys, width=width, label=t["name"], color=color, alpha=0.6 if warm else 1.0,
                   hatch="//" if warm else None)
            if spec["id"] == "chart-speedup":
                for xi, y in zip(idx, ys):
                    ax.annotate(f"{y:.2f}", (xi, y), ha="center", va="bottom", fontsize=7)
    if spec.get("ref_line") is not None:
        ax.axhline(spec["ref_line"], color="#444", linestyle="--", linewidth=1)
    if spec["log"] and any(y for t in traces for y in t["y"]):
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels(xs, rotation=30 if len(xs) > 4 or spec["kind"] == "line" else 0, ha="right" if len(xs) > 4 else "center",
                       fontsize=8)
    ax.set_ylabel(spec["ylabel"])
    ax.set_title(_wrap(spec["title"], 90), fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    if not any(y is not None for t in traces for y in t["y"]):
        ax.text(0.5, 0.5, "no data in this run", transform=ax.transAxes, ha="center", color="#888", fontsize=14)
    elif traces:
        # Explicit legend entries: a trace with no data still shows (marked as such).
        handles = []
        for i, t in enumerate(traces):
            warm = "warm start" in t["name"]
            empty = not any(y is not None for y in t["y"])
            handles.append(Patch(facecolor=_trace_color(t, i), alpha=0.6 if warm else 1.0, hatch="//" if warm else None,
                                 label=t["name"] + (" (no data)" if empty else "")))
        ax.legend(handles=handles, fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _wrap(text: str, width: int) -> str:
    words, lines, line = text.split(), [], ""
    for w in words:
        if len(line) + len(w) + 1 > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    return "\n".join(lines + [line])


# --------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------

CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 0; background: #fafafa; color: #222; }
header { background: #222; color: #eee; padding: 14px 28px; }
header h1 { margin: 0; font-size: 22px; }
header .meta { font-size: 13px; color: #bbb; margin-top: 4px; }
main { padding: 10px 28px 40px; max-width: 1400px; }
section { overflow-x: auto; min-width: 0; background: #fff; border: 1px solid #e3e3e3; border-radius: 6px; margin: 16px 0; padding: 10px 16px; }
h2 { font-size: 17px; margin: 6px 0 10px; }
table { border-collapse: collapse; font-size: 12px; }
th, td { padding: 3px 7px; border-bottom: 1px solid #eee; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; }
td.l, th.l { text-align: left; }
td.err { color: #b00; text-align: left; white-space: normal; max-width: 560px; }
td.bad { color: #b00; font-weight: 600; }
td.good { color: #070; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(620px, 1fr)); gap: 8px; }
.note { font-size: 13px; color: #555; }
code { background: #f3f3f3; padding: 1px 4px; border-radius: 3px; }
"""


def _fmt(x, spec=".2f", none="–"):
    x = _num(x)
    return none if x is None else format(x, spec)


def _stages(row: dict) -> str:
    """rdyn's CPU stages left to the interpreter, of all its CPU stages: '3 / 17'."""
    interpreted = row.get("cpu_stages_interpreted")
    if interpreted is None:
        return "–"
    return f"{interpreted} / {interpreted + (row.get('cpu_stages_compiled') or 0)}"


def _summary_table(record: dict) -> str:
    rows = []
    for s in record.get("summary", []):
        native = _fmt(s.get("native_pct"), ".0f")
        rows.append(
            f"<tr><td class=l>{html.escape(s['backend'])}</td><td class=l>{s['device']}/{s['mode']}/{s['dtype']}</td>"
            f"<td>{_fmt(s.get('geomean_speedup'))}{'x' if _num(s.get('geomean_speedup')) else ''}</td>"
            f"<td>{_fmt(s.get('min_speedup'))} ({html.escape(str(s.get('slowest_model') or '–'))})</td>"
            f"<td>{_fmt(s.get('median_compile_s'))}</td><td>{_fmt(s.get('median_warm_compile_s'), '.3f')}</td>"
            f"<td>{_fmt(s.get('startup_s'))}</td><td>{_fmt(s.get('overhead_us'), '.1f')}</td>"
            f"<td>{_fmt(s.get('median_peak_mem_mb'), '.0f')}</td>"
            f"<td>{s.get('correct', 0)}/{s.get('models', 0)}</td><td>{s.get('errors', 0)}</td><td>{native}</td>"
            f"<td>{_stages(s)}</td></tr>")
    return ("<table id=summary-table><tr><th class=l>backend</th><th class=l>config</th><th>geomean speedup</th>"
            "<th>slowest model</th><th>compile s (median)</th><th>warm s (median)</th><th>start-up s</th>"
            "<th>overhead µs</th><th>peak MB (median)</th><th>correct</th><th>errors</th><th>native %</th>"
            "<th>interpreted stages</th></tr>"
            + "".join(rows) + "</table>")


def _results_table(record: dict) -> str:
    multi = len(_configs(record["results"])) > 1
    rows = []
    for r in record["results"]:
        cfg = f"<td class=l>{r['device']}/{r['mode']}/{r['dtype']}</td>" if multi else ""
        head = f"<tr><td class=l>{html.escape(r['model'])}</td><td class=l>{html.escape(r['backend'])}</td>{cfg}"
        if r.get("status") != "ok":
            rows.append(head + f"<td class=l>{html.escape(r.get('status', '?'))}</td>"
                        f"<td class=err colspan=10>{html.escape(r.get('error') or '')}</td></tr>")
            continue
        correct = r.get("correct")
        stats = r.get("rdyn_stats") or {}
        fallback = stats.get("fallback_ops") or {}
        fb = ", ".join(f"{k}×{v}" for k, v in sorted(fallback.items(), key=lambda kv: -kv[1])[:6]) if fallback else ""
        rows.append(
            head + "<td class=l>ok</td>"
            f"<td>{_fmt(r.get('speedup'))}</td><td>{_fmt(r.get('time_ms'), '.3f')}</td>"
            f"<td>{_fmt(r.get('compile_s'))}</td><td>{_fmt(r.get('warm_compile_s'), '.3f')}</td>"
            f"<td>{_fmt(r.get('peak_mem_mb'), '.0f')}</td>"
            f"<td class={'good' if correct else 'bad'}>{'yes' if correct else 'NO'}</td>"
            f"<td>{_fmt(r.get('max_rel_err'), '.1e')}</td><td>{_fmt(r.get('native_pct'), '.0f')}</td>"
            f"<td>{_stages(r)}</td><td class=l>{html.escape(fb)}</td></tr>")
    cfg_head = "<th class=l>config</th>" if multi else ""
    return ("<table id=results-table><tr><th class=l>model</th><th class=l>backend</th>" + cfg_head +
            "<th class=l>status</th><th>speedup</th><th>ms/call</th><th>compile s</th><th>warm s</th><th>peak MB</th>"
            "<th>correct</th><th>max rel err</th><th>native %</th><th>interpreted stages</th>"
            "<th class=l>rdyn fallback ops</th></tr>"
            + "".join(rows) + "</table>")


def _fallback_table(record: dict) -> str:
    total: dict = {}
    for r in record["results"]:
        for op, n in ((r.get("rdyn_stats") or {}).get("fallback_ops") or {}).items():
            total[op] = total.get(op, 0) + (n or 0)
    if not total:
        return "<p class=note>No rdyn fallback ops recorded in this run.</p>"
    rows = "".join(f"<tr><td class=l><code>{html.escape(op)}</code></td><td>{n}</td></tr>"
                   for op, n in sorted(total.items(), key=lambda kv: -kv[1]))
    return f"<table id=fallback-table><tr><th class=l>op</th><th>nodes</th></tr>{rows}</table>"


def _meta(record: dict) -> str:
    m, v, o = record.get("machine", {}), record.get("versions", {}), record.get("options", {})
    commit = (record.get("commit") or "no commit")[:12] + (" (dirty)" if record.get("dirty") else "")
    vers = ", ".join(f"{k} {val}" for k, val in v.items() if val)
    return (f"{html.escape(suite_label(record))} · "
            f"run {html.escape(record.get('id', ''))} · {html.escape(record.get('timestamp', ''))} · commit "
            f"{html.escape(commit)} · {html.escape(str(m.get('cpu')))}, {m.get('cores')} cores · {html.escape(vers)} · "
            f"{o.get('rounds')} rounds × {o.get('target_ms')} ms · {_fmt(record.get('duration_s'), '.0f')} s"
            + (f" · other processes used {_fmt(m.get('foreign_load'), '.1f')} cores" if m.get("foreign_load") is not None
               else ""))


def _safe_json(data) -> str:
    text = json.dumps(data, allow_nan=False, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def run_summary(record: dict) -> dict:
    return {k: record.get(k) for k in ("id", "timestamp", "commit", "dirty", "duration_s", "summary", "options")}


def build_page(history: list[dict], specs: list[dict]) -> str:
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    latest = history[-1]
    data = {"latest": latest, "runs": [run_summary(h) for h in history],
            "charts": {s["id"]: s for s in specs}}
    figures = {}
    for spec in specs:
        figures[spec["id"]] = pio.to_html(plotly_figure(spec), full_html=False, include_plotlyjs=False,
                                          div_id=spec["id"], default_width="100%",
                                          config={"displaylogo": False, "responsive": True})
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in latest.get("notes", []))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>rdyn benchmarks: {html.escape(suite_label(latest))}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{CSS}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
<script type="application/json" id="rdyn-data">{_safe_json(data)}</script>
</head><body>
<header><h1>rdyn benchmarks: rdyn vs eager PyTorch vs Inductor
<span id=suite-name>({html.escape(suite_label(latest))})</span></h1>
<div class="meta">{_meta(latest)}</div></header>
<main>
<section><h2>Summary of the latest run: {html.escape(suite_label(latest))}</h2>{_summary_table(latest)}
<p class=note>Speedup: median per-call time of eager over the backend's, from interleaved rounds
(eager, inductor, rdyn, eager, …); geomean over the models that ran. Compile: wall time of the first call
(trace + compile + one run) in a worker with <code>TORCHINDUCTOR_FORCE_DISABLE_CACHES=1</code>, after a
start-up probe so one-time costs are not charged to the first model. Warm: the same first call in a new
process whose on-disk caches were filled by another process. Overhead: per-call time of <code>x + 1</code>
on one element minus eager's. Native %: share of ATen nodes rdyn ran in its own kernels or its GEMM/conv
library rather than an eager fallback. Interpreted stages: rdyn's CPU kernel stages left to its interpreter
(not compiled by its JIT), of all its CPU stages (<code>cpu_stages_interpreted</code> and
<code>cpu_stages_compiled</code> in <code>rdyn.stats()</code>), counted at each model's first compile.</p>
{('<ul class=note>' + notes + '</ul>') if notes else ''}</section>
<div class="grid">
<section>{figures['chart-speedup']}</section>
<section>{figures['chart-compile']}</section>
<section>{figures['chart-overhead']}</section>
<section>{figures['chart-memory']}</section>
<section>{figures['chart-coverage']}</section>
<section>{figures['chart-history-speedup']}</section>
<section>{figures['chart-history-compile']}</section>
</div>
<section><h2>Per model and backend</h2>{_results_table(latest)}</section>
<section><h2>rdyn eager-fallback ops (all models)</h2>{_fallback_table(latest)}</section>
<section><h2>Runs in the history ({len(history)})</h2>{_runs_table(history)}</section>
</main>
<script>
// Charts are drawn while the page is still being parsed: fit them to their final boxes.
window.addEventListener("load", function () {{
  document.querySelectorAll(".plotly-graph-div").forEach(function (d) {{ Plotly.Plots.resize(d); }});
}});
</script>
</body></html>
"""


def _runs_table(history: list[dict]) -> str:
    rows = []
    for h in reversed(history[-50:]):
        cells = []
        for b in BACKEND_ORDER[1:]:
            s = next((s for s in h.get("summary", []) if s["backend"] == b and s["device"] == "cpu"
                      and s["mode"] == "inference"), None)
            cells.append(f"<td>{_fmt(s.get('geomean_speedup')) if s else '–'}</td>"
                         f"<td>{_fmt(s.get('median_compile_s')) if s else '–'}</td>")
        rows.append(f"<tr><td class=l>{html.escape(run_label(h))}</td><td class=l>{html.escape(suite_name(h))}</td>"
                    f"<td class=l>"
                    f"{html.escape(' '.join(h.get('options', {}).get('argv', [])) or '(default)')}</td>{''.join(cells)}"
                    f"<td>{_fmt(h.get('duration_s'), '.0f')}</td></tr>")
    return ("<table id=runs-table><tr><th class=l>run</th><th class=l>suite</th><th class=l>options</th>"
            "<th>inductor geomean</th>"
            "<th>inductor compile s</th><th>rdyn geomean</th><th>rdyn compile s</th><th>duration s</th></tr>"
            + "".join(rows) + "</table>")


PNG_NAMES = {
    "chart-speedup": "speedup.png", "chart-compile": "compile_time.png", "chart-overhead": "overhead.png",
    "chart-memory": "memory.png", "chart-coverage": "coverage.png", "chart-history-speedup": "history_speedup.png",
    "chart-history-compile": "history_compile.png",
}


def build(history_path: Path, out_dir: Path, pngs: bool = True) -> Path:
    """Write dashboard.html (and the PNGs) into ``out_dir``; return the page's path."""
    history = json.loads(Path(history_path).read_text())
    if not history:
        raise ValueError(f"{history_path} holds no runs")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    specs = chart_specs(history)
    page = out_dir / "dashboard.html"
    tmp = page.with_suffix(".tmp")
    tmp.write_text(build_page(history, specs), encoding="utf-8")
    tmp.replace(page)
    if pngs:
        try:
            for spec in specs:
                png_chart(spec, out_dir / PNG_NAMES[spec["id"]])
        except ImportError as exc:
            print(f"[dashboard] PNG charts skipped: {exc} (pip install matplotlib)", file=sys.stderr)
    return page


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Build the rdyn benchmark dashboard from the JSON history.")
    p.add_argument("--history", default=str(ROOT / "build" / "bench" / "history.json"))
    p.add_argument("--out", default=None, help="output folder (default: the history's folder)")
    p.add_argument("--no-png", action="store_true", help="only the HTML page")
    p.add_argument("--publish", metavar="DIR", help="also copy the PNG charts into DIR (e.g. benches/img for a README)")
    args = p.parse_args(argv)
    history = Path(args.history)
    out = Path(args.out) if args.out else history.parent
    page = build(history, out, pngs=not args.no_png)
    print(f"dashboard: {page}")
    if args.publish:
        dest = Path(args.publish)
        dest.mkdir(parents=True, exist_ok=True)
        for name in PNG_NAMES.values():
            if (out / name).exists():
                shutil.copy(out / name, dest / name)
        print(f"PNG charts copied to {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
