"""The host side of a compiled graph: allocations and eager nodes.

The Rust runtime calls `alloc` for tensors PyTorch must own (outputs and the
inputs of eager nodes) and `run_node` for nodes it does not lower. Tensors are
passed in the order the node's arguments mention them.
"""

from __future__ import annotations


import torch
import torch.fx as fx


class GraphRunner:
    def __init__(self, info):
        self.nodes = info["nodes"]
        self.tensor_of = info["tensor_of"]
        self.int_nodes = info["int_nodes"]
        self.out_positions = info["out_positions"]
        self.placeholders = [n for n in self.nodes if n.op == "placeholder"]
        self.inputs = []
        # Per node index: its fast call (see `_fast_call`), or False.
        self._fast = {}

    def set_inputs(self, args):
        self.inputs = args
        self._ints = {}

    @staticmethod
    def alloc(sizes, strides, dtype):
        return torch.empty_strided(sizes, strides, dtype=dtype)

    def _int_value(self, node):
        """The value of an int-valued node for the current call."""
        if node in self._ints:
            return self._ints[node]
        if node.op == "placeholder":
            value = self.inputs[self.placeholders.index(node)]
        else:
            args = [self._int_value(a) if isinstance(a, fx.Node) else a for a in node.args]
            if node.target in (torch.ops.aten.sym_size.int, torch.ops.aten.sym_size):
                tensor = self.inputs[self.placeholders.index(node.args[0])] if node.args[0].op == "placeholder" else None
                if tensor is None:
                    raise RuntimeError(f"rdyn: cannot evaluate {node.name} eagerly")
                value = tensor.size(args[1])
            else:
                value = node.target(*args)
        self._ints[node] = int(value)
        return self._ints[node]

    def run_node(self, index, tensors, layouts):
        fast = self._fast.get(index)
        if fast is None:
            fast = self._fast[index] = self._fast_call(index)
        if fast is not False:
            target, args, kwargs, slots = fast
            args = list(args)
            if kwargs:
                kwargs = dict(kwargs)
            for slot, tensor in zip(slots, tensors):
                if isinstance(slot, int):
                    args[slot] = tensor
                else:
                    kwargs[slot] = tensor
            return self._outputs(index, target(*args, **kwargs), layouts)
        return self._run_node_general(index, tensors, layouts)

    def _fast_call(self, index):
        """`(op, args, kwargs, tensor slots)` when the node's tensors are
        top-level arguments (a position or a keyword) and it reads no
        int-valued node (most library calls: convolution, attention); else
        False. Slots follow the order the node mentions its tensors in."""
        node = self.nodes[index]
        if not isinstance(node.target, torch._ops.OpOverload):
            return False
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
            return False
        return _binding(node.target), tuple(args), kwargs, slots

    def _outputs(self, index, result, layouts):
        outs = []
        for pos, (sizes, strides) in zip(self.out_positions[index], layouts):
            t = result
            for i in pos:
                t = t[i]
            outs.append(_with_layout(t, sizes, strides))
        return outs

    def _run_node_general(self, index, tensors, layouts):
        node = self.nodes[index]
        it = iter(tensors)

        def sub(a):
            if isinstance(a, fx.Node):
                if (a, ()) in self.tensor_of:
                    return next(it)
                if a in self.int_nodes:
                    return self._int_value(a)
                raise RuntimeError(f"rdyn: node {node.name} reads {a.name}, which is neither a tensor nor an int")
            return a

        args = fx.node.map_aggregate(node.args, sub)
        kwargs = fx.node.map_aggregate(node.kwargs, sub)
        return self._outputs(index, node.target(*args, **kwargs), layouts)


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

