"""Options (``torch.compile(..., options={...})`` and environment) and logging.

Environment:
  RDYN_LOG=graph,ir,kernels,guards   what to print (``all`` for everything;
                                     also ``options``: what a `mode` leaves
                                     out, ``cache``: graph cache errors)
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
  RDYN_INDEX_CHECKS=device|sync      how CUDA kernels report an index out of
                                     range (the `index_checks` option)
  RDYN_CUDA_GEMM=cublas|aten         how CUDA GEMMs run (the `cuda_gemm` option)
  RDYN_ATTENTION=auto|decompose|aten how CPU attention (`scaled_dot_product_attention`)
                                     runs: ATen's flash kernels as library calls on
                                     the CPU device and rdyn's decomposition on the
                                     others (auto), or one of them everywhere
  RDYN_CONV_BACKWARD=auto|aten       CPU gradients of 1x1 and depthwise
                                     convolutions from rdyn's GEMMs and kernels
                                     (auto), or ATen's `convolution_backward`
  RDYN_SPLIT_REDUCE=0                CPU column reductions stay whole (not split
                                     into row blocks and a combine)
  RDYN_HOST_PARTIALS=0               their block partials stay out of the row
                                     kernels
  RDYN_RELAYOUT=0                    CPU stages whose loads cross their store's
                                     layout compute in the store's (no copy after)
  RDYN_CONV_LAYOUT=0                 a training forward's saved activations
                                     keep eager's layout, and CPU convolution
                                     backwards run in it (all three read at
                                     each compile, by `runtime/src/device.rs`
                                     and `backend.py`)
  RDYN_AUTOGRAD=aot                  training graphs run through AOTAutograd's
                                     runtime, not rdyn's leaner one
                                     (`_autograd.py`; read at each compile)
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

DEVICES = ("cpu", "wgpu", "cuda-sim")
#: Devices `rdyn.explain` can generate code for (CUDA needs no GPU for that).
EXPLAIN_DEVICES = ("cpu", "wgpu", "cuda")
PLANNED_DEVICES: tuple = ()
INDEX_CHECKS = ("device", "sync")
CUDA_GEMMS = ("cublas", "aten")
#: torch.compile's modes, and what rdyn leaves out of each for now. torch
#: passes ``mode=`` to a custom backend (all but "default"); it cannot be
#: given with ``options=``, so ``options={"mode": ...}`` is accepted too.
MODES = {
    "default": "",
    "reduce-overhead": "rdyn does not capture CUDA graphs yet",
    "max-autotune": "rdyn has no autotuning and does not capture CUDA graphs yet",
    "max-autotune-no-cudagraphs": "rdyn has no autotuning",
}
_modes_noted: set = set()


@dataclass(frozen=True)
class Options:
    device: str = "cpu"
    strict: bool = False
    #: How CUDA kernels (and the simulator's) report an index out of range:
    #: "device" traps in the kernel, as eager's and Inductor's device-side
    #: asserts do (the error surfaces at the next synchronisation and the
    #: CUDA context is then unusable; no call waits for the GPU); "sync"
    #: reads an error flag back after each call of a graph that can set it
    #: and raises IndexError there (also for integer division by zero).
    index_checks: str = "device"
    #: How mm, bmm and addmm run on CUDA: "cublas" as cuBLAS calls rdyn
    #: plans itself (the bias and any epilogue fused into the kernels that
    #: read the product), "aten" as ATen library calls.
    cuda_gemm: str = "cublas"
    #: torch.compile's mode (see `MODES`): accepted, compiled as "default".
    mode: str = "default"
    #: torch.compile's ``name`` for the compiled region, if given: accepted
    #: (rdyn's logs name graphs ``g0``, ``g1``, ...).
    name: str | None = None

    @staticmethod
    def parse(options, extra=None) -> "Options":
        merged = dict(options or {})
        merged.update(extra or {})
        known = {"device", "strict", "index_checks", "cuda_gemm", "mode", "name"}
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
        checks = merged.get("index_checks", os.environ.get("RDYN_INDEX_CHECKS", "device"))
        if checks not in INDEX_CHECKS:
            raise ValueError(f"rdyn: option index_checks={checks!r} is not one of {list(INDEX_CHECKS)}")
        gemm = merged.get("cuda_gemm", os.environ.get("RDYN_CUDA_GEMM", "cublas"))
        if gemm not in CUDA_GEMMS:
            raise ValueError(f"rdyn: option cuda_gemm={gemm!r} is not one of {list(CUDA_GEMMS)}")
        mode = _mode(merged.get("mode"))
        name = merged.get("name")
        if name is not None and not isinstance(name, str):
            raise ValueError(f"rdyn: option name must be a string, got {name!r}")
        return Options(device=device, strict=strict, index_checks=checks, cuda_gemm=gemm, mode=mode, name=name)


def _mode(mode) -> str:
    """A torch.compile mode, checked; what rdyn leaves out of it is logged
    once per mode (``RDYN_LOG=options``), not warned at every graph."""
    mode = "default" if mode is None else mode
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"rdyn: mode={mode!r} is not a torch.compile mode; use one of {list(MODES)}")
    if MODES[mode] and mode not in _modes_noted and log_enabled("options"):
        _modes_noted.add(mode)
        log("options", f"mode={mode!r}: {MODES[mode]}; compiling as mode='default'")
    return mode


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
