"""The on-disk cache of captured inference graphs: a warm start skips
AOTAutograd.

After Dynamo, most of a cold compile is AOTAutograd tracing the captured
graph into a decomposed, functional ATen graph. For an inference graph that
AOTAutograd passes through as it is (no input mutated, no output aliasing
an input or another output, no duplicated or non-tensor input), rdyn stores
that ATen graph, pickled with its FakeTensor metadata by PyTorch's
``GraphPickler``. A later process that captures the same graph loads it
and compiles it directly.

The key is everything that decides the ATen graph: the captured graph's
code, the dtype, device, sizes, strides and ``requires_grad`` of each
input, the value of each constant tensor, grad mode, the torch and Python
versions, and rdyn's own build (the size and modification time of every
file of the package, its decomposition table included). A graph calling
anything outside torch, ``operator``, ``math`` or builtins, or captured
under autocast or with symbolic sizes, is not cached.

Environment: ``RDYN_CACHE=0`` disables the cache; ``RDYN_CACHE_DIR`` moves it
(default ``$XDG_CACHE_HOME/rdyn``, else ``~/.cache/rdyn``). A corrupt or
unreadable entry is a miss; a failed write only costs the next warm start;
no error of the cache fails a compile (``RDYN_LOG=cache`` shows them).
Entries are pickles (as Inductor's are): point ``RDYN_CACHE_DIR`` only at a
directory as trusted as the code.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import sys
import tempfile

import torch

from .config import log, log_enabled

_VERSION = "rdyn-graph-cache-1"
_SAFE_MODULES = ("torch", "_operator", "operator", "math", "builtins")
_build_id: str | None = None


def enabled() -> bool:
    return os.environ.get("RDYN_CACHE", "1") not in ("0", "", "false", "off")


def directory() -> pathlib.Path:
    explicit = os.environ.get("RDYN_CACHE_DIR")
    if explicit:
        return pathlib.Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "rdyn"


def _build() -> str:
    """rdyn's build: every file of the package, by name, size and mtime."""
    global _build_id
    if _build_id is None:
        root = pathlib.Path(__file__).parent
        parts = []
        for path in sorted(root.rglob("*")):
            if path.is_file() and path.suffix in (".py", ".so", ".pyd"):
                st = path.stat()
                parts.append(f"{path.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}")
        _build_id = "\n".join(parts)
    return _build_id


def _tensor_key(t: torch.Tensor) -> str | None:
    if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.layout != torch.strided:
        return None
    if not all(isinstance(d, int) for d in (*t.shape, *t.stride(), t.storage_offset())):
        return None
    return f"{t.dtype}|{t.device}|{tuple(t.shape)}|{t.stride()}|{t.storage_offset()}|{t.requires_grad}"


def key(gm: torch.fx.GraphModule, example_inputs, options) -> str | None:
    """The cache key of an inference graph, or None when it is not cached.
    Never raises: a key that cannot be built leaves the graph uncached, it
    does not fail its compile."""
    try:
        return _key(gm, example_inputs, options)
    except Exception as e:  # noqa: BLE001 - the cache is an optimisation, never a compile failure
        _note("no key", e)
        return None


def _note(what: str, error: BaseException) -> None:
    """A swallowed cache error, shown under ``RDYN_LOG=cache``."""
    if log_enabled("cache"):
        log("cache", f"{what}: {type(error).__name__}: {error}")


def _key(gm: torch.fx.GraphModule, example_inputs, options) -> str | None:
    if not enabled() or torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs
    ):
        return None
    if any(torch.is_autocast_enabled(d) for d in ("cpu", "cuda")):
        return None
    h = hashlib.sha256()
    # The stored graph is the decomposed one: which decompositions ran is
    # part of the key (``RDYN_ATTENTION`` picks attention's).
    attention = os.environ.get("RDYN_ATTENTION", "auto")
    for part in (_VERSION, _build(), torch.__version__, sys.version, repr(options), str(torch.is_grad_enabled()), attention):
        h.update(part.encode())
        h.update(b"\0")
    storages = set()
    for x in example_inputs:
        if not isinstance(x, torch.Tensor):
            return None
        k = _tensor_key(x)
        if k is None:
            return None
        # Inputs sharing memory take AOTAutograd's synthetic-base path.
        try:
            storage = (x.device, x.untyped_storage().data_ptr())
        except Exception:  # noqa: BLE001 - fake or storage-less inputs are not cached
            return None
        if storage in storages:
            return None
        storages.add(storage)
        h.update(k.encode())
        h.update(b"\0")
    for node in gm.graph.nodes:
        if node.op == "call_module":
            return None
        if node.op == "call_function":
            module = getattr(node.target, "__module__", None) or ""
            if module.split(".")[0] not in _SAFE_MODULES:
                return None
        if node.op == "get_attr":
            value = getattr(gm, node.target, None)
            if not isinstance(value, torch.Tensor) or _tensor_key(value) is None:
                return None
            data = _value_bytes(value)
            if data is None:
                return None
            h.update(f"{node.target}:{_tensor_key(value)}".encode())
            h.update(data)
    h.update(gm.code.encode())
    return h.hexdigest()


def _value_bytes(t: torch.Tensor) -> bytes | None:
    """A constant's value as bytes, or None when it cannot be read so (it is
    then not cached). Flattened first: viewing a 0-dim tensor (an optimizer's
    step count or learning rate) as bytes raises; bool and complex tensors
    view as bytes like any other."""
    try:
        flat = t.detach().cpu().contiguous().reshape(-1)
        return flat.view(torch.uint8).numpy().tobytes()
    except (RuntimeError, TypeError, NotImplementedError):
        return None


def plain_inference(fw_metadata, graph: torch.fx.GraphModule, n_inputs: int) -> bool:
    """Whether AOTAutograd passed the graph through as it is: its runtime
    wrapper then only calls the compiled graph, which a cache hit does too.
    AOTAutograd's metadata is private: if reading it fails, the graph is not
    stored."""
    if fw_metadata is None:
        return False
    try:
        return _plain(fw_metadata, graph, n_inputs)
    except Exception as e:  # noqa: BLE001 - private metadata changed shape: store nothing
        _note("not stored", e)
        return False


def _plain(fw_metadata, graph: torch.fx.GraphModule, n_inputs: int) -> bool:
    from torch._functorch._aot_autograd.schemas import OutputType

    inputs = [n for n in graph.graph.nodes if n.op == "placeholder"]
    return (
        len(inputs) == n_inputs == len(fw_metadata.input_info)
        and not any(i.mutates_data or i.mutates_metadata for i in fw_metadata.input_info)
        and all(o.output_type == OutputType.non_alias and issubclass(o.raw_type, torch.Tensor) for o in fw_metadata.output_info)
        and fw_metadata.num_intermediate_bases == 0
        and not fw_metadata.tokens
        and not fw_metadata.traced_tangents
        and fw_metadata.grad_enabled_mutation is None
        and all(type(m).__name__ == "PlainTensorMeta" for m in fw_metadata.subclass_inp_meta)
    )


def _entry(cache_key: str) -> pathlib.Path:
    return directory() / cache_key[:2] / f"{cache_key}.fxg"


def store(cache_key: str, graph: torch.fx.GraphModule) -> None:
    try:
        from torch.fx._graph_pickler import GraphPickler

        data = GraphPickler.dumps(graph)
        path = _entry(cache_key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".tmp") as f:
            f.write(data)
        os.replace(f.name, path)
    except Exception as e:  # noqa: BLE001 - a cache write must never fail a compile
        _note("not stored", e)


def load(cache_key: str, example_inputs) -> torch.fx.GraphModule | None:
    """The stored graph, or None: a missing, unreadable or corrupt entry
    (or any error reading it) is a miss."""
    try:
        data = _entry(cache_key).read_bytes()
    except FileNotFoundError:
        return None
    except Exception as e:  # noqa: BLE001 - an unreadable entry (or cache directory) is a miss
        _note("entry not read", e)
        return None
    try:
        from torch._guards import detect_fake_mode
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx._graph_pickler import GraphPickler

        fake_mode = detect_fake_mode(example_inputs) or FakeTensorMode()
        graph = GraphPickler.loads(data, fake_mode)
        if not isinstance(graph, torch.fx.GraphModule):
            return None
        # An unpickled graph module has no `forward` until recompiled, and a
        # graph (or a node) rdyn runs eagerly calls it.
        graph.recompile()
    except Exception as e:  # noqa: BLE001 - a corrupt entry is a miss
        _note("entry not loaded", e)
        return None
    return graph
