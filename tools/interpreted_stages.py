#!/usr/bin/env python3
"""Compile every model of a benchmark suite with rdyn (no timing) and list
what the CPU JIT leaves to the interpreter: per model, the stages compiled
and interpreted for inference and for a training step, and the profile
labels of the interpreted kernels.

    .venv/bin/python tools/interpreted_stages.py                 # the wide corpus
    .venv/bin/python tools/interpreted_stages.py --models rotary,llama --no-train

Each model runs in its own process, so one that fails costs only itself.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WORKER = r"""
import json, sys, torch, rdyn
sys.path.insert(0, sys.argv[1])
import models
torch.manual_seed(0)
spec = models.MODELS[sys.argv[2]]
train = sys.argv[3] == "1"
model, inputs = spec.build()
model = model.train(train)
torch._dynamo.reset()
rdyn.reset_stats()
compiled = torch.compile(model, backend="rdyn")
if train:
    out = compiled(*inputs)
    leaves = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
    sum(t.float().sum() for t in leaves).backward()
else:
    with torch.no_grad():
        compiled(*inputs)
s = rdyn.stats()
interp = [row[0] for row in s.get("profile", []) if row[0].startswith("kernel") and " jit" not in row[0]]
print(json.dumps({"compiled": s["cpu_stages_compiled"], "interpreted": s["cpu_stages_interpreted"],
                  "fallback": s["nodes_fallback"], "kernels": interp[:8]}))
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="wide")
    p.add_argument("--models", default="", help="comma-separated names (default: the suite's)")
    p.add_argument("--no-train", action="store_true", help="inference only")
    p.add_argument("--timeout", type=int, default=600, help="seconds per model and mode")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT / "benches"))
    import models  # noqa: E402

    names = [n for n in args.models.split(",") if n] or models.SUITES[args.suite]
    env = dict(os.environ, RDYN_PROFILE="1")
    totals = {"compiled": 0, "interpreted": 0}
    for name in names:
        spec = models.MODELS[name]
        for train in ([False] if args.no_train or not spec.train else [False, True]):
            cmd = [sys.executable, "-c", WORKER, str(ROOT / "benches"), name, "1" if train else "0"]
            try:
                run = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
                row = json.loads(run.stdout.strip().splitlines()[-1])
            except Exception as e:  # noqa: BLE001 - one model's failure is reported, not fatal
                print(f"{name:24} {'train' if train else 'infer'}  failed: {str(e)[:100]}", flush=True)
                continue
            totals["compiled"] += row["compiled"]
            totals["interpreted"] += row["interpreted"]
            print(f"{name:24} {'train' if train else 'infer'}  interpreted {row['interpreted']:4} of "
                  f"{row['compiled'] + row['interpreted']:5}  fallback nodes {row['fallback']}", flush=True)
            for k in row["kernels"]:
                print(f"    {k[:200]}", flush=True)
    print(f"total: interpreted {totals['interpreted']} of {totals['compiled'] + totals['interpreted']} stages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
