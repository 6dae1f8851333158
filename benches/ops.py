"""Single ops and small training steps: eager, Inductor and rdyn side by side.

The model suite (`suite.py`) times whole models; this times the ops whose
lowering is its own kernel (sorts and selections, binary searches, scans,
scatter-adds, random draws), data movement (cat, pad) and float32 math
whose scalar forms are libm calls (transcendentals, fmod, pow, atan2),
each compiled alone, on the CPU:

    python benches/ops.py                     # every case, all three backends
    python benches/ops.py --cases sort,topk   # cases whose name contains a word
    python benches/ops.py --backends eager,rdyn

Each case is checked against eager before it is timed (values; indices where
they are defined; for a random op, the fraction kept and the kept values). Times are the best of `--rounds` rounds of about
`--target-ms` each, ms per call. Results also go to `build/bench/ops.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def _embedding_step():
    emb = torch.nn.Embedding(1000, 64)
    ids = torch.randint(0, 1000, (4, 64))

    def step(ids):
        emb.weight.grad = None
        emb(ids).square().sum().backward()
        return emb.weight.grad

    return step, (ids,)


def _depthwise_step(shape, k, stride):
    """A depthwise convolution's training step: its backward's input and
    weight gradients."""
    c = shape[1]
    conv = torch.nn.Conv2d(c, c, k, stride, k // 2, groups=c)
    x = torch.randn(shape, requires_grad=True)

    def step(x):
        conv.weight.grad = None
        x.grad = None
        conv(x).relu().square().sum().backward()
        return conv.weight.grad, x.grad

    return step, (x,)


def _qkv_cat(dq, dkt, dv):
    """An attention backward's gradient of a packed q, k, v projection."""
    b, h, t, d = dq.shape
    parts = [dq.transpose(1, 2), dkt.permute(0, 3, 1, 2), dv.transpose(1, 2)]
    return torch.cat([p.reshape(b, t, h * d) for p in parts], -1)


def cases() -> dict:
    torch.manual_seed(0)
    r = torch.randn
    return {
        "sort rows 256x1024": (lambda x: torch.sort(x, 1), (r(256, 1024),)),
        "sort 1M": (lambda x: torch.sort(x), (r(1 << 20),)),
        "sort dim 0 of 4096x256": (lambda x: torch.sort(x, 0), (r(4096, 256),)),
        "argsort int64 256x1024": (lambda x: torch.argsort(x, 1), (torch.randint(0, 1 << 40, (256, 1024)),)),
        "topk 10 of 64x50000": (lambda x: torch.topk(x, 10, 1), (r(64, 50000),)),
        "topk 2 of 1024x64 (MoE routing)": (lambda x: torch.topk(x.softmax(-1), 2, -1), (r(1024, 64),)),
        "kthvalue 300 of 1000x1000": (lambda x: torch.kthvalue(x, 300, 1), (r(1000, 1000),)),
        "median rows 1000x1000": (lambda x: torch.median(x, 1), (r(1000, 1000),)),
        "searchsorted 1M in 1000": (lambda s, v: torch.searchsorted(s, v), (torch.sort(r(1000)).values, r(1 << 20))),
        "bucketize 1M in 16": (lambda s, v: torch.bucketize(v, s), (torch.sort(r(16)).values, r(1 << 20))),
        "cumsum 256x512": (lambda x: torch.cumsum(x, 1), (r(256, 512),)),
        "index_add 2048x64 into 100": (
            lambda x, i: torch.zeros(100, 64).index_add(0, i, x),
            (r(2048, 64), torch.randint(0, 100, (2048,))),
        ),
        "embedding backward 256x64 into 1000": _embedding_step(),
        "conv_backward depthwise 3x3/2 1x96x56x56 (MobileNetV2)": _depthwise_step((1, 96, 56, 56), 3, 2),
        "conv_backward depthwise 7x7 2x96x56x56 (ConvNeXt)": _depthwise_step((2, 96, 56, 56), 7, 1),
        "cat 256x300 and 256x212 along dim 1": (lambda x, y: torch.cat([x, y], 1), (r(256, 300), r(256, 212))),
        "cat of q, k^T, v gradients 4x4x64x32": (_qkv_cat, (r(4, 4, 64, 32), r(4, 4, 32, 64), r(4, 4, 64, 32))),
        "pad 8x64x56x56 by 1": (lambda x: torch.nn.functional.pad(x, (1, 1, 1, 1)), (r(8, 64, 56, 56),)),
        "pad relu 512x509 to 512x512": (lambda x: torch.nn.functional.pad(torch.relu(x), (0, 3)), (r(512, 509),)),
        # float32 math whose scalar forms were libm calls (a 1M-element tensor).
        "math expm1 (ELU) 1M": (torch.nn.functional.elu, (r(1 << 20),)),
        "math log1p (softplus) 1M": (torch.nn.functional.softplus, (r(1 << 20),)),
        "math mish 1M": (torch.nn.functional.mish, (r(1 << 20),)),
        "math sin 1M": (torch.sin, (r(1 << 20) * 10,)),
        "math atan 1M": (torch.atan, (r(1 << 20) * 10,)),
        "math asin 1M": (torch.asin, (torch.rand(1 << 20) * 2 - 1,)),
        "math sinh 1M": (torch.sinh, (r(1 << 20),)),
        "math log2 1M": (torch.log2, (torch.rand(1 << 20) + 0.01,)),
        "math exp2 1M": (torch.exp2, (r(1 << 20) * 10,)),
        "math pow x**2.5 1M": (lambda x: x.abs() ** 2.5, (r(1 << 20),)),
        "math fmod 1M": (lambda x: torch.fmod(x, 0.7), (r(1 << 20) * 10,)),
        "math atan2 1M": (torch.atan2, (r(1 << 20), r(1 << 20))),
        "math hypot 1M": (torch.hypot, (r(1 << 20), r(1 << 20))),
        "math logaddexp 1M": (torch.logaddexp, (r(1 << 20), r(1 << 20))),
        "math int64 remainder 1M": (torch.remainder, (torch.randint(-1000, 1000, (1 << 20,)), torch.randint(1, 50, (1 << 20,)))),
        "dropout 0.1 after relu 8x64x128": (
            lambda x: torch.nn.functional.dropout(torch.relu(x), 0.1),
            (r(8, 64, 128),),
            _dropout_check(lambda x: torch.relu(x), 0.1),
        ),
        "dropout 0.1 of softmax 8x4x64x64": (
            lambda x: torch.nn.functional.dropout(torch.softmax(x, -1), 0.1),
            (r(8, 4, 64, 64),),
            _dropout_check(lambda x: torch.softmax(x, -1), 0.1),
        ),
    }


def _dropout_check(before, p):
    """A random case's check: about 1 - p of the elements kept (the values
    differ from eager's draws), each kept one ``before(x) / (1 - p)``."""

    def check(got, x):
        scaled = before(x) / (1 - p)
        live = scaled != 0
        kept = (got != 0) & live
        fraction = kept.double().sum().item() / max(live.sum().item(), 1)
        return abs(fraction - (1 - p)) < 0.01 and torch.allclose(got[kept], scaled[kept], rtol=1e-5)

    return check


def best_ms(fn, args, rounds: int, target_s: float) -> float:
    fn(*args)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < target_s / 4:
        fn(*args)
        n += 1
    n = max(n * 4, 1)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            fn(*args)
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e3


def same(a, b) -> bool:
    leaves = lambda v: [t for t in (v if isinstance(v, (tuple, list)) else [v]) if isinstance(t, torch.Tensor)]  # noqa: E731
    la, lb = leaves(a), leaves(b)
    # A sort's indices may order ties differently (ATen's CPU sort is not
    # stable): compare values, which are defined.
    la, lb = (la[:1], lb[:1]) if len(la) == 2 and la[1].dtype == torch.int64 and la[0].is_floating_point() else (la, lb)
    return len(la) == len(lb) and all(torch.allclose(x.double(), y.double(), rtol=1e-4, atol=1e-5) for x, y in zip(la, lb))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", help="comma-separated words; a case runs when its name contains one")
    p.add_argument("--backends", default="eager,inductor,rdyn")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--target-ms", type=float, default=200)
    p.add_argument("--out", default=str(ROOT / "build" / "bench" / "ops.json"))
    args = p.parse_args(argv)
    backends = args.backends.split(",")
    words = args.cases.split(",") if args.cases else None
    if "rdyn" in backends:
        import rdyn  # noqa: F401  (registers the backend)
    results = []
    print(f"{'case':38s}" + "".join(f"{b:>12s}" for b in backends) + "   rdyn vs eager")
    for name, (fn, inputs, *checker) in cases().items():
        if words and not any(w in name for w in words):
            continue
        want = fn(*inputs)
        check = checker[0] if checker else lambda got, *_: same(got, want)
        row = {"case": name}
        for backend in backends:
            torch._dynamo.reset()
            compiled = fn if backend == "eager" else torch.compile(fn, backend=backend)
            got = compiled(*inputs)
            if backend != "eager" and not check(got, *inputs):
                print(f"{name}: {backend} differs from eager", file=sys.stderr)
                row[backend] = None
                continue
            row[backend] = best_ms(compiled, inputs, args.rounds, args.target_ms / 1e3)
        results.append(row)
        ratio = row.get("eager") / row["rdyn"] if row.get("eager") and row.get("rdyn") else None
        cells = "".join(f"{row[b]:10.3f}ms" if row.get(b) else f"{'-':>12s}" for b in backends)
        print(f"{name:38s}{cells}   {ratio:.2f}x" if ratio else f"{name:38s}{cells}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"threads": torch.get_num_threads(), "results": results}, indent=1))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
