#!/usr/bin/env python3
"""Attention alone, per shape: ATen's CPU flash kernel (eager) against
rdyn (and optionally Inductor) on ``F.scaled_dot_product_attention``,
inference (or, ``--train``, forward and backward), interleaved rounds,
median per call. ``RDYN_ATTENTION=decompose|aten`` fixes rdyn's choice. It is the measurement
behind ``python/rdyn/_attention.py``'s choice between its decomposition
(batched products around one fused softmax kernel) and ATen's kernel.

    .venv/bin/python benches/attention_shapes.py                # the grid
    .venv/bin/python benches/attention_shapes.py --inductor --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import rdyn

GRID = [
    # batch, heads, tokens, head dim
    (1, 12, 64, 64),
    (2, 6, 128, 64),
    (8, 12, 128, 64),
    (2, 6, 256, 64),
    (1, 12, 384, 64),
    (2, 6, 512, 64),
    (2, 6, 750, 64),
    (1, 8, 1024, 64),
    (1, 32, 128, 128),
]


def attention(causal, train):
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def step(q, k, v):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out.sum().backward()
        return out

    return step if train else f


def time_call(fn, args, reps):
    t = time.perf_counter()
    for _ in range(reps):
        fn(*args)
    return (time.perf_counter() - t) / reps


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--inductor", action="store_true")
    p.add_argument("--train", action="store_true", help="forward and backward (gradients of q, k, v)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"threads {torch.get_num_threads()}; ms per call (median of {args.rounds} rounds); x = eager / backend")
    print(f"{'shape':>22} {'causal':>6} {'eager':>8} {'rdyn':>8} {'x':>6}" + (f" {'inductor':>8} {'x':>6}" if args.inductor else ""))
    ratios = []
    for b, h, s, d in GRID:
        for causal in (False, True):
            torch.manual_seed(0)
            q, k, v = (torch.randn(b, h, s, d, requires_grad=args.train) for _ in range(3))
            fn = attention(causal, args.train)
            backends = {"eager": fn}
            torch._dynamo.reset()
            backends["rdyn"] = torch.compile(fn, backend="rdyn")
            if args.inductor:
                backends["inductor"] = torch.compile(fn)
            with torch.set_grad_enabled(args.train):
                for f in backends.values():
                    f(q, k, v)
                    f(q, k, v)
                one = time_call(fn, (q, k, v), 1)
                reps = max(2, int(0.05 / max(one, 1e-6)))
                times = {name: [] for name in backends}
                for _ in range(args.rounds):
                    for name, f in backends.items():
                        times[name].append(time_call(f, (q, k, v), reps))
            med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
            line = f"{str((b, h, s, d)):>22} {str(causal):>6} {med['eager']:8.3f} {med['rdyn']:8.3f} {med['eager'] / med['rdyn']:6.2f}"
            ratios.append(med["eager"] / med["rdyn"])
            if args.inductor:
                line += f" {med['inductor']:8.3f} {med['eager'] / med['inductor']:6.2f}"
            print(line, flush=True)
    print(f"geomean eager/rdyn {statistics.geometric_mean(ratios):.2f}; rdyn stats: {rdyn.stats().get('nodes_fallback')} fallback nodes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
