"""FX graph -> the plain data that `rdyn._rdyn.CompiledGraph` imports.

Every value is a tagged tuple (``("tensor", 3)``, ``("int", expr)``, ...); every
size is an int, ``("sym", k)`` or ``(op, a, b)``. The same walk records, for
each node, where its tensor outputs sit in its result, so that the runner can
run any node eagerly.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx
from torch.utils._sympy.symbol import SymT, symbol_is_type


class Unsupported(Exception):
    """The graph uses something rdyn cannot represent (the graph runs eagerly)."""


SUPPORTED_DTYPES = {
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
}


class _Symbols:
    """The graph's size symbols by name, numbered in order of appearance,
    and the definitions of those PyTorch derives from others."""

    def __init__(self):
        self.index: dict[str, int] = {}
        # (symbol, "max" | "min", argument expressions): `Max(1, s0 - 2)`,
        # a convolution's output length, is a symbol of its own whose
        # value the runtime computes from its arguments' symbols.
        self.derived: list[tuple[int, str, list]] = []

    def get(self, name: str) -> int:
        if name not in self.index:
            self.index[name] = len(self.index)
        return self.index[name]

    def define(self, name: str, fn: str, args: list) -> int:
        """The symbol named `name`, defined as `fn(*args)` when first seen."""
        if name not in self.index:
            self.derived.append((self.get(name), fn, args))
        return self.index[name]


def _chain(tag: str, args: list):
    """`args` combined left to right by the binary `tag` (sums and products
    of more than two terms)."""
    out = args[0]
    for a in args[1:]:
        out = (tag, out, a)
    return out


def _sym_expr(expr, syms: _Symbols):
    if isinstance(expr, int):
        return expr
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        if symbol_is_type(expr, (SymT.UNBACKED_INT, SymT.UNBACKED_FLOAT)):
            # A value read from data (`.item()`, `nonzero`, a boolean mask):
            # no input's size binds it, so the graph runs eagerly.
            raise Unsupported(f"data-dependent size {expr}")
        return ("sym", syms.get(str(expr)))
    args = [_sym_expr(a, syms) for a in expr.args]
    kind = type(expr).__name__
    if kind in ("Max", "Min") and len(args) >= 2:
        return ("sym", syms.define(str(expr), kind.lower(), args))
    if expr.is_Add or expr.is_Mul:
        return _chain("add" if expr.is_Add else "mul", args)
    if expr.is_Pow and expr.exp.is_Integer and 1 <= int(expr.exp) <= 8:
        # s**2 (a square image's h*w): a product of the base.
        out = args[0]
        for _ in range(int(expr.exp) - 1):
            out = ("mul", out, args[0])
        return out
    if kind == "FloorDiv" and len(args) == 2:
        return ("floordiv", args[0], args[1])
    if kind in ("Mod", "PythonMod") and len(args) == 2:
        return ("mod", args[0], args[1])
    if kind == "ModularIndexing" and len(args) == 3:
        return ("mod", ("floordiv", args[0], args[1]), args[2])
    raise Unsupported(f"symbolic size {expr} ({kind})")


def _float_expr(expr, syms: _Symbols):
    """A float PyTorch computes from sizes (batch norm's `n / (n - 1)` under
    dynamic sizes) as a tree over integer size expressions: a float,
    ``("int", expr)``, or ``(op, a, b)`` with op in add, mul, div."""
    kind = type(expr).__name__
    if expr.is_Number and not expr.is_Integer:
        return float(expr)
    if kind in ("IntTrueDiv", "FloatTrueDiv") and len(expr.args) == 2:
        return ("div", _float_expr(expr.args[0], syms), _float_expr(expr.args[1], syms))
    if kind == "ToFloat" and len(expr.args) == 1:
        return ("int", _sym_expr(expr.args[0], syms))
    if expr.is_integer:
        return ("int", _sym_expr(expr, syms))
    if expr.is_Add or expr.is_Mul:
        return _chain("add" if expr.is_Add else "mul", [_float_expr(a, syms) for a in expr.args])
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) == -1:
        return ("div", 1.0, _float_expr(expr.base, syms))
    raise Unsupported(f"symbolic float {expr} ({kind})")


def _int_expr(value, syms):
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, torch.SymInt):
        node = value.node
        if node.is_constant() if hasattr(node, "is_constant") else False:
            return int(value)
        return _sym_expr(node.expr, syms)
    raise Unsupported(f"size {value!r}")


def _tensor_values(val):
    """The tensor entries of a node's meta value, with their positions."""
    if isinstance(val, torch.Tensor):
        return [((), val)]
    if isinstance(val, (list, tuple)):
        return [((i,), v) for i, v in enumerate(val) if isinstance(v, torch.Tensor)]
    return []


def _is_scalar(val) -> bool:
    return isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool))


#: Scalar ops that read a tensor's metadata, not its values.
_METADATA_OPS = (
    torch.ops.aten.sym_size.int,
    torch.ops.aten.sym_stride.int,
    torch.ops.aten.sym_numel.default,
    torch.ops.aten.sym_storage_offset.default,
)


def _reads_data(node: fx.Node, tensor_of, data_scalars) -> bool:
    """Whether a scalar node's value comes from a tensor's values (``.item()``
    is ``_local_scalar_dense``), directly or through other scalars: such a
    value is the data's, not a size's, so the runner reads it per call (the
    graph's ``_assert_scalar`` checks on it included) and no node takes it
    as a constant."""
    if node.target in _METADATA_OPS:
        return False
    return any((n, ()) in tensor_of or n in data_scalars for n in node.all_input_nodes)


def _data_reads(node: fx.Node, tensor_of, data_scalars) -> list[fx.Node]:
    """The tensors whose values the scalar arguments of `node` are read
    from, each once, in the order a walk through those scalars meets them."""
    reads: list[fx.Node] = []
    seen: set[fx.Node] = set()

    def walk(n):
        if n in seen:
            return
        seen.add(n)
        if n in data_scalars:
            for m in n.all_input_nodes:
                if (m, ()) in tensor_of:
                    if m not in reads:
                        reads.append(m)
                else:
                    walk(m)

    for n in node.all_input_nodes:
        walk(n)
    return reads


def on_device(data: dict, device: str) -> dict:
    """``data`` with every tensor value placed on ``device`` (code for a
    device is generated from metadata alone: ``explain(..., device="cuda")``
    on a machine with no GPU)."""
    values = [(*v[:4], device) for v in data["values"]]
    return {**data, "values": values}


def import_graph(gm: fx.GraphModule):
    """Return (data, info): `data` for the Rust importer and `info` for the
    runner (nodes by index, tensor/int node maps, output positions)."""
    syms = _Symbols()
    values = []
    tensor_of: dict[tuple[fx.Node, tuple], int] = {}
    int_nodes: dict[fx.Node, object] = {}
    scalar_nodes: set[fx.Node] = set()
    data_scalars: set[fx.Node] = set()
    data_reads: dict[int, list[fx.Node]] = {}
    inputs = []
    nodes = []
    out_positions: dict[int, list[tuple]] = {}
    constants: list = []
    node_list = list(gm.graph.nodes)
    if any(n.op == "call_function" and "with_effects" in str(n.target) for n in node_list):
        raise Unsupported("graphs with effect tokens (with_effects)")

    def add_value(t: torch.Tensor) -> int:
        if t.is_complex() or t.is_sparse or t.layout != torch.strided or t.is_quantized or t.dtype not in SUPPORTED_DTYPES:
            raise Unsupported(f"tensor of dtype {t.dtype} / layout {t.layout}")
        values.append(
            (
                [_int_expr(s, syms) for s in t.shape],
                [_int_expr(s, syms) for s in t.stride()],
                _int_expr(t.storage_offset(), syms),
                str(t.dtype).removeprefix("torch."),
                str(t.device.type) if t.device.type != "cuda" else str(t.device),
            )
        )
        return len(values) - 1

    def conv(a):
        if a is None:
            return ("none",)
        if isinstance(a, bool):
            return ("bool", a)
        if isinstance(a, int):
            return ("int", a)
        if isinstance(a, float):
            return ("float", a)
        if isinstance(a, str):
            return ("str", a)
        if isinstance(a, torch.dtype):
            return ("dtype", str(a).removeprefix("torch."))
        if isinstance(a, torch.device):
            return ("device", str(a))
        if isinstance(a, (torch.layout, torch.memory_format)):
            return ("str", str(a))
        if isinstance(a, torch.SymInt):
            return ("int", _int_expr(a, syms))
        if isinstance(a, torch.SymFloat):
            return ("symfloat", _float_expr(a.node.expr, syms))
        if isinstance(a, torch.SymBool):
            raise Unsupported("symbolic bool argument")
        if isinstance(a, fx.Node):
            if (a, ()) in tensor_of:
                return ("tensor", tensor_of[(a, ())])
            if a in data_scalars:
                raise Unsupported(f"a value read from a tensor ({a.name})")
            if a in int_nodes:
                return ("int", int_nodes[a])
            if a in scalar_nodes and isinstance(a.meta.get("val"), torch.SymFloat):
                return ("symfloat", _float_expr(a.meta["val"].node.expr, syms))
            raise Unsupported(f"argument {a.name}")
        if isinstance(a, (list, tuple)):
            return ("list", [conv(x) for x in a])
        raise Unsupported(f"argument {a!r}")

    for index, node in enumerate(node_list):
        val = node.meta.get("val")
        if node.op == "placeholder":
            if isinstance(val, torch.Tensor):
                vid = add_value(val)
                tensor_of[(node, ())] = vid
                inputs.append(("tensor", vid))
            elif isinstance(val, torch.SymInt):
                expr = _int_expr(val, syms)
                int_nodes[node] = expr
                inputs.append(("symint", expr[1]) if isinstance(expr, tuple) and expr[0] == "sym" else ("opaque",))
            else:
                inputs.append(("opaque",))
            continue
        if node.op == "output":
            continue
        if node.op == "get_attr":
            value = getattr(gm, node.target)
            if not isinstance(value, torch.Tensor):
                raise Unsupported(f"constant {node.target} of type {type(value).__name__}")
            vid = add_value(value)
            tensor_of[(node, ())] = vid
            constants.append((vid, value))
            continue
        if node.op != "call_function":
            raise Unsupported(f"FX node kind {node.op}")
        if node.target is operator.getitem and isinstance(node.args[0], fx.Node):
            src, idx = node.args
            if (src, (idx,)) in tensor_of:
                tensor_of[(node, ())] = tensor_of[(src, (idx,))]
                continue
        if _is_scalar(val) and _reads_data(node, tensor_of, data_scalars):
            # A value read from a tensor (`.item()`): the runner computes it
            # from the tensor for the eager nodes that read it. An int the
            # graph leaves symbolic (no check pins it) raises Unsupported:
            # it is a size no input binds, and the graph runs eagerly.
            if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
                _int_expr(val, syms)
            data_scalars.add(node)
            scalar_nodes.add(node)
            continue
        if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
            int_nodes[node] = _int_expr(val, syms)
            continue
        if isinstance(val, (torch.SymFloat, torch.SymBool, float, bool)):
            # A scalar (a size ratio of upsampling): the runner computes it
            # for the eager nodes that read it.
            scalar_nodes.add(node)
            continue
        entries = _tensor_values(val)
        outputs = []
        for pos, t in entries:
            vid = add_value(t)
            tensor_of[(node, pos)] = vid
            outputs.append(vid)
        out_positions[index] = [pos for pos, _ in entries]
        target = str(node.target) if isinstance(node.target, torch._ops.OpOverload) else f"python.{getattr(node.target, '__name__', node.target)}"
        try:
            args = [conv(a) for a in node.args]
            kwargs = [(k, conv(v)) for k, v in node.kwargs.items()]
        except Unsupported:
            # Keep only the tensors (in order), then those its scalars are
            # read from: the node runs eagerly.
            target = f"opaque.{target}"
            tensors = []
            fx.node.map_arg((node.args, node.kwargs), lambda n: tensors.append(("tensor", tensor_of[(n, ())])) if (n, ()) in tensor_of else None)
            reads = _data_reads(node, tensor_of, data_scalars)
            if reads:
                data_reads[index] = reads
            tensors.extend(("tensor", tensor_of[(n, ())]) for n in reads)
            args, kwargs = [("list", tensors)], []
        nodes.append((index, target, args, kwargs, outputs))

    inputs.extend(("tensor", vid) for vid, _ in constants)
    output_node = node_list[-1]
    outs = output_node.args[0]
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    data = {
        "sym_names": list(syms.index),
        "derived_syms": syms.derived,
        "values": values,
        "inputs": inputs,
        "nodes": nodes,
        "outputs": [conv(o) for o in outs],
    }
    info = {
        "nodes": node_list,
        "tensor_of": tensor_of,
        "int_nodes": int_nodes,
        "scalar_nodes": scalar_nodes,
        # Per eager node, the tensors its scalars are read from, passed
        # after the tensors it mentions.
        "data_reads": data_reads,
        "out_positions": out_positions,
        # Module constants (get_attr) are passed as extra trailing inputs.
        "constants": [value for _, value in constants],
    }
    return data, info
