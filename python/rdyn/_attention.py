"""CPU flash attention (``_scaled_dot_product_flash_attention_for_cpu`` and
its backward): ATen's flash kernels as library calls on the CPU device, or
batched matrix products around pointwise work rdyn fuses (the
decomposition below) on the others, or everywhere with
``RDYN_ATTENTION=decompose`` (``aten``: ATen's kernels everywhere).

Why ATen's kernels on the CPU: they never store the scores (tiles of
queries and keys stay in cache, masked tiles of a causal mask are skipped),
where the decomposition writes and reads [query, key] scores per head
twice. Measured with ``benches/attention_shapes.py`` (2 threads, 9 shapes
from 64 to 1024 tokens, causal or not, torch 2.15): the decomposition ran
at 0.66x of ATen's speed in inference (geomean; 0.42-0.81x, one shape
ahead: head dim 128, 1.12x) and 0.76x for forward and backward (0.50-0.92x;
three shapes ahead, 1.08-1.20x), and further behind on one thread. On a
GPU (wgpu, the CUDA simulator) the decomposition's kernels are the device's
own, and a library call would be a host step, so they keep it.

PyTorch's own decomposition of the forward returns the attention weights
in place of the log-sum-exp, which breaks its gradient, and it has none for
the backward.

An additive mask is added to the scores, fused into the softmax's kernel:
GPT-2's, built by comparing position ids (int64), is recomputed per head
there, which costs little now that such comparisons compile
(`codegen-cpu/src/jit/long.rs`; interpreted, the decomposition took 155 µs
per call against ATen's 99). The backward recomputes the probabilities
from the scores as the forward does, the mask included.

Results are laid out as ATen's kernels lay them out: the forward's output
follows the query's order of dimensions, the log-sum-exp is float32
(float64 for float64) stored [batch, query, head], and the backward's three
gradients are stored [batch, tokens, head, dim] whatever their inputs'
layouts. A row whose scores are all -inf gives 0 in every output.

Grouped-query attention (``enable_gqa``: fewer key and value heads than
query heads, each shared by a group of query heads) multiplies each group's
queries, one after the other, with their shared keys: no key is repeated,
and the products that give the key and value gradients sum over the group.

Anything else (dropout, batch counts that differ, head counts that do not
divide, empty sizes, dtypes ATen rejects, a mask that does not broadcast)
returns NotImplemented: the op then runs as ATen's kernel.
"""

from __future__ import annotations

import math
import os

import torch

aten = torch.ops.aten

_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _supported(query, key, value, dropout_p) -> bool:
    """Whether the shapes and dtypes are ones the decompositions handle
    exactly as ATen's kernels."""
    dtype = query.dtype
    return (
        dropout_p == 0.0
        and query.dim() == key.dim() == value.dim() == 4
        and dtype in _DTYPES
        and key.dtype == dtype
        and value.dtype == dtype
        and key.size(0) == query.size(0)
        and value.shape[:2] == key.shape[:2]
        and _groups(query, key) is not None
        and key.size(3) == query.size(3)
        and value.size(3) == query.size(3)
        and value.size(2) == key.size(2)
        and 0 not in query.shape
        and 0 not in key.shape
    )


def _groups(query, key):
    """How many query heads share each key head: 1, or more under
    grouped-query attention (``enable_gqa``: query head ``i`` reads key
    head ``i // groups``); None where the counts do not divide."""
    heads, kv_heads = query.size(1), key.size(1)
    if heads == kv_heads:
        return 1
    if not isinstance(heads, int) or not isinstance(kv_heads, int) or kv_heads == 0 or heads % kv_heads:
        return None
    return heads // kv_heads


def _mask_supported(mask, query, key) -> bool:
    """A mask ATen's kernels accept: additive, of the query's dtype,
    broadcasting to [batch, head, query, key]."""
    if mask is None:
        return True
    if mask.dtype != query.dtype or mask.dim() > 4:
        return False
    full = (query.size(0), query.size(1), query.size(2), key.size(2))
    sizes = (1,) * (4 - mask.dim()) + tuple(mask.shape)
    return all(m in (1, f) for m, f in zip(sizes, full))


def _work(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _flat(t, work, groups=1):
    """[batch, head, tokens, dim] as [batch * head, tokens, dim] in `work`;
    with `groups` heads sharing a key head, each group's heads one after
    the other as one [groups * tokens, dim] matrix, so that one product
    with the group's keys serves them all (no key is repeated, and the
    key and value gradients come out summed over the group)."""
    heads = t.size(1) // groups
    return t.to(work).reshape(t.size(0) * heads, groups * t.size(2), t.size(3))


def _scores(q, k, shape, scale, is_causal, mask):
    """The scaled scores [batch, head, query, key]: -inf above the diagonal
    when causal, the additive mask added."""
    b, h, l, s = shape
    scores = torch.bmm(q, k.transpose(1, 2)).view(b, h, l, s) * scale
    if is_causal:
        rows = torch.arange(l, device=q.device).view(l, 1)
        cols = torch.arange(s, device=q.device).view(1, s)
        scores = torch.where(cols <= rows, scores, float("-inf"))
    if mask is not None:
        scores = scores + mask.to(q.dtype)
    return scores


def _scale(query, scale):
    return 1.0 / math.sqrt(query.size(3)) if scale is None else scale


def _swapped_storage(t):
    """`t` stored with dims 1 and 2 swapped (same shape and values)."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def _tokens_major(t, b, h, n, e):
    """[batch * head, tokens, dim] stored [batch, tokens, head, dim], viewed
    [batch, head, tokens, dim]."""
    return _swapped_storage(t.view(b, h, n, e))


def flash_attention_cpu(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    """The forward: scores (scaled, masked), then the row max, the sum of
    exponentials, the log-sum-exp and the probabilities from it (one
    fused kernel), then the product with the values."""
    if not _supported(query, key, value, dropout_p) or not _mask_supported(attn_mask, query, key):
        return NotImplemented
    dtype = query.dtype
    b, h, l, e = query.shape
    s = key.size(2)
    work = _work(dtype)
    groups = _groups(query, key)
    q = _flat(query, work, groups)
    k, v = (_flat(t, work) for t in (key, value))
    scores = _scores(q, k, (b, h, l, s), _scale(query, scale), is_causal, attn_mask)
    masked, top, total, probs = _softmax(scores)
    lse = _swapped_storage(torch.where(masked, 0.0, top + torch.log(total)).view(b, h, l))
    out = torch.bmm(_grouped(probs, groups), v).view(b, h, l, e).to(dtype)
    # The output follows the query's order of dimensions (a query viewed
    # from [batch, tokens, heads, dim] gives its output the same strides).
    if query.stride(1) < query.stride(2):
        out = _swapped_storage(out)
    return out, lse


def _grouped(t, groups):
    """[batch * head, tokens, n] as [batch * head / groups, groups * tokens,
    n] (a view), the layout of `_flat`'s grouped queries."""
    bh, tokens, n = t.shape
    return t.view(bh // groups, groups * tokens, n)


def _softmax(scores):
    """The row max (0 for a row of -inf), whether the row is all -inf, the
    sum of ``exp(scores - max)``, and the probabilities ``exps / sum``
    [batch * head, query, key] (0 in a row of -inf): one exp per score.

    The backward builds its probabilities here too, from the scores it
    recomputes, rather than as ``exp(scores - lse)`` from the forward's
    log-sum-exp: in AOTAutograd's joint graph the two constructions are
    then the same nodes, which its common-subexpression pass makes one
    computation (saved for the backward, or recomputed there), and the
    forward keeps its single exp per score. Built from the log-sum-exp,
    the backward's probabilities had needed a second exp per score in
    the forward (or a second pass beside it)."""
    b, h, l, s = scores.shape
    top = torch.amax(scores, dim=-1, keepdim=True)
    masked = top == float("-inf")
    top = torch.where(masked, 0.0, top)
    exps = torch.exp(scores - top)
    total = torch.sum(exps, dim=-1, keepdim=True)
    probs = torch.where(masked, 0.0, exps * torch.reciprocal(total)).view(b * h, l, s)
    return masked, top, total, probs


def flash_attention_cpu_backward(
    grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None
):
    """The backward: the probabilities recomputed from the scores as the
    forward computes them (``_softmax``; the log-sum-exp is not read), then

    - ``dV = P^T dO``,
    - ``dS = P (dO V^T - rowsum(dO * O)) * scale``,
    - ``dQ = dS K`` and ``dK = dS^T Q``,

    four batched products and two fused kernels."""
    if not _supported(query, key, value, dropout_p) or not _mask_supported(attn_mask, query, key):
        return NotImplemented
    if grad_out.shape != query.shape[:3] + value.shape[3:] or out.shape != grad_out.shape:
        return NotImplemented
    dtype = query.dtype
    b, h, l, e = query.shape
    s, hk = key.size(2), key.size(1)
    work = _work(dtype)
    scale = _scale(query, scale)
    groups = _groups(query, key)
    q, do, o = (_flat(t, work, groups) for t in (query, grad_out, out))
    k, v = (_flat(t, work) for t in (key, value))
    scores = _scores(q, k, (b, h, l, s), scale, is_causal, attn_mask)
    probs = _grouped(_softmax(scores)[3], groups)
    grad_v = torch.bmm(probs.transpose(1, 2), do)
    grad_p = torch.bmm(do, v.transpose(1, 2))
    row = torch.sum(do * o, dim=-1, keepdim=True)
    grad_s = probs * (grad_p - row) * scale
    grad_q = torch.bmm(grad_s, k)
    grad_k = torch.bmm(grad_s.transpose(1, 2), q)
    return tuple(
        _tokens_major(g, b, heads, n, e).to(dtype) for g, heads, n in ((grad_q, h, l), (grad_k, hk, s), (grad_v, hk, s))
    )


DECOMPOSITIONS = {
    aten._scaled_dot_product_flash_attention_for_cpu.default: flash_attention_cpu,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default: flash_attention_cpu_backward,
}

#: ``RDYN_ATTENTION``'s values: "auto" (ATen's kernels on the CPU device,
#: the decomposition on the others), "decompose", "aten".
CHOICES = ("auto", "decompose", "aten")


def decomposed_on(device: str) -> bool:
    """Whether attention on `device` runs as the decomposition (else as
    ATen's flash kernels, library calls)."""
    choice = os.environ.get("RDYN_ATTENTION", "auto")
    if choice not in CHOICES:
        raise ValueError(f"rdyn: RDYN_ATTENTION={choice!r} is not one of {list(CHOICES)}")
    return choice == "decompose" or (choice == "auto" and device != "cpu")
