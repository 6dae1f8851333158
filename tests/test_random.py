"""Random ops in rdyn's kernels (`python/rdyn/_random.py`): dropout,
``bernoulli`` and ``rand`` from the counter-based hash
``rdyn::hash_mix(position, key)``.

The kernels' bits are checked exactly against the hash's eager reference
(torch ops), on the CPU (compiled by the JIT and interpreted), the PTX
simulator and wgpu; a compiled dropout against the mask the reference
gives for the key torch's generator draws; the distributions by their
moments; and training: the backward reads the forward's mask.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import rdyn
from rdyn._random import _KEYS, _hash_mix_eager
from helpers import wgpu_available

DEVICES = ["cpu", "cuda-sim"] + (["wgpu"] if wgpu_available() else [])


def _compiled(fn, device="cpu"):
    torch._dynamo.reset()
    rdyn.reset_stats()
    return torch.compile(fn, backend="rdyn", options={"device": device})


def _only_key_draws():
    """Every eager node is a key draw (one ``randint`` per random op)."""
    fallback = rdyn.stats()["fallback_ops"]
    assert set(fallback) <= {"aten.randint.low"}, fallback


@pytest.mark.parametrize("device", DEVICES)
def test_hash_matches_its_reference_exactly(device) -> None:
    """The kernels' hash is the reference's, bit for bit, for positions up
    to 2^31 - 1 and keys up to 2^24 - 1, broadcast against each other."""
    positions = torch.cat([torch.arange(5000), torch.tensor([(1 << 31) - 1, 1 << 30, 123456789])])
    keys = torch.tensor([[0], [1], [_KEYS - 1], [987654]])
    fn = lambda p, k: torch.ops.rdyn.hash_mix(p, k)  # noqa: E731
    got = _compiled(fn, device)(positions, keys)
    assert torch.equal(got, _hash_mix_eager(positions, keys))
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]


def _expected_dropout(x, p, seed):
    """The dropout a compiled graph computes after ``manual_seed(seed)``:
    its key is the generator's first draw."""
    torch.manual_seed(seed)
    key = torch.randint(0, _KEYS, (), dtype=torch.float32)
    u = _hash_mix_eager(torch.arange(x.numel()).view(x.shape), key.to(torch.int64)).to(torch.float32) / _KEYS
    keep = u < 1.0 - p
    return x * keep * (1.0 / (1.0 - p)), keep


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_is_the_reference_mask(device, p) -> None:
    """A fused dropout (after a ReLU) keeps exactly the elements the
    reference mask keeps, scaled by 1 / (1 - p); no eager node but the key."""
    x = torch.randn(6, 37, 29)
    drop = torch.nn.Dropout(p)
    fn = lambda x: drop(torch.relu(x))  # noqa: E731
    compiled = _compiled(fn, device)
    torch.manual_seed(11)
    got = compiled(x)
    want, _ = _expected_dropout(torch.relu(x), p, 11)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    _only_key_draws()


def test_interpreter_and_jit_agree() -> None:
    """With the JIT off (``RDYN_JIT=0``) the same seed gives the same bits."""
    script = textwrap.dedent(
        """
        import torch, rdyn
        torch.manual_seed(0)
        x = torch.randn(3000)
        f = torch.compile(lambda x: torch.nn.functional.dropout(x * 2, 0.3), backend="rdyn")
        torch.manual_seed(5)
        torch.save(f(x), "{out}")
        """
    )
    outs = []
    for jit in ("1", "0"):
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"rdyn_random_jit{jit}.pt")
        env = dict(os.environ, RDYN_JIT=jit)
        run = subprocess.run([sys.executable, "-c", script.format(out=path)], env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        outs.append(torch.load(path))
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_keeps_one_minus_p(p) -> None:
    x = torch.ones(200_000)
    compiled = _compiled(lambda x: torch.nn.functional.dropout(x, p))
    y = compiled(x)
    kept = (y != 0).double().mean().item()
    assert abs(kept - (1 - p)) < 5 * ((p * (1 - p) / x.numel()) ** 0.5), kept
    assert torch.allclose(y[y != 0], torch.tensor(1 / (1 - p)))


def test_each_call_draws_new_numbers_and_seeds_repeat() -> None:
    compiled = _compiled(lambda x: torch.nn.functional.dropout(x, 0.5))
    x = torch.ones(4096)
    torch.manual_seed(3)
    a, b = compiled(x), compiled(x)
    torch.manual_seed(3)
    c = compiled(x)
    assert not torch.equal(a, b) and torch.equal(a, c)


def test_two_dropouts_in_one_graph_are_independent() -> None:
    compiled = _compiled(lambda x: (torch.nn.functional.dropout(x, 0.5), torch.nn.functional.dropout(x, 0.5)))
    a, b = compiled(torch.ones(10_000))
    agree = ((a != 0) == (b != 0)).double().mean().item()
    assert 0.47 < agree < 0.53, agree


def test_dropout_backward_reads_the_forward_mask() -> None:
    """Training: the gradient through dropout is the forward's mask times
    the scale, element for element."""
    lin = torch.nn.Linear(32, 32)
    drop = torch.nn.Dropout(0.25)
    x = torch.randn(64, 32, requires_grad=True)
    compiled = _compiled(lambda x: drop(lin(x)))
    y = compiled(x)
    y.sum().backward()
    keep = (y != 0).float()
    want = (keep / 0.75) @ lin.weight
    torch.testing.assert_close(x.grad, want, rtol=1e-5, atol=1e-6)
    _only_key_draws()


def test_eval_mode_dropout_is_the_identity() -> None:
    drop = torch.nn.Dropout(0.5).eval()
    x = torch.randn(100)
    assert torch.equal(_compiled(drop)(x), x)
    assert "aten.randint.low" not in rdyn.stats()["fallback_ops"]


@pytest.mark.parametrize("device", ["cpu", "cuda-sim"])
def test_bernoulli_and_rand_distributions(device) -> None:
    """``bernoulli(x, p)`` (stochastic depth), ``bernoulli(probs)`` and
    ``rand_like``: means and ranges of uniforms and Bernoulli draws."""
    n = 100_000
    x = torch.empty(n)
    fn = lambda x: (  # noqa: E731
        torch.bernoulli(x, 0.3),
        torch.bernoulli(torch.full_like(x, 0.8)),
        torch.rand_like(x),
        torch.rand(n, dtype=torch.float64),
    )
    b1, b2, u, u64 = _compiled(fn, device)(x)
    assert set(b1.unique().tolist()) <= {0.0, 1.0} and abs(b1.mean().item() - 0.3) < 0.01
    assert abs(b2.mean().item() - 0.8) < 0.01
    for v in (u, u64.float()):
        assert 0.0 <= v.min().item() and v.max().item() < 1.0
        assert abs(v.mean().item() - 0.5) < 0.01 and abs(v.var().item() - 1 / 12) < 0.005
    assert u64.dtype == torch.float64
    _only_key_draws()


def test_stochastic_depth_trains_without_eager_nodes() -> None:
    """torchvision's stochastic depth (a ``bernoulli_`` of a new tensor)
    in a training step: only key draws run eagerly."""
    from torchvision.ops import StochasticDepth

    block = torch.nn.Sequential(torch.nn.Linear(16, 16), StochasticDepth(0.5, "row"))
    x = torch.randn(64, 16, requires_grad=True)
    y = _compiled(block)(x)
    y.sum().backward()
    rows = (y != 0).any(1)
    assert 0.3 < rows.float().mean().item() < 0.7
    assert torch.equal(x.grad.abs().sum(1) != 0, rows)
    _only_key_draws()


def test_dropout_ptx_assembles() -> None:
    """The hash in PTX (32-bit multiplies, shifts, xors) assembles for
    sm_80 and sm_90."""
    from test_cuda import PTXAS, assemble, one_module

    if PTXAS is None:
        pytest.skip("no ptxas")
    report = rdyn.explain(lambda x: torch.nn.functional.dropout(x.exp(), 0.2), torch.randn(64, 300), device="cuda")
    sources = [k.source for k in report.kernels if k.device == "cuda" and k.source.startswith(".version")]
    assert sources and any("mul.lo.u32" in s for s in sources), [k.source[:300] for k in report.kernels]
    assemble(one_module(sources))


def test_dropout_under_dynamic_shapes() -> None:
    """With symbolic sizes (``dynamic=True``) a dropout still runs in
    rdyn's kernels, one program for every size."""
    torch._dynamo.reset()
    rdyn.reset_stats()
    compiled = torch.compile(lambda x: torch.nn.functional.dropout(x.relu(), 0.25), backend="rdyn", dynamic=True)
    for n in (5, 9, 4000):
        y = compiled(torch.ones(n, 3))
        assert y.shape == (n, 3) and torch.all((y == 0) | (y == 1 / 0.75))
    assert abs((y != 0).float().mean().item() - 0.75) < 0.03
    _only_key_draws()
