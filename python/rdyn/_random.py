"""Random ops in rdyn's kernels: dropout, ``bernoulli``, ``rand``.

ATen draws every random element from its generator, one after another, so a
random op is a call of its own that no kernel can fuse (a CPU dropout of
131K elements took 0.9 ms, more than the matrix product before it). rdyn
computes random numbers instead from a counter-based hash,
``rdyn::hash_mix(position, key)``: 24 random bits from each element's
linear position and one key per op per call (the hash is
``rdyn_ir::random::hash_mix``, in Rust, which every backend implements;
``_hash_mix_eager`` below is the same function in torch ops, the reference
the tests compare kernels with). The key is drawn from torch's generator by
a one-element ``randint`` (an eager node), so ``torch.manual_seed`` makes a
compiled model's random numbers repeat, and each call gets new ones.

The numbers differ from eager's (as Inductor's do): same distribution, not
the same draws. A uniform is ``bits · 2^-24`` (every multiple of 2^-24 in
[0, 1) equally likely), a Bernoulli(p) draw ``uniform < p``. Dropout keeps
an element with probability 1 - p and scales it by 1 / (1 - p), and returns
the mask it used, which its backward reads.
"""

from __future__ import annotations

import math

import numpy as np
import torch

aten = torch.ops.aten

_MASK = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9
_FMIX = (0x85EBCA6B, 0xC2B2AE35)
#: Keys are drawn below 2^24 (a float32 holds them exactly, which the CPU
#: JIT reads them as).
_KEYS = 1 << 24
#: Positions are 32-bit: larger tensors keep ATen's random ops.
_MAX_NUMEL = 1 << 31


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    # int64 lanes holding 32-bit words: a product wraps past 2^63 as
    # two's complement, so its low 32 bits are the 32-bit product's.
    h = h ^ (h >> 16)
    h = (h * _FMIX[0]) & _MASK
    h = h ^ (h >> 13)
    h = (h * _FMIX[1]) & _MASK
    return h ^ (h >> 16)


def _hash_mix_eager(position: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    k = _fmix32((key.to(torch.int64) & _MASK) ^ _GOLDEN)
    h = _fmix32(((position.to(torch.int64) & _MASK) * _GOLDEN + k) & _MASK)
    return _fmix32(h ^ k) >> 8


@torch.library.custom_op("rdyn::hash_mix", mutates_args=())
def hash_mix(position: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """24 random bits (int64 in [0, 2^24)) per element of the broadcast of
    ``position`` and ``key``."""
    return _hash_mix_eager(position, key)


@hash_mix.register_fake
def _(position, key):
    return torch.empty(torch.broadcast_shapes(position.shape, key.shape), dtype=torch.int64, device=position.device)


def _bits(shape, device):
    """24 random bits per element of ``shape`` (int64), or None (a size rdyn
    leaves to ATen)."""
    n = math.prod(shape)
    # A symbolic size is taken as it comes (its positions wrap at 2^32 in
    # the hash, as a static size over 2^31 would; those stay ATen's).
    if isinstance(n, int) and n >= _MAX_NUMEL:
        return None
    key = torch.randint(0, _KEYS, (), dtype=torch.float32, device=device)
    position = torch.arange(n, dtype=torch.int64, device=device).view(tuple(shape))
    return torch.ops.rdyn.hash_mix(position, key.to(torch.int64))


def _uniform(shape, device):
    """float32 uniforms in [0, 1) of ``shape``, or None."""
    bits = _bits(shape, device)
    return None if bits is None else bits.to(torch.float32) * (1.0 / _KEYS)


def _below(shape, device, p):
    """Bernoulli(p) draws as a bool mask: ``uniform < float32(p)``, which
    for ``uniform = bits · 2^-24`` is ``bits < ceil(float32(p) · 2^24)``
    (two ops fewer per element), or None."""
    bits = _bits(shape, device)
    return None if bits is None else bits < math.ceil(float(np.float32(p)) * _KEYS)


def _floating(x) -> bool:
    return x.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def native_dropout(x, p, train):
    """``native_dropout``: ``(x · keep / (1 - p), keep)``, ``keep`` a
    Bernoulli(1 - p) mask."""
    if (train is not None and not train) or not _floating(x) or x.numel() == 0:
        return NotImplemented
    kept = 1.0 - p
    keep = _below(x.shape, x.device, kept)
    if keep is None:
        return NotImplemented
    scale = 0.0 if kept == 0 else 1.0 / kept
    return x * keep * scale, keep


def bernoulli_p(x, p=0.5, generator=None):
    """``bernoulli(x, p)``: 1 with probability p, in x's shape and dtype."""
    if generator is not None or not _floating(x):
        return NotImplemented
    keep = _below(x.shape, x.device, p)
    return NotImplemented if keep is None else keep.to(x.dtype)


def bernoulli(x, generator=None):
    """``bernoulli(x)``: 1 with probability ``x`` per element."""
    if generator is not None or not _floating(x):
        return NotImplemented
    u = _uniform(x.shape, x.device)
    return NotImplemented if u is None else (u < x).to(x.dtype)


def rand_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    dtype = dtype or x.dtype
    if dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        return NotImplemented
    u = _uniform(x.shape, device or x.device)
    return NotImplemented if u is None else u.to(dtype)


def rand(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = dtype or torch.get_default_dtype()
    if dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        return NotImplemented
    u = _uniform(size, device or torch.device("cpu"))
    return NotImplemented if u is None else u.to(dtype)


DECOMPOSITIONS = {
    aten.native_dropout.default: native_dropout,
    aten.bernoulli.p: bernoulli_p,
    aten.bernoulli.default: bernoulli,
    aten.rand_like.default: rand_like,
    aten.rand.default: rand,
}
