"""The device layer: each device plans only its own code.

A CUDA or wgpu specialization is memory-planned by `rdyn_memplan` and planned
by its device alone; the CPU planner (and with it Cranelift) runs only for
the CPU device and for the steps wgpu hands to the CPU. The CPU planner's
counters in `rdyn.stats()` pin that, with the CPU device as the control that
shows the counters move.
"""

from __future__ import annotations

import pytest
import torch

import rdyn
from helpers import wgpu_available


def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A GEMM, a softmax (two reductions) and pointwise ops: every step has
    a PTX and a WGSL form."""
    return torch.softmax(torch.relu(x @ w) * 0.5 + 1.0, dim=-1)


def run(device: str, rows: int) -> dict:
    torch._dynamo.reset()
    x, w = torch.randn(rows, 24), torch.randn(24, 40)
    rdyn.reset_stats()
    got = torch.compile(block, backend="rdyn", options={"device": device})(x, w)
    want = block(x.double(), w.double())
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)
    return rdyn.stats()


def test_cpu_device_plans_cpu_kernels() -> None:
    stats = run("cpu", 17)
    assert stats["nodes_fallback"] == 0
    assert stats["cpu_kernels_planned"] >= 1
    assert stats["cpu_stages_compiled"] + stats["cpu_stages_interpreted"] >= 1


def test_cuda_sim_specialization_plans_no_cpu_kernel() -> None:
    stats = run("cuda-sim", 19)
    assert stats["nodes_fallback"] == 0 and stats["specializations"] >= 1
    assert stats["cuda_sim_instructions"] > 0, "the kernels ran in the simulator"
    assert stats["cpu_kernels_planned"] == 0
    assert stats["cpu_stages_compiled"] == 0 and stats["cpu_stages_interpreted"] == 0


@pytest.mark.skipif(not wgpu_available(), reason="no wgpu adapter (install mesa-vulkan-drivers for lavapipe)")
def test_wgpu_specialization_plans_no_cpu_kernel() -> None:
    stats = run("wgpu", 21)
    assert stats["nodes_fallback"] == 0 and stats["specializations"] >= 1
    assert stats["wgpu_cpu_kernels"] == 0, "every step has a WGSL form"
    assert stats["cpu_kernels_planned"] == 0
    assert stats["cpu_stages_compiled"] == 0 and stats["cpu_stages_interpreted"] == 0


@pytest.mark.skipif(not wgpu_available(), reason="no wgpu adapter (install mesa-vulkan-drivers for lavapipe)")
def test_wgpu_plans_for_the_cpu_only_the_steps_it_hands_over() -> None:
    # float64 has no WGSL form: those kernels (and only they) are CPU kernels.
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (x * 2).relu(), (y.exp() + 1).sum(-1)

    torch._dynamo.reset()
    x, y = torch.randn(8, 16), torch.randn(8, 16, dtype=torch.float64)
    rdyn.reset_stats()
    got = torch.compile(f, backend="rdyn", options={"device": "wgpu"})(x, y)
    for g, e in zip(got, f(x, y)):
        torch.testing.assert_close(g, e)
    stats = rdyn.stats()
    assert stats["wgpu_cpu_kernels"] >= 1
    assert stats["cpu_kernels_planned"] == stats["wgpu_cpu_kernels"]


def test_unknown_device_names_the_devices() -> None:
    with pytest.raises(Exception) as raised:
        torch.compile(block, backend="rdyn", options={"device": "tpu"})(torch.randn(2, 24), torch.randn(24, 3))
    text = str(raised.value)
    assert "tpu" in text and "cuda-sim" in text and "wgpu" in text
