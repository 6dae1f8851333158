"""The benchmark model zoo: real models built from code, random weights, no downloads.

Each entry of ``MODELS`` maps a name to a :class:`ModelSpec`.  ``spec.build()``
returns ``(module, inputs)`` where ``inputs`` is a tuple of tensors on the CPU
in float32 (integer token ids stay ``int64``).  Builders seed the RNG so every
process (the main worker, the warm-start and memory subprocesses) gets the same
weights and the same inputs.

Sizes are deliberately modest: the default CPU suite (eager + Inductor + rdyn,
compile time included) must finish in well under 15 minutes on 2 cores.

Heavy imports (torchvision, transformers) happen inside the builders so a
worker only pays for what it builds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn
import torch.nn.functional as F


@dataclass(frozen=True)
class ModelSpec:
    """One benchmark model."""

    name: str
    description: str
    builder: Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]
    # Rough size class used to pick the `--quick` models (smaller is cheaper).
    cost: int
    tags: tuple[str, ...] = field(default_factory=tuple)
    # Opt-in: not in the default suite; `--models extra` runs all of them.
    extra: bool = False

    def build(self, seed: int = 0) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(seed)
        module, inputs = self.builder()
        module.eval()
        return module, inputs


# --------------------------------------------------------------------------
# Hand-written blocks
# --------------------------------------------------------------------------


class MLP(nn.Module):
    """A 3-layer MLP: GEMM-bound with small pointwise epilogues."""

    def __init__(self, d_in: int = 256, hidden: int = 512, d_out: int = 64):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, d_out)

    def forward(self, x):
        x = F.gelu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class AttentionBlock(nn.Module):
    """A pre-norm transformer attention block written out by hand.

    Explicit q @ k^T, scaling, causal mask, softmax, @ v, output projection and
    residual: the ATen graph a compiler sees for attention without SDPA.
    """

    def __init__(self, dim: int = 128, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        h = self.norm(x)
        q, k, v = self.qkv(h).split(c, dim=-1)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf"))
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        return x + self.proj(y)


class LayerNormGeluChain(nn.Module):
    """Memory-bound chain of LayerNorm, GELU, scale/shift and residual adds."""

    def __init__(self, dim: int = 256, depth: int = 4):
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.scales = nn.ParameterList(nn.Parameter(torch.randn(dim) * 0.1 + 1) for _ in range(depth))
        self.shifts = nn.ParameterList(nn.Parameter(torch.randn(dim) * 0.1) for _ in range(depth))

    def forward(self, x):
        for norm, scale, shift in zip(self.norms, self.scales, self.shifts):
            x = x + F.gelu(norm(x)) * scale + shift
        return x


class ReductionBlock(nn.Module):
    """Reduction-heavy block: softmax, log_softmax, var_mean, amax, logsumexp."""

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True)
        z = (x - mean) * torch.rsqrt(var + 1e-5)
        p = torch.softmax(z, dim=-1)
        lp = torch.log_softmax(x, dim=-1)
        peak = x.amax(dim=-1, keepdim=True)
        lse = torch.logsumexp(x, dim=-1, keepdim=True)
        col = x.mean(dim=0, keepdim=True)
        return p * lp + (peak - lse) + col, var.squeeze(-1)


class UpsampleDecoder(nn.Module):
    """A feature-pyramid / U-Net decoder step, twice: 2x nearest
    upsampling, a skip connection concatenated, conv + relu."""

    def __init__(self, channels: int = 32):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(2 * channels, channels, 3, padding=1) for _ in range(2))

    def forward(self, x, skip1, skip2):
        for conv, skip in zip(self.convs, (skip1, skip2)):
            x = F.interpolate(x, scale_factor=2.0, mode="nearest")
            x = F.relu(conv(torch.cat([x, skip], 1)))
        return x


class ConvBnRelu(nn.Module):
    """Two conv + batchnorm + relu stages and a residual: the CNN workhorse."""

    def __init__(self, channels: int = 32):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(x + y)


class HFWrapper(nn.Module):
    """Call a `transformers` model and return its main output as a plain tensor."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids).last_hidden_state


def _randomise_batchnorm(module: nn.Module) -> nn.Module:
    """Give BatchNorm layers non-trivial running statistics and affine params.

    Fresh BatchNorm layers are the identity in eval mode (mean 0, var 1, weight 1,
    bias 0), which would let a wrong lowering pass unnoticed.
    """
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            with torch.no_grad():
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
    return module


# --------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------


def _resnet18():
    import torchvision

    model = _randomise_batchnorm(torchvision.models.resnet18(num_classes=100))
    return model, (torch.randn(1, 3, 112, 112),)


def _mobilenet_v2():
    import torchvision

    model = _randomise_batchnorm(torchvision.models.mobilenet_v2(num_classes=100))
    return model, (torch.randn(1, 3, 112, 112),)


def _vit():
    import torchvision

    model = torchvision.models.VisionTransformer(
        image_size=64, patch_size=16, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128, num_classes=100
    )
    return model, (torch.randn(8, 3, 64, 64),)


def _bert():
    import transformers

    config = transformers.BertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        vocab_size=1000,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = HFWrapper(transformers.BertModel(config, add_pooling_layer=False))
    return model, (torch.randint(0, 1000, (4, 64)),)


def _gpt2():
    import transformers

    config = transformers.GPT2Config(
        n_embd=64,
        n_layer=2,
        n_head=2,
        n_positions=128,
        vocab_size=1000,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        use_cache=False,
    )
    model = HFWrapper(transformers.GPT2Model(config))
    return model, (torch.randint(0, 1000, (4, 64)),)


def _mlp():
    return MLP(), (torch.randn(64, 256),)


def _attention():
    return AttentionBlock(), (torch.randn(4, 64, 128),)


def _layernorm_gelu():
    return LayerNormGeluChain(), (torch.randn(16, 128, 256),)


def _reduction():
    return ReductionBlock(), (torch.randn(256, 1024),)


def _conv_bn_relu():
    return _randomise_batchnorm(ConvBnRelu()), (torch.randn(2, 32, 56, 56),)


def _efficientnet_b0():
    import torchvision

    model = _randomise_batchnorm(torchvision.models.efficientnet_b0(num_classes=100))
    return model, (torch.randn(1, 3, 96, 96),)


def _squeezenet():
    import torchvision

    return torchvision.models.squeezenet1_1(num_classes=100), (torch.randn(2, 3, 64, 64),)


def _shufflenet():
    import torchvision

    model = _randomise_batchnorm(torchvision.models.shufflenet_v2_x1_0(num_classes=100))
    return model, (torch.randn(2, 3, 64, 64),)


def _upsample_decoder():
    return UpsampleDecoder(), (torch.randn(2, 32, 16, 16), torch.randn(2, 32, 32, 32), torch.randn(2, 32, 64, 64))


_SPECS = [
    ModelSpec("mlp", "3-layer MLP 256-512-512-64, batch 64", _mlp, cost=1, tags=("gemm",)),
    ModelSpec("layernorm_gelu", "4x (LayerNorm, GELU, scale/shift, residual) on 16x128x256", _layernorm_gelu, cost=1, tags=("memory-bound",)),
    ModelSpec("reduction", "softmax, log_softmax, var_mean, amax, logsumexp on 256x1024", _reduction, cost=1, tags=("reduction",)),
    ModelSpec("attention", "hand-written causal attention block, 4x64x128, 4 heads", _attention, cost=2, tags=("gemm", "attention")),
    ModelSpec("conv_bn_relu", "2x (conv3x3, batchnorm, relu) + residual, 2x32x56x56", _conv_bn_relu, cost=2, tags=("conv",)),
    ModelSpec("vit", "torchvision VisionTransformer 64px/16, 2 layers, dim 64, batch 8", _vit, cost=3, tags=("transformer", "torchvision")),
    ModelSpec("bert", "transformers BertModel, 2 layers, dim 64, 4x64 tokens", _bert, cost=3, tags=("transformer", "transformers")),
    ModelSpec("gpt2", "transformers GPT2Model, 2 layers, dim 64, 4x64 tokens", _gpt2, cost=3, tags=("transformer", "transformers")),
    ModelSpec("resnet18", "torchvision resnet18, 1x3x112x112", _resnet18, cost=4, tags=("cnn", "torchvision")),
    ModelSpec("mobilenet_v2", "torchvision mobilenet_v2, 1x3x112x112", _mobilenet_v2, cost=5, tags=("cnn", "torchvision")),
    ModelSpec("efficientnet_b0", "torchvision efficientnet_b0 (SiLU, squeeze-excite), 1x3x96x96", _efficientnet_b0, cost=6, tags=("cnn", "torchvision")),
]

_SPECS += [
    ModelSpec("squeezenet", "torchvision squeezenet1_1 (fire modules: cat, ceil-mode pools), 2x3x64x64", _squeezenet,
              cost=3, tags=("cnn", "torchvision"), extra=True),
    ModelSpec("shufflenet", "torchvision shufflenet_v2_x1_0 (channel shuffles), 2x3x64x64", _shufflenet,
              cost=4, tags=("cnn", "torchvision"), extra=True),
    ModelSpec("upsample_decoder", "2x (nearest 2x upsampling, skip cat, conv3x3, relu) from 2x32x16x16",
              _upsample_decoder, cost=2, tags=("cnn", "memory-bound"), extra=True),
]

MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in _SPECS}

#: The three cheapest models, run by `--quick`.
QUICK_MODELS: list[str] = [s.name for s in sorted((s for s in _SPECS if not s.extra), key=lambda s: s.cost)[:3]]


def tiny_graph():
    """The per-call overhead probe: ``x + 1`` on a one-element tensor."""

    def f(x):
        return x + 1

    return f, (torch.ones(1),)
