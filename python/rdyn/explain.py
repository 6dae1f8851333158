"""`rdyn.explain`: what rdyn makes of a function, without running its kernels."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
from torch._dynamo.backends.common import aot_autograd

try:
    from torch.fx.experimental.symbolic_shapes import optimization_hint
except ImportError:  # torch < 2.13 names it size_hint
    from torch.fx.experimental.symbolic_shapes import size_hint as optimization_hint

from . import _rdyn
from ._import import Unsupported, import_graph, on_device
from ._runner import GraphRunner
from .config import EXPLAIN_DEVICES, PLANNED_DEVICES, Options


@dataclass
class Kernel:
    name: str
    device: str
    source: str


@dataclass
class Report:
    graphs: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    fallback_ops: dict = field(default_factory=dict)
    ir: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def __str__(self):
        lines = [f"rdyn: {len(self.graphs)} graph(s), {len(self.kernels)} kernel(s)"]
        if self.fallback_ops:
            lines.append("eager fallbacks: " + ", ".join(f"{op} x{n}" for op, n in sorted(self.fallback_ops.items())))
        else:
            lines.append("eager fallbacks: none")
        lines.extend(self.notes)
        for i, g in enumerate(self.graphs):
            lines.append(f"--- graph {i} (ATen) ---")
            lines.append(g.rstrip())
        for k in self.kernels:
            lines.append(f"--- {k.name} on {k.device} ---")
            lines.append(k.source.rstrip())
        return "\n".join(lines)


def _hinted(x):
    """`x` with its symbolic sizes replaced by the example's: describing a
    graph reads sizes as integers, which under dynamic shapes would guard
    them to the example's values (and fail for `mark_dynamic` sizes)."""
    if isinstance(x, torch.SymInt):
        return optimization_hint(x)
    if not isinstance(x, torch.Tensor) or not any(isinstance(s, torch.SymInt) for s in (*x.shape, *x.stride())):
        return x
    mode = getattr(x, "fake_mode", None) or contextlib.nullcontext()
    with mode:
        return torch.empty_strided(
            [optimization_hint(s) for s in x.shape], [optimization_hint(s) for s in x.stride()], dtype=x.dtype, device=x.device
        )


def _describe_into(report: Report, gm, inputs, device: str = "cpu") -> None:
    try:
        data, info = import_graph(gm)
    except Unsupported as e:
        report.notes.append(f"a graph runs eagerly: {e}")
        return
    if device == "cuda":
        data = on_device(data, "cuda:0")
    # Index checks and GEMMs as the environment's defaults would make them.
    options = Options.parse({"device": "cpu"})
    graph = _rdyn.CompiledGraph(data, GraphRunner(info), device, options.index_checks, options.cuda_gemm)
    try:
        desc = graph.describe([_hinted(x) for x in inputs] + info["constants"])
    except NotImplementedError as e:
        report.notes.append(f"a graph runs eagerly on {device}: {e}")
        return
    index = len(report.graphs)
    report.graphs.append(desc["graph"])
    report.ir.append(desc.get("ir", ""))
    for name, dev, source in desc["kernels"]:
        report.kernels.append(Kernel(name if index == 0 else f"g{index}.{name}", dev, source))
    for op, n in desc.get("fallback_ops", {}).items():
        report.fallback_ops[op] = report.fallback_ops.get(op, 0) + n


def describe_graph(gm, example_inputs, device: str = "cpu") -> Report:
    """Like `explain`, for an ATen FX graph (e.g. from ``make_fx`` with
    `rdyn.DECOMPOSITIONS`): builds its kernels without running anything."""
    report = Report()
    _describe_into(report, gm, example_inputs, device)
    return report


def explain(fn, *example_inputs, device=None) -> Report:
    """Compile `fn` for `example_inputs` and report the graphs, the kernels
    (with their generated source) and the eager fallbacks. The function runs
    once eagerly to trace it; rdyn's kernels are built but not run."""
    device = device or "cpu"
    if device not in EXPLAIN_DEVICES:
        if device in PLANNED_DEVICES:
            raise ValueError(f"rdyn.explain: device={device!r} is not available in this build yet; use device='cpu'")
        raise ValueError(f"rdyn.explain: unknown device {device!r}; use one of {list(EXPLAIN_DEVICES)}")
    from .backend import DECOMPOSITIONS

    report = Report()

    def fw(gm, inputs):
        _describe_into(report, gm, inputs, device)
        return gm

    backend = aot_autograd(fw_compiler=fw, decompositions=DECOMPOSITIONS)
    torch._dynamo.reset()
    try:
        torch.compile(fn, backend=backend)(*example_inputs)
    finally:
        torch._dynamo.reset()
    return report
