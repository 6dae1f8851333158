"""The `torch.compile` backend: ``torch.compile(model, backend="rdyn")``.

Dynamo hands each captured graph to `rdyn_backend`; AOTAutograd turns it into
forward (and, when training, backward) ATen graphs decomposed to the ops rdyn
lowers, and each of those becomes a `rdyn._rdyn.CompiledGraph`.
"""

from __future__ import annotations

import os
import time
import warnings

import torch
from torch._decomp import core_aten_decompositions, get_decompositions
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.partitioners import min_cut_rematerialization_partition

from . import _autograd, _cache, _rdyn
from ._attention import DECOMPOSITIONS as ATTENTION_DECOMPOSITIONS
from ._attention import decomposed_on
from ._decomp import DECOMPOSITIONS as RDYN_DECOMPOSITIONS
from ._decomp_conv import decompositions as cpu_decompositions
from ._decomp_index import DECOMPOSITIONS as INDEX_DECOMPOSITIONS
from ._errors import InternalError, UnavailableError
from ._random import DECOMPOSITIONS as RANDOM_DECOMPOSITIONS
from ._import import Unsupported, import_graph, on_device
from ._rewrite import rewrite_captured
from ._runner import GraphRunner
from .config import Options, log_enabled, log

aten = torch.ops.aten

#: The decomposition table rdyn uses: core ATen, plus the composite ops
#: (softmax, norms, GELU, pooling, ...) broken into ops rdyn fuses.
DECOMPOSITIONS = {
    **core_aten_decompositions(),
    **get_decompositions(
        [
            aten._softmax,
            aten._log_softmax,
            aten._native_batch_norm_legit_functional,
            aten.native_group_norm,
            aten.max_pool2d_with_indices,
            aten._adaptive_avg_pool2d,
            aten.upsample_nearest2d,
            aten.upsample_bilinear2d,
            aten.native_layer_norm_backward,
            aten._softmax_backward_data,
            aten._log_softmax_backward_data,
            aten.gelu_backward,
            aten.max_pool2d_with_indices_backward,
            aten.native_batch_norm_backward,
            aten.embedding_dense_backward,
            aten.native_group_norm_backward,
            aten.leaky_relu,
            aten.elu,
            aten.mish,
            aten.hardswish,
            aten.hardsigmoid,
            aten.logsumexp,
            aten.sigmoid_backward,
            aten.tanh_backward,
            aten.threshold_backward,
            aten.rsub,
            aten.masked_fill,
            aten._unsafe_index,
            aten.select_backward,
            aten.slice_backward,
            # Copy variants: views plus a copy.
            aten.view_copy,
            aten.permute_copy,
            aten.narrow_copy,
            aten.as_strided_copy,
            aten.unbind_copy,
            aten.unfold,
            aten.repeat,
            # Pointwise compositions.
            aten.ldexp,
            aten.special_log_ndtr,
            aten.special_ndtr,
            # Pooling and linear algebra built from reductions and GEMM.
            aten.adaptive_max_pool2d,
            aten.adaptive_max_pool3d,
            aten.max_pool3d_with_indices,
            aten.addmv,
            aten.dist,
            aten.grid_sampler_2d,
            aten._upsample_bilinear2d_aa,
            aten._batch_norm_with_update_functional,
            # In core ATen's table in torch 2.15, not in 2.11: without it every
            # norm (F.normalize, cosine_similarity, linalg.norm) ran eagerly.
            aten.linalg_vector_norm,
        ]
    ),
    **RDYN_DECOMPOSITIONS,
    **ATTENTION_DECOMPOSITIONS,
    **INDEX_DECOMPOSITIONS,
    **RANDOM_DECOMPOSITIONS,
}


#: Ops rdyn lowers whole, kept out of the table: AOTAutograd traces every op
#: a decomposition emits through its Python modes (~0.6 ms each), so a
#: decomposed ReLU6 (clamp's reference: isnan, comparisons, where) cost 8 ms
#: of capture and a layer norm 5 ms. Views are index rewrites either way.
KEPT_WHOLE = (
    aten.t.default,
    aten.transpose.int,
    aten._unsafe_view.default,
    aten.squeeze.default,
    aten.squeeze.dim,
    *(getattr(op, o) for op in (aten.clamp, aten.clamp_min, aten.clamp_max, aten.hardtanh) for o in op.overloads()),
    aten.silu.default,
    aten.native_layer_norm.default,
    aten.logsumexp.default,
)
for _op in KEPT_WHOLE:
    DECOMPOSITIONS.pop(_op, None)

_GELU_BACKWARD = DECOMPOSITIONS.get(aten.gelu_backward.default)


def _gelu_backward(grad_output, self, approximate="none"):
    """Exact GELU's backward stays whole (rdyn lowers its factor as one op,
    which took erf, exp and eight more ops decomposed); the tanh form is
    decomposed."""
    if approximate != "tanh" or _GELU_BACKWARD is None:
        return NotImplemented
    return _GELU_BACKWARD(grad_output, self, approximate=approximate)


DECOMPOSITIONS[aten.gelu_backward.default] = _gelu_backward


#: Errors of a call (not of rdyn): never a reason to run the graph eagerly.
#: rdyn's own failures, on which a graph runs eagerly (unless strict); every
#: other error of a call (bad data, memory, an eager op's) is the caller's.
_COMPILER_ERRORS = (InternalError, UnavailableError)


class CompileError(RuntimeError):
    """A graph could not be compiled (raised under ``RDYN_STRICT=1``)."""


_py_stats = {
    "graphs_failed": 0,
    "graphs_unsupported": 0,
    "nodes_fallback": 0,
    "fallback_ops": {},
    "python_compile_seconds": 0.0,
    "cache_hits": 0,
    "cache_misses": 0,
    # Wall time of the outermost compile steps (see `_wall_enter`), and the
    # part of rdyn's lowering inside them (`stats` adds the rest: lowering
    # at a first call, which the caller waits for too).
    "compile_wall_seconds": 0.0,
    "lowering_in_wall_seconds": 0.0,
    # Dynamo's count of frames it gave up on when the stats were reset.
    "frames_eager_base": (None, 0),
}
_wall = {"depth": 0}


def _wall_enter(start: float):
    """Time a compile the caller waits for, from `start`. Only the outermost
    step counts (rdyn_backend around AOTAutograd, or a graph AOTAutograd
    compiles later: a backward at its first call), so nested steps count
    once. Returns the token for `_wall_exit`; None when nested."""
    _wall["depth"] += 1
    if _wall["depth"] > 1:
        return None
    return start, _rdyn.stats()["compile_seconds"]


def _wall_exit(token) -> None:
    _wall["depth"] -= 1
    if token is None:
        return
    start, lowered = token
    _py_stats["compile_wall_seconds"] += time.perf_counter() - start
    _py_stats["lowering_in_wall_seconds"] += max(0.0, _rdyn.stats()["compile_seconds"] - lowered)


def _frames_given_up():
    """Dynamo's frame counter and how many frames it gave up on (tried and
    did not compile: its recompile limit, a graph break it cannot resume
    from); they run eagerly. Dynamo never resets the count; a cleared
    counter is a new object."""
    frames = torch._dynamo.utils.counters["frames"]
    return frames, frames["total"] - frames["ok"]


def _frames_eager() -> int:
    """Frames Dynamo gave up on since the stats were reset."""
    frames, given_up = _frames_given_up()
    base_frames, base = _py_stats["frames_eager_base"]
    return given_up - base if frames is base_frames else given_up


def _frames_not_counted(frames, n: int) -> None:
    """`n` frames Dynamo gave up on outside the user's compiles (while
    `rdyn.explain` traced): left out of `frames_eager`."""
    base_frames, base = _py_stats["frames_eager_base"]
    if base_frames is frames:
        _py_stats["frames_eager_base"] = (frames, base + n)


_py_stats["frames_eager_base"] = _frames_given_up()


def _strict(options: Options) -> bool:
    return options.strict or os.environ.get("RDYN_STRICT", "") not in ("", "0")


def _boxed(fn):
    fn._boxed_call = True
    return fn


def _eager(gm, reason, options):
    if _strict(options):
        raise CompileError(f"rdyn could not compile a graph: {reason}")
    warnings.warn(f"rdyn: running a graph eagerly: {reason}", stacklevel=3)
    _py_stats["graphs_failed"] += 1

    def run(args):
        return gm(*args)

    return _boxed(run)


def _unsupported_graph(gm, reason):
    """A graph rdyn cannot represent (complex or sparse tensors, effect
    tokens, ...) runs eagerly: an unsupported construct, not a compiler bug,
    so it is counted as fallback nodes rather than raised, even when strict."""
    ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    _py_stats["graphs_unsupported"] += 1
    _py_stats["nodes_fallback"] += len(ops)
    for op in ops:
        _py_stats["fallback_ops"][op] = _py_stats["fallback_ops"].get(op, 0) + 1
    if log_enabled("graph"):
        log("graph", f"runs eagerly ({reason}):\n{gm.graph}")

    def run(args):
        return gm(*args)

    return _boxed(run)


def _devices(gm: torch.fx.GraphModule, example_inputs) -> set[torch.device]:
    """The devices of the graph's inputs and of every tensor it makes: a
    graph without tensor inputs (`torch.arange(n, device="cuda")`) runs
    where its factories put their results."""
    devices = {t.device for t in example_inputs if isinstance(t, torch.Tensor)}
    for node in gm.graph.nodes:
        if node.op == "call_function":
            for v in torch.utils._pytree.tree_leaves(node.meta.get("val")):
                if isinstance(v, torch.Tensor):
                    devices.add(v.device)
    return devices


def compile_aten_graph(
    gm: torch.fx.GraphModule, example_inputs, options: Options | None = None, free_layout: tuple[int, ...] = ()
):
    """Compile an ATen-level FX graph; returns a boxed callable (one list
    argument -> list of outputs). `free_layout`: positions of outputs whose
    strides rdyn may choose (a training forward's saved activations); the
    strides chosen are reported to AOTAutograd (`_report_strides`)."""
    options = options or Options()
    start = time.perf_counter()
    tensor_devices = _devices(gm, example_inputs)
    devices = {d.type for d in tensor_devices}
    device = options.device
    if "cuda" in devices:
        if devices != {"cuda"}:
            return _unsupported_graph(gm, f"a graph mixing tensors on {sorted(devices)}")
        indices = {d.index or 0 for d in tensor_devices}
        if indices != {0} or torch.cuda.current_device() != 0:
            return _unsupported_graph(gm, "rdyn runs CUDA graphs on device 0 only for now")
        device = "cuda"
    elif devices - {"cpu"}:
        return _unsupported_graph(gm, f"tensors on {sorted(devices - {'cpu'})}: rdyn compiles CPU and CUDA tensors")
    wall = _wall_enter(start)
    try:
        data, info = import_graph(gm)
        data["free_layout"] = list(free_layout) if device == "cpu" else []
        runner = GraphRunner(info)
        if device == "cuda" and any(
            isinstance(c, torch.Tensor) and c.device.type != "cuda" for c in info["constants"]
        ):
            return _unsupported_graph(gm, "a CUDA graph with constants on another device")
        if device == "cuda-sim":
            # Generated for CUDA, run on the CPU tensors by the PTX simulator.
            data = on_device(data, "cuda:0")
        compiled = _rdyn.CompiledGraph(data, runner, device, options.index_checks, options.cuda_gemm)
        if device in ("cuda", "cuda-sim"):
            # Generate the kernels now: a graph the CUDA code generator
            # cannot express yet runs eagerly (counted), not as an error.
            compiled.describe(list(example_inputs) + info["constants"])
        if data["free_layout"]:
            _report_strides(compiled.output_strides(list(example_inputs) + info["constants"]))
    except (Unsupported, NotImplementedError) as e:
        # NotImplementedError: a kernel the device's code generator cannot
        # express yet (raised by the CUDA plan above).
        return _unsupported_graph(gm, str(e))
    finally:
        _py_stats["python_compile_seconds"] += time.perf_counter() - start
        _wall_exit(wall)
    if log_enabled("graph"):
        log("graph", f"{compiled.name}:\n{compiled.graph_text()}")
    state = {"compiled": compiled, "specs": 0}
    constants = info["constants"]
    logging = log_enabled("ir") or log_enabled("kernels")

    def run(args):
        graph = state["compiled"]
        if graph is None:
            return gm(*args)
        runner.set_inputs(args)
        try:
            out = graph(args + constants if constants else args)
        except NotImplementedError as e:
            # New shapes the device's code generator cannot express: this
            # call runs eagerly (an unsupported construct, counted).
            _unsupported_graph(gm, str(e))
            return gm(*args)
        except RuntimeError as e:
            # Bad data (an index out of range), a failed allocation and an
            # eager op's error are the call's, raised as eager raises them;
            # rdyn's own failures are the compiler's, and the graph runs
            # eagerly.
            if _strict(options) or not isinstance(e, _COMPILER_ERRORS):
                raise
            warnings.warn(f"rdyn: falling back to eager for a graph: {e}", stacklevel=2)
            _py_stats["graphs_failed"] += 1
            state["compiled"] = None
            return gm(*args)
        if logging and graph.specializations() != state["specs"]:
            state["specs"] = graph.specializations()
            desc = graph.describe(args)
            if log_enabled("ir") and "ir" in desc:
                log("ir", desc["ir"])
            if log_enabled("kernels"):
                for name, device, source in desc["kernels"]:
                    log("kernels", f"[{name} on {device}]\n{source}")
        return out

    return _boxed(run)


def rdyn_backend(gm: torch.fx.GraphModule, example_inputs, options=None, **kwargs):
    """The Dynamo backend registered as ``"rdyn"``. torch.compile passes its
    ``mode`` (unless "default") as a keyword, beside ``options``."""
    wall = _wall_enter(time.perf_counter())
    try:
        return _compile_captured(gm, example_inputs, Options.parse(options, kwargs))
    finally:
        _wall_exit(wall)


def _compile_captured(gm: torch.fx.GraphModule, example_inputs, opts: Options):
    """A graph Dynamo captured: from the on-disk cache, else through
    AOTAutograd (storing a plain inference graph)."""
    gm = rewrite_captured(gm)
    cache_key = _cache.key(gm, example_inputs, opts)
    if cache_key is not None:
        cached = _cache.load(cache_key, example_inputs)
        compiled = None if cached is None else _from_cache(cached, example_inputs, opts)
        if compiled is not None:
            _py_stats["cache_hits"] += 1
            return compiled
        _py_stats["cache_misses"] += 1

    captured = {}

    def forward(graph, inputs):
        context = torch._guards.TracingContext.try_get()
        captured["meta"] = getattr(context, "fw_metadata", None)
        captured["inputs"] = len(inputs)
        captured["forward"] = compile_aten_graph(graph, inputs, opts, _saved_activations(graph))
        return captured["forward"]

    def backward(graph, inputs):
        # Compiled at its first call (`_autograd.lazy`), through AOTAutograd's
        # runtime or rdyn's.
        def build():
            _restride_placeholders(graph, inputs)
            return compile_aten_graph(graph, inputs, opts)

        captured["backward"] = _autograd.lazy(build)
        return captured["backward"]

    def inference(graph, inputs):
        if cache_key is not None:
            context = torch._guards.TracingContext.try_get()
            if _cache.plain_inference(getattr(context, "fw_metadata", None), graph, len(example_inputs)):
                _cache.store(cache_key, graph)
        return compile_aten_graph(graph, inputs, opts)

    # The backward graph is handed over at once (to be compiled lazily all
    # the same), so that a plain training graph can skip AOTAutograd's
    # runtime (`_autograd`).
    with torch._functorch.config.patch(force_non_lazy_backward_lowering=True):
        compiled = aot_autograd(
            fw_compiler=forward,
            bw_compiler=backward,
            inference_compiler=inference,
            decompositions=decompositions(opts.device),
            partition_fn=min_cut_rematerialization_partition,
        )(gm, example_inputs)
    # AOTAutograd drops an input passed twice from the graph's.
    if "backward" in captured and captured["inputs"] == len(example_inputs):
        lean = _autograd.lean_function(
            captured["meta"], captured["forward"], captured["backward"], example_inputs, gm
        )
        if lean is not None:
            return lean
    return compiled


def _saved_activations(graph: torch.fx.GraphModule) -> tuple[int, ...]:
    """The positions of a training forward's outputs that its backward
    reads (AOTAutograd's saved tensors), when AOTAutograd will ask for
    their strides (it then compiles the backward for those strides and
    hands it the tensors as they are): rdyn may lay them out as the kernels
    that compute them find cheapest (a convolution's channels-last result,
    kept so for the backward's convolutions). Otherwise none."""
    if os.environ.get("RDYN_CONV_LAYOUT") == "0":
        return ()
    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    if context is None or getattr(context, "output_strides", None) is None or meta is None:
        return ()
    # Outputs of tensor subclasses are unwrapped into several graph outputs.
    plain = _autograd.plain_tensor_metas(getattr(meta, "subclass_fw_graph_out_meta", None))
    if not plain or getattr(meta, "num_symints_saved_for_bw", None) is None:
        return ()
    # Strides are reported as numbers: a graph of symbolic sizes keeps
    # eager's layouts (reading them as numbers would specialize them).
    for node in graph.graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder" and isinstance(val, torch.SymInt):
            return ()
        if node.op == "placeholder" and isinstance(val, torch.Tensor) and not _autograd.static_layout(val):
            return ()
    outputs = torch.utils._pytree.arg_tree_leaves(*next(n for n in graph.graph.nodes if n.op == "output").args)
    try:
        saved = range(len(outputs))[meta.tensors_saved_for_backwards_slice]
    except (AssertionError, AttributeError, TypeError):
        return ()
    return tuple(k for k in saved if isinstance(outputs[k], torch.fx.Node))


def _report_strides(strides) -> None:
    """Tell AOTAutograd each forward output's strides (None: the
    metadata's), as Inductor does, so that its backward is traced for the
    layout the saved activations come in."""
    context = torch._guards.TracingContext.try_get()
    if context is not None and getattr(context, "output_strides", None) is not None:
        context.output_strides.extend(None if s is None else tuple(s) for s in strides)


def _restride_placeholders(graph: torch.fx.GraphModule, inputs) -> None:
    """Give the backward's placeholders the strides of its example inputs:
    AOTAutograd restrides the saved activations' fake tensors to what the
    forward reported, but not the graph's metadata, which rdyn reads."""
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    for node, example in zip(placeholders, inputs):
        val = node.meta.get("val")
        if (
            isinstance(val, torch.Tensor)
            and isinstance(example, torch.Tensor)
            and val.shape == example.shape
            and val.stride() != example.stride()
        ):
            node.meta["val"] = example


def decompositions(device: str) -> dict:
    """`DECOMPOSITIONS` for `device`: without attention's where ATen's flash
    kernels run it (`_attention.decomposed_on`); on the CPU, pointwise
    convolutions' gradients as GEMMs (`_decomp_conv`)."""
    table = DECOMPOSITIONS
    if not decomposed_on(device):
        table = {op: f for op, f in table.items() if op not in ATTENTION_DECOMPOSITIONS}
    if device == "cpu":
        table = {**table, **cpu_decompositions()}
    return table


def _from_cache(graph: torch.fx.GraphModule, example_inputs, options: Options):
    """A cached ATen graph, compiled: called as AOTAutograd's result would
    be (positional tensors), which for a plain inference graph only calls
    the compiled graph. None when it fails to compile: then it is a miss,
    and the graph is traced again as if it had not been stored."""
    try:
        run = _positional(compile_aten_graph(graph, list(example_inputs), options))
    except Exception as e:  # noqa: BLE001 - a stored graph that fails is a cache miss, not a compile failure
        if log_enabled("cache"):
            log("cache", f"a stored graph did not compile, tracing it again: {type(e).__name__}: {e}")
        return None
    return torch._dynamo.disable(run, reason="rdyn: a cached, compiled graph")


def _positional(boxed):
    """A compiled graph (called with one list of inputs) as a function of
    positional tensors."""

    def call(*args):
        return boxed(list(args))

    return call


def compile_graph(gm: torch.fx.GraphModule, example_inputs, options=None):
    """Compile an already-ATen FX graph (e.g. from ``make_fx`` with
    `DECOMPOSITIONS`); the result takes positional tensors and returns a
    list of outputs, like ``gm(*inputs)``."""
    return _positional(compile_aten_graph(gm, example_inputs, Options.parse(options, {})))
