"""Memory bandwidth of rdyn's CUDA kernels against a device-to-device copy.

    .venv/bin/python benches/cuda_bandwidth.py [--size-mb 256] [--rows 4096] [--backends rdyn,inductor,eager]

For each case: the bytes a kernel must move (inputs read once, outputs
written once), the median time over CUDA-event-timed repetitions, GB/s, and
that as a percentage of the measured copy bandwidth (``torch.Tensor.copy_``
between two device buffers). Also the per-call overhead of a one-kernel
graph on a tiny tensor. Needs an NVIDIA GPU; exits with a message without one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch


def timed(fn, *args, reps: int = 50) -> float:
    """Median seconds per call, CUDA events, after warm-up."""
    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def cases(size_mb: int, rows: int):
    n = size_mb * (1 << 20) // 4
    x, y, z = (torch.randn(n, device="cuda") for _ in range(3))
    cols = n // rows
    m = torch.randn(rows, cols, device="cuda")
    w, b = torch.randn(cols, device="cuda"), torch.randn(cols, device="cuda")
    yield "pointwise (x*2+y).relu()*z", lambda x, y, z: (x * 2 + y).relu() * z, (x, y, z), 4 * n * 4
    yield "gelu(x)", torch.nn.functional.gelu, (x,), 2 * n * 4
    yield f"softmax rows {rows}x{cols}", lambda t: torch.softmax(t, -1), (m,), 2 * m.numel() * 4
    yield (
        f"layer_norm rows {rows}x{cols}",
        lambda t, w, b: torch.nn.functional.layer_norm(t, (cols,), w, b),
        (m, w, b),
        2 * m.numel() * 4,
    )
    yield "sum rows", lambda t: t.sum(-1), (m,), m.numel() * 4


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=256, help="size of each pointwise operand")
    parser.add_argument("--rows", type=int, default=4096, help="rows of the softmax/layer-norm matrix")
    parser.add_argument("--backends", default="rdyn,inductor,eager")
    parser.add_argument("--json", type=Path, default=Path("build/bench/cuda_bandwidth.json"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("cuda_bandwidth: no CUDA GPU here; nothing to measure", file=sys.stderr)
        return 0
    import rdyn  # noqa: F401  (registers the backend)

    backends = args.backends.split(",")
    n = args.size_mb * (1 << 20) // 4
    src, dst = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
    copy_s = timed(dst.copy_, src)
    copy_gbs = 2 * n * 4 / copy_s / 1e9
    print(f"{torch.cuda.get_device_name()}: device-to-device copy {copy_gbs:.0f} GB/s")
    rows = []
    print(f"{'kernel':36} {'backend':9} {'MB':>8} {'us':>9} {'GB/s':>8} {'% copy':>7}")
    for name, fn, inputs, nbytes in cases(args.size_mb, args.rows):
        for backend in backends:
            f = fn if backend == "eager" else torch.compile(fn, backend=backend)
            s = timed(f, *inputs)
            gbs = nbytes / s / 1e9
            rows.append({"kernel": name, "backend": backend, "bytes": nbytes, "seconds": s, "gbs": gbs,
                         "percent_of_copy": 100 * gbs / copy_gbs})
            print(f"{name:36} {backend:9} {nbytes / 1e6:8.1f} {s * 1e6:9.1f} {gbs:8.0f} {100 * gbs / copy_gbs:6.1f}%")
        torch._dynamo.reset()
    tiny = torch.randn(16, device="cuda")
    overhead = {}
    for backend in backends:
        f = (lambda t: t + 1) if backend == "eager" else torch.compile(lambda t: t + 1, backend=backend)
        overhead[backend] = timed(f, tiny, reps=500)
        print(f"per-call overhead, one-kernel graph, {backend}: {overhead[backend] * 1e6:.1f} us")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "copy_gbs": copy_gbs, "rows": rows,
                                     "overhead_seconds": overhead}, indent=1))
    print(f"written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
