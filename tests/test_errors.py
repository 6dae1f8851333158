"""Errors by kind: every error rdyn raises is an `rdyn.RdynError` of one
kind, and subclasses the builtin that code written for eager catches, so
callers (and rdyn's backend, which decides on them whether a graph runs
eagerly) branch on the type, never on the message."""

from __future__ import annotations

import pytest
import torch

import rdyn
from helpers import compile_aten, no_rust_panic


@pytest.mark.parametrize(
    "kind,builtins",
    [
        (rdyn.InputError, (ValueError,)),
        (rdyn.UnsupportedError, (NotImplementedError,)),
        (rdyn.UnavailableError, (RuntimeError,)),
        (rdyn.KernelCheckError, (IndexError, RuntimeError)),
        (rdyn.InternalError, (RuntimeError,)),
    ],
)
def test_each_kind_is_an_rdyn_error_and_the_builtin_eager_code_catches(kind: type, builtins: tuple) -> None:
    assert issubclass(kind, rdyn.RdynError)
    for builtin in builtins:
        assert issubclass(kind, builtin)


def test_a_call_with_the_wrong_dtype_is_an_input_error_naming_it() -> None:
    x = torch.randn(4, 4)
    fn = compile_aten(lambda t: t * 2 + 1, [x])
    with no_rust_panic(), pytest.raises(rdyn.InputError, match="dtype") as raised:
        fn(x.double())
    assert isinstance(raised.value, ValueError)


def test_a_call_with_the_wrong_shape_is_an_input_error_naming_it() -> None:
    x = torch.randn(4, 4)
    fn = compile_aten(lambda t: t * 2 + 1, [x])
    with no_rust_panic(), pytest.raises(rdyn.InputError, match="shape"):
        fn(torch.randn(4, 5))


def test_an_index_out_of_range_is_a_kernel_check_error_raised_to_the_caller() -> None:
    x, idx = torch.randn(5, 3), torch.tensor([[0, 7, 1]])
    fn = torch.compile(lambda a, i: torch.gather(a, 0, i) * 2, backend="rdyn")
    with no_rust_panic(), pytest.raises(rdyn.KernelCheckError) as raised:
        fn(x, idx)
    assert isinstance(raised.value, rdyn.RdynError)
    # The process is fine: a good call after it runs.
    good = torch.tensor([[0, 4, 1]])
    torch.testing.assert_close(fn(x, good), torch.gather(x, 0, good) * 2)


def test_the_backend_runs_eagerly_only_on_rdyn_compiler_errors() -> None:
    from rdyn import backend

    assert set(backend._COMPILER_ERRORS) == {rdyn.InternalError, rdyn.UnavailableError}
    for kind in (rdyn.InputError, rdyn.KernelCheckError, torch.OutOfMemoryError):
        assert not issubclass(kind, backend._COMPILER_ERRORS)
