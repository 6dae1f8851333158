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

``SUITES`` names the model lists ``suite.py --suite`` runs: ``default`` (the
models above that are not ``extra``) and ``wide`` (every model: those, the
opt-in ones and the wide corpus of ``corpus.py``).  ``spec(name)`` also takes
a ``MODULE:FUNCTION`` target, your own model (``python -m rdyn.bench``):
:func:`build_target` imports it and checks what it returns.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
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
    # Whether a training step (forward + backward) makes sense: False for a
    # model with no parameters. `--train` skips the model in training mode.
    train: bool = True
    # Only in the wide corpus (`--suite wide`, benches/corpus.py).
    wide: bool = False
    # Packages the builder imports; a model whose package is missing is
    # skipped with a note.
    requires: tuple[str, ...] = field(default_factory=tuple)

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

    model = _randomise_batchnorm(torchvision.models.mobilenet_v2(num_classes=100, dropout=0.0))
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

    # No dropout or stochastic depth: a training step must be deterministic
    # to compare with eager's (eval mode, and the weights, are the same).
    model = _randomise_batchnorm(torchvision.models.efficientnet_b0(num_classes=100, dropout=0.0,
                                                                    stochastic_depth_prob=0.0))
    return model, (torch.randn(1, 3, 96, 96),)


def _squeezenet():
    import torchvision

    return torchvision.models.squeezenet1_1(num_classes=100, dropout=0.0), (torch.randn(2, 3, 64, 64),)


def _shufflenet():
    import torchvision

    model = _randomise_batchnorm(torchvision.models.shufflenet_v2_x1_0(num_classes=100))
    return model, (torch.randn(2, 3, 64, 64),)


def _upsample_decoder():
    return UpsampleDecoder(), (torch.randn(2, 32, 16, 16), torch.randn(2, 32, 32, 32), torch.randn(2, 32, 64, 64))


_SPECS = [
    ModelSpec("mlp", "3-layer MLP 256-512-512-64, batch 64", _mlp, cost=1, tags=("gemm",)),
    ModelSpec("layernorm_gelu", "4x (LayerNorm, GELU, scale/shift, residual) on 16x128x256", _layernorm_gelu, cost=1, tags=("memory-bound",)),
    ModelSpec("reduction", "softmax, log_softmax, var_mean, amax, logsumexp on 256x1024", _reduction, cost=1,
              tags=("reduction",), train=False),
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

import corpus  # noqa: E402  (the wide corpus; after ModelSpec: its builders use this module's helpers)

_SPECS += [ModelSpec(**fields, wide=True) for fields in corpus.SPECS]

MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in _SPECS}

#: The three cheapest models, run by `--quick`.
QUICK_MODELS: list[str] = [s.name for s in sorted((s for s in _SPECS if not (s.extra or s.wide)),
                                                   key=lambda s: s.cost)[:3]]

#: The named suites (`suite.py --suite NAME`): the default one (a few
#: minutes), and the wide corpus: every model here, the default's, the
#: opt-in ones and benches/corpus.py's.
SUITES: dict[str, list[str]] = {
    "default": [s.name for s in _SPECS if not (s.extra or s.wide)],
    "wide": [s.name for s in _SPECS],
}

_PACKAGES = ("torchvision", "timm", "transformers")


def packages(spec: ModelSpec) -> tuple[str, ...]:
    """The optional packages a model's builder imports (from its tags and ``requires``)."""
    return tuple(p for p in _PACKAGES if p in spec.tags or p in spec.requires)


def tiny_graph():
    """The per-call overhead probe: ``x + 1`` on a one-element tensor."""

    def f(x):
        return x + 1

    return f, (torch.ones(1),)


# --------------------------------------------------------------------------
# Your own model: MODULE:FUNCTION targets (python -m rdyn.bench, suite.py --target)
# --------------------------------------------------------------------------


class TargetError(Exception):
    """A ``MODULE:FUNCTION`` target that cannot be benchmarked. The message is
    one line saying what is wrong and how to fix it."""


def is_target(name: str) -> bool:
    """Model names never hold a colon; targets (``my_module:make``) always do."""
    return ":" in name


class _FunctionModule(nn.Module):
    """A plain function returned by a target's ``make()``, as a module."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *inputs):
        return self.fn(*inputs)


def _user_dir() -> str:
    """The folder the user ran the benchmark from (the suite passes it on,
    since the workers run in the repository root)."""
    return os.environ.get("RDYN_BENCH_CWD") or os.getcwd()


def _a(type_name: str) -> str:
    return ("an " if type_name[:1].lower() in "aeiou" else "a ") + type_name


def _one_line(exc: BaseException) -> str:
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _import_target_module(target: str, module_part: str, attr: str):
    import importlib
    import importlib.util

    if module_part.endswith(".py") or "/" in module_part or os.sep in module_part:
        path = Path(module_part)
        if not path.is_absolute():
            path = Path(_user_dir()) / path
        if not path.is_file():
            raise TargetError(f"{target}: no file {path}; give the path of a Python file, or a module name "
                              f"importable from {_user_dir()}")
        name = f"_rdyn_bench_target_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise TargetError(f"{target}: running {path} failed: {_one_line(exc)}") from None
        return module
    if _user_dir() not in sys.path:
        sys.path.append(_user_dir())
    try:
        return importlib.import_module(module_part)
    except ModuleNotFoundError as exc:
        if exc.name and (module_part == exc.name or module_part.startswith(exc.name + ".")):
            raise TargetError(
                f"{target}: no module named {module_part!r} in {_user_dir()} or on sys.path; run from the folder "
                f"holding {module_part.replace('.', '/')}.py, add that folder to PYTHONPATH, or name the file: "
                f"path/to/{module_part.rsplit('.', 1)[-1]}.py:{attr}") from None
        raise TargetError(f"{target}: importing {module_part!r} failed: {_one_line(exc)} "
                          f"(pip install the package it imports)") from None
    except Exception as exc:
        raise TargetError(f"{target}: importing {module_part!r} failed: {_one_line(exc)}") from None


def build_target(target: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Import ``MODULE:FUNCTION``, call the function, check what it returned.

    ``MODULE`` is a module name importable from the user's folder
    (``my_model``, ``pkg.models``) or a Python file (``path/to/file.py``).
    The function takes no arguments and returns ``(model, inputs)``: an
    ``nn.Module`` (or a plain function) and a tensor or a tuple of tensors.
    Raises :class:`TargetError` with a one-line message otherwise.
    """
    module_part, _, attr = target.rpartition(":")
    if not module_part or not attr:
        raise TargetError(f"{target!r}: expected MODULE:FUNCTION, e.g. my_model:make (a module or a .py file, "
                          "and a function in it returning (model, inputs))")
    module = _import_target_module(target, module_part, attr)
    fn = getattr(module, attr, None)
    if fn is None:
        raise TargetError(f"{target}: {module_part} has no {attr!r}; define {attr}() returning (model, inputs) "
                          f"there, or name the function that does: {module_part}:FUNCTION")
    if not callable(fn):
        raise TargetError(f"{target}: {module_part}.{attr} is {_a(type(fn).__name__)}, not a function; it must be a "
                          "function taking no arguments and returning (model, inputs)")
    try:
        got = fn()
    except Exception as exc:
        raise TargetError(f"{target}: {attr}() raised {_one_line(exc)}") from None
    shape = ("(model, inputs): an nn.Module (or a function) and a tensor or a tuple of tensors, "
             "e.g. return model, (torch.randn(8, 3, 224, 224),)")
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        what = f"a {len(got)}-tuple" if isinstance(got, (tuple, list)) else _a(type(got).__name__)
        raise TargetError(f"{target}: {attr}() returned {what}; it must return {shape}")
    model, inputs = got
    if not isinstance(model, nn.Module):
        if not callable(model) or isinstance(model, torch.Tensor):
            raise TargetError(f"{target}: {attr}() returned {_a(type(model).__name__)} as the model; it must return "
                              f"{shape}")
        model = _FunctionModule(model)
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    elif isinstance(inputs, (tuple, list)) and inputs and all(isinstance(x, torch.Tensor) for x in inputs):
        inputs = tuple(inputs)
    else:
        if isinstance(inputs, (tuple, list)):
            bad = [type(x).__name__ for x in inputs if not isinstance(x, torch.Tensor)]
            what = f"inputs holding {_a(bad[0])}" if bad else "no inputs (an empty tuple)"
        else:
            what = f"{_a(type(inputs).__name__)} as the inputs"
        raise TargetError(f"{target}: {attr}() returned {what}; it must return {shape} (pass other arguments "
                          "through a wrapper module)")
    return model, inputs


_TARGET_SPECS: dict[str, ModelSpec] = {}


def spec(name: str) -> ModelSpec:
    """The spec of a model of the zoo, or of a ``MODULE:FUNCTION`` target."""
    if not is_target(name):
        return MODELS[name]
    if name not in _TARGET_SPECS:
        _TARGET_SPECS[name] = ModelSpec(name, f"your model ({name})", lambda: build_target(name), cost=0)
    return _TARGET_SPECS[name]


def describe_target(target: str) -> dict:
    """What the suite's catalog holds for a target: its description (model
    class, input shapes) and whether a training step makes sense, or the
    one-line ``error`` that says why it cannot run."""
    try:
        model, inputs = spec(target).build()
    except TargetError as exc:
        return {"name": target, "error": str(exc)}
    except Exception as exc:  # e.g. model.eval() failing
        return {"name": target, "error": f"{target}: {_one_line(exc)}"}
    shapes = ", ".join("x".join(map(str, x.shape)) + ("" if x.dtype == torch.float32 else " " + str(x.dtype)[6:])
                       for x in inputs)
    cls = type(model.fn).__name__ if isinstance(model, _FunctionModule) else type(model).__name__
    params = sum(p.numel() for p in model.parameters())
    return {"name": target, "description": f"{cls} ({params:,} parameters) on {shapes}", "cost": 0,
            "extra": False, "wide": False, "target": True,
            "train": any(p.requires_grad for p in model.parameters()), "packages": []}
