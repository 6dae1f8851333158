"""The exceptions rdyn raises, one class per kind of failure.

Each kind subclasses the builtin that code written for eager already
catches, and `RdynError`, so callers (and rdyn's own backend) branch on the
type, never on the message:

- `InputError` (a `ValueError`): the call's inputs do not fit the graph (a
  dtype, a shape), named in the message with the remedy.
- `UnsupportedError` (a `NotImplementedError`): the device's code generator
  cannot express a kernel yet; the backend runs that graph or call eagerly
  and counts it.
- `UnavailableError` (a `RuntimeError`): the device is missing (no CUDA
  driver, no wgpu adapter); the backend runs the graph eagerly with a warning.
- `KernelCheckError` (an `IndexError` and a `RuntimeError`): a kernel read an
  index out of range or divided an integer by zero. Eager raises
  ``IndexError`` for some of those (``index_select``, ``embedding``,
  ``x[i]``) and ``RuntimeError`` for the rest (``gather``, ``scatter_add``,
  ``index_add``, "ZeroDivisionError" for integer division), so it is both:
  code that catches what eager raises catches it. Raised to the caller.
- `InternalError` (a `RuntimeError`): a bug in rdyn; the backend warns and
  runs the graph eagerly (``RDYN_STRICT=1`` raises it instead).

Memory that cannot be allocated raises ``torch.OutOfMemoryError``, as eager's
allocator does.
"""

from __future__ import annotations


class RdynError(Exception):
    """Base of the errors rdyn raises itself."""


class InputError(RdynError, ValueError):
    """The call's inputs do not fit the compiled graph."""


class UnsupportedError(RdynError, NotImplementedError):
    """A kernel the device's code generator cannot express yet."""


class UnavailableError(RdynError, RuntimeError):
    """The device is not available on this machine."""


class KernelCheckError(RdynError, IndexError, RuntimeError):
    """A kernel read an index out of range or divided an integer by zero."""


class InternalError(RdynError, RuntimeError):
    """A bug in rdyn (please report it)."""


#: The kinds the extension raises, by the name it passes.
BY_KIND = {
    "input": InputError,
    "unsupported": UnsupportedError,
    "unavailable": UnavailableError,
    "device_check": KernelCheckError,
    "internal": InternalError,
}
