"""Differential fuzzing: random tensor programs (``fuzzgen.py``) compiled by
rdyn and compared with eager: values (against a float64 reference where
tolerances are tight), dtypes, sizes, stride order, storage sharing, and
gradients for the training cases.

A fixed range of seeds runs in CI. Other ranges, for longer hunts::

    RDYN_FUZZ_SEED=10000 RDYN_FUZZ_COUNT=2000 tools/test.sh tests/test_fuzz.py

Each seed also runs on the CUDA backend's PTX through the simulator
(``cuda-sim``).

A failure prints the program and its inputs; ``fuzzgen.generate(seed)``
rebuilds it.
"""

from __future__ import annotations

import os

import pytest
import torch
from functorch.compile import aot_function, nop

import fuzzgen
from fuzzgen import Case
from helpers import aot_compile, assert_same, clone_inputs, no_rust_panic, to_float64, tolerance

SEED = int(os.environ.get("RDYN_FUZZ_SEED", "0"))
COUNT = int(os.environ.get("RDYN_FUZZ_COUNT", "150"))


#: Seeds run on the CPU, with the range: seed 54545's padded size is a
#: ``sym_sum`` of a list, which the eager runner's scalar evaluation had
#: passed on unevaluated.
SEEDS = sorted({*range(SEED, SEED + COUNT), 54545})


@pytest.mark.parametrize("seed", SEEDS)
def test_random_program_matches_eager(seed: int) -> None:
    check(fuzzgen.generate(seed))


#: Seeds run on the CUDA generator's PTX through the simulator (seed 1782:
#: ``True + True`` in a bool kernel gave 2).
SIM_SEEDS = sorted({*range(SEED, SEED + COUNT), 1782})


@pytest.mark.parametrize("seed", SIM_SEEDS)
def test_random_program_matches_eager_on_cuda_sim(seed: int) -> None:
    check(fuzzgen.generate(seed), {"device": "cuda-sim"})


@pytest.mark.parametrize("seed", SEEDS)
def test_random_program_split_into_pieces_matches_eager(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same programs with every CPU stage that picks between sources by
    index ranges (cat, pad) split where they change, however small
    (``RDYN_PIECEWISE_MIN=1``; by default only stages of a few thousand
    elements are, larger than the fuzzer's tensors)."""
    monkeypatch.setenv("RDYN_PIECEWISE_MIN", "1")
    check(fuzzgen.generate(seed))



def check(case: Case, options: dict | None = None) -> None:
    """Run ``case`` with rdyn (``options`` to torch.compile) and eagerly;
    raise AssertionError on a mismatch."""
    try:
        with no_rust_panic():
            _check(case, options)
    except AssertionError as error:
        raise AssertionError(f"{error}\n\n{case.describe()}") from None


def _check(case: Case, options: dict | None) -> None:
    fn = case.function()
    inputs = case.make_inputs()
    eager_inputs = clone_inputs(inputs)
    expected = fn(*eager_inputs)
    reference_inputs = to_float64(clone_inputs(inputs))
    if case.mode == "train":
        reference_inputs = [t.requires_grad_(e.requires_grad) for t, e in zip(reference_inputs, inputs)]
    try:
        reference = case.function(reference=True)(*reference_inputs)
    except RuntimeError:
        # Some mix of dtypes the float64 run cannot make (an explicit
        # float32 tensor meeting a float64 one): no reference.
        reference = None
    if case.mode == "dynamic":
        compiled = torch.compile(fn, backend="rdyn", dynamic=True, fullgraph=False, options=options)
    else:
        compiled = aot_compile(fn, options)
    actual_inputs = clone_inputs(inputs)
    actual = compiled(*actual_inputs)
    assert_same(actual, expected, reference, **_tolerances(case))
    # Strides as AOTAutograd's graph promises them: where functionalisation
    # itself changes a layout (an in-place op on a clone, ``masked_fill``)
    # no backend behind it can give eager's.
    _same_layouts(actual, aot_function(fn, nop)(*clone_inputs(inputs)))
    _same_sharing(actual, actual_inputs, expected, eager_inputs)
    if case.mode == "dynamic":
        # A second call hits the compiled code and must give the same.
        assert_same(compiled(*clone_inputs(inputs)), expected, reference, what="second call", **_tolerances(case))
    if case.mode == "train":
        _check_gradients(
            (actual, actual_inputs),
            (expected, eager_inputs),
            None if reference is None else (reference, reference_inputs),
            _tolerances(case),
        )


def _tolerances(case: Case) -> dict[str, float]:
    if case.narrowest is None:
        return {}
    rtol, atol = tolerance(case.narrowest)
    return {"rtol": rtol, "atol": atol}


def _same_layouts(actual: tuple, expected: tuple) -> None:
    for index, (got, want) in enumerate(zip(actual, expected)):
        if want.numel() <= 1 or not _dense(want):
            continue
        assert _order(got) == _order(want), (
            f"output[{index}] strides {got.stride()}, eager gives {want.stride()} (sizes {tuple(want.shape)})"
        )


def _dense(t: torch.Tensor) -> bool:
    """No gaps and no overlap: some order of the dims is contiguous."""
    expected = 1
    for size, stride in sorted(zip(t.shape, t.stride()), key=lambda p: p[1]):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def _order(t: torch.Tensor) -> list[int]:
    """Dims of size > 1 from outermost to innermost by stride."""
    dims = [d for d in range(t.dim()) if t.shape[d] > 1]
    return sorted(dims, key=lambda d: -t.stride(d))


def _same_sharing(actual: tuple, actual_inputs: list, expected: tuple, eager_inputs: list) -> None:
    def storages(outs: tuple, ins: list) -> list[list[bool]]:
        ptrs = [t.untyped_storage().data_ptr() for t in (*outs, *ins)]
        n = len(outs)
        return [[ptrs[i] == ptrs[j] and i != j for j in range(len(ptrs))] for i in range(n)]

    got, want = storages(actual, actual_inputs), storages(expected, eager_inputs)
    for i, (g, w) in enumerate(zip(got, want)):
        if any(t.numel() == 0 for t in (actual[i], expected[i])):
            continue
        assert g == w, f"output[{i}] shares storage with {_shared(g, len(actual))}, eager's with {_shared(w, len(actual))}"


def _shared(row: list[bool], outputs: int) -> str:
    names = [f"output[{j}]" if j < outputs else f"input[{j - outputs}]" for j, s in enumerate(row) if s]
    return ", ".join(names) or "nothing"


def _check_gradients(actual: tuple, expected: tuple, reference: tuple | None, tolerances: dict[str, float]) -> None:
    """Gradients of ``sum(output * w)`` (fixed random ``w``) for each run's
    (outputs, inputs); the float64 run's are the reference."""
    differentiable = [i for i, t in enumerate(expected[0]) if t.requires_grad]
    if not differentiable:
        return
    gen = torch.Generator().manual_seed(7)
    weights = [torch.randn(expected[0][i].shape, generator=gen, dtype=torch.float64) for i in differentiable]
    leaves = [i for i, t in enumerate(expected[1]) if t.requires_grad]

    def grads(outs: tuple, ins: list) -> list:
        loss = sum((outs[i].double() * w).sum() for i, w in zip(differentiable, weights))
        found = torch.autograd.grad(loss, [ins[i] for i in leaves], allow_unused=True)
        return [torch.zeros_like(ins[i]) if g is None else g for i, g in zip(leaves, found)]

    try:
        want = grads(*expected)
    except RuntimeError:
        return  # eager has no derivative for some op (heaviside): nothing to compare
    ref = grads(*reference) if reference is not None else None
    assert_same(grads(*actual), want, ref, what="gradient", **tolerances)
