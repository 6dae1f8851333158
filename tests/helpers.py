"""Shared helpers for the rdyn Python tests.

Three ways to get a function into rdyn:

* ``torch.compile(fn, backend="rdyn")``: the user's path (Dynamo, AOTAutograd,
  core ATen decompositions, then rdyn).
* :func:`aot_compile`: AOTAutograd without Dynamo, ``rdyn.compile_graph`` as
  its compiler: the graph ``torch.compile`` would produce, ~5x cheaper.
* :func:`compile_aten`: trace ``fn`` to a functional ATen graph with ``make_fx``
  (the same decompositions rdyn uses) and hand it to ``rdyn.compile_graph``,
  returning rdyn's compiled graph object itself (for the guard tests).

Results are compared with eager by :func:`assert_same`, which first applies
per-dtype tolerances and, where they fail and a float64 reference is given,
accepts a result whose RMS error against the float64 reference is at most
twice eager's own (the criterion Inductor's tests use).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx

import rdyn

# Tolerances against eager (rtol, atol), by dtype of the compared tensor.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.complex64: (1e-4, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}
# How much further from the float64 reference than eager a result may be.
REFERENCE_MULTIPLIER = 2.0


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for comparing a tensor of ``dtype`` with eager."""
    return TOLERANCES.get(dtype, (0.0, 0.0))


# --------------------------------------------------------------------------
# Tracing and compiling without Dynamo


def trace_aten(
    fn: Callable[..., Any], inputs: Sequence[torch.Tensor], dynamic: bool = False
) -> torch.fx.GraphModule:
    """``fn`` as a functional ATen FX graph with FakeTensor metadata.

    Mirrors what AOTAutograd hands a backend for an inference graph:
    functionalized (no mutation), rdyn's decompositions applied, every node
    carrying ``meta["val"]``.  With ``dynamic`` every size is a symbol.
    """
    functional = torch.func.functionalize(fn, remove="mutations")
    return make_fx(
        functional,
        decomposition_table=rdyn.DECOMPOSITIONS,
        tracing_mode="symbolic" if dynamic else "fake",
        _allow_non_fake_inputs=True,
    )(*inputs)


def compile_aten(
    fn: Callable[..., Any],
    inputs: Sequence[torch.Tensor],
    options: dict[str, Any] | None = None,
    dynamic: bool = False,
) -> Callable[..., Any]:
    """Trace ``fn`` on ``inputs`` and compile the graph with ``rdyn.compile_graph``."""
    gm = trace_aten(fn, inputs, dynamic)
    return rdyn.compile_graph(gm, list(inputs), options)


class AotCompiled:
    """``fn`` through AOTAutograd (no Dynamo) with rdyn compiling the graph.

    Tracing happens on the first call.  ``reached_rdyn`` tells whether a
    failure came after tracing (rdyn's) or before (AOTAutograd's).
    """

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any] | None = None) -> None:
        from functorch.compile import aot_function, make_boxed_func

        self.reached_rdyn = False

        def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]) -> Any:
            self.reached_rdyn = True
            return make_boxed_func(rdyn.compile_graph(gm, list(example_inputs), options))

        self._compiled = aot_function(
            fn, fw_compiler=compile_graph, bw_compiler=compile_graph, decompositions=rdyn.DECOMPOSITIONS
        )

    def __call__(self, *args: Any) -> Any:
        return self._compiled(*args)


def aot_compile(fn: Callable[..., Any], options: dict[str, Any] | None = None) -> AotCompiled:
    return AotCompiled(fn, options)


def tensor_outputs(fn: Callable[..., Any]) -> Callable[..., tuple[torch.Tensor, ...]]:
    """Wrap ``fn`` so it returns the flat tuple of the tensors in its output."""

    def flat(*args: Any) -> tuple[torch.Tensor, ...]:
        return tuple(x for x in pytree.tree_leaves(fn(*args)) if isinstance(x, torch.Tensor))

    return flat


def clone_inputs(values: Any) -> Any:
    """Deep copy of every tensor in a pytree (keeping strides), other leaves kept."""
    return pytree.tree_map_only(torch.Tensor, _clone_preserving_strides, values)


def _clone_preserving_strides(t: torch.Tensor) -> torch.Tensor:
    if t.is_sparse or t.layout != torch.strided:
        return t.clone()
    # A clone of a non-contiguous view keeps its strides but not its storage
    # offset or gaps; use as_strided on a copied storage to keep all of them.
    storage = t.untyped_storage().clone()
    out = torch.empty(0, dtype=t.dtype, device=t.device)
    out.set_(storage, t.storage_offset(), t.size(), t.stride())
    out.requires_grad_(t.requires_grad)
    return out


def to_float64(values: Any) -> Any:
    """The pytree with every floating tensor upcast to float64 (complex to complex128)."""

    def up(t: torch.Tensor) -> torch.Tensor:
        if t.is_floating_point():
            return t.detach().to(torch.float64)
        if t.is_complex():
            return t.detach().to(torch.complex128)
        return t.detach()

    return pytree.tree_map_only(torch.Tensor, up, values)


# --------------------------------------------------------------------------
# Panics


@contextlib.contextmanager
def no_rust_panic() -> Iterator[None]:
    """Turn a Rust panic escaping rdyn into an ordinary test failure.

    pyo3 raises ``PanicException``, a BaseException that ``except Exception``
    (and so a user's error handling) does not catch; rdyn must never let one
    out.
    """
    try:
        yield
    except BaseException as error:
        if type(error).__name__ == "PanicException":
            raise AssertionError(f"a Rust panic reached Python: {error}") from error
        raise


# --------------------------------------------------------------------------
# Comparison


def assert_same(
    actual: Any,
    expected: Any,
    reference: Any = None,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    check_dtype: bool = True,
    what: str = "output",
) -> None:
    """Assert two pytrees of outputs match: structure, shapes, dtypes, values.

    ``reference``, if given, is the same computation in float64; a tensor that
    misses the tolerances still passes if its RMS error against the reference
    is at most ``REFERENCE_MULTIPLIER`` times eager's (plus ``atol / 10``).
    """
    actual_leaves = pytree.tree_leaves(actual)
    expected_leaves = pytree.tree_leaves(expected)
    assert len(actual_leaves) == len(expected_leaves), (
        f"{what}: {len(actual_leaves)} values, eager gives {len(expected_leaves)}"
    )
    reference_leaves: list[Any] = [None] * len(expected_leaves)
    if reference is not None:
        leaves = pytree.tree_leaves(reference)
        if len(leaves) == len(expected_leaves):
            reference_leaves = leaves
    for index, (got, want, ref) in enumerate(zip(actual_leaves, expected_leaves, reference_leaves)):
        name = f"{what}[{index}]" if len(expected_leaves) > 1 else what
        if isinstance(want, torch.Tensor):
            assert_tensor_same(got, want, ref, rtol=rtol, atol=atol, check_dtype=check_dtype, what=name)
        elif isinstance(want, float) and isinstance(got, float) and math.isnan(want):
            assert math.isnan(got), f"{name}: {got!r}, eager gives nan"
        else:
            assert got == want, f"{name}: {got!r}, eager gives {want!r}"


def assert_tensor_same(
    got: Any,
    want: torch.Tensor,
    ref: Any = None,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    check_dtype: bool = True,
    what: str = "output",
) -> None:
    assert isinstance(got, torch.Tensor), f"{what}: got {type(got).__name__}, eager gives a tensor"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, eager gives {tuple(want.shape)}"
    if check_dtype:
        assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, eager gives {want.dtype}"
    assert got.device == want.device, f"{what}: device {got.device}, eager gives {want.device}"
    default_rtol, default_atol = tolerance(want.dtype)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    got, want = got.detach(), want.detach()
    try:
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True, check_dtype=check_dtype)
        return
    except AssertionError as error:
        mismatch = error
    if isinstance(ref, torch.Tensor) and ref.shape == want.shape and want.is_floating_point() and want.numel():
        if _closer_to_reference(got, want, ref, atol):
            return
    raise AssertionError(f"{what} differs from eager:\n{mismatch}") from None


def _closer_to_reference(got: torch.Tensor, want: torch.Tensor, ref: torch.Tensor, atol: float) -> bool:
    """Inductor's fp64 criterion: rmse(got, ref) <= k * rmse(want, ref) + atol / 10."""
    ref = ref.detach().to(torch.float64)
    got64, want64 = got.to(torch.float64), want.to(torch.float64)
    # NaN/inf must agree exactly where the reference has them.
    special = ~torch.isfinite(want64)
    if not torch.equal(special, ~torch.isfinite(got64)):
        return False
    if special.any() and not torch.equal(got64[special].nan_to_num(), want64[special].nan_to_num()):
        return False
    finite = ~special & torch.isfinite(ref)
    if not finite.any():
        return True
    got_error = _rmse(got64[finite], ref[finite])
    want_error = _rmse(want64[finite], ref[finite])
    return got_error <= REFERENCE_MULTIPLIER * want_error + atol / 10


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.sqrt(torch.mean(torch.square(a - b))).item()


# --------------------------------------------------------------------------
# Exceptions


def exception_chain(error: BaseException) -> list[BaseException]:
    """``error`` and the exceptions it wraps (``inner_exception``, cause, context)."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        inner = getattr(current, "inner_exception", None)
        current = inner or current.__cause__ or current.__context__
    return chain


def wgpu_available() -> bool:
    """Whether rdyn can open a wgpu adapter here (lavapipe counts)."""
    try:
        rdyn.wgpu_adapter()
        return True
    except Exception:  # noqa: BLE001 - any failure to open an adapter means "no wgpu"
        return False


def cpu_kernels(fn: Callable[..., Any], *args: torch.Tensor) -> list:
    """The CPU kernels (`k0`, `k1`, ...) rdyn plans for `fn` on `args`,
    traced with rdyn's decompositions (library and eager steps left out)."""
    gm = make_fx(fn, decomposition_table=rdyn.DECOMPOSITIONS)(*args)
    return [k for k in rdyn.describe_graph(gm, list(args)).kernels if k.name.startswith("k")]
