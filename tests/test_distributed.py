"""rdyn under torch.distributed: DDP, FSDP2 and functional collectives.

Each test starts two worker processes on loopback (gloo, `127.0.0.1`, a
free port) that run this file as a script (`python test_distributed.py
CASE RANK WORLD PORT`). A worker runs the same training steps eagerly and
with `torch.compile(..., backend="rdyn")` (with ``RDYN_STRICT=1``, so a
graph rdyn fails to compile is an error), compares losses, gradients and
parameters over 3 SGD steps (to 1e-5), and exits non-zero on a mismatch;
the test checks both exit codes and shows the workers' output on failure.
Every run is bounded in time (`TIMEOUT_S`).

* DDP: an MLP wrapped in ``DistributedDataParallel`` with buckets of one
  layer each (``bucket_cap_mb=1``, 1 MiB layers), so Dynamo's DDPOptimizer
  splits the graph into one subgraph per bucket (checked: 3), each
  compiled by rdyn. The model's class is the test's own: Dynamo skips
  frames of torch.nn's modules, so a wrapped ``nn.Sequential`` would run
  uncompiled.
* FSDP2: ``fully_shard`` on each layer and the root, then compiled.
* Functional collectives: ``_functional_collectives.all_reduce`` inside a
  compiled function (the collective runs as an eager node of rdyn's graph).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time

import pytest

WORLD = 2
TIMEOUT_S = 120  # per test: both workers, start-up and compile included
TOL = 1e-5


# --------------------------------------------------------------------------
# The pytest side
# --------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_workers(case: str) -> None:
    port = _free_port()
    env = dict(os.environ)
    env.update(
        RDYN_STRICT="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        GLOO_SOCKET_IFNAME="lo",  # gloo's own connections stay on loopback
        OMP_NUM_THREADS="1",
    )
    logs = [tempfile.TemporaryFile(mode="w+") for _ in range(WORLD)]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, case, str(rank), str(WORLD), str(port)],
            env=env,
            stdout=logs[rank],
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(WORLD)
    ]
    # Wait for both; once one fails, the other would only wait for it in a
    # collective, so it is stopped too.
    deadline = time.monotonic() + TIMEOUT_S
    timed_out = False
    while any(p.poll() is None for p in procs):
        failed = any(p.returncode not in (None, 0) for p in procs)
        timed_out = time.monotonic() > deadline
        if failed or timed_out:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            break
        time.sleep(0.1)
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
    report = "\n".join(
        f"--- rank {r} (exit {p.returncode}) ---\n{o}" for r, (p, o) in enumerate(zip(procs, outputs))
    )
    if any("RDYN_DIST_SKIP" in o for o in outputs):
        reason = next(line for o in outputs for line in o.splitlines() if "RDYN_DIST_SKIP" in line)
        pytest.skip(reason.split("RDYN_DIST_SKIP", 1)[1].strip(": "))
    if timed_out:
        pytest.fail(f"{case}: workers did not finish within {TIMEOUT_S} s\n{report}")
    if any(p.returncode != 0 for p in procs):
        pytest.fail(f"{case}: a worker failed\n{report}")
    assert all("RDYN_DIST_OK" in o for o in outputs), report
    print(report)  # shown by `pytest -rP`: what each worker compiled


def _require_gloo() -> None:
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this build")
    if not dist.is_gloo_available():
        pytest.skip("the gloo backend is not available in this build")


def test_ddp_optimizer_split() -> None:
    """DDP + DDPOptimizer (graph split at bucket boundaries), 3 steps."""
    _require_gloo()
    _run_workers("ddp")


def test_fsdp2_fully_shard() -> None:
    """FSDP2 (`fully_shard`) compiled with rdyn, 3 steps."""
    _require_gloo()
    _run_workers("fsdp2")


def test_functional_collectives() -> None:
    """`_functional_collectives.all_reduce` inside rdyn-compiled code."""
    _require_gloo()
    _run_workers("funcol")


# --------------------------------------------------------------------------
# The worker side (run as a script)
# --------------------------------------------------------------------------


def _mlp(width: int = 32):
    """A small MLP. Its class is defined here, not in torch.nn: Dynamo skips
    frames of torch.nn's own modules (an `nn.Sequential` wrapped in DDP would
    run eagerly, uncompiled, under `torch.compile`)."""
    import torch

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(16, width)
            self.fc2 = torch.nn.Linear(width, width)
            self.fc3 = torch.nn.Linear(width, width)
            self.fc4 = torch.nn.Linear(width, 4)

        def forward(self, x):
            x = torch.relu(self.fc1(x))
            x = torch.nn.functional.gelu(self.fc2(x))
            x = torch.tanh(self.fc3(x))
            return self.fc4(x)

    return MLP()


def _close(what: str, a, b) -> None:
    import torch

    a = a.full_tensor() if hasattr(a, "full_tensor") else a
    b = b.full_tensor() if hasattr(b, "full_tensor") else b
    torch.testing.assert_close(a, b, atol=TOL, rtol=TOL, msg=lambda m: f"{what}: {m}")


def _train(model, batches, steps: int = 3):
    """Losses and per-step gradients (by parameter name) of `steps` SGD steps."""
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, grads = [], []
    for step in range(steps):
        x, y = batches[step]
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        losses.append(loss.detach().clone())
        grads.append({_name(n): p.grad.detach().clone() for n, p in model.named_parameters()})
        opt.step()
    return losses, grads


def _name(name: str) -> str:
    """A parameter's name without the compiled module's prefix."""
    return name.removeprefix("_orig_mod.")


def _batches(rank: int, steps: int = 3):
    import torch

    g = torch.Generator().manual_seed(1000 + rank)  # different data per rank
    return [(torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)) for _ in range(steps)]


def _compare_training(eager, compiled, batches) -> None:
    """Train both for 3 steps; losses, gradients and the final parameters
    must match to `TOL`."""
    le, ge = _train(eager, batches)
    lc, gc = _train(compiled, batches)
    for step, (a, b) in enumerate(zip(lc, le)):
        _close(f"loss at step {step}", a, b)
    for step, (a, b) in enumerate(zip(gc, ge)):
        assert a.keys() == b.keys(), (sorted(a), sorted(b))
        for name in a:
            _close(f"grad of {name} at step {step}", a[name], b[name])
    final = dict(eager.named_parameters())
    for n, p in compiled.named_parameters():
        _close(f"parameter {_name(n)} after training", p.detach(), final[_name(n)].detach())


def _case_ddp(rank: int) -> None:
    import copy

    import torch
    import torch._dynamo
    from torch._dynamo.backends.distributed import DDPOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    import rdyn

    assert torch._dynamo.config.optimize_ddp in (True, "ddp_optimizer"), torch._dynamo.config.optimize_ddp
    torch.manual_seed(0)
    # DDPOptimizer wants buckets of at least DDP's first bucket (1 MiB), so
    # the layers are 512x512 (1 MiB of float32 each): with a 1 MiB cap each
    # such layer closes a bucket and the graph is split into several.
    base = _mlp(512)
    cap = 1
    eager = DDP(copy.deepcopy(base), bucket_cap_mb=cap)
    compiled_ddp = DDP(copy.deepcopy(base), bucket_cap_mb=cap)
    compiled = torch.compile(compiled_ddp, backend="rdyn")
    # Record how many buckets (subgraphs) DDPOptimizer split the graph into.
    splits = []
    compile_fn = DDPOptimizer.compile_fn

    def recording_compile_fn(self, gm, example_inputs, **kwargs):
        out = compile_fn(self, gm, example_inputs, **kwargs)
        splits.append(len(self.buckets))
        return out

    DDPOptimizer.compile_fn = recording_compile_fn
    rdyn.reset_stats()
    try:
        _compare_training(eager, compiled, _batches(rank))
    finally:
        DDPOptimizer.compile_fn = compile_fn
    subgraphs = max(splits, default=0)
    assert subgraphs >= 3, f"DDPOptimizer did not split the graph: {splits}"
    stats = rdyn.stats()
    assert stats["graphs"] >= subgraphs, stats  # each subgraph compiled by rdyn
    assert stats["graphs_failed"] == 0, stats
    print(f"rank {rank}: DDP graph split into {subgraphs} subgraphs; rdyn graphs {stats['graphs']}", flush=True)


def _case_fsdp2(rank: int) -> None:
    import copy

    import torch
    from torch.distributed.fsdp import fully_shard

    import rdyn

    torch.manual_seed(0)
    base = _mlp()

    def shard(model):
        for layer in (model.fc1, model.fc2, model.fc3, model.fc4):
            fully_shard(layer)
        return fully_shard(model)

    eager = shard(copy.deepcopy(base))
    sharded = shard(copy.deepcopy(base))
    compiled = torch.compile(sharded, backend="rdyn")
    rdyn.reset_stats()
    _compare_training(eager, compiled, _batches(rank))
    stats = rdyn.stats()
    assert stats["graphs"] >= 1, stats
    assert stats["graphs_failed"] == 0, stats
    print(f"rank {rank}: FSDP2; rdyn graphs {stats['graphs']}", flush=True)


def _case_funcol(rank: int) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    import rdyn

    group = dist.group.WORLD

    def f(x, w):
        y = torch.relu(x @ w) * 2 + 1
        z = funcol.all_reduce(y, "sum", group)
        return torch.tanh(z) + y.sum(dim=0), z

    torch.manual_seed(rank)  # different inputs per rank
    x, w = torch.randn(8, 16), torch.randn(16, 8)
    expected, _ = f(x, w)
    rdyn.reset_stats()
    actual, reduced = torch.compile(f, backend="rdyn", fullgraph=True)(x, w)
    stats = rdyn.stats()
    assert stats["graphs"] >= 1, stats
    assert stats["graphs_failed"] == 0, stats
    _close("compiled function with a functional all_reduce", actual, expected)
    # The reduction crossed the ranks: it is the sum of every rank's `y`.
    y = torch.relu(x @ w) * 2 + 1
    ys = [torch.empty_like(y) for _ in range(dist.get_world_size())]
    dist.all_gather(ys, y)
    _close("all_reduce's result", reduced, torch.stack(ys).sum(dim=0))
    print(f"rank {rank}: functional collectives; rdyn graphs {stats['graphs']}", flush=True)
    print(f"rank {rank}: eager nodes {stats['fallback_ops']}", flush=True)


def _worker(case: str, rank: int, world: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        print("RDYN_DIST_SKIP: torch.distributed with gloo is not available", flush=True)
        return
    if case == "fsdp2":
        try:
            from torch.distributed.fsdp import fully_shard  # noqa: F401
        except ImportError:
            print("RDYN_DIST_SKIP: this torch has no FSDP2 (torch.distributed.fsdp.fully_shard)", flush=True)
            return
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=_timedelta(90)
    )
    try:
        {"ddp": _case_ddp, "fsdp2": _case_fsdp2, "funcol": _case_funcol}[case](rank)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    print("RDYN_DIST_OK", flush=True)


def _timedelta(seconds: int):
    import datetime

    return datetime.timedelta(seconds=seconds)


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
