"""rdyn: a `torch.compile` backend that generates its own fused kernels.

    model = torch.compile(model, backend="rdyn")

`stats()` counts what was lowered natively and what fell back to eager;
`explain(fn, *args)` shows the kernels a call produces.
"""

from __future__ import annotations

from . import _rdyn
from ._aten_libs import use_aten_blas, use_aten_openmp
from ._errors import InputError, InternalError, KernelCheckError, RdynError, UnavailableError, UnsupportedError
from .backend import DECOMPOSITIONS, CompileError, compile_graph, rdyn_backend, _frames_eager, _frames_given_up, _py_stats
from .config import Options
from .explain import Report, describe_graph, explain

__version__ = _rdyn.__version__

use_aten_openmp()
use_aten_blas()


def stats() -> dict:
    """Counters since the last `reset_stats()`: graphs, specializations,
    kernels, native / library (extern) / eager-fallback nodes, guard hits and
    misses, compile seconds (rdyn's share, and `compile_wall_seconds`: what
    the caller waited, AOTAutograd included), frames Dynamo gave up on and
    runs eagerly (`frames_eager`), and fallback ops by name."""
    out = dict(_rdyn.stats())
    out["graphs_failed"] = _py_stats["graphs_failed"]
    out["graphs_unsupported"] = _py_stats["graphs_unsupported"]
    out["nodes_fallback"] += _py_stats["nodes_fallback"]
    ops = dict(out["fallback_ops"])
    for op, n in _py_stats["fallback_ops"].items():
        ops[op] = ops.get(op, 0) + n
    out["fallback_ops"] = ops
    # rdyn's lowering outside the timed compile steps ran at a first call:
    # the caller waited for it too.
    lowering_at_calls = max(0.0, out["compile_seconds"] - _py_stats["lowering_in_wall_seconds"])
    out["compile_wall_seconds"] = _py_stats["compile_wall_seconds"] + lowering_at_calls
    out["compile_seconds"] = out["compile_seconds"] + _py_stats["python_compile_seconds"]
    out["frames_eager"] = _frames_eager()
    out["cache_hits"] = _py_stats["cache_hits"]
    out["cache_misses"] = _py_stats["cache_misses"]
    return out


def wgpu_adapter() -> str:
    """The GPU adapter the wgpu device uses (a software renderer such as
    lavapipe is reported as such); raises if none is available."""
    return _rdyn.wgpu_adapter()


def reset_stats() -> None:
    _rdyn.reset_stats()
    _py_stats["graphs_failed"] = 0
    _py_stats["graphs_unsupported"] = 0
    _py_stats["nodes_fallback"] = 0
    _py_stats["fallback_ops"] = {}
    _py_stats["python_compile_seconds"] = 0.0
    _py_stats["cache_hits"] = 0
    _py_stats["cache_misses"] = 0
    _py_stats["compile_wall_seconds"] = 0.0
    _py_stats["lowering_in_wall_seconds"] = 0.0
    _py_stats["frames_eager_base"] = _frames_given_up()


__all__ = [
    "DECOMPOSITIONS",
    "CompileError",
    "InputError",
    "InternalError",
    "KernelCheckError",
    "RdynError",
    "UnavailableError",
    "UnsupportedError",
    "Options",
    "Report",
    "compile_graph",
    "describe_graph",
    "explain",
    "rdyn_backend",
    "reset_stats",
    "stats",
    "wgpu_adapter",
]
