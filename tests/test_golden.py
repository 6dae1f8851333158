"""Golden CPU kernel plans and pinned fusion decisions.

Each case traces a small function to ATen (rdyn's decompositions), builds its
kernels without running them, and compares every kernel's source with
``tests/golden/<device>/<case>.txt`` (CPU kernel plans; WGSL, validated by
naga; PTX, assembled by ptxas in test_cuda.py). Regenerate after an intended
change with::

    RDYN_BLESS=1 .venv/bin/python -m pytest tests/test_golden.py

The fusion pins assert the decision that matters ("softmax is one kernel")
rather than the text.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import rdyn

GOLDEN = Path(__file__).parent / "golden" / "cpu"


def _report(fn, *args, device="cpu"):
    gm = make_fx(fn, decomposition_table=rdyn.DECOMPOSITIONS)(*args)
    return rdyn.describe_graph(gm, list(args), device=device)


def _kernels(report):
    return [k for k in report.kernels if k.name.startswith("k")]


CASES = {
    "relu_add_mul": (lambda x, y: torch.relu(x + y) * 2, (torch.randn(64, 33), torch.randn(64, 33))),
    "softmax": (lambda x: torch.softmax(x, -1), (torch.randn(32, 100),)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (64,), w, b), (torch.randn(16, 64), torch.randn(64), torch.randn(64))),
    "var_mean": (lambda x: torch.var_mean(x, dim=1), (torch.randn(8, 50),)),
    "softmax_middle_dim": (lambda x: torch.softmax(x, 1), (torch.randn(4, 6, 40),)),
    "transpose_add": (lambda x: x.t() + 1, (torch.randn(16, 24),)),
    "cat_pad": (lambda x, y: F.pad(torch.cat([x, y], 1), (1, 2)), (torch.randn(4, 3), torch.randn(4, 5))),
    "max_pool": (lambda x: F.max_pool2d(x, 3, 2, 1), (torch.randn(1, 2, 9, 9),)),
    # Large enough that the CPU plan splits it where its sources change:
    # one unmasked copy per input, one fill per padded side.
    "cat_pad_large": (lambda x, y: F.pad(torch.cat([x, y], 1), (1, 2)), (torch.randn(64, 96), torch.randn(64, 160))),
    "gather": (lambda x, i: torch.gather(x, 1, i), (torch.randn(5, 7), torch.randint(0, 7, (5, 3)))),
    "linear_gelu": (lambda x, w, b: F.gelu(F.linear(x, w, b)), (torch.randn(8, 16), torch.randn(32, 16), torch.randn(32))),
    "depthwise_relu6": (
        lambda x, w, s: F.relu6(F.conv2d(x, w, padding=1, groups=8) * s),
        (torch.randn(1, 8, 6, 6), torch.randn(8, 1, 3, 3), torch.randn(1, 8, 1, 1)),
    ),
    # Channels-last tensors: the ReLUs walk them in storage order.
    "conv_relu_conv_channels_last": (
        lambda x, w1, w2: F.relu(F.conv2d(F.relu(F.conv2d(x, w1, padding=1)), w2, padding=1)),
        tuple(
            t.contiguous(memory_format=torch.channels_last)
            for t in (torch.randn(1, 4, 5, 5), torch.randn(6, 4, 3, 3), torch.randn(4, 6, 3, 3))
        ),
    ),
    # Serial scatter stages: identity, then max/add; a mean's counts
    # scattered alongside and divided by.
    "scatter_reduce_mean": (
        lambda x, i, s: x.scatter_reduce(0, i, s, "mean", include_self=False) + x.scatter_reduce(0, i, s, "amax"),
        (torch.randn(4, 3), torch.tensor([[0, 1, 0], [3, 3, 1]]), torch.randn(2, 3)),
    ),
    # A small weight over a large NCHW input: the library convolution runs
    # channels-last, the batch norm's scale and shift are stored per channel,
    # and the last kernel reads the channels-last result by columns.
    "conv_bn_relu_channels_last_library": (
        lambda x, w, m, v, g, b: F.relu(F.batch_norm(F.conv2d(x, w, padding=1), m, v, g, b) + x),
        (
            torch.randn(2, 16, 24, 24),
            torch.randn(16, 16, 3, 3),
            torch.randn(16),
            torch.rand(16) + 0.5,
            torch.randn(16),
            torch.randn(16),
        ),
    ),
}


@pytest.mark.parametrize("device", ["cpu", "wgpu", "cuda"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_kernels(name, device):
    """Kernel sources per backend: CPU plans, WGSL (validated by naga) and
    PTX, all generated without needing a GPU."""
    fn, args = CASES[name]
    report = _report(fn, *args, device=device)
    text = "".join(f"=== {k.name} on {k.device}\n{k.source}" for k in report.kernels)
    path = GOLDEN.parent / device / f"{name}.txt"
    if os.environ.get("RDYN_BLESS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; run with RDYN_BLESS=1 to create it"
    assert text == path.read_text(), f"kernel plan of {name} changed; if intended, re-bless with RDYN_BLESS=1"


def test_softmax_is_one_kernel():
    assert len(_kernels(_report(lambda x: torch.softmax(x, -1), torch.randn(32, 100)))) == 1


def test_layer_norm_is_one_kernel():
    report = _report(lambda x: F.layer_norm(x, (64,)), torch.randn(16, 64))
    assert len(_kernels(report)) == 1


def test_pointwise_chain_is_one_kernel():
    report = _report(lambda x, y: (torch.relu(x + y) * 2).exp().sigmoid(), torch.randn(10, 10), torch.randn(10, 10))
    assert len(_kernels(report)) == 1
    assert report.fallback_ops == {}


def test_sibling_reductions_share_a_kernel():
    report = _report(lambda x: (x.sum(-1), x.amax(-1), x.mean(-1)), torch.randn(64, 128))
    kernels = _kernels(report)
    assert len(kernels) == 1
    assert kernels[0].source.count("stage") == 3


def test_pooling_index_math_becomes_a_view():
    """max_pool2d (rdyn's decomposition) reads its windows as strided views
    of the padded input: the padded input is stored once, then one pointwise
    kernel takes the maximum of affine loads (no gather, no division, no
    bounds check per window element)."""
    report = _report(lambda x: F.max_pool2d(torch.relu(x), 3, 2, 1), torch.randn(1, 2, 16, 16))
    kernels = _kernels(report)
    assert len(kernels) == 2
    pad, pool = kernels[0].source, kernels[1].source
    assert " if " in pad  # the padding's bounds check, once per element
    for text in ("bounded", "//", " if ", " over "):
        assert text not in pool


def test_linear_bias_fuses_into_the_epilogue():
    """addmm's bias is added in the kernel after the product, with the GELU:
    one GEMM that only multiplies, then one kernel that reads the bias."""
    report = _report(
        lambda x, w, b: F.gelu(F.linear(x, w, b)), torch.randn(8, 16), torch.randn(32, 16), torch.randn(32)
    )
    names = [k.name for k in report.kernels]
    assert names[0] == "gemm" and len(names) == 2, names
    assert "+=" not in report.kernels[0].source
    epilogue = report.kernels[1].source
    assert "gelu" in epilogue and "[i1]" in epilogue, epilogue


def test_transposed_gemm_operand_is_a_view_of_the_stored_value():
    """A weight gradient's `relu_grad.t() @ x`: the pointwise operand is
    stored untransposed and passed to the GEMM as a transposed view (which
    it reads as it is), so the stage reads its sources in storage order
    instead of gathering them by columns, and the same stored value serves
    the untransposed product too (one stage, not two)."""

    def transposed_first(g, h, x, w):
        r = torch.where(h > 0, g, 0.0)
        return r.t() @ x, r @ w

    def transposed_second(g, h, x, w):
        r = torch.where(h > 0, g, 0.0)
        return r @ w, r.t() @ x

    args = (torch.randn(64, 512), torch.randn(64, 512), torch.randn(64, 256), torch.randn(512, 128))
    for fn in (transposed_first, transposed_second):
        kernels = _kernels(_report(fn, *args))
        assert len(kernels) == 1 and kernels[0].source.count("stage ->") == 1, kernels
        source = kernels[0].source
        assert "by columns" not in source
        assert "load buf0:float32[i0]" in source, source  # read in storage order
        compiled = rdyn.compile_graph(make_fx(fn, decomposition_table=rdyn.DECOMPOSITIONS)(*args), list(args))
        for got, want in zip(compiled(*args), fn(*args)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
