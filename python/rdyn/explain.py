"""`rdyn.explain`: what rdyn makes of a function, without running its kernels."""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition

try:
    from torch.fx.experimental.symbolic_shapes import optimization_hint
except ImportError:  # torch < 2.13 names it size_hint
    from torch.fx.experimental.symbolic_shapes import size_hint as optimization_hint

from . import _rdyn
from ._import import Unsupported, import_graph, on_device
from ._rewrite import rewrite_captured
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
    #: Each graph's part: "forward", "backward" or "inference" ("" from
    #: `describe_graph`), and its eager fallbacks (op -> count).
    kinds: list = field(default_factory=list)
    graph_fallbacks: list = field(default_factory=list)
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
            lines.append(self._header(i))
            lines.append(g.rstrip())
        for k in self.kernels:
            lines.append(f"--- {k.name} on {k.device} ---")
            lines.append(k.source.rstrip())
        return "\n".join(lines)

    def _header(self, i: int) -> str:
        """A graph's title: its part and its own eager fallbacks, so a
        backward's fallbacks are told from its forward's."""
        title = "ATen"
        if i < len(self.kinds) and self.kinds[i]:
            title += f", {self.kinds[i]}"
        ops = self.graph_fallbacks[i] if i < len(self.graph_fallbacks) else {}
        if ops:
            title += "; eager: " + ", ".join(f"{op} x{n}" for op, n in sorted(ops.items()))
        return f"--- graph {i} ({title}) ---"


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


def _describe_into(report: Report, gm, inputs, device: str = "cpu", kind: str = "") -> None:
    what = f"a {kind} graph" if kind else "a graph"
    try:
        data, info = import_graph(gm)
    except Unsupported as e:
        report.notes.append(f"{what} runs eagerly: {e}")
        return
    if device == "cuda":
        data = on_device(data, "cuda:0")
    # Index checks and GEMMs as the environment's defaults would make them.
    options = Options.parse({"device": "cpu"})
    graph = _rdyn.CompiledGraph(data, GraphRunner(info), device, options.index_checks, options.cuda_gemm)
    try:
        desc = graph.describe([_hinted(x) for x in inputs] + info["constants"])
    except NotImplementedError as e:
        report.notes.append(f"{what} runs eagerly on {device}: {e}")
        return
    index = len(report.graphs)
    report.graphs.append(desc["graph"])
    report.kinds.append(kind)
    report.graph_fallbacks.append(dict(desc.get("fallback_ops", {})))
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
    """Compile `fn` for `example_inputs` and report the graphs (forward,
    backward or inference), the kernels (with their generated source) and
    the eager fallbacks. The function runs once eagerly to trace it; rdyn's
    kernels are built but not run. A backward graph is reported whether or
    not `fn` runs the backward.

    What the process compiled before is left alone: `fn` is compiled in a
    region of Dynamo's cache of its own, without resetting Dynamo (which
    would discard every compiled model). The frames Dynamo gives up on while
    explaining are noted in the report, not counted in `rdyn.stats()`."""
    device = _explain_device(device)
    from .backend import _frames_given_up, _frames_not_counted

    report = Report()
    frames, before = _frames_given_up()
    with _backward_with_forward():
        _compile_apart(fn, _explain_backend(report, device))(*example_inputs)
    given_up = _frames_given_up()[1] - before
    if given_up > 0:
        report.notes.append(f"Dynamo gave up on {given_up} frame(s): they run eagerly")
        _frames_not_counted(frames, given_up)
    return report


def _explain_device(device) -> str:
    device = device or "cpu"
    if device not in EXPLAIN_DEVICES:
        if device in PLANNED_DEVICES:
            raise ValueError(f"rdyn.explain: device={device!r} is not available in this build yet; use device='cpu'")
        raise ValueError(f"rdyn.explain: unknown device {device!r}; use one of {list(EXPLAIN_DEVICES)}")
    return device


def _explain_backend(report: Report, device: str):
    """AOTAutograd as rdyn's backend configures it (the same decompositions
    and partitioner, so the same graphs), describing each graph into
    `report` and running it as it is."""
    from .backend import decompositions

    def describer(kind):
        def compile_(gm, inputs):
            _describe_into(report, gm, inputs, device, kind)
            return make_boxed_func(gm)

        return compile_

    backend = aot_autograd(
        fw_compiler=describer("forward"),
        bw_compiler=describer("backward"),
        inference_compiler=describer("inference"),
        decompositions=decompositions("cpu" if device == "cpu" else "gpu"),
        partition_fn=min_cut_rematerialization_partition,
    )
    return lambda gm, inputs: backend(rewrite_captured(gm), inputs)


def _backward_with_forward():
    """Backward graphs compiled with their forward, not at a first backward
    call that the explained function may never make."""
    import torch._functorch.config as functorch_config

    if not hasattr(functorch_config, "force_non_lazy_backward_lowering"):
        return contextlib.nullcontext()
    return functorch_config.patch(force_non_lazy_backward_lowering=True)


def _compile_apart(fn, backend):
    """``torch.compile(fn)`` in a region of Dynamo's cache of its own
    (``isolate_recompiles``): its entries do not count toward the recompile
    limit of the code the process compiled before, nor that code's toward
    it. A torch without it shares the region (still no reset)."""
    if "isolate_recompiles" in inspect.signature(torch.compile).parameters:
        return torch.compile(fn, backend=backend, isolate_recompiles=True)
    return torch.compile(fn, backend=backend)
