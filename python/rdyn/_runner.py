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
        result = node.target(*args, **kwargs)
        outs = []
        for pos, (sizes, strides) in zip(self.out_positions[index], layouts):
            t = result
            for i in pos:
                t = t[i]
            outs.append(_with_layout(t, sizes, strides))
        return outs


def _with_layout(t, sizes, strides):
    """`t` with the sizes and strides PyTorch's metadata promised (a copy if
    the eager kernel chose different strides)."""
    if list(t.shape) != list(sizes):
        raise RuntimeError(f"rdyn: eager result has shape {list(t.shape)}, metadata said {list(sizes)}")
    same = all(st == want or sz <= 1 for sz, st, want in zip(sizes, t.stride(), strides))
    if same:
        return t
    out = torch.empty_strided(sizes, strides, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out

