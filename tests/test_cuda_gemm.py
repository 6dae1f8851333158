"""GEMMs on CUDA as cuBLAS calls rdyn plans itself.

mm, bmm and addmm on CUDA tensors become GEMM steps, each one
``cublasGemmStridedBatchedEx`` call whose arguments (transposes, leading
dimensions, batch strides, which operand goes first) rdyn derives from the
operands' layouts (``codegen-cuda/src/gemm.rs``). Without a GPU, the
``cuda-sim`` device runs each call as cuBLAS defines it, so these tests
check that mapping against float64 eager for every operand order, batched
and broadcast operands, sliced views and each float dtype. On a GPU the same
cases run through cuBLAS itself, and through ATen (``cuda_gemm="aten"``).
"""

from __future__ import annotations

import pytest
import torch

import rdyn

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")

#: dtype -> relative tolerance against float64 (of the largest result).
DTYPES = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def _cases():
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    a, b, bias = r(7, 5), r(5, 9), r(9)
    x, y = r(3, 7, 5), r(3, 5, 4)
    q = r(2, 4, 6, 8)
    return {
        "mm": (lambda a, b: a @ b, (a, b)),
        "mm_column_major": (lambda a, b: a.t().contiguous().t() @ b.t().contiguous().t(), (a, b)),
        "mm_transposed_result": (lambda a, b: (b.t() @ a.t()).t(), (a, b)),
        "addmm_scaled_gelu": (
            lambda a, b, c: torch.nn.functional.gelu(torch.addmm(c, a, b, alpha=0.5, beta=2.0)),
            (a, b, bias),
        ),
        "linear_relu": (lambda a, w, c: torch.nn.functional.linear(a, w.t(), c).relu(), (a, b, bias)),
        "bmm": (torch.bmm, (x, y)),
        "bmm_column_major": (
            lambda x, y: torch.bmm(x.transpose(1, 2).contiguous().transpose(1, 2), y.transpose(1, 2).contiguous().transpose(1, 2)),
            (x, y),
        ),
        "matmul_broadcast_weight": (torch.matmul, (x, r(5, 6))),
        "sliced_views": (lambda a, b: a[:, 1:4] @ b[1:4, ::2], (a, b)),
        "empty_sum": (lambda a, b: a[:, :0] @ b[:0, :], (a, b)),
        "attention": (lambda q, k, v: torch.softmax(q @ k.transpose(-1, -2) / 3, -1) @ v, (q, q.flip(-1), q * 2)),
        "vector_times_matrix": (lambda v, b: v @ b, (r(5), b)),
    }


CASES = _cases()


def _check(name, dtype, device, options):
    fn, args = CASES[name]
    args = [a.to(device=device, dtype=dtype) for a in args]
    torch._dynamo.reset()
    got = torch.compile(fn, backend="rdyn", options=options)(*args)
    want = fn(*[a.double() for a in args])
    assert got.dtype == dtype and got.shape == want.shape
    err = (got.double() - want).abs().max().item() if want.numel() else 0.0
    scale = want.abs().max().item() if want.numel() else 1.0
    assert err <= DTYPES[dtype] * max(scale, 1.0), f"{name} {dtype}: max error {err:.3g} of {scale:.3g}"


@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_cublas_calls_on_cuda_sim(name: str, dtype) -> None:
    rdyn.reset_stats()
    _check(name, dtype, "cpu", {"device": "cuda-sim", "strict": True})
    # The products are rdyn's own steps, not ATen library calls.
    assert rdyn.stats()["fallback_ops"].get("aten.mm.default", 0) == 0


def test_explain_shows_the_cublas_call() -> None:
    a, b = torch.randn(7, 5), torch.randn(5, 9)
    text = str(rdyn.explain(lambda a, b: (b.t() @ a.t()).t(), a, b, device="cuda"))
    # The result is row-major, so cuBLAS computes its transpose: bᵀ·aᵀ read
    # transposed, with m = 7 rows of the result.
    assert "cublasGemmStridedBatchedEx m 7 n 9 k 5 batch 1" in text
    assert "b T float32 ld 5" in text and "a T float32 ld 9" in text


def test_aten_gemms_when_asked() -> None:
    fn, args = CASES["linear_relu"]
    torch._dynamo.reset()
    rdyn.reset_stats()
    got = torch.compile(fn, backend="rdyn", options={"device": "cuda-sim", "cuda_gemm": "aten"})(*args)
    torch.testing.assert_close(got, fn(*args))
    assert rdyn.stats()["nodes_extern"] >= 1


def test_unknown_cuda_gemm_option_is_a_clear_error() -> None:
    # Dynamo wraps the backend's ValueError; its message names the option.
    with pytest.raises(Exception, match="cuda_gemm='cutlass' is not one of"):
        torch.compile(lambda x: x @ x, backend="rdyn", options={"cuda_gemm": "cutlass"})(torch.randn(2, 2))


@needs_gpu
@pytest.mark.parametrize("gemm", ["cublas", "aten"])
@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_gemms_on_gpu(name: str, dtype, gemm: str) -> None:
    _check(name, dtype, "cuda", {"cuda_gemm": gemm, "strict": True})
