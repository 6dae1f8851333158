"""Conformance against eager PyTorch, driven by PyTorch's OpInfo database.

``test_op``: every op in ``op_db`` that supports CPU float32 and whose output
is deterministic, on its first two sample inputs.  Each sample becomes a
function of the sample's tensors, which AOTAutograd traces to the same ATen
graph ``torch.compile`` would hand rdyn (rdyn's decompositions, mutations and
aliasing handled outside the graph) and ``rdyn.compile_graph`` compiles.
Skipping Dynamo makes this ~5x cheaper per op.  Samples that AOTAutograd cannot
trace without running data-dependent code (``nonzero``, ``item``, ...) go
through ``torch.compile(backend="rdyn")`` instead, where Dynamo breaks the
graph around them.  ``RDYN_OPINFO_MODE=dynamo`` sends every sample that way.
Per-op records (status, rdyn's node counts, fallback ops) are summarised in
``build/opinfo_summary.json`` (see conftest.py).

``test_op_other_dtypes``: the pointwise, reduction and common composite ops
of ``op_db`` in float64, float16 and bfloat16, one sample each.

``test_dtype_matrix``: a table of pointwise and reduction ops × float64,
float16, bfloat16 (and float32) × odd sizes, non-contiguous and zero-size
inputs, compared with eager at per-dtype tolerances (float64 reference for
the low-precision dtypes), all lowered natively (no fallback nodes).

``test_integer_matrix``: integer and bool dtypes, exact.

``RDYN_OPINFO_LIMIT=N`` keeps the first N cases of each OpInfo test for a
quick run.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import time
import zlib
from typing import Any, Callable

import pytest
import torch
import torch.utils._pytree as pytree
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.opinfo.core import (
    BinaryUfuncInfo,
    OpInfo,
    ReductionOpInfo,
    SampleInput,
    UnaryUfuncInfo,
)
from torch.utils._python_dispatch import TorchDispatchMode

import rdyn
from helpers import (
    aot_compile,
    assert_same,
    clone_inputs,
    compile_aten,
    no_rust_panic,
    tensor_outputs,
    to_float64,
    wgpu_available,
)

# Eager's own warnings (degrees of freedom <= 0, deprecations) are noise here.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

SAMPLES_PER_OP = 2
MODE = os.environ.get("RDYN_OPINFO_MODE", "aot")  # "aot" or "dynamo"
assert MODE in ("aot", "dynamo"), f"RDYN_OPINFO_MODE must be 'aot' or 'dynamo', not {MODE!r}"

# Ops whose outputs are random or uninitialised memory: nothing to compare.
# (Samples of other ops that draw random numbers, such as dropout with
# training=True, are found at run time by RandomOpDetector.)
RANDOM_OP = re.compile(
    r"(^|[._])(rand\w*|randn\w*|randint\w*|normal|log_normal|bernoulli|uniform|multinomial|cauchy"
    r"|exponential|geometric|poisson|rrelu|fractional_max_pool\w*|\w*empty\w*)$"
)
# Non-random names the pattern above would catch.
NOT_RANDOM = {"signal.windows.exponential", "nn.functional.poisson_nll_loss"}


def op_id(op: OpInfo) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def is_random(op: OpInfo) -> bool:
    if op.name in NOT_RANDOM:
        return False
    return bool(
        getattr(op, "has_nondeterministic_output", False)  # torch >= 2.12
        or op.skip_correctness_check_compile_vs_eager
        or RANDOM_OP.search(op.name)
    )


def _limit(ops: list[Any]) -> list[Any]:
    limit = os.environ.get("RDYN_OPINFO_LIMIT")
    return ops[: int(limit)] if limit else ops


OPS = _limit([op for op in op_db if op.supports_dtype(torch.float32, "cpu")])

# The pointwise and reduction ops, plus the composite ops models are made of,
# also run in float64, float16 and bfloat16 (one sample each).
LOW_PRECISION_DTYPES = [torch.float64, torch.float16, torch.bfloat16]
COMPOSITE_OPS = {
    "softmax",
    "log_softmax",
    "logsumexp",
    "var",
    "std",
    "var_mean",
    "std_mean",
    "nn.functional.layer_norm",
    "nn.functional.group_norm",
    "nn.functional.batch_norm",
    "nn.functional.rms_norm",
    "nn.functional.gelu",
    "nn.functional.silu",
    "nn.functional.hardswish",
    "nn.functional.leaky_relu",
    "nn.functional.elu",
    "nn.functional.avg_pool2d",
    "nn.functional.max_pool2d",
    "nn.functional.adaptive_avg_pool2d",
    "nn.functional.interpolate",
    "nn.functional.linear",
    "nn.functional.conv2d",
    "nn.functional.embedding",
    "nn.functional.cross_entropy",
    "matmul",
    "addmm",
    "bmm",
    "where",
    "clamp",
    "cat",
    "index_select",
    "gather",
}


def _is_pointwise_or_reduction(op: OpInfo) -> bool:
    return isinstance(op, (UnaryUfuncInfo, BinaryUfuncInfo, ReductionOpInfo)) or op.name in COMPOSITE_OPS


LOW_PRECISION_CASES = _limit(
    [
        pytest.param(op, dtype, id=f"{op_id(op)}-{str(dtype)[6:]}")
        for dtype in LOW_PRECISION_DTYPES
        for op in op_db
        if _is_pointwise_or_reduction(op) and op.supports_dtype(dtype, "cpu")
    ]
)


# --------------------------------------------------------------------------
# One sample as a function of its tensors


def sample_as_function(op: OpInfo, sample: SampleInput) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    """``(fn, tensors)`` with ``fn(*tensors) == op(sample.input, *sample.args, **sample.kwargs)``.

    Every tensor in the sample (``sample.input`` may be a list of tensors)
    becomes a positional input, so the compiled graph sees them as inputs
    rather than constants.
    """
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    tensor_positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    tensors = [leaves[i] for i in tensor_positions]

    def fn(*ts: torch.Tensor) -> Any:
        rebuilt = list(leaves)
        for position, t in zip(tensor_positions, ts):
            rebuilt[position] = t
        first, args, kwargs = pytree.tree_unflatten(rebuilt, spec)
        return op.op(first, *args, **kwargs)

    return fn, tensors


def outputs_match(a: Any, b: Any) -> bool:
    """Whether two eager runs of a sample agree (to rounding: LAPACK-backed
    ops are not bitwise reproducible).  Catches outputs that are random or
    uninitialised memory."""
    la, lb = pytree.tree_leaves(a), pytree.tree_leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.layout != torch.strided or y.layout != torch.strided:
                continue
            x, y = x.resolve_conj().resolve_neg(), y.resolve_conj().resolve_neg()
            if x.dtype == torch.complex32:
                x, y = x.to(torch.complex64), y.to(torch.complex64)
            try:
                torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6, equal_nan=True)
            except AssertionError:
                return False
        elif x != y and not (x != x and y != y):
            return False
    return True


class EagerFailed(Exception):
    """The sample raises in eager: not a valid test case."""


class EagerRandom(Exception):
    """The sample draws random numbers in eager: nothing to compare."""


class RandomOpDetector(TorchDispatchMode):
    """Records the ATen ops tagged ``nondeterministic_seeded`` (bernoulli,
    normal, native_dropout, ...) that run under it.  More reliable than
    watching the RNG state: OpInfo wraps random ops in ``wrapper_set_seed``,
    which reseeds before every call."""

    def __init__(self) -> None:
        super().__init__()
        self.random_ops: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if torch.Tag.nondeterministic_seeded in func.tags and not _without_dropout(func, args, kwargs):
            self.random_ops.add(str(func.overloadpacket))
        return func(*args, **kwargs)


def _without_dropout(func: Any, args: Any, kwargs: dict[str, Any]) -> bool:
    """True for a seeded op whose dropout is off (attention with
    ``dropout_p=0``, ``native_dropout`` with ``p=0`` or ``train=False``)."""
    named = dict(kwargs)
    for argument, value in zip(func._schema.arguments, args):
        named[argument.name] = value
    if "dropout_p" in named:
        return named["dropout_p"] == 0
    if func.overloadpacket is torch.ops.aten.native_dropout:
        return named.get("p") == 0 or named.get("train") is False
    return False


def run_eager(
    fn: Callable[..., Any], tensors: list[torch.Tensor], check_random: bool = False
) -> tuple[Any, list[torch.Tensor]]:
    """Eager outputs and the inputs after the call."""
    inputs = clone_inputs(tensors)
    detector = RandomOpDetector() if check_random else contextlib.nullcontext()
    try:
        with detector:
            outputs = fn(*inputs)
    except Exception as error:  # noqa: BLE001 - any eager error disqualifies the sample
        raise EagerFailed(f"{type(error).__name__}: {error}") from error
    if check_random and detector.random_ops:
        raise EagerRandom("random ops in eager: " + ", ".join(sorted(detector.random_ops)))
    return outputs, inputs


def tensor_leaves(values: Any) -> list[torch.Tensor]:
    return [leaf for leaf in pytree.tree_leaves(values) if isinstance(leaf, torch.Tensor)]


def float64_reference(fn: Callable[..., Any], tensors: list[torch.Tensor], like: Any) -> Any:
    """The sample computed in float64, or None where that is not meaningful."""
    try:
        # Clone: for float64 inputs the conversion is a no-op, and an op that
        # updates its inputs in place (batch_norm's running stats) must not
        # change the tensors the other runs start from.
        reference = fn(*clone_inputs(to_float64(tensors)))
    except Exception:  # noqa: BLE001 - many ops have no float64 kernel or reject mixed dtypes
        return None
    if len(pytree.tree_leaves(reference)) != len(pytree.tree_leaves(like)):
        return None
    return reference


def run_rdyn(
    fn: Callable[..., Any], tensors: list[torch.Tensor], tensors_only: bool, device: str = "cpu"
) -> tuple[Any, list[torch.Tensor], str]:
    """rdyn's outputs, the inputs after the call, and the path taken.

    With ``tensors_only`` the outputs are the flat tuple of output tensors
    (what an ATen graph returns); otherwise the op's own output.
    """
    # CUDA tensors compile for CUDA by themselves; the option picks CPU or wgpu.
    options = {} if device == "cuda" else {"device": device}
    if MODE == "aot" and tensors_only:
        compiled = aot_compile(tensor_outputs(fn), options)
        inputs = clone_inputs(tensors)
        try:
            return tuple(compiled(*inputs)), inputs, "aot"
        except Exception:
            if compiled.reached_rdyn:
                raise
            # AOTAutograd could not trace the sample without running
            # data-dependent code (nonzero, item, ...); Dynamo can.
    inputs = clone_inputs(tensors)
    compiled_fn = torch.compile(
        tensor_outputs(fn) if tensors_only else fn, backend="rdyn", dynamic=False, options=options
    )
    return compiled_fn(*inputs), inputs, "dynamo"


# --------------------------------------------------------------------------
# The per-op conformance test


@pytest.mark.parametrize("op", OPS, ids=op_id)
def test_op(op: OpInfo, opinfo_results: list[dict[str, Any]]) -> None:
    _run_recorded(op, torch.float32, SAMPLES_PER_OP, opinfo_results)


@pytest.mark.skipif(not wgpu_available(), reason="no wgpu adapter (install mesa-vulkan-drivers for lavapipe)")
@pytest.mark.parametrize("op", OPS, ids=op_id)
def test_op_wgpu(op: OpInfo, opinfo_results: list[dict[str, Any]]) -> None:
    """The same conformance run with ``options={"device": "wgpu"}``."""
    _run_recorded(op, torch.float32, SAMPLES_PER_OP, opinfo_results, device="wgpu")


@pytest.mark.parametrize("op", OPS, ids=op_id)
def test_op_cuda_sim(op: OpInfo, opinfo_results: list[dict[str, Any]]) -> None:
    """The conformance run on the CUDA backend's PTX, run by rdyn's PTX
    simulator on CPU tensors (``options={"device": "cuda-sim"}``): the CUDA
    generator's numbers, checked without a GPU."""
    _run_recorded(op, torch.float32, SAMPLES_PER_OP, opinfo_results, device="cuda-sim")


@pytest.mark.parametrize("op,dtype", [c for c in LOW_PRECISION_CASES if c.values[1] in (torch.float16, torch.bfloat16)])
def test_op_cuda_sim_half(op: OpInfo, dtype: torch.dtype, opinfo_results: list[dict[str, Any]]) -> None:
    _run_recorded(op, dtype, 1, opinfo_results, device="cuda-sim")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("op", OPS, ids=op_id)
def test_op_cuda(op: OpInfo, opinfo_results: list[dict[str, Any]]) -> None:
    """The conformance run on CUDA tensors (rdyn's PTX kernels)."""
    _run_recorded(op, torch.float32, SAMPLES_PER_OP, opinfo_results, device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
@pytest.mark.parametrize("op,dtype", [c for c in LOW_PRECISION_CASES if c.values[1] in (torch.float16, torch.bfloat16)])
def test_op_cuda_half(op: OpInfo, dtype: torch.dtype, opinfo_results: list[dict[str, Any]]) -> None:
    _run_recorded(op, dtype, 1, opinfo_results, device="cuda")


@pytest.mark.parametrize("op,dtype", LOW_PRECISION_CASES)
def test_op_other_dtypes(op: OpInfo, dtype: torch.dtype, opinfo_results: list[dict[str, Any]]) -> None:
    _run_recorded(op, dtype, 1, opinfo_results)


def _run_recorded(
    op: OpInfo, dtype: torch.dtype, samples: int, opinfo_results: list[dict[str, Any]], device: str = "cpu"
) -> None:
    record: dict[str, Any] = {
        "op": op_id(op),
        "device": device,
        "dtype": str(dtype).removeprefix("torch."),
        "status": "fail",
        "samples": 0,
        "paths": [],
    }
    start = time.monotonic()
    try:
        _check_op(op, dtype, samples, record, device)
        record["status"] = "pass"
    except pytest.skip.Exception as skip:
        record["status"] = "skip"
        record["reason"] = str(skip)
        raise
    except BaseException as error:
        record["reason"] = f"{type(error).__name__}: {error}".splitlines()[0][:300]
        raise
    finally:
        counters = rdyn.stats()
        for key in ("nodes_native", "nodes_extern", "nodes_fallback", "graphs", "kernels", "wgpu_cpu_kernels"):
            record[key] = counters.get(key, 0)
        record["fallback_ops"] = dict(counters.get("fallback_ops", {}))
        record["seconds"] = round(time.monotonic() - start, 3)
        opinfo_results.append(record)


def _check_op(op: OpInfo, dtype: torch.dtype, count: int, record: dict[str, Any], device: str = "cpu") -> None:
    if is_random(op):
        pytest.skip("random or uninitialised output")
    torch.manual_seed(0)
    sample_device = "cuda" if device == "cuda" else "cpu"
    samples = list(itertools.islice(op.sample_inputs(sample_device, dtype, requires_grad=False), count))
    reasons = []
    for index, sample in enumerate(samples):
        fn, tensors = sample_as_function(op, sample)
        if any(t.layout != torch.strided for t in tensors):
            reasons.append(f"sample {index} has sparse inputs")
            continue
        try:
            expected, expected_inputs = run_eager(fn, tensors)
            again, _ = run_eager(fn, tensors, check_random=True)
        except (EagerFailed, EagerRandom) as error:
            reasons.append(f"sample {index}: {error}")
            continue
        if not outputs_match(expected, again):
            reasons.append(f"sample {index}: eager output is not deterministic")
            continue
        # Graphs return tensors; an op returning numbers (item, equal) is
        # compared whole, through Dynamo.
        tensors_only = bool(tensor_leaves(expected))
        if tensors_only:
            expected = tuple(tensor_leaves(expected))
        reference = float64_reference(fn, tensors, expected)
        if tensors_only and reference is not None:
            reference = tuple(tensor_leaves(reference))
        with no_rust_panic():
            actual, actual_inputs, path = run_rdyn(fn, tensors, tensors_only, device)
        record["paths"].append(path)
        what = f"sample {index} ({sample.summary()[:400]})"
        assert_same(actual, expected, reference, what=f"{what} output")
        assert_same(actual_inputs, expected_inputs, what=f"{what} inputs after the call")
        record["samples"] += 1
    if record["samples"] == 0:
        pytest.skip("no usable sample: " + "; ".join(reasons) if reasons else "no samples")


# --------------------------------------------------------------------------
# The dtype × layout × size matrix


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def _log_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(x, dim=-1)


def _layer_norm(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, x.shape[-1:])


def _layer_norm_affine(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    n = x.shape[-1]
    weight = y.reshape(-1)[:n] if y.numel() >= n else torch.ones(n, dtype=x.dtype)
    return torch.nn.functional.layer_norm(x, (n,), weight, weight * 0.5)


# name -> (function, number of tensor inputs); reductions run over dims of
# the odd size.
MATRIX_OPS: dict[str, tuple[Callable[..., Any], int]] = {
    "add": (torch.add, 2),
    "sub": (torch.sub, 2),
    "mul": (torch.mul, 2),
    "div": (torch.div, 2),
    "maximum": (torch.maximum, 2),
    "where": (lambda x, y: torch.where(x > y, x, y * 2), 2),
    "add_scalar_mul": (lambda x, y: (x + 1.5) * y - 0.25, 2),
    "neg": (torch.neg, 1),
    "abs": (torch.abs, 1),
    "exp": (torch.exp, 1),
    "log": (lambda x: torch.log(x.abs() + 0.5), 1),
    "sqrt": (lambda x: torch.sqrt(x.abs()), 1),
    "rsqrt": (lambda x: torch.rsqrt(x.abs() + 0.1), 1),
    "sin": (torch.sin, 1),
    "tanh": (torch.tanh, 1),
    "sigmoid": (torch.sigmoid, 1),
    "relu": (torch.relu, 1),
    "gelu": (torch.nn.functional.gelu, 1),
    "gelu_tanh": (lambda x: torch.nn.functional.gelu(x, approximate="tanh"), 1),
    "silu": (torch.nn.functional.silu, 1),
    "clamp": (lambda x: torch.clamp(x, -0.5, 0.75), 1),
    "to_float32": (lambda x: x.to(torch.float32) * 2, 1),
    "sum": (lambda x: x.sum(-1), 1),
    "sum_all": (torch.sum, 1),
    "sum_dim0": (lambda x: x.sum(0), 1),
    "mean": (lambda x: x.mean(-1), 1),
    "amax": (lambda x: x.amax(-1), 1),
    "amin": (lambda x: x.amin(0), 1),
    "prod": (lambda x: (x * 0.1 + 1).prod(-1), 1),
    "argmax": (lambda x: x.argmax(-1), 1),
    "var": (lambda x: x.var(-1), 1),
    "std_mean": (lambda x: torch.std_mean(x, dim=-1), 1),
    "softmax": (_softmax, 1),
    "log_softmax": (_log_softmax, 1),
    "layer_norm": (_layer_norm, 1),
    "layer_norm_affine": (_layer_norm_affine, 2),
}

MATRIX_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
MATRIX_SIZES = [1, 3, 50, 783, 4097]
MATRIX_LAYOUTS = [f"n{n}" for n in MATRIX_SIZES] + ["transposed", "sliced", "expanded", "zero", "zero_rows"]


def make_matrix_input(layout: str, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    """A (rows, n) input for the given layout; reductions run over the last dim."""

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float32).to(dtype)

    if layout.startswith("n"):
        return rand(3, int(layout[1:]))
    if layout == "transposed":  # strides (1, 37)
        return rand(129, 37).t()
    if layout == "sliced":  # strides (520, 2), storage offset 261
        return rand(14, 260)[1::2, 1::2]
    if layout == "expanded":  # stride 0 in the rows
        return rand(1, 333).expand(5, 333)
    if layout == "zero":  # reductions over an empty dim
        return rand(5, 0)
    if layout == "zero_rows":
        return rand(0, 7)
    raise ValueError(layout)


def _matrix_params() -> list[Any]:
    params = []
    for name in MATRIX_OPS:
        for dtype in MATRIX_DTYPES:
            for layout in MATRIX_LAYOUTS:
                params.append(pytest.param(name, dtype, layout, id=f"{name}-{str(dtype)[6:]}-{layout}"))
    return params


@pytest.mark.parametrize("name,dtype,layout", _matrix_params())
def test_dtype_matrix(name: str, dtype: torch.dtype, layout: str) -> None:
    fn, arity = MATRIX_OPS[name]
    generator = torch.Generator().manual_seed(zlib.crc32(f"{name}-{layout}".encode()))
    tensors = [make_matrix_input(layout, dtype, generator) for _ in range(arity)]
    try:
        expected, _ = run_eager(fn, tensors)
    except EagerFailed as error:
        pytest.skip(f"eager: {error}")
    expected = tuple(tensor_leaves(expected))
    reference = float64_reference(fn, tensors, expected)
    reference = None if reference is None else tuple(tensor_leaves(reference))
    # Low-precision results are compared in their own dtype but judged
    # against float64 where eager's own rounding differs from rdyn's.
    with no_rust_panic():
        compiled = compile_aten(tensor_outputs(fn), clone_inputs(tensors))
        actual = tuple(compiled(*clone_inputs(tensors)))
    assert_same(actual, expected, reference, what=f"{name} {dtype} {layout}")
    # These ops are the core of what rdyn lowers: the comparison must be of
    # rdyn's own kernels, not of an eager fallback.
    stats = rdyn.stats()
    assert stats["nodes_fallback"] == 0, f"fallback ops: {stats['fallback_ops']}"


# --------------------------------------------------------------------------
# Integer and bool dtypes: exact results, C-style vs Python-style division


def _nonzero(t: torch.Tensor) -> torch.Tensor:
    return torch.where(t == 0, torch.ones_like(t), t)


INTEGER_OPS: dict[str, tuple[Callable[..., Any], int]] = {
    "add": (torch.add, 2),
    "sub": (lambda x, y: x - y, 2),
    "mul": (torch.mul, 2),
    "floor_divide": (lambda x, y: torch.floor_divide(x, _nonzero(y)), 2),
    "trunc_divide": (lambda x, y: torch.div(x, _nonzero(y), rounding_mode="trunc"), 2),
    "true_divide": (lambda x, y: x / _nonzero(y), 2),
    "remainder": (lambda x, y: torch.remainder(x, _nonzero(y)), 2),
    "fmod": (lambda x, y: torch.fmod(x, _nonzero(y)), 2),
    "bitwise": (lambda x, y: (x & y) | (x ^ 3), 2),
    "compare": (lambda x, y: (x < y, x == y, x >= 1), 2),
    "where": (lambda x, y: torch.where(x > y, x, y), 2),
    "maximum": (torch.maximum, 2),
    "abs_neg": (lambda x: (x.abs(), -x), 1),
    "to_float": (lambda x: x.to(torch.float32) * 0.5, 1),
    "sum": (lambda x: x.sum(-1), 1),
    "sum_all": (torch.sum, 1),
    "amax": (lambda x: x.amax(-1), 1),
    "argmin": (lambda x: x.argmin(0), 1),
}
INTEGER_DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
INTEGER_LAYOUTS = ["n3", "n783", "transposed", "sliced"]
BOOL_OPS: dict[str, tuple[Callable[..., Any], int]] = {
    "logical": (lambda x, y: (x & y, x | y, x ^ y, ~x), 2),
    "where": (lambda x, y: torch.where(x, y, ~y), 2),
    "any_all": (lambda x, y: (x.any(-1), y.all(0), (x | y).any()), 2),
    "sum": (lambda x, y: (x.sum(-1), (x & y).sum()), 2),
    "to_float": (lambda x, y: x.to(torch.float32) + y, 2),
}


def make_integer_input(layout: str, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    low, high = (0, 2) if dtype == torch.bool else (0, 200) if dtype == torch.uint8 else (-100, 100)
    if dtype == torch.int8:
        low, high = -60, 60

    def rand(*shape: int) -> torch.Tensor:
        return torch.randint(low, high, shape, generator=generator).to(dtype)

    if layout.startswith("n"):
        return rand(3, int(layout[1:]))
    if layout == "transposed":
        return rand(129, 37).t()
    if layout == "sliced":
        return rand(14, 260)[1::2, 1::2]
    raise ValueError(layout)


def _integer_params() -> list[Any]:
    params = []
    for name in INTEGER_OPS:
        for dtype in INTEGER_DTYPES:
            for layout in INTEGER_LAYOUTS:
                params.append(pytest.param("int", name, dtype, layout, id=f"{name}-{str(dtype)[6:]}-{layout}"))
    for name in BOOL_OPS:
        for layout in INTEGER_LAYOUTS:
            params.append(pytest.param("bool", name, torch.bool, layout, id=f"{name}-bool-{layout}"))
    return params


@pytest.mark.parametrize("table,name,dtype,layout", _integer_params())
def test_integer_matrix(table: str, name: str, dtype: torch.dtype, layout: str) -> None:
    fn, arity = (INTEGER_OPS if table == "int" else BOOL_OPS)[name]
    generator = torch.Generator().manual_seed(zlib.crc32(f"{name}-{layout}".encode()))
    tensors = [make_integer_input(layout, dtype, generator) for _ in range(arity)]
    try:
        expected, _ = run_eager(fn, tensors)
    except EagerFailed as error:
        pytest.skip(f"eager: {error}")
    expected = tuple(tensor_leaves(expected))
    with no_rust_panic():
        compiled = compile_aten(tensor_outputs(fn), clone_inputs(tensors))
        actual = tuple(compiled(*clone_inputs(tensors)))
    assert_same(actual, expected, what=f"{name} {dtype} {layout}")
    stats = rdyn.stats()
    assert stats["nodes_fallback"] == 0, f"fallback ops: {stats['fallback_ops']}"
