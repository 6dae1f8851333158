"""Rewrites of the graph Dynamo captured, before AOTAutograd sees it.

Some functions reach AOTAutograd already decomposed at the autograd level
(PyTorch registers their decompositions under ``DispatchKey.Autograd``), so
their gradients are whatever the decomposition's ops differentiate to, and
rdyn's decomposition table never sees them. Those are rewritten here, where
the call is still the user's.

Nearest-neighbour interpolation (``F.interpolate(mode="nearest" |
"nearest-exact")``) decomposes into a gather (``_unsafe_index``) whose
gradient is a scatter-add (``index_put(accumulate=True)``) at indices saved
from the forward: a serial kernel whose indices rdyn cannot see. When every
spatial dim maps output positions to input positions as an integer repeat
(``j // k``) or an integer stride (``o + k·j``) -- 2x upsampling in U-Nets,
FPNs and YOLO necks, crops and subsampling -- the call is a strided slice, a
broadcast and a copy, whose gradient is a window sum (a reduction rdyn
vectorises) or a strided store. Which map a dim has is read from eager's own
kernel on a probe (one batch, one channel, the input's spatial sizes), so
every scale and rounding rule PyTorch has is the one it applies; any other
map leaves the call as it is.
"""

from __future__ import annotations

import inspect
import math

import torch
import torch.nn.functional as F
from torch._prims_common import suggest_memory_format

_INTERPOLATE = tuple(f for f in (F.interpolate, getattr(F, "upsample", None), getattr(F, "upsample_nearest", None)) if f)
_SIGNATURE = inspect.signature(F.interpolate)
_NEAREST = ("nearest", "nearest-exact")

#: A probe larger than this many output elements is not run (the call stays
#: a gather): the probe costs one eager interpolation of one channel, in
#: float64, at compile time.
PROBE_LIMIT = 1 << 24


def rewrite_captured(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm` with the calls this module rewrites replaced, in place."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target in _INTERPOLATE:
            changed |= _rewrite_nearest(gm, node)
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm


def _rewrite_nearest(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    plan = _nearest_plan(node)
    if plan is None:
        return False
    with gm.graph.inserting_after(node):
        new = gm.graph.call_function(nearest_copy, (node.args[0] if node.args else node.kwargs["input"], plan))
    new.meta = dict(node.meta)
    node.replace_all_uses_with(new)
    gm.graph.erase_node(node)
    return True


def _nearest_plan(node: torch.fx.Node):
    """Each spatial dim's map, or None where the call is not a nearest
    interpolation of static sizes whose every dim repeats or strides."""
    if node.target is getattr(F, "upsample_nearest", None):
        args = dict(zip(("input", "size", "scale_factor"), node.args)) | dict(node.kwargs) | {"mode": "nearest"}
    else:
        try:
            args = _SIGNATURE.bind(*node.args, **node.kwargs).arguments
        except TypeError:
            return None
    x = args.get("input")
    if not isinstance(x, torch.fx.Node) or args.get("mode", "nearest") not in _NEAREST:
        return None
    if args.get("align_corners") is not None or args.get("antialias", False) is not False:
        return None  # eager raises; leave it to eager
    rest = [args.get(k) for k in ("size", "scale_factor", "recompute_scale_factor")]
    if any(_has_node(v) for v in rest):
        return None
    example = x.meta.get("example_value")
    if not isinstance(example, torch.Tensor) or example.dim() not in (3, 4, 5):
        return None
    spatial = tuple(example.shape[2:])
    if not all(type(s) is int and s > 0 for s in spatial):
        return None  # dynamic sizes: the map may change with them
    return _probe(spatial, args)


def _has_node(v) -> bool:
    if isinstance(v, (list, tuple)):
        return any(_has_node(u) for u in v)
    return isinstance(v, torch.fx.Node | torch.SymInt | torch.SymFloat)


def _out_numel(spatial: tuple, args: dict) -> int | None:
    """The output's spatial size as F.interpolate will compute it (to
    bound the probe), or None when neither size nor scale is given."""
    size, factors = args.get("size"), args.get("scale_factor")
    if size is not None:
        sizes = list(size) if isinstance(size, (list, tuple)) else [size] * len(spatial)
    elif factors is not None:
        fs = list(factors) if isinstance(factors, (list, tuple)) else [factors] * len(spatial)
        sizes = [math.floor(n * float(f)) for n, f in zip(spatial, fs)]
    else:
        return None
    return math.prod(max(int(s), 0) for s in sizes)


def _probe(spatial: tuple, args: dict):
    """Run eager's interpolation on `[1, 1, *spatial]` holding each
    element's linear index, and read each dim's map off the axes."""
    out_numel = _out_numel(spatial, args)
    if out_numel is None or max(out_numel, math.prod(spatial)) > PROBE_LIMIT:
        return None
    try:
        with torch._subclasses.fake_tensor.unset_fake_temporarily(), torch.no_grad():
            probe = torch.arange(math.prod(spatial), dtype=torch.float64).reshape(1, 1, *spatial)
            out = F.interpolate(
                probe,
                size=args.get("size"),
                scale_factor=args.get("scale_factor"),
                mode=args.get("mode", "nearest"),
                recompute_scale_factor=args.get("recompute_scale_factor"),
            )
    except Exception:  # noqa: BLE001 - eager raises the same at run time: leave the call to it
        return None
    strides = [math.prod(spatial[d + 1 :]) for d in range(len(spatial))]
    plan = []
    for d, n in enumerate(spatial):
        axis = out[(0, 0) + tuple(slice(None) if e == d else 0 for e in range(len(spatial)))]
        index = [int(v) // strides[d] % n for v in axis.tolist()]
        dim = _dim_map(index, n)
        if dim is None:
            return None
        plan.append(dim)
    return tuple(plan)


def _dim_map(index: list, n: int):
    """`("repeat", k)` where `index[j] == j // k` over `k·n` positions,
    `("slice", start, step, o)` where `index[j] == start + step·j` over `o`
    positions, else None."""
    o = len(index)
    if o % n == 0 and o > n:
        k = o // n
        if all(i == j // k for j, i in enumerate(index)):
            return ("repeat", k)
    step = index[1] - index[0] if o > 1 else 1
    if step >= 1 and all(i == index[0] + step * j for j, i in enumerate(index)):
        return ("slice", index[0], step, o)
    return None


def nearest_copy(x: torch.Tensor, plan: tuple) -> torch.Tensor:
    """Nearest interpolation of `x` by `plan` (one map per spatial dim, see
    `_dim_map`) as views and one copy, laid out as PyTorch's decomposition
    lays it out (the input's suggested memory format; contiguous on CUDA
    below 4 channels)."""
    lead = x.dim() - len(plan)
    memory_format = torch.contiguous_format
    if x.dim() in (4, 5):
        memory_format = suggest_memory_format(x)
        if x.dim() == 4 and x.device.type == "cuda" and x.shape[1] < 4:
            memory_format = torch.contiguous_format
    for d, dim in enumerate(plan):
        if dim[0] == "slice":
            _, start, step, length = dim
            x = x[(slice(None),) * (lead + d) + (slice(start, start + step * (length - 1) + 1, step),)]
    repeats = [dim[1] if dim[0] == "repeat" else 1 for dim in plan]
    if all(k == 1 for k in repeats):
        return x.clone(memory_format=memory_format)
    # Each repeated dim gets a broadcast dim of size k after it; the copy
    # that merges the pairs is the only one.
    wide, sizes, merged = x, [], []
    for d, n in enumerate(x.shape):
        k = repeats[d - lead] if d >= lead else 1
        sizes += [n, k] if k > 1 else [n]
        merged.append(n * k)
        if k > 1:
            wide = wide.unsqueeze(len(sizes) - 1)
    return wide.expand(sizes).reshape(merged).contiguous(memory_format=memory_format)
