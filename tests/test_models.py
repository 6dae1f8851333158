"""Real models through ``torch.compile(backend="rdyn")``, compared with eager.

Inference (``.eval()``, ``torch.no_grad()``) and one training step
(``loss.backward()``: gradients, loss, and BatchNorm running statistics).
Random weights from a fixed seed, small inputs, no downloads.  Results that
miss the float32 tolerances are judged against a float64 copy of the model
(see ``helpers.assert_same``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

import pytest
import torch
from torch import nn

import rdyn
from helpers import assert_same, no_rust_panic, wgpu_available

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

# Model outputs accumulate rounding through many layers.
RTOL, ATOL = 1e-3, 1e-4


@dataclass
class ModelCase:
    build: Callable[[], nn.Module]
    inputs: Callable[[], tuple[Any, ...]]
    # Picks the tensor(s) to compare out of the model's output.
    outputs: Callable[[Any], Any] = lambda out: out


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(32, 64),
            nn.GELU(),
            nn.LayerNorm(64),
            nn.Linear(64, 64),
            nn.ReLU(),
            nn.Linear(64, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.layers(x), dim=-1)


def _resnet18() -> nn.Module:
    import torchvision

    return torchvision.models.resnet18(weights=None, num_classes=10)


def _mobilenet_v2() -> nn.Module:
    import torchvision

    return torchvision.models.mobilenet_v2(weights=None, num_classes=10)


def _squeezenet() -> nn.Module:
    import torchvision

    return torchvision.models.squeezenet1_1(weights=None, num_classes=10)


def _shufflenet() -> nn.Module:
    import torchvision

    return torchvision.models.shufflenet_v2_x0_5(weights=None, num_classes=10)


def _bert() -> nn.Module:
    import transformers

    config = transformers.BertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        vocab_size=100,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return transformers.BertModel(config)


def _gpt2() -> nn.Module:
    import transformers

    config = transformers.GPT2Config(
        n_embd=64,
        n_layer=2,
        n_head=2,
        n_positions=64,
        vocab_size=100,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return transformers.GPT2LMHeadModel(config)


def _images(batch: int = 2) -> tuple[torch.Tensor]:
    return (torch.randn(batch, 3, 64, 64),)


def _tokens() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, 100, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 12:] = 0  # padding in the second sequence
    return ids, mask


MODELS: dict[str, ModelCase] = {
    "mlp": ModelCase(MLP, lambda: (torch.randn(8, 32),)),
    "resnet18": ModelCase(_resnet18, _images),
    "mobilenet_v2": ModelCase(_mobilenet_v2, _images),
    # Fire modules (`cat`, ceil-mode pools) and channel-shuffle chains.
    "squeezenet": ModelCase(_squeezenet, _images),
    "shufflenet": ModelCase(_shufflenet, _images),
    "bert": ModelCase(_bert, _tokens, lambda out: out.last_hidden_state),
    "gpt2": ModelCase(_gpt2, lambda: _tokens()[:1], lambda out: out.logits),
}
TRAINING_MODELS = ["mlp", "resnet18", "bert", "gpt2"]


def build(name: str) -> tuple[nn.Module, tuple[Any, ...]]:
    torch.manual_seed(0)
    case = MODELS[name]
    model = case.build()
    return model, case.inputs()


def float64_copy(model: nn.Module) -> nn.Module:
    return copy.deepcopy(model).to(torch.float64)


def float64_inputs(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(x.to(torch.float64) if x.is_floating_point() else x for x in inputs)


CUDA = pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU"))
DEVICES = ["cpu", pytest.param("wgpu", marks=pytest.mark.skipif(not wgpu_available(), reason="no wgpu adapter")), "cuda-sim", CUDA]


def on_device(name: str, device: str) -> tuple[nn.Module, tuple[Any, ...]]:
    """The model and its inputs, on CUDA for ``device="cuda"``."""
    model, inputs = build(name)
    if device == "cuda":
        model = model.cuda()
        inputs = tuple(x.cuda() if isinstance(x, torch.Tensor) else x for x in inputs)
    return model, inputs


@pytest.fixture(autouse=True)
def _no_tf32():
    """cuDNN's convolutions in float32 rounding (TF32 is its default on
    CUDA), so eager, its float64 copy and rdyn's library calls agree to
    float32 tolerances. (Matrix products use TF32 only when asked.)"""
    if not torch.cuda.is_available():
        yield
        return
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        yield


def _options(device: str) -> dict[str, str]:
    # CUDA is chosen by the inputs' device; wgpu runs CPU tensors on the GPU.
    return {} if device == "cuda" else {"device": device}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(MODELS))
def test_inference(name: str, device: str) -> None:
    model, inputs = on_device(name, device)
    model.eval()
    pick = MODELS[name].outputs
    with torch.no_grad():
        expected = pick(model(*inputs))
        reference = pick(float64_copy(model)(*float64_inputs(inputs)))
        compiled = torch.compile(model, backend="rdyn", options=_options(device))
        with no_rust_panic():
            actual = pick(compiled(*inputs))
            again = pick(compiled(*inputs))  # the cached program
    assert_same(actual, expected, reference, rtol=RTOL, atol=ATOL, what=f"{name} output")
    assert_same(again, expected, reference, rtol=RTOL, atol=ATOL, what=f"{name} output (second call)")
    stats = rdyn.stats()
    assert stats["graphs"] >= 1, f"rdyn compiled no graph for {name}: {stats}"


def _loss(output: torch.Tensor) -> torch.Tensor:
    # Scale-free and sensitive to every output element.
    return output.float().square().mean()


def _training_step(model: nn.Module, inputs: tuple[Any, ...], pick: Callable[[Any], Any]) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    loss = _loss(pick(model(*inputs)))
    loss.backward()
    return loss.detach()


@pytest.mark.parametrize("device", ["cpu", "cuda-sim", CUDA])
@pytest.mark.parametrize("name", TRAINING_MODELS)
def test_training_step(name: str, device: str) -> None:
    model, inputs = on_device(name, device)
    model.train()
    pick = MODELS[name].outputs
    compiled_model = copy.deepcopy(model)
    reference_model = float64_copy(model)

    expected_loss = _training_step(model, inputs, pick)
    reference_loss = _training_step(reference_model, float64_inputs(inputs), pick)
    compiled = torch.compile(compiled_model, backend="rdyn", options=_options(device))
    with no_rust_panic():
        actual_loss = _training_step(compiled, inputs, pick)

    assert_same(actual_loss, expected_loss, reference_loss, rtol=RTOL, atol=ATOL, what=f"{name} loss")
    expected_params = dict(model.named_parameters())
    reference_params = dict(reference_model.named_parameters())
    for param_name, param in compiled_model.named_parameters():
        expected_grad = expected_params[param_name].grad
        reference_grad = reference_params[param_name].grad
        if expected_grad is None:
            # AOTAutograd gives zeros for a parameter the loss does not use.
            assert param.grad is None or not param.grad.any(), f"{name}: {param_name} has a gradient, eager has none"
            continue
        assert param.grad is not None, f"{name}: no gradient for {param_name}"
        assert_same(
            param.grad, expected_grad, reference_grad, rtol=RTOL, atol=ATOL, what=f"{name} grad of {param_name}"
        )
    # BatchNorm running statistics are updated in place by the compiled graph.
    expected_buffers = dict(model.named_buffers())
    reference_buffers = dict(reference_model.named_buffers())
    for buffer_name, buffer in compiled_model.named_buffers():
        assert_same(
            buffer,
            expected_buffers[buffer_name],
            reference_buffers[buffer_name] if buffer.is_floating_point() else None,
            rtol=RTOL,
            atol=ATOL,
            what=f"{name} buffer {buffer_name}",
        )
    stats = rdyn.stats()
    assert stats["graphs"] >= 2, f"expected forward and backward graphs for {name}: {stats}"
