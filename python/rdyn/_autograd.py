"""How a compiled training graph runs under autograd.

AOTAutograd traces a captured graph into a forward and a backward ATen
graph, and rdyn compiles both. AOTAutograd also returns a runtime for them:
an `autograd.Function` and wrappers that cover every case a graph can bring
(inputs whose metadata or storage changes, outputs aliasing inputs, tensor subclasses, functionalized
RNG, effect tokens, symbolic sizes saved for the backward, ...). That
generality costs 30-50 µs per training step and graph on a CPU: a
1-op step took 59 µs through it against 26 µs through a plain
`autograd.Function`, and on small models (an RMSNorm training step of
0.17 ms in eager) it was most of the gap to eager.

A graph whose metadata shows none of those cases (`_plain`) runs through
`LeanFunction` instead: the forward's outputs are split into the user's
outputs and the tensors saved for the backward as AOTAutograd laid them out
(`ViewAndMutationMeta`), saved with `save_for_backward` (so in-place changes
to them are caught as in eager), and the backward receives the saved tensors
then the gradients of the outputs that need them, the order AOTAutograd
traced the backward graph in. Inputs whose data alone the graph changes
(running statistics) get the new values copied in after the call, as
AOTAutograd does. Anything else keeps AOTAutograd's runtime, as
does every graph with ``RDYN_AUTOGRAD=aot``.

The backward is compiled when it first runs (`lazy`), as AOTAutograd does:
a model called with gradients enabled but never differentiated pays no
backward compile.
"""

from __future__ import annotations

import os

import torch

#: Raised when gradients computed by a compiled backward are differentiated.
DOUBLE_BACKWARD = (
    "rdyn: a compiled backward cannot be differentiated again (double backward); "
    "compute higher-order gradients of this function without torch.compile"
)


def enabled() -> bool:
    """Whether plain training graphs run through `LeanFunction` (read at each
    compile)."""
    return os.environ.get("RDYN_AUTOGRAD", "rdyn") != "aot"


def lazy(compile_backward):
    """A backward that `compile_backward()` builds at its first call, in the
    tracing and compile contexts of the forward's compile (as AOTAutograd's
    own lazy backward compile does: symbolic sizes resolve there)."""
    state = {}
    tracing = torch._guards.TracingContext.try_get()
    compiling = torch._guards.CompileContext.try_get()

    def run(args):
        fn = state.get("fn")
        if fn is None:
            with torch._guards.tracing(tracing), torch._guards.compile_context(compiling):
                fn = state["fn"] = compile_backward()
        return fn(args)

    run._boxed_call = True
    return run


def plain_tensor_metas(metas) -> bool:
    """Whether AOTAutograd's subclass metadata `metas` describes plain
    tensors (and scalars) only: no subclass unwrapped into several."""
    return all(type(m).__name__ == "PlainTensorMeta" or isinstance(m, int) for m in metas or ())


def static_layout(t: torch.Tensor) -> bool:
    """Whether `t`'s sizes, strides and offset are numbers, not symbols."""
    return all(type(n) is int for n in (*t.shape, *t.stride(), t.storage_offset()))


def _copied_back(info) -> bool:
    """Whether an input the graph mutates is one whose new values are only
    copied back into it after the call (a batch norm's running statistics):
    its data alone changes, and autograd does not track it."""
    return (
        info.mutates_data
        and not info.mutates_metadata
        and not info.mutates_storage_metadata
        and not info.requires_grad
    )


def _plain(meta, example_inputs) -> bool:
    """Whether AOTAutograd's runtime would do no more than split outputs,
    save tensors and route gradients for this graph."""
    if meta is None or meta.num_symints_saved_for_bw != 0 or (meta.num_opaque_objects_saved_for_bw or 0) != 0:
        return False
    if meta.num_intermediate_bases or meta.num_outputs_aliased:
        return False
    if not all(_copied_back(meta.input_info[i]) for i in meta.mutated_inp_runtime_indices):
        return False
    if meta.num_unsafe_view_outputs or meta.tokens or meta.num_backward_tokens or meta.is_rng_op_functionalized:
        return False
    if meta.num_graphsafe_rng_states or meta.grad_enabled_mutation is not None:
        return False
    if meta.indices_of_inputs_that_requires_grad_with_mutations_in_bw:
        return False
    if not all(
        plain_tensor_metas(m)
        for m in (meta.subclass_inp_meta, meta.subclass_fw_graph_out_meta, meta.subclass_tangent_meta)
    ):
        return False
    if not all(issubclass(o.raw_type, torch.Tensor) for o in meta.output_info):
        return False
    # Static sizes only: symbolic ones travel beside the tensors.
    for t in example_inputs:
        if not isinstance(t, torch.Tensor) or type(t).__name__ not in ("FakeTensor", "Tensor", "Parameter"):
            return False
        if not static_layout(t):
            return False
    return True


def _runtime_state_allows() -> bool:
    """Compile-time state AOTAutograd's runtime handles that `LeanFunction`
    does not: autocast (it runs the graph with autocast off), compiled
    autograd (it traces AOTAutograd's backward), saved-tensor hooks (it may
    have inlined them into the graph), DDPOptimizer's split graphs."""
    if torch._C._is_any_autocast_enabled():
        return False
    if torch._dynamo.compiled_autograd.in_compiled_autograd_region:
        return False
    if getattr(torch._dynamo.compiled_autograd, "compiled_autograd_enabled", False):
        return False
    hooks = torch._functorch._aot_autograd.utils.top_saved_tensors_hooks()
    if hooks is not None:
        return False
    # DDPOptimizer's split graphs: their first call must return fake
    # tensors, which AOTAutograd's runtime arranges.
    context = torch._guards.TracingContext.try_get()
    return not getattr(context, "fakify_first_call", False)


def _second_order_raises(grads) -> tuple:
    """The gradients a backward run with ``create_graph=True`` returns:
    usable as values, raising if they are differentiated in turn (rdyn's
    backward graph is not differentiable), as AOTAutograd's do."""
    present = [g for g in grads if g is not None]
    if not present:
        return tuple(grads)
    error = torch._C._functions.DelayedError(DOUBLE_BACKWARD.encode(), len(present))
    marked = error(*(g.detach().requires_grad_() for g in present))
    marked = iter((marked,) if isinstance(marked, torch.Tensor) else marked)
    return tuple(None if g is None else next(marked) for g in grads)


def lean_function(meta, forward, backward, example_inputs, module):
    """A callable running `forward` and `backward` (rdyn's compiled graphs,
    boxed) under autograd, or None where AOTAutograd's runtime must run
    them."""
    if not enabled() or not _runtime_state_allows() or not _plain(meta, example_inputs):
        return None
    # AOTAutograd prepends a module's own parameters and buffers to the
    # inputs (Dynamo passes them as inputs when it inlines modules).
    if any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
        return None
    user = meta.num_forward_returns
    vc_saved = meta.tensors_saved_for_backwards_with_vc_check_slice
    unchecked = meta.tensors_saved_for_backwards_no_vc_check_slice
    graph_inputs = {i for i, is_input in enumerate(meta.saved_tensor_is_graph_input) if is_input}
    # The forward returns the mutated inputs' new values, then the outputs;
    # the former take no gradient.
    mutated = tuple(meta.mutated_inp_runtime_indices)
    outputs = [(o.requires_grad, o.requires_grad_for_backward) for o in meta.output_info]
    non_differentiable = tuple(range(len(mutated))) + tuple(
        len(mutated) + i for i, (grad, _) in enumerate(outputs) if not grad
    )
    with_gradient = tuple(len(mutated) + i for i, (_, wanted) in enumerate(outputs) if wanted)
    deterministic = meta.deterministic

    def detached(tensors, first):
        # A saved view of another output would share its autograd view
        # metadata; AOTAutograd detaches those too.
        return [t.detach() if t._is_view() and first + i not in graph_inputs else t for i, t in enumerate(tensors)]

    class LeanFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            outs = forward(list(args))
            checked = detached(outs[vc_saved], 0)
            ctx.save_for_backward(*checked)
            ctx.unchecked = detached(outs[unchecked], len(checked))
            ctx.mark_non_differentiable(*(outs[i] for i in non_differentiable))
            ctx._materialize_non_diff_grads = False
            return tuple(outs[:user])

        @staticmethod
        def backward(ctx, *grads):
            if deterministic is False and torch.are_deterministic_algorithms_enabled():
                raise RuntimeError(
                    "This compiled backward function is being run with torch.use_deterministic_algorithms(True), "
                    "but it was compiled while torch.use_deterministic_algorithms(False) was set."
                )
            args = [*ctx.saved_tensors, *ctx.unchecked, *(grads[i] for i in with_gradient)]
            with torch.no_grad():
                results = backward(args)
            if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in args):
                return _second_order_raises(results)
            return tuple(results)

    def run(*args):
        results = LeanFunction.apply(*args)
        for value, i in zip(results, mutated):
            args[i].copy_(value)
        return list(results[len(mutated):])

    return torch._dynamo.disable(run, reason="rdyn: a compiled training graph")
