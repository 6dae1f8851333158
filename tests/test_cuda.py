"""The CUDA backend.

Without a GPU (CI): every kernel the OpInfo conformance graphs lower to for
CUDA is generated as PTX and assembled by ``ptxas`` for sm_80 and sm_90
(golden PTX is in ``tests/golden/cuda``, see test_golden.py), and the
runtime reports a missing driver as a normal error. With a GPU: models run
on CUDA tensors and match eager (the OpInfo suite on CUDA is
``test_opinfo.py::test_op_cuda``).

``ptxas`` comes from Triton's wheel (installed with torch), from
``nvidia-cuda-nvcc``, from ``PATH``, or from ``RDYN_PTXAS``.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch

import rdyn
from helpers import no_rust_panic, trace_aten
from test_opinfo import OPS, SAMPLES_PER_OP, is_random, op_id, sample_as_function

ROOT = Path(__file__).resolve().parents[1]
ARCHS = ("sm_80", "sm_90")


def find_ptxas() -> str | None:
    if os.environ.get("RDYN_PTXAS"):
        return os.environ["RDYN_PTXAS"]
    candidates = []
    try:
        import triton

        candidates.append(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas")
    except ImportError:
        pass
    try:
        import nvidia

        for base in nvidia.__path__:
            candidates += sorted(Path(base).glob("cu*/bin/ptxas"))
    except ImportError:
        pass
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return shutil.which("ptxas")


PTXAS = find_ptxas()
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="no ptxas (pip install nvidia-cuda-nvcc, or set RDYN_PTXAS)")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


def one_module(sources: list[str]) -> str:
    """Several single-kernel PTX modules as one (one header)."""
    header = [line for line in sources[0].splitlines() if line.startswith((".version", ".target", ".address_size"))]
    bodies = [
        "\n".join(line for line in s.splitlines() if not line.startswith((".version", ".target", ".address_size")))
        for s in sources
    ]
    return "\n".join(header) + "\n" + "\n".join(bodies)


def assemble(ptx: str) -> None:
    """Assemble with ptxas for every target; fail with its message."""
    assert PTXAS is not None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.ptx"
        path.write_text(ptx)
        for arch in ARCHS:
            run = subprocess.run(
                [PTXAS, f"-arch={arch}", str(path), "-o", str(Path(tmp) / "k.cubin")], capture_output=True, text=True
            )
            if run.returncode != 0:
                lines = ptx.splitlines()
                raise AssertionError(f"ptxas -arch={arch} rejected the PTX:\n{run.stderr[:3000]}\n--- PTX ---\n" + "\n".join(lines[:400]))


# --------------------------------------------------------------------------
# Every OpInfo conformance graph, as PTX


@pytest.fixture(scope="module")
def ptx_results():
    results: list[dict[str, Any]] = []
    yield results
    out = ROOT / "build" / "ptx_summary.json"
    out.parent.mkdir(exist_ok=True)
    graphs = sum(r["graphs"] for r in results)
    kernels = sum(r["kernels"] for r in results)
    unsupported: dict[str, int] = {}
    for r in results:
        for reason in r["unsupported"]:
            unsupported[reason] = unsupported.get(reason, 0) + 1
    summary = {
        "ops": len(results),
        "graphs": graphs,
        "kernels_assembled": kernels,
        "archs": list(ARCHS),
        "ops_fully_generated": sum(1 for r in results if r["graphs"] and not r["unsupported"]),
        "unsupported_reasons": dict(sorted(unsupported.items(), key=lambda kv: -kv[1])),
        "results": results,
    }
    out.write_text(json.dumps(summary, indent=1))
    print(
        f"\nPTX: {len(results)} ops, {graphs} graphs, {kernels} kernels assembled by ptxas for {', '.join(ARCHS)}; "
        f"{summary['ops_fully_generated']} ops with every graph generated; written to {out.relative_to(ROOT)}"
    )


def _reason(note: str) -> str:
    """A note's cause without sizes and kernel numbers, for counting."""
    return note.rsplit(": ", 1)[-1][:80]


@needs_ptxas
@pytest.mark.parametrize("op", OPS, ids=op_id)
def test_op_ptx(op, ptx_results) -> None:
    """Each sample's graph, lowered for CUDA without a GPU: every kernel
    assembles for sm_80 and sm_90."""
    if is_random(op):
        pytest.skip("random op")
    torch.manual_seed(0)
    record: dict[str, Any] = {"op": op_id(op), "graphs": 0, "kernels": 0, "unsupported": []}
    samples = itertools.islice(op.sample_inputs("cpu", torch.float32, requires_grad=False), SAMPLES_PER_OP)
    for sample in samples:
        fn, tensors = sample_as_function(op, sample)
        if any(t.layout != torch.strided for t in tensors):
            continue
        try:
            gm = trace_aten(lambda *ts: [t for t in torch.utils._pytree.tree_leaves(fn(*ts)) if isinstance(t, torch.Tensor)], tensors)
        except Exception:
            continue  # data-dependent or non-functional: not a graph rdyn gets this way
        try:
            report = rdyn.describe_graph(gm, tensors, device="cuda")
        except RuntimeError as e:
            if "concrete buffer size" in str(e):
                continue  # a data-dependent output size: Dynamo breaks the graph there
            raise
        record["graphs"] += 1
        record["unsupported"] += [_reason(n) for n in report.notes]
        sources = [k.source for k in report.kernels if k.device == "cuda" and k.source.startswith(".version")]
        if sources:
            assemble(one_module(sources))
            record["kernels"] += len(sources)
    ptx_results.append(record)
    if record["graphs"] == 0:
        pytest.skip("no traceable sample")


# --------------------------------------------------------------------------
# Without a GPU


def test_explain_cuda_needs_no_gpu() -> None:
    report = rdyn.explain(lambda x, y: torch.softmax(x @ y, -1).sum(0), torch.randn(8, 16), torch.randn(16, 32), device="cuda")
    cuda = [k for k in report.kernels if k.device == "cuda" and k.name.startswith("k")]
    assert cuda, report
    for k in cuda:
        assert k.source.startswith(".version ") and f".visible .entry {k.name}(" in k.source
    # The matrix product is a cuBLAS call rdyn planned, on CUDA.
    assert any(k.name == "gemm" and k.device == "cuda" and "cublasGemmStridedBatchedEx" in k.source for k in report.kernels)
    assert ".entry" in str(report)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_cuda_not_available_is_a_clear_error() -> None:
    from rdyn._import import import_graph, on_device
    from rdyn._runner import GraphRunner

    x = torch.randn(4, 5)
    gm = trace_aten(lambda t: [t.exp() + 1], [x])
    data, info = import_graph(gm)
    graph = rdyn._rdyn.CompiledGraph(on_device(data, "cuda:0"), GraphRunner(info), "cuda")
    with pytest.raises(RuntimeError, match="CUDA not available"):
        graph([x])


@needs_ptxas
@pytest.mark.parametrize(
    "name, fn",
    [
        ("softmax", lambda x: torch.softmax(x, -1)),
        ("layer_norm", lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:])),
        ("argmax", lambda x: x.argmax(-1)),
        ("sum", lambda x: x.sum(-1)),
    ],
)
def test_long_rows_assemble(name: str, fn) -> None:
    """Rows long enough for 1024-thread blocks and the loops that keep four
    loads per thread in flight (OpInfo's small samples never reach them)."""
    report = rdyn.explain(fn, torch.randn(8, 20000), device="cuda")
    sources = [k.source for k in report.kernels if k.device == "cuda" and k.source.startswith(".version")]
    assert sources, report
    assert any(".maxntid 1024" in s and "$L_unrolled" in s for s in sources), sources[0][:2000]
    assemble(one_module(sources))


ROW_OPS = {
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax_of_exp": lambda x: torch.log_softmax(x.exp() * 0.5, -1),
    "layer_norm": lambda x: torch.nn.functional.layer_norm(
        x, x.shape[-1:], torch.linspace(0.5, 2, x.shape[-1], dtype=x.dtype), torch.ones(x.shape[-1], dtype=x.dtype)
    ),
    "var_mean": lambda x: torch.var_mean(x, -1),
    "argmax_and_centered": lambda x: (x.argmax(-1), x - x.mean(-1, keepdim=True)),
    # Rows of two points: a thread per row.
    "middle_dim": lambda x: torch.softmax(x.view(x.shape[0], 2, -1), 1),
}


@pytest.mark.parametrize("cols", [1, 200, 256, 257, 1000, 4099, 8192, 16390])
@pytest.mark.parametrize("name", list(ROW_OPS))
def test_row_kernels_on_cuda_sim(name: str, cols: int) -> None:
    """Row kernels on the CUDA generator's PTX, run by the simulator: rows
    shorter than a block, with whole and partial chunks held in registers
    across stages (256 and 1024 threads), and longer than the chunks allow
    (the unrolled loop). Transposed inputs too."""
    fn = ROW_OPS[name]
    if name == "middle_dim":
        cols += cols % 2
    x = torch.randn(3, cols, dtype=torch.float64).to(torch.float32)
    for inp in (x, x.t().contiguous().t()):
        got = torch.compile(fn, backend="rdyn", options={"device": "cuda-sim"})(inp)
        want = fn(inp.double())
        for g, w in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)):
            if w.is_floating_point():
                torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-5, equal_nan=True)
            else:
                assert torch.equal(g, w)
        torch._dynamo.reset()


@pytest.mark.parametrize(
    "name, fn",
    [
        ("sum", lambda x: x.sum(0)),
        ("softmax", lambda x: torch.softmax(x, 0)),
        ("var", lambda x: x.var(0)),
        ("argmin", lambda x: x.argmin(0)),
        ("centered_middle", lambda x: (lambda y: y - y.mean(1, keepdim=True))(x.view(4, 10, -1))),
    ],
)
def test_strided_rows_run_a_thread_per_row(name: str, fn) -> None:
    """Reductions over a leading or middle dim (rows across memory, outer
    points along it) run a thread per row, so a warp's loads are
    consecutive; the simulator checks the results."""
    x = torch.randn(40, 2000)
    report = rdyn.explain(fn, x, device="cuda")
    sources = [k.source for k in report.kernels if k.device == "cuda" and k.source.startswith(".version")]
    assert sources and all("shfl" not in s and "bar.sync" not in s for s in sources), sources[0][:1500]
    got = torch.compile(fn, backend="rdyn", options={"device": "cuda-sim"})(x)
    want = fn(x.double())
    if want.is_floating_point():
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(got, want)


POLYNOMIALS = [
    "chebyshev_polynomial_t",
    "chebyshev_polynomial_u",
    "chebyshev_polynomial_v",
    "chebyshev_polynomial_w",
    "shifted_chebyshev_polynomial_t",
    "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w",
    "hermite_polynomial_h",
    "hermite_polynomial_he",
    "laguerre_polynomial_l",
    "legendre_polynomial_p",
]


@pytest.mark.parametrize("device", ["cuda-sim", "cpu"])
@pytest.mark.parametrize("name", POLYNOMIALS)
def test_polynomials_from_one_definition(name: str, device: str) -> None:
    """The orthogonal polynomials, each one definition in
    `rdyn_ir::special` (PTX through the translator, the CPU's machine code),
    against float64 eager over the ends (x = ±1, 0), the trigonometric form
    (degrees above 6 with |x| < 1, with acos built from sin and cos), the
    recurrences, negative and NaN degrees: computed in float64, so within
    the float32 rounding of the result (PTX once kept eager CUDA's float32
    trigonometry, off by up to 1e-5 at degree 30)."""
    fn = getattr(torch.special, name)
    xs = torch.tensor([-1.0, 0.0, 1.0, 0.5, -0.3, 0.93, 1.2, -1.7, 0.01, 3.0])
    ns = torch.tensor([-1.0, 0.0, 1.0, 2.0, 5.0, 7.0, 9.0, 12.0, 30.0, float("nan")])
    x, n = torch.meshgrid(xs, ns, indexing="ij")
    x, n = x.contiguous(), n.contiguous()
    compiled = torch.compile(fn, backend="rdyn", options={"device": device})
    with no_rust_panic():
        got = compiled(x, n)
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]
    want = fn(x.double(), n.double())
    err = (got.double() - want).abs()
    tol = 1e-12 + 6e-8 * want.abs()
    assert bool(((err <= tol) | (got.isnan() & want.isnan())).all()), (x[err > tol], n[err > tol], got[err > tol], want[err > tol])


@pytest.mark.parametrize(
    "fn",
    [
        torch.special.i0,
        torch.special.i0e,
        torch.special.i1,
        torch.special.i1e,
        torch.special.erfcx,
        torch.special.spherical_bessel_j0,
        torch.special.ndtri,
        torch.special.digamma,
        torch.special.erfinv,
    ],
    ids=lambda fn: fn.__name__,
)
def test_special_functions_on_cuda_sim(fn) -> None:
    """Bessel I, erfcx, spherical j0, ndtri, digamma and erfinv as PTX (from
    their one definition in `rdyn_ir::special`) against float64 eager
    across their branches: the series and the large-argument expansion
    (|x| = 20), overflow, the x < 0 branch of erfcx, the small-x series of
    j0, ndtri's tails (p < 0.02425 and above 0.97575), ±inf and NaN."""
    if fn is torch.special.ndtri:
        x = torch.tensor([0.0, 1.0, -0.1, 1.1, 0.5, 0.4999, 0.02, 0.03, 0.98, 0.97, 1e-10, 1e-30, 1e-45, 0.9999999, 0.3])
    elif fn is torch.special.erfinv:
        x = torch.tensor([0.0, -0.0, 1e-30, 1e-7, -0.3, 0.5, 0.9, -0.99, 0.999999, 1.0, -1.0, 1.5, float("nan")])
    else:
            x = torch.tensor(
            [0.0, -0.0, 1e-3, -0.3, 0.49, 0.5, -0.51, 1.0, -3.0, 5.0, 9.0, -9.0, -10.0, 19.9, 20.0, 20.1, -25.0, 30.0,
             80.0, 100.0, 1e4, float("inf"), -float("inf"), float("nan")]
        )
    compiled = torch.compile(fn, backend="rdyn", options={"device": "cuda-sim"})
    with no_rust_panic():
        got = compiled(x)
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]
    want = fn(x.double()).to(torch.float32).double()
    torch.testing.assert_close(got.double(), want, rtol=2e-6, atol=1e-7, equal_nan=True)


BESSEL_JYK = {
    "bessel_j0": (0, "j"),
    "bessel_j1": (1, "j"),
    "bessel_y0": (0, "y"),
    "bessel_y1": (1, "y"),
    "modified_bessel_k0": (0, "k"),
    "modified_bessel_k1": (1, "k"),
    "scaled_modified_bessel_k0": (0, "ke"),
    "scaled_modified_bessel_k1": (1, "ke"),
}


@pytest.mark.parametrize("device", ["cuda-sim", "cpu"])
@pytest.mark.parametrize("name", list(BESSEL_JYK))
def test_bessel_jyk_against_mpmath(name: str, device: str) -> None:
    """Bessel J, Y and K, written once in `rdyn_ir::special`, as PTX and as
    the CPU's machine code, against mpmath at 30 digits (eager's own
    float64 J/Y is off by up to 1e-5 near zeros, its float32 by far more
    at large x): both sides of the power-series/expansion switch (9 for K,
    12 for J and Y), near zeros, large arguments that need the float64
    π/2 reduction, and the special values (±0, negative, ±inf, NaN)."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 30
    n, kind = BESSEL_JYK[name]
    fn = getattr(torch.special, name)
    x = torch.tensor(
        [1e-30, 1e-3, 0.3, 0.89, 1.0, 2.404825, 3.9577, 5.0, 8.9, 9.0, 9.1, 11.9, 12.0, 12.1, 20.0, 55.5,
         1234.5, 1e5, 3e7, 1e10]
    )
    if kind in ("j", "y"):
        want = [(mpmath.besselj if kind == "j" else mpmath.bessely)(n, mpmath.mpf(float(v))) for v in x]
    else:
        scale = (lambda v: mpmath.exp(v)) if kind == "ke" else (lambda v: 1)
        want = [mpmath.besselk(n, mpmath.mpf(float(v))) * scale(mpmath.mpf(float(v))) for v in x]
    want = torch.tensor([float(w) for w in want], dtype=torch.float64)
    compiled = torch.compile(fn, backend="rdyn", options={"device": device})
    with no_rust_panic():
        got = compiled(x).double()
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]
    # float32 rounding of the result (2^-24), and underflow to 0 for K.
    torch.testing.assert_close(got, want, rtol=1.2e-7, atol=1e-44)
    special = torch.tensor([0.0, -0.0, -2.0, float("inf"), -float("inf"), float("nan")])
    got, want = torch.compile(fn, backend="rdyn", options={"device": device})(special), fn(special)
    torch.testing.assert_close(got, want, equal_nan=True)
    # Signed zeros too (J1(−0) = −0).
    assert torch.equal(torch.signbit(got[:2]), torch.signbit(want[:2])), (got, want)
    if kind in ("j", "y"):
        # Past 2^62 the reduction of x by π/2 loses the phase; the result
        # stays within the amplitude √(2/(πx)).
        huge = torch.tensor([1e18, 1e30, 3e38])
        got = torch.compile(fn, backend="rdyn", options={"device": device})(huge).double()
        assert bool((got.abs() <= (2 / (torch.pi * huge.double())).sqrt() * 1.001).all()), got


@pytest.mark.parametrize("device", ["cuda-sim", "wgpu"])
def test_gelu_backward_factor_on_gpu_codegens(device: str) -> None:
    """Exact GELU's backward, lowered whole as the gradient times one
    `gelu_grad` op, as PTX (through the simulator) and as WGSL (on
    lavapipe): within float32 tolerance of float64 eager over [-8, 8]."""
    from helpers import assert_same, wgpu_available

    if device == "wgpu" and not wgpu_available():
        pytest.skip("no wgpu adapter")
    rdyn.reset_stats()
    fn = lambda g, x: torch.ops.aten.gelu_backward(g, x)  # noqa: E731
    x = torch.linspace(-8, 8, 4001)
    g = torch.linspace(-2, 3, 4001)
    with no_rust_panic():
        got = torch.compile(fn, backend="rdyn", options={"device": device})(g, x)
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]
    assert_same(got, fn(g, x), fn(g.double(), x.double()))
    if device == "cuda-sim" and PTXAS is not None:
        report = rdyn.explain(fn, g, x, device="cuda")
        sources = [k.source for k in report.kernels if k.device == "cuda" and k.source.startswith(".version")]
        assert sources, report
        assemble(one_module(sources))


@pytest.mark.parametrize("device", ["cpu", "cuda-sim"])
def test_airy_ai_matches_mpmath(device: str) -> None:
    """Airy Ai on the CPU backend and as PTX (the same algorithm) against
    mpmath at 30 digits, rounded to float32: both sides of the series'
    ends (−8 and 5.5), near its first zero, large arguments both ways
    (the float64 sin/cos of ζ = (2/3)|x|^(3/2)), underflow; NaN at ±inf
    and NaN as eager."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 30
    x = torch.tensor(
        [0.0, -0.0, 1e-3, 1.0, -1.0, 2.5, -2.338107, 5.0, 5.49, 5.51, 6.0, 10.0, 25.0, 100.0, -4.0, -7.99, -8.01,
         -10.0, -100.0, -1e4, -1e6]
    )
    want = torch.tensor([float(mpmath.airyai(mpmath.mpf(float(v)))) for v in x], dtype=torch.float64)
    compiled = torch.compile(torch.special.airy_ai, backend="rdyn", options={"device": device})
    with no_rust_panic():
        got = compiled(x)
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]
    # ζ is rounded in float64: about 1e-7 of phase at x = −1e6.
    torch.testing.assert_close(got.double(), want.float().double(), rtol=2.4e-7, atol=1e-9)
    special = torch.tensor([float("inf"), -float("inf"), float("nan")])
    torch.testing.assert_close(compiled(special), torch.special.airy_ai(special), equal_nan=True)


@pytest.mark.parametrize("device", ["cpu", "cuda-sim"])
@pytest.mark.parametrize("name", ["igamma", "igammac"])
def test_incomplete_gamma_matches_mpmath(name: str, device: str) -> None:
    """The regularized incomplete gamma functions on the CPU backend and as
    PTX (the same methods and selection) against mpmath at 40 digits: the
    series/continued-fraction switch, the small-x series of Q at tiny a
    (where 1 − P would cancel), Temme's expansion for large a near x, and
    results near 0 and 1; PyTorch's edge cases against eager."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    cases = [
        (0.5, 0.3), (1.0, 1.0), (2.5, 2.0), (10.0, 12.0), (1e-3, 0.5), (3.0, 20.0), (50.0, 45.0), (200.0, 210.0),
        (1000.0, 1000.0), (0.1, 5.0), (7.0, 0.01), (1e4, 1e4), (30.0, 1.0), (4.0, 4.999), (4.0, 5.001),
        (1e-10, 0.5), (1e-10, 1.05), (1e-6, 0.3), (150.0, 140.0), (150.0, 200.0), (0.3, 1.05), (0.3, 1.2),
        (1e5, 1.0005e5), (2e5, 1.98e5),
    ]
    a = torch.tensor([c[0] for c in cases])
    x = torch.tensor([c[1] for c in cases])
    lower = name == "igamma"

    def ref(p, q):
        p, q = mpmath.mpf(float(p)), mpmath.mpf(float(q))
        return mpmath.gammainc(p, 0, q, regularized=True) if lower else mpmath.gammainc(p, q, mpmath.inf, regularized=True)

    want = torch.tensor([float(ref(p, q)) for p, q in zip(a, x)], dtype=torch.float64)
    fn = getattr(torch, name)
    compiled = torch.compile(fn, backend="rdyn", options={"device": device})
    with no_rust_panic():
        got = compiled(a, x).double()
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]
    # Two float32 ulps: Temme's erfc on CUDA is the float32 fit.
    torch.testing.assert_close(got, want, rtol=2.4e-7, atol=0.0)
    edge_a = torch.tensor([0.0, 0.0, -1.0, 1.0, float("inf"), float("inf"), 1.0, float("nan"), 2.0, 0.0])
    edge_x = torch.tensor([1.0, 0.0, 1.0, -1.0, 1.0, float("inf"), float("inf"), 1.0, float("nan"), -1.0])
    torch.testing.assert_close(compiled(edge_a, edge_x), fn(edge_a, edge_x), equal_nan=True)


def test_zeta_on_cuda_sim() -> None:
    """Hurwitz zeta's PTX against float64 eager: its domain (x = 1, x < 1,
    poles of q, q ≤ 0 with non-integer x), small and large x, negative q."""
    x = torch.tensor([1.0, 0.5, 1.5, 2.0, 3.0, 4.5, 10.0, 30.0, float("nan"), 2.0, 2.5, 3.0, 2.0, 5.0])
    q = torch.tensor([1.0, 1.0, 1.0, 0.5, 2.0, 3.5, 1.0, 7.0, 1.0, -1.0, -0.5, -1.5, 0.0, 1e-3])
    compiled = torch.compile(torch.special.zeta, backend="rdyn", options={"device": "cuda-sim"})
    got = compiled(x, q)
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]
    want = torch.special.zeta(x.double(), q.double()).to(torch.float32).double()
    torch.testing.assert_close(got.double(), want, rtol=5e-6, atol=0.0, equal_nan=True)


@pytest.mark.parametrize("cols", [2048, 16384])
def test_softmax_moves_its_row_once(cols: int) -> None:
    """Counted by the simulator: a softmax over 64 rows reads each row once
    and writes it once; besides, every thread of a row's block loads the
    row's max and its sum once (L1 hits on a GPU)."""
    x = torch.randn(64, cols)
    compiled = torch.compile(lambda t: torch.softmax(t, -1), backend="rdyn", options={"device": "cuda-sim"})
    compiled(x)
    rdyn.reset_stats()
    torch.testing.assert_close(compiled(x), torch.softmax(x, -1))
    stats = rdyn.stats()
    block = 1024 if cols >= 8192 else 256
    assert stats["cuda_sim_bytes_stored"] == x.numel() * 4 + 2 * 64 * 4, stats
    assert stats["cuda_sim_bytes_loaded"] == x.numel() * 4 + 64 * block * 2 * 4, stats


def test_a_row_is_read_once() -> None:
    """Softmax over 1000-point rows (a warp per row: 31 whole chunks of 32
    points and a partial one): each of a lane's 32 points of x is loaded
    once for all stages (max, exp-sum, output), and each reduction result
    once for the whole chunks and once for the partial chunk."""
    report = rdyn.explain(lambda x: torch.softmax(x, -1), torch.randn(64, 1000), device="cuda")
    (kernel,) = [k for k in report.kernels if k.device == "cuda" and k.source.startswith(".version")]
    assert "bar.warp.sync" in kernel.source and "bar.sync" not in kernel.source, kernel.source[:1500]
    loads = kernel.source.count("ld.global.f32")
    assert loads == 32 + 2 + 2, kernel.source


VECTOR_CASES = {
    # (dtype, the vector load and store each kernel must hold)
    torch.float32: ("ld.global.v4.f32", "st.global.v4.f32"),
    torch.float16: ("ld.global.v4.b16", "st.global.v4.b16"),
    torch.bfloat16: ("ld.global.v4.b16", "st.global.v4.b16"),
    torch.float64: ("ld.global.v2.f64", "st.global.v2.f64"),
}


def _vector_fn(x, y, b):
    # Two outputs, a row broadcast (b) and a scalar per row (y[:, :1]).
    z = (x * 2 + y).relu() * b + y[:, :1]
    return z, torch.sigmoid(z) - x


@pytest.mark.parametrize("dtype", list(VECTOR_CASES), ids=str)
def test_pointwise_kernels_load_and_store_vectors(dtype) -> None:
    """A pointwise kernel whose rows are a multiple of 4 long loads and
    stores 4 consecutive elements per instruction (16 bytes at most); a
    base off that alignment (a view at an odd offset) takes the scalar loop
    instead, which the simulator's alignment check would otherwise catch."""
    x, y = torch.randn(37, 260, dtype=torch.float64), torch.randn(37, 260, dtype=torch.float64)
    b = torch.randn(260, dtype=torch.float64)
    x, y, b = x.to(dtype), y.to(dtype), b.to(dtype)
    report = rdyn.explain(_vector_fn, x, y, b, device="cuda")
    (source,) = [k.source for k in report.kernels if k.device == "cuda" and k.source.startswith(".version")]
    vld, vst = VECTOR_CASES[dtype]
    assert vld in source and vst in source and "$L_scalar" in source, source[:3000]
    compiled = torch.compile(_vector_fn, backend="rdyn", options={"device": "cuda-sim"})
    odd = torch.randn(37 * 260 + 1, dtype=torch.float64).to(dtype)[1:].view(37, 260)
    for args in ((x, y, b), (odd, y, b), (x, odd, b), (x.t().contiguous().t(), y, b)):
        with no_rust_panic():
            got = compiled(*args)
        # float64 eager, rounded once to the dtype (rdyn rounds half
        # precision once per output, eager after every op).
        want = _vector_fn(*(a.double() for a in args))
        for g, w in zip(got, want):
            assert g.dtype == dtype and g.shape == w.shape
            torch.testing.assert_close(g, w.to(dtype), equal_nan=True)
    assert rdyn.stats()["nodes_fallback"] == 0, rdyn.stats()["fallback_ops"]


def test_pointwise_vectors_count_their_bytes_once() -> None:
    """Counted by the simulator: an aligned add of 1024x1024 float32 moves
    each byte once, in a quarter of the scalar kernel's instructions or
    fewer per element (one index computation per 4 points)."""
    compiled = torch.compile(lambda a, c: a + c, backend="rdyn", options={"device": "cuda-sim"})
    a, c = torch.randn(1024, 1024), torch.randn(1024, 1024)
    odd = torch.randn(1024 * 1024 + 1)[1:].view(1024, 1024)
    counts = {}
    for name, args in (("vector", (a, c)), ("scalar", (odd, c))):
        compiled(*args)
        rdyn.reset_stats()
        torch.testing.assert_close(compiled(*args), args[0] + args[1])
        stats = rdyn.stats()
        assert stats["cuda_sim_bytes_loaded"] == 2 * a.numel() * 4, stats
        assert stats["cuda_sim_bytes_stored"] == a.numel() * 4, stats
        counts[name] = stats["cuda_sim_instructions"] / a.numel()
    assert counts["vector"] * 2 < counts["scalar"], counts


def _cuda_sources(fn, *args) -> list[str]:
    report = rdyn.explain(fn, *args, device="cuda")
    return [k.source for k in report.kernels if k.device == "cuda" and k.source.startswith(".version")]


def test_index_checks_trap_or_raise_on_cuda_sim() -> None:
    """An index out of range: by default the kernel traps, as eager's
    device-side asserts do (no error flag, so no call waits for the GPU;
    the simulator reports the trap as an IndexError); with
    `index_checks="sync"` the kernel sets the error flag and the call
    raises an IndexError. In-range indices give eager's values both ways."""
    table = torch.randn(10, 4)
    fn = lambda i: table[i] * 2  # noqa: E731
    good, bad = torch.tensor([1, 9, 0]), torch.tensor([1, 12, 0])
    (device_src,) = _cuda_sources(fn, good)
    assert "trap;" in device_src and "st.global.u32" not in device_src, device_src
    for checks, word in (("device", "device-side index check"), ("sync", "index out of range")):
        compiled = torch.compile(fn, backend="rdyn", options={"device": "cuda-sim", "index_checks": checks})
        with no_rust_panic():
            torch.testing.assert_close(compiled(good), fn(good))
            with pytest.raises(IndexError, match=word):
                compiled(bad)
            torch.testing.assert_close(compiled(good), fn(good))
        assert rdyn.stats()["nodes_fallback"] == 0
        torch._dynamo.reset()


def test_integer_division_by_zero_is_checked_only_with_sync_checks() -> None:
    """Eager's CUDA kernels do not raise on an integer division by zero, so
    the default device-side checks leave it unchecked (no trap, no flag);
    sync checks raise an IndexError at the call."""
    fn = lambda a, b: torch.div(a, b, rounding_mode="floor")  # noqa: E731
    a, b, ok = torch.tensor([7, -7, 9]), torch.tensor([2, 2, 0]), torch.tensor([2, 2, 3])
    (source,) = _cuda_sources(fn, a, ok)
    assert "trap" not in source and "st.global.u32" not in source, source
    compiled = torch.compile(fn, backend="rdyn", options={"device": "cuda-sim", "index_checks": "sync"})
    with no_rust_panic():
        torch.testing.assert_close(compiled(a, ok), fn(a, ok))
        with pytest.raises(IndexError, match="divided an integer by zero"):
            compiled(a, b)


@needs_ptxas
def test_golden_ptx_assembles() -> None:
    files = sorted((ROOT / "tests" / "golden" / "cuda").glob("*.txt"))
    assert files, "no golden PTX (run test_golden.py with RDYN_BLESS=1)"
    for path in files:
        parts = [part.split("\n", 1)[1] for part in path.read_text().split("=== ")[1:]]
        sources = [p for p in parts if p.startswith(".version")]
        if sources:
            assemble(one_module(sources))


# --------------------------------------------------------------------------
# On a GPU


@needs_gpu
@pytest.mark.parametrize("shape", [(4, 7), (1000, 33), (3, 4097)])
def test_fused_kernels_match_eager_on_gpu(shape) -> None:
    x = torch.randn(*shape, device="cuda")
    y = torch.randn(*shape, device="cuda")

    def f(x, y):
        return torch.softmax(x, -1) * torch.tanh(y) + torch.nn.functional.layer_norm(x, shape[-1:]), x.sum(0), x.argmax(-1)

    got = torch.compile(f, backend="rdyn")(x, y)
    want = f(x, y)
    for g, w in zip(got, want):
        assert g.device == w.device
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


@needs_gpu
def test_mlp_training_on_gpu() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 10)).cuda()
    x = torch.randn(16, 32, device="cuda")
    compiled = torch.compile(model, backend="rdyn")
    loss = compiled(x).square().mean()
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).square().mean().backward()
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)
