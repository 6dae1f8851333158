"""Options (``torch.compile(..., options={...})`` and environment) and logging.

Environment:
  RDYN_LOG=graph,ir,kernels,guards   what to print (``all`` for everything)
  RDYN_STRICT=1                      a compile failure raises instead of
                                     falling back to eager
  RDYN_DEVICE=cpu|wgpu|cuda-sim      default device for CPU tensors (wgpu: any
                                     GPU through Vulkan/Metal/DX12; CPU tensors
                                     in and out; cuda-sim: the CUDA backend's
                                     PTX run by rdyn's PTX simulator, slowly,
                                     to test it without a GPU). CUDA tensors
                                     always compile for CUDA.
  RDYN_JIT=0                         interpret every CPU stage (no Cranelift
                                     machine code)
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

DEVICES = ("cpu", "wgpu", "cuda-sim")
#: Devices `rdyn.explain` can generate code for (CUDA needs no GPU for that).
EXPLAIN_DEVICES = ("cpu", "wgpu", "cuda")
PLANNED_DEVICES: tuple = ()


@dataclass(frozen=True)
class Options:
    device: str = "cpu"
    strict: bool = False

    @staticmethod
    def parse(options, extra=None) -> "Options":
        merged = dict(options or {})
        merged.update(extra or {})
        known = {"device", "strict"}
        unknown = sorted(set(merged) - known)
        if unknown:
            raise ValueError(
                f"rdyn: unknown option(s) {unknown}; known options are {sorted(known)}"
            )
        device = merged.get("device", os.environ.get("RDYN_DEVICE", "cpu"))
        if device not in DEVICES:
            if device in PLANNED_DEVICES:
                raise ValueError(
                    f"rdyn: option device={device!r} is not available in this build yet; use device='cpu'"
                )
            raise ValueError(f"rdyn: option device={device!r} is not a device rdyn knows; use one of {list(DEVICES)}")
        strict = merged.get("strict", False)
        if not isinstance(strict, bool):
            raise ValueError(f"rdyn: option strict must be True or False, got {strict!r}")
        return Options(device=device, strict=strict)


_TOPICS: frozenset = frozenset()


def refresh() -> None:
    """Re-read RDYN_LOG (it is read once at import)."""
    global _TOPICS
    _TOPICS = frozenset(t.strip() for t in os.environ.get("RDYN_LOG", "").split(",") if t.strip())


refresh()


def log_enabled(topic: str) -> bool:
    return topic in _TOPICS or "all" in _TOPICS


def log(topic: str, text: str) -> None:
    print(f"[rdyn {topic}]\n{text.rstrip()}", file=sys.stderr)
