"""The host side of a compiled graph: allocations and eager nodes.

The Rust runtime calls `alloc` for tensors PyTorch must own (outputs and the
inputs of eager nodes). For a node it does not lower it asks `fast_node` once
for the node's op and constant arguments and then calls the op itself
(`frontend/src/node_call.rs`); nodes with no such form go through `run_node`.
Tensors are passed in the order the node's arguments mention them.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx


class GraphRunner:
    def __init__(self, info):
        self.nodes = info["nodes"]
        self.tensor_of = info["tensor_of"]
        self.int_nodes = info["int_nodes"]
        self.scalar_nodes = info.get("scalar_nodes", set())
        self.data_reads = info.get("data_reads", {})
        self.out_positions = info["out_positions"]
        self.placeholders = [n for n in self.nodes if n.op == "placeholder"]
        self.inputs = []
        self._scalars = {}
        self._bound = None
        # The tensors the current eager node's scalars are read from.
        self._read = {}

    def set_inputs(self, args):
        self.inputs = args
        self._scalars = {}
        self._bound = None
        self._read = {}

    @staticmethod
    def with_layout(t, sizes, strides):
        return _with_layout(t, sizes, strides)

    @staticmethod
    def alloc(sizes, strides, dtype):
        return torch.empty_strided(sizes, strides, dtype=dtype)

    def _scalar_value(self, node):
        """The value of a scalar node (int, or a float or bool in
        ``scalar_nodes``) for the current call."""
        if node in self._scalars:
            return self._scalars[node]
        if node.op == "placeholder":
            value = self.inputs[self.placeholders.index(node)]
        elif node.target in _TENSOR_METADATA:
            value = self._metadata(node)
        else:
            # Nested too: `sym_sum` takes its terms as one list.
            args = fx.node.map_arg(node.args, self._operand)
            kwargs = fx.node.map_arg(node.kwargs, self._operand)
            value = node.target(*args, **kwargs)
        val = node.meta.get("val")
        convert = float if isinstance(val, (torch.SymFloat, float)) else bool if isinstance(val, (torch.SymBool, bool)) else int
        self._scalars[node] = convert(value)
        return self._scalars[node]

    def _operand(self, node):
        """An operand of a scalar node: a tensor its value is read from
        (``.item()``'s), or another scalar."""
        if node in self._read:
            return self._read[node]
        return self._scalar_value(node)

    def _metadata(self, node):
        """A size, stride, element count or offset of a tensor: read from the
        input itself, or for a value computed inside the graph, its
        metadata's expression evaluated with this call's sizes."""
        source = node.args[0]
        if source.op == "placeholder":
            tensor = self.inputs[self.placeholders.index(source)]
            return _TENSOR_METADATA[node.target](tensor, *node.args[1:])
        expr = node.meta["val"].node.expr
        value = expr.xreplace(self._symbols())
        if value.free_symbols:
            raise RuntimeError(f"rdyn: cannot evaluate {node.name} ({expr}) eagerly")
        return value

    def _symbols(self):
        """Each size symbol's value in this call, from the inputs that carry it."""
        if self._bound is None:
            bound = {}
            for node, value in zip(self.placeholders, self.inputs):
                val = node.meta.get("val")
                if isinstance(val, torch.SymInt):
                    pairs = [(val, value)]
                elif isinstance(val, torch.Tensor) and isinstance(value, torch.Tensor):
                    pairs = [*zip(val.shape, value.shape), *zip(val.stride(), value.stride())]
                else:
                    pairs = []
                for sym, v in pairs:
                    if isinstance(sym, torch.SymInt) and sym.node.expr.is_Symbol:
                        bound[sym.node.expr] = int(v)
            self._bound = bound
        return self._bound

    def run_node(self, index, tensors, layouts):
        """Run node `index` on `tensors` (in the order the node mentions
        them); returns its tensor results with the metadata's `layouts`.
        Nodes with a `fast_node` form are called from Rust instead."""
        node = self.nodes[index]
        reads = self.data_reads.get(index, ())
        mentioned = len(tensors) - len(reads)
        self._read = dict(zip(reads, tensors[mentioned:]))
        it = iter(tensors[:mentioned])

        def sub(a):
            if isinstance(a, fx.Node):
                if (a, ()) in self.tensor_of:
                    return next(it)
                if a in self.int_nodes or a in self.scalar_nodes:
                    return self._scalar_value(a)
                raise RuntimeError(f"rdyn: node {node.name} reads {a.name}, which is neither a tensor nor a scalar")
            return a

        args = fx.node.map_aggregate(node.args, sub)
        kwargs = fx.node.map_aggregate(node.kwargs, sub)
        if _writes_workspace(node):
            return self._outputs(index, _with_workspace(node.target, args, kwargs), layouts)
        op = _contiguous_inputs(node.target) if _needs_contiguous(node.target) else node.target
        return self._outputs(index, op(*args, **kwargs), layouts)

    def fast_node(self, index):
        """`(op, args, kwargs, tensor slots, output paths)` when the node's
        tensors are top-level arguments (a position or a keyword) and it
        reads no int-valued node (most library calls: mm, convolution,
        attention); else None. The Rust host then calls `op(*args,
        **kwargs)` itself with each tensor put in its slot (a position, or
        a keyword's name), in the order the node mentions them, and takes
        each output from the result by its index path."""
        node = self.nodes[index]
        if not isinstance(node.target, torch._ops.OpOverload) or _writes_workspace(node):
            return None
        slots = []
        unsupported = object()

        def constant(a, slot):
            if isinstance(a, fx.Node):
                if (a, ()) not in self.tensor_of:
                    return unsupported
                slots.append(slot)
                return None
            if isinstance(a, (list, tuple)) and any(isinstance(x, fx.Node) for x in a):
                return unsupported
            return a

        args = [constant(a, pos) for pos, a in enumerate(node.args)]
        kwargs = {name: constant(a, name) for name, a in node.kwargs.items()}
        if any(a is unsupported for a in args) or any(a is unsupported for a in kwargs.values()):
            return None
        op = _contiguous_inputs(node.target) if _needs_contiguous(node.target) else _binding(node.target)
        return op, tuple(args), kwargs, slots, list(self.out_positions[index])

    def _outputs(self, index, result, layouts):
        outs = []
        for k, (pos, (sizes, strides)) in enumerate(zip(self.out_positions[index], layouts)):
            t = result
            for i in pos:
                t = t[i]
            if _unsized(sizes):
                outs.append(self.empty_result(index, k, t, sizes, strides))
            else:
                outs.append(_with_layout(t, sizes, strides))
        return outs

    def empty_result(self, index, k, t, sizes, strides):
        """Output `k` of node `index`, `t`, where its metadata promises no
        elements: ATen may return an optional result as None, or a
        workspace at its real size; either becomes
        `_stand_in`'s tensor. The Rust fast path calls this for such
        outputs (an ``_embedding_bag``'s empty ``offset2bag``)."""
        if t is not None and list(t.shape) == list(sizes):
            return _with_layout(t, sizes, strides)
        meta = self.nodes[index].meta.get("val")
        for i in self.out_positions[index][k]:
            meta = meta[i]
        return _stand_in(t, sizes, strides, meta.dtype)


#: Tensor metadata an int node may read, by op.
_TENSOR_METADATA = {
    torch.ops.aten.sym_size.int: lambda t, d: t.size(d),
    torch.ops.aten.sym_stride.int: lambda t, d: t.stride(d),
    torch.ops.aten.sym_numel.default: lambda t: t.numel(),
    torch.ops.aten.sym_storage_offset.default: lambda t: t.storage_offset(),
}


def _unsized(sizes) -> bool:
    """Whether a layout holds no elements."""
    return any(n == 0 for n in sizes)


def _stand_in(t, sizes, strides, dtype):
    """An eager result for a layout of no elements, where an eager result may
    disagree with the metadata: ATen returns optional results as undefined
    tensors (None), and workspaces its meta kernels size 0
    (``mkldnn_rnn_layer``'s) at their real size. An undefined result
    becomes an empty tensor; a workspace ATen sized stays itself (its
    kernel's backward reads it through its data pointer, which the empty
    view rdyn makes of it keeps)."""
    if t is None:
        return torch.empty_strided(sizes, strides, dtype=dtype)
    return t


#: Ops whose workspace output (by index) ATen writes only in grad mode,
#: and whose backward op reads it: AOTAutograd runs a compiled forward with
#: grad disabled, where ``mkldnn_rnn_layer`` (an LSTM layer, under
#: ``torch._dynamo.config.allow_rnn``) returned no workspace and its
#: backward crashed on the empty one.
_WORKSPACE_OUTPUT = {torch.ops.aten.mkldnn_rnn_layer.default: 3}


def _writes_workspace(node) -> bool:
    """Whether the graph reads `node`'s workspace output."""
    index = _WORKSPACE_OUTPUT.get(node.target)
    return index is not None and any(
        user.target is operator.getitem and user.args[1] == index for user in node.users
    )


def _with_workspace(op, args, kwargs):
    """`op` called in grad mode, so that ATen writes its workspace; its
    tensors are detached, so that no autograd graph is recorded."""

    def detached(a):
        return a.detach() if isinstance(a, torch.Tensor) else a

    args = torch.utils._pytree.tree_map(detached, args)
    kwargs = torch.utils._pytree.tree_map(detached, kwargs)
    with torch.enable_grad():
        return op(*args, **kwargs)


def _needs_contiguous(op) -> bool:
    """Whether `op` is tagged ``needs_contiguous_strides``: its kernel (a
    custom op's) may assume contiguous inputs, where rdyn hands over views
    (a transpose's among them)."""
    return isinstance(op, torch._ops.OpOverload) and torch.Tag.needs_contiguous_strides in op.tags


def _contiguous_inputs(op):
    """`op` called with each tensor argument (in lists too) contiguous."""

    def contiguous(a):
        return a.contiguous() if isinstance(a, torch.Tensor) else a

    def call(*args, **kwargs):
        args, kwargs = torch.utils._pytree.tree_map(contiguous, (args, kwargs))
        return op(*args, **kwargs)

    return call


def _binding(op):
    """The C++ binding `torch.<name>` (or `torch._C._nn.<name>`) behind the
    default overload `op` when the op has no overload but `out`: with the
    arguments of the default schema it calls the same kernel, and its
    unboxed call costs about 4 µs less per call than the OpOverload's boxed
    one (8 against 12 µs for a small convolution). Else `op`."""
    namespace, _, name = op._schema.name.partition("::")
    packet = getattr(torch.ops.aten, name, None) if namespace == "aten" else None
    if op._overloadname != "default" or packet is None or not set(packet.overloads()) <= {"default", "out"}:
        return op
    for module in (torch._C._VariableFunctions, torch._C._nn):
        binding = getattr(module, name, None)
        if binding is not None:
            return binding
    return op


def _with_layout(t, sizes, strides):
    """`t` with the sizes and strides PyTorch's metadata promised (a copy if
    the eager kernel chose different strides)."""
    if t.stride() == tuple(strides) and t.shape == tuple(sizes):
        return t
    if list(t.shape) != list(sizes):
        raise RuntimeError(f"rdyn: eager result has shape {list(t.shape)}, metadata said {list(sizes)}")
    same = all(st == want or sz <= 1 for sz, st, want in zip(sizes, t.stride(), strides))
    if same:
        return t
    out = torch.empty_strided(sizes, strides, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out

