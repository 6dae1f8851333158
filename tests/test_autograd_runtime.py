"""rdyn's runtime for training graphs (`python/rdyn/_autograd.py`).

A plain training graph runs through rdyn's `LeanFunction`, the others through
AOTAutograd's runtime. Either way a training step must behave as eager's:
gradients against float64 eager, running statistics updated, in-place
changes of saved tensors caught, ``retain_graph`` and ``create_graph`` as
eager allows them.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch._dynamo

import rdyn  # noqa: F401  (registers the backend)


def _grad_fn_names(out: torch.Tensor) -> set:
    return {type(out.grad_fn).__name__}


def _runtime(monkeypatch, runtime: str) -> None:
    monkeypatch.setenv("RDYN_AUTOGRAD", runtime)
    torch._dynamo.reset()


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc1(x))
        return torch.nn.functional.layer_norm(self.fc2(h), (8,))


@pytest.mark.parametrize("runtime", ["rdyn", "aot"])
def test_training_step_matches_float64_eager(runtime, monkeypatch) -> None:
    _runtime(monkeypatch, runtime)
    torch.manual_seed(0)
    model = _MLP()
    reference = copy.deepcopy(model).double()
    x = torch.randn(4, 16)
    compiled = torch.compile(model, backend="rdyn")
    out = compiled(x)
    expected = "LeanFunctionBackward" if runtime == "rdyn" else "CompiledFunctionBackward"
    assert _grad_fn_names(out) == {expected}
    weights = torch.randn(4, 8)
    (out * weights).sum().backward()
    (reference(x.double()) * weights.double()).sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad.float(), rtol=1e-4, atol=1e-5, msg=name)


def test_running_statistics_are_copied_back() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="rdyn")
    x = torch.randn(2, 3, 8, 8)
    for _ in range(3):
        out = compiled(x)
        out.sum().backward()
        reference(x).sum().backward()
    assert _grad_fn_names(out) == {"LeanFunctionBackward"}
    bn, ref_bn = model[1], reference[1]
    torch.testing.assert_close(bn.running_mean, ref_bn.running_mean)
    torch.testing.assert_close(bn.running_var, ref_bn.running_var)
    assert int(bn.num_batches_tracked) == int(ref_bn.num_batches_tracked) == 3
    torch.testing.assert_close(model[0].weight.grad, reference[0].weight.grad, rtol=1e-4, atol=1e-4)


def test_changing_a_saved_output_in_place_is_caught() -> None:
    def f(x):
        return x.exp()  # the backward reads exp's result

    x = torch.randn(8, requires_grad=True)
    out = torch.compile(f, backend="rdyn")(x)
    assert _grad_fn_names(out) == {"LeanFunctionBackward"}
    out.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_retain_graph_runs_the_backward_twice() -> None:
    def f(x, w):
        return (x @ w).tanh()

    x = torch.randn(4, 8)
    w = torch.randn(8, 3, requires_grad=True)
    out = torch.compile(f, backend="rdyn")(x, w)
    out.sum().backward(retain_graph=True)
    once = w.grad.clone()
    out.sum().backward()
    torch.testing.assert_close(w.grad, 2 * once)
    w64 = w.detach().double().requires_grad_()
    f(x.double(), w64).sum().backward()
    torch.testing.assert_close(once, w64.grad.float(), rtol=1e-4, atol=1e-5)


def test_first_order_gradients_with_create_graph_and_no_second_order() -> None:
    def f(x):
        return x.sin() * x

    x = torch.randn(6, requires_grad=True)
    out = torch.compile(f, backend="rdyn")(x)
    (grad,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    x64 = x.detach().double().requires_grad_()
    (expected,) = torch.autograd.grad(f(x64).sum(), x64)
    torch.testing.assert_close(grad, expected.float(), rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="double backward"):
        grad.sum().backward()


def test_outputs_without_gradients_are_not_differentiable() -> None:
    def f(x):
        return x.softmax(-1), x.argmax(-1), (x > 0)

    x = torch.randn(3, 5, requires_grad=True)
    probs, index, mask = torch.compile(f, backend="rdyn")(x)
    assert probs.requires_grad and not index.requires_grad and not mask.requires_grad
    torch.testing.assert_close(index, x.argmax(-1))
    probs[:, 0].sum().backward()
    x64 = x.detach().double().requires_grad_()
    x64.softmax(-1)[:, 0].sum().backward()
    torch.testing.assert_close(x.grad, x64.grad.float(), rtol=1e-5, atol=1e-6)


def test_graphs_aliasing_their_inputs_keep_aotautograd_runtime() -> None:
    def f(x):
        y = x * 2
        return y, x.view(-1)  # an output that is a view of an input

    x = torch.randn(2, 3, requires_grad=True)
    y, view = torch.compile(f, backend="rdyn")(x)
    assert _grad_fn_names(y) == {"CompiledFunctionBackward"}
    assert view.data_ptr() == x.data_ptr()
    (y.sum() + 3 * view.sum()).backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 5.0))


def test_symbolic_sizes_train_through_aotautograds_runtime() -> None:
    def f(x, w):
        return torch.nn.functional.gelu(x @ w).sum(-1)

    w = torch.randn(8, 5, requires_grad=True)
    compiled = torch.compile(f, backend="rdyn", dynamic=True)
    for rows in (3, 7):
        w.grad = None
        x = torch.randn(rows, 8)
        out = compiled(x, w)
        out.sum().backward()
        w64 = w.detach().double().requires_grad_()
        f(x.double(), w64).sum().backward()
        torch.testing.assert_close(w.grad, w64.grad.float(), rtol=1e-4, atol=1e-5)
