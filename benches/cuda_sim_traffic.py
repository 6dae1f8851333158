"""Global memory traffic of rdyn's CUDA kernels, counted by the PTX simulator.

    .venv/bin/python benches/cuda_sim_traffic.py [--rows 8] [--cols 16384]

No GPU needed: the kernels of `cuda_bandwidth.py`'s cases are generated for
CUDA and run by the simulator (`cuda-sim`) on CPU tensors, which counts every
byte a global load or store moves and every instruction executed. For each
case: bytes moved per byte the kernel must move (inputs read once, outputs
written once; 1.00 is the minimum) and instructions per output element. A
bandwidth-bound kernel's speed on a GPU is at best its minimum bytes over
the copy bandwidth; extra traffic divides it (L2 can absorb some re-reads,
the simulator counts them all: layer norm's weight and bias, re-read for
every row, come to 2 of its bytes per element). The cases have the GPU
benchmark's rows (16384 columns: 1024-thread blocks), fewer of them, to
simulate fast; with fewer than about 32 rows the scheduler splits softmax
and layer norm into several kernels.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import rdyn


def cases(rows: int, cols: int):
    n = rows * cols
    x, y, z = (torch.randn(n) for _ in range(3))
    m = torch.randn(rows, cols)
    w, b = torch.randn(cols), torch.randn(cols)
    yield "pointwise (x*2+y).relu()*z", lambda x, y, z: (x * 2 + y).relu() * z, (x, y, z), 4 * n * 4
    yield "gelu(x)", torch.nn.functional.gelu, (x,), 2 * n * 4
    yield f"softmax rows {rows}x{cols}", lambda t: torch.softmax(t, -1), (m,), 2 * n * 4
    yield (
        f"layer_norm rows {rows}x{cols}",
        lambda t, w, b: torch.nn.functional.layer_norm(t, (cols,), w, b),
        (m, w, b),
        (2 * n + 2 * cols) * 4,
    )
    yield "sum rows", lambda t: t.sum(-1), (m,), (n + rows) * 4
    yield "sum columns", lambda t: t.sum(0), (m,), (n + cols) * 4


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--cols", type=int, default=16384)
    parser.add_argument("--json", type=Path, default=Path("build/bench/cuda_sim_traffic.json"))
    args = parser.parse_args()
    results = []
    print(f"{'kernel':32} {'bytes moved / minimum':>22} {'instructions / element':>23}")
    for name, fn, inputs, minimum in cases(args.rows, args.cols):
        compiled = torch.compile(fn, backend="rdyn", options={"device": "cuda-sim", "strict": True})
        compiled(*inputs)  # compile
        rdyn.reset_stats()
        out = compiled(*inputs)
        stats = rdyn.stats()
        torch.testing.assert_close(out, fn(*inputs), rtol=1e-4, atol=1e-4)
        moved = stats["cuda_sim_bytes_loaded"] + stats["cuda_sim_bytes_stored"]
        per_element = stats["cuda_sim_instructions"] / max(out.numel(), inputs[0].numel())
        print(f"{name:32} {moved / minimum:22.2f} {per_element:23.1f}")
        results.append(
            {
                "kernel": name,
                "bytes_loaded": stats["cuda_sim_bytes_loaded"],
                "bytes_stored": stats["cuda_sim_bytes_stored"],
                "minimum_bytes": minimum,
                "instructions": stats["cuda_sim_instructions"],
            }
        )
        torch._dynamo.reset()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": args.rows, "cols": args.cols, "results": results}, indent=1))
    print(f"written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
