"""Exceptions rdyn's kernels raise.

A kernel reports two kinds of bad data with one flag: an index out of
range (gather, embedding, scatter, ``index_put``) and an integer division
by zero. Eager raises ``IndexError`` for some of those (``index_select``,
``embedding``, ``x[i]``) and ``RuntimeError`` for the rest (``gather``,
``scatter_add``, ``index_add``, and "ZeroDivisionError" for integer
division), so `KernelCheckError` is both: code that catches what eager
raises catches it.
"""

from __future__ import annotations


class KernelCheckError(IndexError, RuntimeError):
    """A kernel read an index out of range or divided an integer by zero."""
