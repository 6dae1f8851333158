"""A quick look at rdyn's CUDA backend on a GPU: many small graphs, each
compiled with ``backend="rdyn"`` on CUDA tensors and compared with eager
PyTorch in float64. One line per case (ok, or the first line of what went
wrong), then rdyn's counters. Needs an NVIDIA GPU.

    RDYN_STRICT=1 python tools/cuda_smoke.py [-k SUBSTRING]
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

import torch
import torch.nn.functional as F

os.environ.setdefault("RDYN_STRICT", "1")

import rdyn  # noqa: E402


def cases():
    n = 1 << 20
    yield "add", lambda x, y: x + y, [(n,), (n,)]
    yield "pointwise chain", lambda x, y, z: (x * 2 + y).relu() * z, [(n,), (n,), (n,)]
    yield "odd size", lambda x: torch.sigmoid(x) * x, [(1000003,)]
    yield "tiny", lambda x: x + 1, [(3,)]
    yield "broadcast", lambda x, y: x * y + 1, [(64, 1, 33), (7, 33)]
    yield "transpose", lambda x: (x.t() * 2).contiguous(), [(257, 129)]
    yield "gelu erf", lambda x: F.gelu(x), [(4096, 512)]
    yield "gelu tanh", lambda x: F.gelu(x, approximate="tanh"), [(4096, 512)]
    yield "transcendentals", lambda x: torch.exp(x) + torch.log(x.abs() + 1) + torch.sin(x) * torch.cos(x) + torch.tanh(x), [(5000,)]
    yield "pow/rsqrt", lambda x: x.abs().pow(1.7) + torch.rsqrt(x.abs() + 0.1), [(5000,)]
    yield "sum all", lambda x: x.sum(), [(n,)]
    yield "sum rows", lambda x: x.sum(-1), [(4096, 1024)]
    yield "sum cols", lambda x: x.sum(0), [(4096, 1024)]
    yield "mean long row", lambda x: x.mean(-1), [(8, 300000)]
    yield "amax/argmax", lambda x: (x.amax(-1), x.argmax(-1)), [(1000, 77)]
    yield "softmax", lambda x: torch.softmax(x, -1), [(4096, 1024)]
    yield "softmax long rows", lambda x: torch.softmax(x, -1), [(16, 100000)]
    yield "log_softmax dim0", lambda x: torch.log_softmax(x, 0), [(333, 65)]
    yield "layer_norm", lambda x, w, b: F.layer_norm(x, (768,), w, b), [(4096, 768), (768,), (768,)]
    yield "layer_norm long", lambda x: F.layer_norm(x, (65536,)), [(8, 65536)]
    yield "var/std", lambda x: (x.var(-1), x.std(0)), [(100, 200)]
    yield "cumsum", lambda x: x.cumsum(-1), [(64, 1000)]
    yield "where/mask", lambda x, y: torch.where(x > 0, x, y * 2), [(3000,), (3000,)]
    yield "matmul + epilogue", lambda a, b, c: torch.relu(a @ b + c), [(256, 512), (512, 384), (384,)]
    yield "bmm softmax", lambda q, k: torch.softmax(q @ k.transpose(-1, -2) / 8, -1), [(4, 128, 64), (4, 128, 64)]
    yield "conv2d relu", lambda x, w: F.relu(F.conv2d(x, w, padding=1)), [(2, 8, 32, 32), (16, 8, 3, 3)]
    yield "batch_norm eval", lambda x, m, v: F.batch_norm(x, m, v.abs(), training=False), [(8, 16, 12, 12), (16,), (16,)]
    yield "max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1), [(2, 8, 33, 33)]
    yield "avg_pool2d", lambda x: F.avg_pool2d(x, 2), [(2, 8, 32, 32)]
    yield "interpolate", lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), [(2, 3, 17, 17)]
    yield "cat/slice", lambda x, y: torch.cat([x[:, 1:], y * 2], 1), [(64, 33), (64, 17)]
    yield "gather", lambda x: torch.gather(x, 1, (x.abs() * 3).long().clamp(max=9)), [(100, 10)]
    yield "embedding", lambda w: F.embedding(torch.arange(50, device="cuda") % 7, w), [(7, 32)]
    yield "index_add", lambda x, s: x.index_add(0, torch.tensor([0, 2, 2], device="cuda"), s), [(5, 4), (3, 4)]
    yield "integer ops", lambda x: ((x * 100).long() // 7 % 5).sum(-1), [(100, 100)]
    yield "float16 pointwise", lambda x, y: (x * y).relu() + 1, [(n,), (n,)], torch.float16
    yield "float16 softmax", lambda x: torch.softmax(x, -1), [(512, 1000)], torch.float16
    yield "bfloat16 layer_norm", lambda x: F.layer_norm(x, (512,)), [(512, 512)], torch.bfloat16
    yield "bfloat16 sum", lambda x: x.sum(-1), [(64, 4096)], torch.bfloat16


def training_cases():
    """Gradients of every input through one compiled forward + backward."""
    yield "grad pointwise", lambda x, y: torch.tanh(x) * y, [(1000,), (1000,)]
    yield "grad softmax", lambda x: torch.softmax(x, -1), [(64, 300)]
    yield "grad layer_norm", lambda x, w, b: F.layer_norm(x, (128,), w, b), [(64, 128), (128,), (128,)]
    yield "grad batch_norm train", lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), [(8, 16, 10, 10), (16,), (16,)]
    yield "grad max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1), [(2, 8, 20, 20)]
    yield "grad adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, 1), [(2, 8, 7, 7)]
    yield "grad conv2d", lambda x, w: F.conv2d(x, w, stride=2, padding=3), [(2, 3, 32, 32), (16, 3, 7, 7)]
    yield "grad relu residual", lambda x, y: F.relu(F.relu(x) + y), [(2, 8, 10, 10), (2, 8, 10, 10)]
    yield ("grad conv-bn-relu-pool", lambda x, w, g, b: F.max_pool2d(F.relu(F.batch_norm(F.conv2d(x, w, stride=2, padding=3), None, None, g, b, training=True)), 3, 2, 1),
           [(2, 3, 32, 32), (16, 3, 7, 7), (16,), (16,)])
    yield "grad linear", lambda x, w, b: F.linear(x, w, b), [(32, 64), (16, 64), (16,)]


def run_training(fn, shapes) -> str | None:
    torch.manual_seed(0)
    tensors = [torch.randn(*s, device="cuda") for s in shapes]
    weight = None

    def grads(f, ts):
        nonlocal weight
        ts = [t.detach().clone().requires_grad_() for t in ts]
        out = f(*ts)
        if weight is None:
            weight = torch.randn(out.shape, device="cuda", dtype=torch.float64)
        (out * weight.to(out.dtype)).sum().backward()
        return [out] + [t.grad for t in ts]

    want = grads(fn, [t.double() for t in tensors])
    torch._dynamo.reset()
    got = grads(torch.compile(fn, backend="rdyn"), tensors)
    return compare(tuple(got), tuple(want), torch.float32)


def resnet18_grads() -> str:
    """Which of resnet18's parameter gradients differ on CUDA."""
    import copy

    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10).cuda().train()
    x = torch.randn(2, 3, 64, 64, device="cuda")
    ref64 = copy.deepcopy(model).double()
    compiled = torch.compile(copy.deepcopy(model), backend="rdyn")
    compiled(x).float().square().mean().backward()
    ref64(x.double()).square().mean().backward()
    bad = []
    for (name, p), (_, q) in zip(compiled.named_parameters(), ref64.named_parameters()):
        err = ((p.grad.double() - q.grad).norm() / q.grad.norm().clamp(min=1e-30)).item()
        if not err < 1e-3:
            bad.append(f"{name} {err:.2g}")
    return "all gradients match" if not bad else f"{len(bad)} differ: " + ", ".join(bad[:12])


def ref(fn, tensors):
    with torch.no_grad():
        return fn(*[t.double() if t.is_floating_point() else t for t in tensors])


def compare(got, want, dtype) -> str | None:
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    tol = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    for g, w in zip(got, want):
        if g.device.type != "cuda":
            return f"output on {g.device}"
        if not g.is_floating_point():
            if not torch.equal(g.cpu(), w.cpu()):
                return f"integer output differs in {(g.cpu() != w.cpu()).sum()} places"
            continue
        err = (g.double() - w).norm() / w.norm().clamp(min=1e-30)
        if not torch.isfinite(err) or err > tol:
            return f"relative error {err:.3g} > {tol}"
    return None


def run_forward(fn, shapes, dtype) -> str | None:
    torch.manual_seed(0)
    tensors = [torch.randn(*s, device="cuda", dtype=dtype) for s in shapes]
    torch._dynamo.reset()
    got = torch.compile(fn, backend="rdyn")(*tensors)
    torch.cuda.synchronize()
    return compare(got, ref(fn, tensors), dtype)


def report(name: str, run) -> bool:
    """Run one case, print its line; whether it passed. Every case runs,
    whatever the ones before it raised."""
    try:
        problem = run()
    except Exception as e:
        problem = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
        if os.environ.get("RDYN_SMOKE_TRACE"):
            traceback.print_exc()
    print(f"{'ok  ' if problem is None else 'FAIL'} {name}{'' if problem is None else ': ' + problem}", flush=True)
    return problem is None


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("-k", default="", help="run only the cases whose name contains this")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("cuda_smoke: no CUDA GPU")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    print(torch.__version__, torch.cuda.get_device_name())
    failed = 0
    for name, fn, shapes, *dtype in cases():
        if args.k in name:
            failed += not report(name, lambda: run_forward(fn, shapes, dtype[0] if dtype else torch.float32))
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        for name, fn, shapes in training_cases():
            if args.k in name:
                failed += not report(name, lambda: run_training(fn, shapes))
        if args.k in "resnet18 grads":
            torch._dynamo.reset()
            print("resnet18 grads:", resnet18_grads(), flush=True)
    print("stats:", rdyn.stats())
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
