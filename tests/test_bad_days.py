"""What a user's bad day found: silent wrong answers and dead processes.

Each test compares with PyTorch eager (the independent reference), bit for
bit where eager's result is exact, and each failed before its fix:

* chunks of a dynamic-size input from the shape-generic program (after the
  specializations run out) were all the first chunk;
* negative indices wrapped where eager's kernel rejects them;
* float16/bfloat16 ops met a Python float unrounded where eager rounds it
  to the tensor's dtype, and a GEMM read an unrounded half-precision sum;
* int64 ``pow`` clamped exponents to 32 bits; ``select_scatter`` promoted;
  ``sgn``/``sign`` of NaN was NaN;
* a ZeroTensor (no memory) fed a GEMM: a segfault;
* a failed scratch allocation aborted the process;
* the errors a kernel raises were not the types eager raises.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import rdyn
from helpers import wgpu_available


def _compile(fn, **kwargs):
    return torch.compile(fn, backend="rdyn", **kwargs)


# -- 1. views of a dynamic-size input from the shape-generic program --------


@pytest.mark.parametrize("dim", [0, 1])
def test_chunks_of_dynamic_input_past_the_specializations(dim):
    torch._dynamo.config.cache_size_limit = 64
    f = _compile(lambda x: x.chunk(4, dim), dynamic=True)
    for n in range(8, 8 + 4 * 12, 4):
        x = torch.arange(3 * n, dtype=torch.float32).view((n, 3) if dim == 0 else (3, n))
        got, want = f(x), x.chunk(4, dim)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert torch.equal(g, w), n
            assert g.storage_offset() == w.storage_offset()
    assert rdyn.stats()["generic_programs"] >= 1


# -- 2. negative indices ---------------------------------------------------

W = torch.arange(15, dtype=torch.float32).view(5, 3)
NEGATIVE = {
    "embedding": lambda: F.embedding(torch.tensor([0, -1]), W),
    "gather": lambda: W.gather(0, torch.tensor([[0, -1, 1]])),
    "index_select": lambda: W.index_select(0, torch.tensor([0, -1])),
    "scatter_add": lambda: W.scatter_add(0, torch.tensor([[0, -1, 1]]), torch.ones(1, 3)),
    "scatter": lambda: W.scatter(0, torch.tensor([[0, -1, 1]]), torch.ones(1, 3)),
    "index_add": lambda: W.index_add(0, torch.tensor([0, -1]), torch.ones(2, 3)),
    "index_copy": lambda: W.index_copy(0, torch.tensor([-1]), torch.ones(1, 3)),
}


@pytest.mark.parametrize("name", sorted(NEGATIVE))
def test_negative_index_raises_as_eager(name):
    op = NEGATIVE[name]
    with pytest.raises((IndexError, RuntimeError)) as eager:
        op()
    with pytest.raises(type(eager.value)):
        _compile(op)()


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, i: x[i],
        lambda x, i: x.index_put((i,), torch.ones(3)),
        lambda x, i: x.index_put((i,), torch.ones(3), accumulate=True),
    ],
    ids=["index", "index_put", "index_put_accumulate"],
)
def test_negative_index_wraps_where_eager_wraps(fn):
    i = torch.tensor([0, -1, -5])
    assert torch.equal(_compile(fn)(W, i), fn(W, i))


# -- 3. half precision as eager rounds it ----------------------------------

SCALAR_OPS = {
    "add": lambda t, s: t + s,
    "sub": lambda t, s: t - s,
    "rsub": lambda t, s: s - t,
    "mul": lambda t, s: t * s,
    "div": lambda t, s: t / s,
    "eq": lambda t, s: t == s,
    "ne": lambda t, s: t != s,
    "lt": lambda t, s: t < s,
    "ge": lambda t, s: t >= s,
    "pow": lambda t, s: t.abs() ** s,
    "fmod": lambda t, s: torch.fmod(t, s),
    "remainder": lambda t, s: torch.remainder(t, s),
    "add_alpha": lambda t, s: torch.add(t, t, alpha=s),
    "softshrink": lambda t, s: F.softshrink(t, s),
    "full": lambda t, s: t + torch.full_like(t, s),
    "where": lambda t, s: torch.where(t > 0, t, s),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", sorted(SCALAR_OPS))
def test_python_float_meets_half_precision_as_in_eager(name, dtype):
    op = SCALAR_OPS[name]
    x = (torch.randn(512) * 4).to(dtype)
    # Values that sit on either side of the scalar once it is rounded.
    x[:4] = torch.tensor([-1.703125, 3.140625, 9.99, -9.99]).to(dtype)
    for s in (1.7, 3.14, 9.99):
        got, want = _compile(op)(x, s), op(x, s)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=f"{name}({s})")


def test_issue_examples_bit_exact():
    x = torch.tensor([-1.703125], dtype=torch.bfloat16)
    assert torch.equal(_compile(lambda x: x + 1.7)(x), torch.zeros(1, dtype=torch.bfloat16))
    y = torch.tensor([3.14, 3.0, 3.14, 2.0], dtype=torch.bfloat16)
    assert _compile(lambda y: y == 3.14)(y).tolist() == [True, False, True, False]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_half_precision_gemm_operand_rounded_as_eager_stores_it(dtype):
    """``a + 1`` reaches the GEMM rounded to ``dtype``, as eager stores it:
    an unrounded operand (a float32 ``a + 1`` near 400) moves results by
    about 0.1. The products are summed in float32 in another order than
    torch's own half-precision GEMM (which changed between torch builds of
    2.15), so a result may differ by one half-precision ulp."""
    g = torch.Generator().manual_seed(3)
    a = torch.randn(32, 32, generator=g).to(dtype) * 100
    b = torch.randn(32, 32, generator=g).to(dtype)
    fn = lambda a, b: (a + 1) @ b.t()  # noqa: E731
    ulp = torch.finfo(dtype).eps
    torch.testing.assert_close(_compile(fn)(a, b), fn(a, b), rtol=ulp, atol=1e-3)


# -- 4-6. integer pow, select_scatter's dtype, sign of NaN -----------------


def test_int64_pow_with_exponents_past_32_bits():
    x = torch.tensor([-1, -1, 3, 0, 2, -3])
    y = torch.tensor([2**32, 2**34 + 1, 2**32 + 1, 2**40, 63, 2**33 + 7])
    assert torch.equal(_compile(torch.pow)(x, y), torch.pow(x, y))


def test_select_scatter_keeps_the_input_dtype():
    x = torch.zeros(3, 4, dtype=torch.int64)
    src = torch.full((4,), 1.7)
    fn = lambda x, s: torch.select_scatter(x, s, 0, -1)  # noqa: E731
    got, want = _compile(fn)(x, src), fn(x, src)
    assert got.dtype == want.dtype == torch.int64
    assert torch.equal(got, want)


@pytest.mark.parametrize("device", ["cpu", "cuda-sim", "wgpu"])
@pytest.mark.parametrize("op", [torch.sgn, torch.sign], ids=["sgn", "sign"])
def test_sign_of_nan_and_negative_zero(op, device):
    if device == "wgpu" and not wgpu_available():
        pytest.skip("no wgpu adapter")
    x = torch.tensor([float("nan"), -2.0, -0.0, 0.0, 3.0, float("-inf")])
    got = torch.compile(op, backend="rdyn", options={"device": device})(x)
    want = op(x)
    assert torch.equal(got, want)
    assert not torch.signbit(got[2])


# -- 7. ZeroTensors --------------------------------------------------------


def test_efficient_zero_tensor_feeding_a_gemm():
    """The 4-node graph of the report: ``_efficientzerotensor`` (an eager
    node here, a tensor whose ``data_ptr()`` is 0) read by ``mm``."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    aten = torch.ops.aten
    g = torch.fx.Graph()
    a = g.placeholder("a")
    b = g.call_function(aten.add.Tensor, (a, 1))
    z = g.call_function(aten._efficientzerotensor.default, ([8, 4],), {"dtype": torch.float32})
    t = g.call_function(aten.t.default, (z,))
    g.output((g.call_function(aten.mm.default, (b, z)), t))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    x = torch.randn(3, 8)
    FakeTensorProp(gm, FakeTensorMode()).propagate(x)
    product, transposed = rdyn.compile_graph(gm, [x])(x)
    assert torch.equal(product, torch.zeros(3, 4))
    assert torch.equal(transposed, torch.zeros(4, 8))


def test_zero_tensor_input_is_read_as_zeros():
    z = torch._efficientzerotensor((4, 3))
    w = torch.randn(3, 2)
    assert torch.equal(_compile(lambda z, w: (z + 1) @ w)(z, w), torch.ones(4, 3) @ w)


def test_jvp_through_linear_layers_trains():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    x, v = torch.randn(5, 4), torch.randn(5, 4)

    def step(x, v):
        out, tangent = torch.func.jvp(model, (x,), (v,))
        (out.sum() + tangent.pow(2).sum()).backward()
        return out, tangent

    want = step(x, v)
    want_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    got = _compile(step)(x, v)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    for p, w in zip(model.parameters(), want_grads):
        torch.testing.assert_close(p.grad, w, rtol=1e-5, atol=1e-6)


# -- 8. an allocation that fails is an error, not an abort ------------------

_OUT_OF_MEMORY_CASES = {
    # The scratch arena: the [262144, 256] product feeding relu().sum().
    "arena": (
        "lambda x, w: (x @ w).relu().sum()",
        "(torch.randn(64, 256), torch.randn(256, 256))",
        "(torch.randn(4 * 65536, 256), torch.randn(256, 256))",
        64,
    ),
    # A sort's keys: 128 MiB for a line of 2**24 float32 (its outputs,
    # 192 MiB, are torch's and fit under the limit). The small input has no
    # ties: eager's default sort is not stable, so with ties its indices may
    # differ from rdyn's (which orders ties by position).
    "sort": (
        "lambda x: torch.sort(x, -1)",
        "(torch.randperm(2000).float().view(2, 1000),)",
        "(torch.randn(1, 1 << 24),)",
        256,
    ),
}


@pytest.mark.parametrize("case", sorted(_OUT_OF_MEMORY_CASES))
def test_failed_scratch_allocation_raises_and_the_process_goes_on(case):
    fn, small, big, headroom_mib = _OUT_OF_MEMORY_CASES[case]
    script = textwrap.dedent(
        f"""
        import resource, torch, rdyn
        fn = {fn}
        f = torch.compile(fn, backend="rdyn")
        small = {small}
        f(*small)
        big = {big}
        # From here on the address space may grow by the headroom only.
        vm = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (vm + ({headroom_mib} << 20), resource.RLIM_INFINITY))
        try:
            f(*big)
        except RuntimeError as e:
            print("raised", type(e).__name__, str(e)[:200])
        else:
            print("no error")
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        torch.testing.assert_close(f(*small), fn(*small), rtol=1e-4, atol=1e-3)
        print("usable")
        """
    )
    env = dict(os.environ, RDYN_STRICT="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "raised OutOfMemoryError" in proc.stdout and "memory" in proc.stdout, proc.stdout
    assert "usable" in proc.stdout, proc.stdout


# -- 16. error types as eager's --------------------------------------------


def test_integer_division_by_zero_raises_a_runtime_error():
    x = torch.tensor([4, 5, 6])
    y = torch.tensor([1, 0, 2])
    fn = lambda x, y: torch.div(x, y, rounding_mode="floor")  # noqa: E731
    with pytest.raises(RuntimeError):
        fn(x, y)
    with pytest.raises(RuntimeError):
        _compile(fn)(x, y)


def test_kernel_check_error_is_both_of_eagers_types():
    assert issubclass(rdyn.KernelCheckError, IndexError) and issubclass(rdyn.KernelCheckError, RuntimeError)
    with pytest.raises(rdyn.KernelCheckError):
        _compile(lambda x, i: x[i])(W, torch.tensor([9]))


def test_out_of_range_index_raises_what_eager_raises():
    i = torch.tensor([0, 7])
    for fn in (lambda x, i: x[i], lambda x, i: x.index_select(0, i), lambda x, i: x.gather(0, i.view(2, 1))):
        with pytest.raises((IndexError, RuntimeError)) as eager:
            fn(W, i)
        torch._dynamo.reset()
        with pytest.raises(type(eager.value)):
            _compile(fn)(W, i)
