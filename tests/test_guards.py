"""rdyn's own guards and specialization cache.

A compiled graph keeps up to 8 specializations keyed by each input's sizes
and strides: a call matching one reuses it (a guard hit), a call matching
none compiles a new one (a guard miss), and past the limit a graph with
symbolic sizes runs one shape-generic program.  A graph's dtypes are fixed
when it is captured: through ``torch.compile`` a dtype change is Dynamo's
recompile (a new graph); ``rdyn.compile_graph`` rejects it with a clear
error.  Checked both directly through ``rdyn.compile_graph`` and end to end
through ``torch.compile``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import rdyn
from helpers import assert_same, compile_aten, no_rust_panic

SPECIALIZATION_LIMIT = 8


def pointwise_and_reduction(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """No size appears in the graph, so any 2-D shape is valid for it."""
    y = torch.sin(x) * 2 + 1
    return y, y.sum(dim=-1)


def stats_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    keys = ("graphs", "specializations", "generic_programs", "guard_hits", "guard_misses")
    return {key: after[key] - before[key] for key in keys}


# --------------------------------------------------------------------------
# Through rdyn.compile_graph


def test_same_shape_hits_the_cache() -> None:
    example = torch.randn(4, 8)
    compiled = compile_aten(pointwise_and_reduction, [example])
    with no_rust_panic():
        compiled(example)
        before = rdyn.stats()
        for _ in range(3):
            x = torch.randn(4, 8)
            assert_same(tuple(compiled(x)), pointwise_and_reduction(x))
    delta = stats_delta(before, rdyn.stats())
    assert delta["specializations"] == 0, delta
    assert delta["guard_misses"] == 0, delta
    assert delta["guard_hits"] >= 3, delta


@pytest.mark.parametrize(
    "make_input",
    [
        pytest.param(lambda: torch.randn(8, 4).t(), id="transposed"),
        pytest.param(lambda: torch.randn(4, 16)[:, ::2], id="strided"),
        pytest.param(lambda: torch.randn(1, 8).expand(4, 8), id="expanded"),
    ],
)
def test_new_strides_make_a_new_specialization(make_input: Any) -> None:
    example = torch.randn(4, 8)
    compiled = compile_aten(pointwise_and_reduction, [example])
    with no_rust_panic():
        compiled(example)
        before = rdyn.stats()
        x = make_input()
        actual = tuple(compiled(x))
        middle = rdyn.stats()
        again = tuple(compiled(x))
    expected = pointwise_and_reduction(x)
    assert_same(actual, expected, pointwise_and_reduction(x.double()))
    assert_same(again, expected, pointwise_and_reduction(x.double()))
    first = stats_delta(before, middle)
    assert first["specializations"] == 1, first
    assert first["guard_misses"] == 1, first
    second = stats_delta(middle, rdyn.stats())
    assert second["specializations"] == 0, second
    assert second["guard_hits"] >= 1, second


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_compile_graph_rejects_a_new_dtype(dtype: torch.dtype) -> None:
    example = torch.randn(4, 8)
    compiled = compile_aten(pointwise_and_reduction, [example])
    with pytest.raises(ValueError, match="dtype"):
        with no_rust_panic():
            compiled(example.to(dtype))


def test_storage_offset_is_honoured() -> None:
    example = torch.randn(4, 8)
    compiled = compile_aten(pointwise_and_reduction, [example])
    base = torch.randn(6, 8)
    x = base[1:5]  # same sizes and strides as the example, storage offset 8
    with no_rust_panic():
        actual = tuple(compiled(x))
    assert_same(actual, pointwise_and_reduction(x))


def test_ninth_shape_uses_the_generic_program() -> None:
    shapes = [(n, 3 + 2 * n) for n in range(2, 14)]  # 12 distinct shapes
    compiled = compile_aten(pointwise_and_reduction, [torch.randn(*shapes[0])], dynamic=True)
    counts = []
    with no_rust_panic():
        for shape in shapes:
            x = torch.randn(*shape)
            assert_same(tuple(compiled(x)), pointwise_and_reduction(x), what=f"output for shape {shape}")
            counts.append(rdyn.stats()["specializations"])
        # A shape seen before is still served from its specialization.
        before = rdyn.stats()
        x = torch.randn(*shapes[1])
        assert_same(tuple(compiled(x)), pointwise_and_reduction(x), what="output for a repeated shape")
    assert counts == [min(n, SPECIALIZATION_LIMIT) for n in range(1, len(shapes) + 1)], counts
    stats = rdyn.stats()
    assert stats["generic_programs"] == 1, stats
    assert stats["guard_hits"] == before["guard_hits"] + 1, stats


# --------------------------------------------------------------------------
# The repeat-call fast path: a call with the previous call's metadata skips
# reading it, and must still see everything that differs.


def test_repeat_calls_read_each_calls_data_and_offset() -> None:
    example = torch.randn(4, 8)
    compiled = compile_aten(pointwise_and_reduction, [example])
    base = torch.randn(7, 8)
    with no_rust_panic():
        compiled(example)
        before = rdyn.stats()
        # Same sizes and strides each time; new data, then new storage offsets.
        for x in (torch.randn(4, 8), base[1:5], base[3:7], base[0:4]):
            assert_same(tuple(compiled(x)), pointwise_and_reduction(x))
    delta = stats_delta(before, rdyn.stats())
    assert (delta["specializations"], delta["guard_misses"], delta["guard_hits"]) == (0, 0, 4), delta


def called_twice() -> tuple[torch.Tensor, Any]:
    """A compiled graph and its example input, after two calls with it (the
    second through the fast path)."""
    example = torch.randn(4, 8)
    compiled = compile_aten(pointwise_and_reduction, [example])
    with no_rust_panic():
        compiled(example)
        compiled(example)
    return example, compiled


def test_a_new_dtype_after_repeat_calls_is_rejected() -> None:
    example, compiled = called_twice()
    with pytest.raises(ValueError, match="dtype"):
        with no_rust_panic():
            compiled(example.double())


def test_new_strides_after_repeat_calls_miss() -> None:
    example, compiled = called_twice()
    with no_rust_panic():
        x = torch.randn(8, 4).t()
        actual = tuple(compiled(x))
        again = tuple(compiled(example))
    assert_same(actual, pointwise_and_reduction(x))
    assert_same(again, pointwise_and_reduction(example))
    assert rdyn.stats()["specializations"] == 2


def test_an_output_aliasing_an_input_follows_each_calls_view() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.view(2, 4), x * 2

    base = torch.randn(3, 8)
    compiled = compile_aten(fn, [base[0]])
    with no_rust_panic():
        for row in (0, 1, 2, 1):
            x = base[row]
            view, doubled = compiled(x)
            assert_same((view, doubled), fn(x))
            assert view.data_ptr() == x.data_ptr(), f"row {row}: the view must alias this call's input"


def test_as_strided_graphs_guard_storage_offsets_on_repeat() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        # Addresses x's storage directly, from storage element 2 whatever
        # x's own offset: a graph whose guards include storage offsets.
        return torch.as_strided(x, (2, 3), (3, 1), 2) * 2

    base = torch.randn(32)
    compiled = compile_aten(fn, [base[0:12]])
    with no_rust_panic():
        for start in (0, 0, 5, 5, 0):
            x = base[start : start + 12]
            assert_same(compiled(x), fn(x), what=f"output for storage offset {start}")


# --------------------------------------------------------------------------
# Through torch.compile


def test_torch_compile_repeated_shape_hits_the_cache() -> None:
    fn = torch.compile(pointwise_and_reduction, backend="rdyn", dynamic=False)
    with no_rust_panic():
        fn(torch.randn(4, 8))
        before = rdyn.stats()
        for _ in range(3):
            x = torch.randn(4, 8)
            assert_same(fn(x), pointwise_and_reduction(x))
    delta = stats_delta(before, rdyn.stats())
    assert (delta["graphs"], delta["specializations"], delta["guard_misses"]) == (0, 0, 0), delta
    assert delta["guard_hits"] >= 3, delta


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_torch_compile_dtype_change_makes_a_new_specialization(dtype: torch.dtype) -> None:
    fn = torch.compile(pointwise_and_reduction, backend="rdyn", dynamic=False)
    with no_rust_panic():
        fn(torch.randn(4, 8))
        before = rdyn.stats()
        x = torch.randn(4, 8).to(dtype)
        actual = fn(x)
    assert_same(actual, pointwise_and_reduction(x), pointwise_and_reduction(x.double()))
    delta = stats_delta(before, rdyn.stats())
    assert delta["specializations"] >= 1, delta


def test_torch_compile_output_strides_match_eager() -> None:
    fn = torch.compile(lambda x: torch.sin(x) + 1, backend="rdyn", dynamic=False)
    for x in (torch.randn(4, 8), torch.randn(8, 4).t(), torch.randn(2, 3, 4).permute(2, 0, 1)):
        with no_rust_panic():
            actual = fn(x)
        expected = torch.sin(x) + 1
        assert_same(actual, expected)
        assert actual.stride() == expected.stride(), f"strides {actual.stride()}, eager {expected.stride()}"


def test_torch_compile_dynamic_shapes() -> None:
    fn = torch.compile(pointwise_and_reduction, backend="rdyn", dynamic=True)
    counts = []
    with no_rust_panic():
        for n in range(2, 14):
            x = torch.randn(n, 3 + 2 * n)
            assert_same(fn(x), pointwise_and_reduction(x), what=f"output for shape {tuple(x.shape)}")
            counts.append(rdyn.stats()["specializations"])
    stats = rdyn.stats()
    assert stats["graphs"] == 1, f"Dynamo should pass one symbolic graph: {stats}"
    assert counts[-1] <= SPECIALIZATION_LIMIT, counts
    assert stats["generic_programs"] <= 1, stats


def test_dynamic_square_images_lower() -> None:
    """Dynamic sizes of a square image give `s**2` pixel counts, which lower."""
    fn = lambda x: x.flatten(2).softmax(-1)  # noqa: E731
    compiled = torch.compile(fn, backend="rdyn", dynamic=True)
    rdyn.reset_stats()
    for size in (7, 9):
        x = torch.randn(1, 8, size, size)
        torch.testing.assert_close(compiled(x), fn(x))
    stats = rdyn.stats()
    assert stats["nodes_fallback"] == 0 and stats["nodes_native"] > 0


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_dynamic_upsampling_lowers(mode) -> None:
    """Upsampling by a scale under dynamic sizes computes its source index
    from the size symbol (`scalar_tensor(s0)`, `full` of a size): it runs
    in rdyn's kernels, no node left to ATen, one graph for every size."""
    fn = lambda x: torch.nn.functional.interpolate(x, scale_factor=2.0, mode=mode) + 1  # noqa: E731
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="rdyn", dynamic=True)
    rdyn.reset_stats()
    with no_rust_panic():
        for n in (5, 9, 12):
            x = torch.randn(2, 3, n, n + 1)
            assert_same(compiled(x), fn(x), fn(x.double()), what=f"output for {n}")
    stats = rdyn.stats()
    assert stats["graphs"] == 1, stats
    assert stats["nodes_fallback"] == 0 and stats["nodes_native"] > 0, stats["fallback_ops"]


def test_dynamic_eager_nodes_get_float_scalars_and_computed_strides() -> None:
    """Under dynamic sizes a node rdyn leaves to ATen may read a float
    computed from sizes (linear upsampling's `size / 5`) or a stride of a
    value computed in the graph (`unfold` of one). The runner computes
    both for each call's sizes; it used to raise (a float) or misread (a
    stride) instead. Several sizes, one graph."""

    def fn(x):
        up = torch.nn.functional.interpolate(x, size=5, mode="linear")
        return up, (x * 2).softmax(-1).unfold(0, 2, 2)

    compiled = torch.compile(fn, backend="rdyn", dynamic=True)
    with no_rust_panic():
        for n in (4, 6, 9):
            x = torch.randn(n, 3, n + 2, dtype=torch.float64)
            assert_same(compiled(x), fn(x), what=f"outputs for {n}")
    assert rdyn.stats()["graphs"] == 1


def test_dynamic_convolution_sizes_lower() -> None:
    """A convolution without padding over a dynamic size has the output
    length `Max(1, s - 2)`, and a ceil-mode max pool pads its input by a
    size expression: the first is a symbol rdyn computes from its
    definition at each call, the second a trailing pad that only sets the
    output size. Both used to send the whole graph (or the pad) to eager.
    Training too, past the specialization limit, in float64 against eager."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 4, 3, stride=2),
        torch.nn.MaxPool2d(2, ceil_mode=True), torch.nn.Flatten(),
    ).double()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="rdyn", dynamic=True)
    rdyn.reset_stats()
    with no_rust_panic():
        for n in range(9, 9 + SPECIALIZATION_LIMIT + 2):
            x = torch.randn(2, 3, n, n + 3, dtype=torch.float64, requires_grad=True)
            out, ref = compiled(x), model(x)
            assert_same(out, ref, what=f"output for {n}")
            grad = torch.randn_like(ref)
            params = [x, *model.parameters()]
            got = torch.autograd.grad(out, params, grad)
            want = torch.autograd.grad(ref, params, grad)
            assert_same(list(got), list(want), what=f"gradients for {n}")
    stats = rdyn.stats()
    assert stats["graphs"] == 2, stats  # forward and backward, one each for every size
    assert stats["generic_programs"] == 2, stats
    assert stats["nodes_fallback"] == 0 and stats["nodes_native"] > 0, stats["fallback_ops"]


@torch._dynamo.config.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True)
def test_data_dependent_sizes_run_eagerly_with_eagers_numbers() -> None:
    """A value read from data (`.item()` captured as a scalar, `nonzero`, a
    boolean mask) is a symbol no input's size binds: the graph runs
    eagerly, counted, with eager's numbers for every call. `.item()` had
    been taken as an unbound size symbol and gave wrong numbers silently."""
    def scaled(x, n):
        k = n.item()
        return x * (k / 3.0) + x.sum() * k

    def masked(x):
        return torch.nonzero(x > 0).sum() * 2 + x.sum(), x[x > 0.5] * 3

    torch._dynamo.reset()
    rdyn.reset_stats()
    c_scaled = torch.compile(scaled, backend="rdyn", fullgraph=True)
    c_masked = torch.compile(masked, backend="rdyn", fullgraph=True)
    g = torch.Generator().manual_seed(4)
    for v in (3, 5, 8):
        x = torch.randn(6, generator=g, dtype=torch.float64)
        n = torch.tensor(v)
        torch.testing.assert_close(c_scaled(x, n), scaled(x, n))
        assert_same(c_masked(x), masked(x), what=f"masked outputs for {v}")
    stats = rdyn.stats()
    assert stats["nodes_fallback"] > 0 and "aten._local_scalar_dense.default" in stats["fallback_ops"], stats


def test_dynamic_batch_norm_training_computes_its_size_factor() -> None:
    """Training batch norm under dynamic sizes updates the running variance
    with `n / (n - 1)`, a float PyTorch computes from sizes: a constant in
    each specialization, float64 arithmetic on the sizes in the generic
    program. It had been an eager `mul` per batch norm (and its gradient
    reads `1 / n`). Running statistics, outputs and gradients against
    float64 eager, past the specialization limit."""
    import copy

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).double()
    reference = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="rdyn", dynamic=True)
    rdyn.reset_stats()
    g = torch.Generator().manual_seed(6)
    with no_rust_panic():
        for n in range(6, 6 + SPECIALIZATION_LIMIT + 2):
            x = torch.randn(2, 3, n, n + 1, generator=g, dtype=torch.float64, requires_grad=True)
            out, want = compiled(x), reference(x)
            assert_same(out, want, what=f"output for {n}")
            got_grad, = torch.autograd.grad(out.square().sum(), x)
            want_grad, = torch.autograd.grad(want.square().sum(), x)
            assert_same(got_grad, want_grad, what=f"input gradient for {n}")
            for name in ("running_mean", "running_var"):
                assert_same(getattr(model[1], name), getattr(reference[1], name), what=f"{name} after {n}")
    stats = rdyn.stats()
    assert stats["generic_programs"] >= 1, stats
    assert stats["nodes_fallback"] == 0 and stats["nodes_native"] > 0, stats["fallback_ops"]


@pytest.mark.parametrize("out", [1, (3, 2), "pooled_4x4"], ids=str)
def test_dynamic_adaptive_pool_gradient_of_a_channels_last_input_lowers(out) -> None:
    """The gradient of a global average pool over a channels-last input
    restrides through `as_strided` and fills a zero buffer with
    `as_strided_scatter` covering all of it: under dynamic sizes the first
    takes each specialization's sizes, the second is its source. Other
    output sizes (AlexNet's 6x6) reach `_adaptive_avg_pool2d_backward`,
    whose decomposition takes the averaging products over dynamic sizes.
    All three ran eagerly. A 4x4 pool of a dynamic input that ceil-mode max
    pools shrank (GoogLeNet's auxiliary heads) traces its output size as
    `16 // (s // 4)`: the averaging products take that too. Gradients
    against float64 eager."""
    torch.manual_seed(0)
    if out == "pooled_4x4":
        pools = [torch.nn.MaxPool2d(3, 2, ceil_mode=True), torch.nn.MaxPool2d(3, 2, ceil_mode=True)]
        layers = [torch.nn.Conv2d(3, 4, 3, padding=1), *pools, torch.nn.AdaptiveAvgPool2d((4, 4))]
    else:
        layers = [torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(out)]
    model = torch.nn.Sequential(*layers, torch.nn.Flatten()).double()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="rdyn", dynamic=True)
    rdyn.reset_stats()
    g = torch.Generator().manual_seed(2)
    with no_rust_panic():
        for n in (16, 20, 25) if out == "pooled_4x4" else (7, 9, 12):
            x = torch.randn(2, 3, n, n + 2, generator=g, dtype=torch.float64).to(memory_format=torch.channels_last)
            x.requires_grad_(True)
            got, = torch.autograd.grad(compiled(x).square().sum(), x)
            want, = torch.autograd.grad(model(x).square().sum(), x)
            assert_same(got, want, what=f"gradient for {n}")
            assert got.stride() == want.stride()
    stats = rdyn.stats()
    assert stats["nodes_fallback"] == 0 and stats["nodes_native"] > 0, stats["fallback_ops"]
