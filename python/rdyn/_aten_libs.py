"""Share ATen's OpenMP team and BLAS with rdyn's CPU kernels.

PyTorch's CPU wheels parallelise ATen kernels with OpenMP (libgomp), whose
threads spin for a while after each parallel region. rdyn's kernels run
between ATen calls (convolutions, attention, fallbacks); on a separate pool
they would compete for the cores with those spinning threads. Handing rdyn
libgomp's entry points makes both share one team. ``RDYN_OPENMP=0`` keeps
rdyn on its own rayon pool.

The wheels also link a tuned BLAS (MKL on x86-64) into ``libtorch_cpu``;
its Fortran ``sgemm_``/``dgemm_`` (and MKL's ``?gemm_batch_`` for batched
products) run rdyn's matrix products when the operand layouts allow.
Where both BLAS and the ``gemm`` crate can run a product, the faster of the
two on this CPU runs it, timed on the first call of each shape
(``codegen-cpu/src/gemm/choice.rs``; ``rdyn._rdyn.gemm_choices()`` lists the
shapes and their library). ``RDYN_BLAS=1`` gives BLAS every product its
rules allow, untimed (reproducible bit for bit across processes);
``RDYN_BLAS=0`` keeps them all on the crate.
"""

from __future__ import annotations

import ctypes
import os

import torch

from . import _rdyn


def _loaded(name: str) -> str | None:
    """The path of a loaded shared library whose file name contains `name`."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if name in os.path.basename(path) and os.path.exists(path):
                    return path
    except OSError:
        return None
    return None


def _addresses(path: str | None, names: tuple[str, ...]) -> tuple[int, ...] | None:
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
        return tuple(ctypes.cast(getattr(lib, n), ctypes.c_void_p).value or 0 for n in names)
    except (OSError, AttributeError):
        return None


def use_aten_openmp() -> bool:
    """Share ATen's OpenMP team when torch runs on libgomp; returns whether
    rdyn's kernels now run on it."""
    if os.environ.get("RDYN_OPENMP", "") == "0" or "OpenMP" not in torch.__config__.parallel_info():
        return False
    found = _addresses(_loaded("libgomp"), ("GOMP_parallel", "omp_get_max_threads", "omp_get_thread_num"))
    if found is not None:
        _rdyn.use_openmp(*found)
    return _rdyn.thread_pool() == "openmp"


def use_aten_blas() -> bool:
    """Run matrix products through the BLAS in libtorch_cpu; returns whether
    one was found."""
    setting = os.environ.get("RDYN_BLAS", "")
    if setting == "0":
        return False
    _rdyn.measure_gemms(setting != "1")
    lib = _loaded("libtorch_cpu")
    found = _addresses(lib, ("sgemm_", "dgemm_"))
    # MKL's batched routines run a batch of products (attention heads) in one call.
    batched = _addresses(lib, ("sgemm_batch_", "dgemm_batch_")) or (0, 0)
    return found is not None and _rdyn.use_blas(*found, *batched)
