"""The wide corpus: models the default suite leaves out, run by ``--suite wide``.

    python benches/suite.py --suite wide --list
    python benches/suite.py --suite wide           # every model, inference and training

The default suite is eleven models chosen to finish in a few minutes; a
backend tuned on eleven models can fall off a cliff on the twelfth.  This
corpus is the models people run, at the batch sizes they run them (1-8), all
built from code with random weights (no downloads):

* torchvision CNNs: ResNet-50, DenseNet-121, ConvNeXt-tiny, RegNetY-400MF,
  MobileNetV3-small;
* timm: DeiT-tiny, Swin-tiny, MobileViT-xxs, ConvNeXt-atto;
* transformers, from small configs: LLaMA, T5, BART, DistilBERT, the Whisper
  encoder (750 frames, as Whisper runs it), wav2vec2;
* recurrent models (``nn.LSTM``; ``nn.GRUCell`` unrolled), a diffusion UNet
  block (GroupNorm, SiLU), a recommender with ``nn.EmbeddingBag``;
* LLM building blocks written the way model code writes them: RMSNorm,
  rotary embeddings with strided slices, SwiGLU, causal SDPA, and a decoder
  layer made of the four;
* the shapes and ops that have been cliffs: a weight-normed conv
  (``nn.utils.parametrizations.weight_norm``), ``amax(dim=0)`` of a softmax,
  ConvNeXt's downsampling (LayerNorm over channels, 2x2 stride-2 patches),
  a DenseNet dense block, a Whisper-style encoder layer over 750 frames.

``SPECS`` holds one dict per model: the :class:`models.ModelSpec` fields
(``models.py`` turns them into specs, marked ``wide``).  ``train`` is False
where a training step means nothing (no parameters).  ``requires`` names the
packages a builder imports, so the suite can skip a model whose package is
missing with one note rather than an error per backend.

Widths and depths are the real architectures' where that stays cheap on two
CPU cores (the torchvision and timm models are the real ones at small
images); the transformers models are 2-layer configs with small widths.
"""

from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F


def _randomise_batchnorm(module: nn.Module) -> nn.Module:
    import models

    return models._randomise_batchnorm(module)


class HFOutput(nn.Module):
    """Call a `transformers` model with keyword inputs; return ``last_hidden_state``."""

    def __init__(self, model: nn.Module, *names: str):
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *inputs):
        return self.model(**dict(zip(self.names, inputs))).last_hidden_state


# --------------------------------------------------------------------------
# Hand-written models
# --------------------------------------------------------------------------


class LSTMClassifier(nn.Module):
    """Token embedding, a 2-layer ``nn.LSTM``, the last step's state to a classifier."""

    def __init__(self, vocab: int = 1000, dim: int = 64, hidden: int = 128, classes: int = 10):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, tokens):
        out, _ = self.lstm(self.embed(tokens))
        return self.head(out[:, -1])


class GRUCellLoop(nn.Module):
    """A GRU written as a Python loop over ``nn.GRUCell``: what a custom RNN
    (a decoder with attention, a streaming model) looks like to a compiler."""

    def __init__(self, features: int = 40, hidden: int = 96, classes: int = 12):
        super().__init__()
        self.cell = nn.GRUCell(features, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        h = x.new_zeros(x.shape[0], self.cell.hidden_size)
        outs = []
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
            outs.append(self.head(h))
        return torch.stack(outs, 1)


class UNetResBlock(nn.Module):
    """A diffusion UNet residual block: GroupNorm, SiLU, conv, the timestep
    embedding added per channel, GroupNorm, SiLU, conv, a 1x1 skip; then
    self-attention over the pixels (GroupNorm, SDPA)."""

    def __init__(self, c_in: int = 64, c_out: int = 96, t_dim: int = 256, groups: int = 32):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, c_in)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.temb = nn.Linear(t_dim, c_out)
        self.norm2 = nn.GroupNorm(groups, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.skip = nn.Conv2d(c_in, c_out, 1)
        self.attn_norm = nn.GroupNorm(groups, c_out)
        self.qkv = nn.Conv2d(c_out, 3 * c_out, 1)
        self.proj = nn.Conv2d(c_out, c_out, 1)

    def forward(self, x, t):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(t))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        h = h + self.skip(x)
        b, c, hh, ww = h.shape
        q, k, v = self.qkv(self.attn_norm(h)).reshape(b, 3, c, hh * ww).transpose(-1, -2).unbind(1)
        a = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None])[:, 0]
        return h + self.proj(a.transpose(-1, -2).reshape(b, c, hh, ww))


class EmbeddingBagRecommender(nn.Module):
    """A DLRM-style recommender: ``nn.EmbeddingBag`` (sum) per sparse
    feature over variable-length bags (indices + offsets), a bottom MLP on
    the dense features, pairwise dot-product interactions, a top MLP."""

    def __init__(self, tables: int = 4, rows: int = 1000, dim: int = 32, dense: int = 13):
        super().__init__()
        self.bags = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables))
        self.bottom = nn.Sequential(nn.Linear(dense, 64), nn.ReLU(), nn.Linear(64, dim), nn.ReLU())
        n = tables + 1
        self.top = nn.Sequential(nn.Linear(dim + n * (n - 1) // 2, 64), nn.ReLU(), nn.Linear(64, 1))
        self.pairs = [(i, j) for i in range(n) for j in range(i)]

    def forward(self, dense, indices, offsets):
        feats = [self.bottom(dense)] + [bag(indices[i], offsets) for i, bag in enumerate(self.bags)]
        z = torch.stack(feats, 1)
        dots = z @ z.transpose(1, 2)
        li = torch.tensor([i for i, _ in self.pairs], device=z.device)
        lj = torch.tensor([j for _, j in self.pairs], device=z.device)
        inter = dots[:, li, lj]
        return torch.sigmoid(self.top(torch.cat([feats[0], inter], 1)))


class RMSNorm(nn.Module):
    """LLaMA's RMSNorm: in float32, ``x * rsqrt(mean(x^2) + eps) * weight``."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(dim) * 0.1 + 1)

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rotary_tables(seq: int, head_dim: int, base: float = 10000.0):
    inv = 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(seq).float(), inv)
    return angles.cos(), angles.sin()


def apply_rotary(x, cos, sin):
    """Rotate interleaved pairs (x[..., 0::2], x[..., 1::2]) by the position's
    angle: strided slices in, ``stack(-1).flatten(-2)`` out (the GPT-J /
    LLaMA-reference form)."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)


class Rotary(nn.Module):
    """Project to q and k, apply rotary embeddings to both."""

    def __init__(self, dim: int = 256, heads: int = 4, seq: int = 128):
        super().__init__()
        self.heads = heads
        self.qk = nn.Linear(dim, 2 * dim, bias=False)
        cos, sin = rotary_tables(seq, dim // heads)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)

    def forward(self, x):
        b, t, c = x.shape
        q, k = self.qk(x).view(b, t, 2, self.heads, c // self.heads).transpose(1, 3).unbind(2)
        cos, sin = self.cos[:t], self.sin[:t]
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)


class SwiGLU(nn.Module):
    """LLaMA's MLP: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, dim: int = 256, hidden: int = 688):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class CausalSDPA(nn.Module):
    """Fused qkv projection, ``scaled_dot_product_attention(is_causal=True)``, output projection."""

    def __init__(self, dim: int = 256, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, c))


class LlamaBlock(nn.Module):
    """A LLaMA decoder layer from the four blocks above, grouped-query
    attention (8 query heads, 2 key/value heads) included."""

    def __init__(self, dim: int = 256, heads: int = 8, kv_heads: int = 2, hidden: int = 688, seq: int = 128):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.attn_norm = RMSNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.mlp_norm = RMSNorm(dim)
        self.mlp = SwiGLU(dim, hidden)
        cos, sin = rotary_tables(seq, self.head_dim)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)

    def forward(self, x):
        b, t, c = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(b, t, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        cos, sin = self.cos[:t], self.sin[:t]
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.o(y)
        return x + self.mlp(self.mlp_norm(x))


class WeightNormConvs(nn.Module):
    """A HiFi-GAN / WaveNet-style stack of weight-normed dilated 1-D convs
    (``nn.utils.parametrizations.weight_norm``: the weight is recomputed
    from ``g`` and ``v`` on every call) with leaky-ReLU residuals."""

    def __init__(self, channels: int = 64, kernel: int = 3, dilations=(1, 3, 5)):
        super().__init__()
        wn = nn.utils.parametrizations.weight_norm
        self.convs = nn.ModuleList(
            wn(nn.Conv1d(channels, channels, kernel, dilation=d, padding=d * (kernel - 1) // 2)) for d in dilations
        )
        self.out = wn(nn.Conv1d(channels, 1, 7, padding=3))

    def forward(self, x):
        for conv in self.convs:
            x = x + conv(F.leaky_relu(x, 0.1))
        return torch.tanh(self.out(F.leaky_relu(x, 0.1)))


class SoftmaxAmax(nn.Module):
    """Scores, softmax over the last dimension, then the max over the first:
    ``s.amax(dim=0)``, a reduction across rows of a row-wise reduction's output."""

    def __init__(self, dim: int = 128, classes: int = 1000):
        super().__init__()
        self.proj = nn.Linear(dim, classes)

    def forward(self, x):
        s = self.proj(x).softmax(-1)
        return s.amax(dim=0), s.mean(0)


class ConvNeXtDownsample(nn.Module):
    """ConvNeXt's downsampling layer: LayerNorm over the channels of an NCHW
    tensor (permute, normalise, permute back), then a 2x2 stride-2 conv."""

    def __init__(self, c_in: int = 96, c_out: int = 192):
        super().__init__()
        self.norm = nn.LayerNorm(c_in, eps=1e-6)
        self.conv = nn.Conv2d(c_in, c_out, kernel_size=2, stride=2)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.1, 0.1)

    def forward(self, x):
        x = self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.conv(x)


class WhisperStyleLayer(nn.Module):
    """A Whisper encoder layer (Whisper-tiny's widths: 384, 6 heads, MLP
    1536): pre-LayerNorm self-attention whose key projection has no bias,
    GELU MLP, residuals; over 750 frames (30 s of audio)."""

    def __init__(self, dim: int = 384, heads: int = 6, hidden: int = 1536):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        b, t, c = x.shape
        h = self.norm1(x)
        q, k, v = (p(h).view(b, t, self.heads, c // self.heads).transpose(1, 2) for p in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, c)
        x = x + self.o(y)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


# --------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------


def _torchvision(name: str, size: int, batch: int = 1, **kwargs):
    def build():
        import torchvision

        model = getattr(torchvision.models, name)(num_classes=100, **kwargs)
        return _randomise_batchnorm(model), (torch.randn(batch, 3, size, size),)

    return build


def _timm(name: str, size: int, batch: int = 1, **kwargs):
    def build():
        import timm

        model = timm.create_model(name, pretrained=False, num_classes=100, **kwargs)
        return _randomise_batchnorm(model), (torch.randn(batch, 3, size, size),)

    return build


def _llama():
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=128, intermediate_size=344, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=1000, max_position_embeddings=256, use_cache=False,
    )
    return HFOutput(transformers.LlamaModel(config), "input_ids"), (torch.randint(0, 1000, (2, 128)),)


def _t5():
    import transformers

    config = transformers.T5Config(
        d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4, vocab_size=1000,
        dropout_rate=0.0, use_cache=False, decoder_start_token_id=0, pad_token_id=0,
    )
    model = HFOutput(transformers.T5Model(config), "input_ids", "decoder_input_ids")
    return model, (torch.randint(0, 1000, (4, 64)), torch.randint(0, 1000, (4, 32)))


def _bart():
    import transformers

    config = transformers.BartConfig(
        d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=1000, max_position_embeddings=128, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, use_cache=False,
    )
    model = HFOutput(transformers.BartModel(config), "input_ids", "decoder_input_ids")
    return model, (torch.randint(3, 1000, (4, 64)), torch.randint(3, 1000, (4, 32)))


def _distilbert():
    import transformers

    config = transformers.DistilBertConfig(
        dim=64, hidden_dim=128, n_layers=2, n_heads=4, vocab_size=1000, max_position_embeddings=128, dropout=0.0,
        attention_dropout=0.0,
    )
    return HFOutput(transformers.DistilBertModel(config), "input_ids"), (torch.randint(0, 1000, (8, 64)),)


def _whisper_encoder():
    import transformers
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = transformers.WhisperConfig(
        d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=256, num_mel_bins=80,
        max_source_positions=750, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
    )
    # 1500 mel frames (30 s), halved to 750 positions by the second conv.
    return HFOutput(WhisperEncoder(config), "input_features"), (torch.randn(1, 80, 1500),)


def _wav2vec2():
    import transformers

    config = transformers.Wav2Vec2Config(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        conv_dim=(64,) * 7, num_conv_pos_embeddings=32, num_conv_pos_embedding_groups=4,
        hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0,
        final_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0, mask_feature_prob=0.0,
    )
    # One second of 16 kHz audio: the conv feature extractor (GroupNorm
    # after the first conv), then a weight-normed positional conv.
    return HFOutput(transformers.Wav2Vec2Model(config), "input_values"), (torch.randn(1, 16000),)


def _lstm():
    return LSTMClassifier(), (torch.randint(0, 1000, (4, 32)),)


def _gru_loop():
    return GRUCellLoop(), (torch.randn(4, 16, 40),)


def _unet_block():
    return UNetResBlock(), (torch.randn(2, 64, 16, 16), torch.randn(2, 256))


def _recommender():
    batch, tables = 8, 4
    lengths = torch.randint(1, 6, (batch,))
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
    indices = torch.randint(0, 1000, (tables, int(lengths.sum())))
    return EmbeddingBagRecommender(tables=tables), (torch.randn(batch, 13), indices, offsets)


def _rmsnorm():
    return RMSNorm(512), (torch.randn(4, 128, 512),)


def _rotary():
    return Rotary(), (torch.randn(2, 128, 256),)


def _swiglu():
    return SwiGLU(), (torch.randn(4, 64, 256),)


def _causal_sdpa():
    return CausalSDPA(), (torch.randn(2, 128, 256),)


def _llama_block():
    return LlamaBlock(), (torch.randn(2, 128, 256),)


def _weight_norm_conv():
    return WeightNormConvs(), (torch.randn(2, 64, 512),)


def _softmax_amax():
    return SoftmaxAmax(), (torch.randn(256, 128),)


def _convnext_downsample():
    return ConvNeXtDownsample(), (torch.randn(2, 96, 28, 28),)


def _dense_block():
    from torchvision.models.densenet import _DenseBlock

    block = _DenseBlock(num_layers=6, num_input_features=64, bn_size=4, growth_rate=32, drop_rate=0.0)
    return _randomise_batchnorm(block), (torch.randn(2, 64, 28, 28),)


def _whisper_layer():
    return WhisperStyleLayer(), (torch.randn(1, 750, 384),)


def _spec(name, description, builder, cost, tags, train=True, requires=()):
    return {"name": name, "description": description, "builder": builder, "cost": cost, "tags": tuple(tags),
            "train": train, "requires": tuple(requires)}


TV, TIMM, HF = ("torchvision",), ("timm",), ("transformers",)

SPECS: list[dict] = [
    # torchvision CNNs, the real architectures at small images.
    _spec("resnet50", "torchvision resnet50 (bottlenecks), 1x3x112x112", _torchvision("resnet50", 112),
          7, ("cnn", "torchvision"), requires=TV),
    _spec("densenet121", "torchvision densenet121 (concatenating dense blocks), 1x3x96x96",
          _torchvision("densenet121", 96), 8, ("cnn", "torchvision"), requires=TV),
    _spec("convnext_tiny", "torchvision convnext_tiny (7x7 depthwise, LayerNorm over channels), 1x3x96x96",
          _torchvision("convnext_tiny", 96, stochastic_depth_prob=0.0), 8, ("cnn", "torchvision"), requires=TV),
    _spec("regnet_y_400mf", "torchvision regnet_y_400mf (group convs, squeeze-excite), 2x3x96x96",
          _torchvision("regnet_y_400mf", 96, batch=2), 6, ("cnn", "torchvision"), requires=TV),
    _spec("mobilenet_v3_small", "torchvision mobilenet_v3_small (hardswish, squeeze-excite), 4x3x96x96",
          _torchvision("mobilenet_v3_small", 96, batch=4, dropout=0.0), 4, ("cnn", "torchvision"), requires=TV),
    # timm.
    _spec("deit_tiny", "timm deit_tiny_patch16 (12 layers, dim 192), 112px: 50 tokens, batch 2",
          _timm("deit_tiny_patch16_224", 112, batch=2, img_size=112), 6, ("transformer", "timm"), requires=TIMM),
    _spec("swin_tiny", "timm swin_tiny_patch4 (shifted windows of 4), 1x3x128x128",
          _timm("swin_tiny_patch4_window7_224", 128, img_size=128, window_size=4, drop_path_rate=0.0), 8, ("transformer", "timm"),
          requires=TIMM),
    _spec("mobilevit_xxs", "timm mobilevit_xxs (convs + unfold/fold attention), 2x3x128x128",
          _timm("mobilevit_xxs", 128, batch=2), 6, ("cnn", "transformer", "timm"), requires=TIMM),
    _spec("convnext_atto_timm", "timm convnext_atto (LayerNorm2d, GELU), 4x3x96x96",
          _timm("convnext_atto", 96, batch=4), 5, ("cnn", "timm"), requires=TIMM),
    # transformers, from small configs.
    _spec("llama", "transformers LlamaModel, 2 layers, dim 128, GQA 4/2 heads, RoPE, 2x128 tokens", _llama,
          4, ("transformer", "llm", "transformers"), requires=HF),
    _spec("t5", "transformers T5Model (relative position buckets), 2+2 layers, dim 64, 4x64 -> 4x32 tokens", _t5,
          4, ("transformer", "transformers"), requires=HF),
    _spec("bart", "transformers BartModel, 2+2 layers, dim 64, 4x64 -> 4x32 tokens", _bart,
          4, ("transformer", "transformers"), requires=HF),
    _spec("distilbert", "transformers DistilBertModel, 2 layers, dim 64, 8x64 tokens", _distilbert,
          3, ("transformer", "transformers"), requires=HF),
    _spec("whisper_encoder", "transformers WhisperEncoder, 2 layers, dim 64, 1x80x1500 mel frames -> 750",
          _whisper_encoder, 4, ("transformer", "audio", "transformers"), requires=HF),
    _spec("wav2vec2", "transformers Wav2Vec2Model, conv features (GroupNorm), 2 layers, dim 64, 1x16000 samples",
          _wav2vec2, 5, ("transformer", "audio", "transformers"), requires=HF),
    # Recurrent, diffusion, recommender.
    _spec("lstm", "Embedding + 2-layer nn.LSTM (hidden 128) + classifier, 4x32 tokens", _lstm, 3, ("rnn",)),
    _spec("gru_cell_loop", "nn.GRUCell (hidden 96) unrolled over 16 steps, 4x16x40", _gru_loop, 3, ("rnn",)),
    _spec("unet_block", "diffusion UNet res block: GroupNorm, SiLU, conv, time embedding, attention, 2x64x16x16",
          _unet_block, 3, ("cnn", "diffusion")),
    _spec("recommender", "DLRM-style: 4 nn.EmbeddingBag (sum, offsets), MLPs, dot interactions, batch 8",
          _recommender, 2, ("embedding",)),
    # LLM building blocks.
    _spec("rmsnorm", "RMSNorm in float32 over 4x128x512", _rmsnorm, 1, ("llm", "memory-bound")),
    _spec("rotary", "q/k projection + rotary embeddings (x[..., ::2], x[..., 1::2], stack.flatten), 2x128x256",
          _rotary, 2, ("llm",)),
    _spec("swiglu", "SwiGLU MLP 256-688-256, 4x64x256", _swiglu, 2, ("llm", "gemm")),
    _spec("causal_sdpa", "qkv projection + causal scaled_dot_product_attention, 4 heads, 2x128x256", _causal_sdpa,
          2, ("llm", "attention")),
    _spec("llama_block", "LLaMA decoder layer: RMSNorm, RoPE, GQA 8/2 causal SDPA, SwiGLU, 2x128x256",
          _llama_block, 3, ("llm", "attention")),
    # Cliffs: models where a backend has fallen far behind before.
    _spec("weight_norm_conv", "3 weight-normed dilated Conv1d (parametrizations.weight_norm) + leaky ReLU, 2x64x512",
          _weight_norm_conv, 2, ("conv", "cliff")),
    _spec("softmax_amax", "Linear 128->1000, softmax(-1), then amax(dim=0) and mean(0), 256 rows", _softmax_amax,
          1, ("reduction", "cliff")),
    _spec("convnext_downsample", "LayerNorm over channels (NCHW permuted) + 2x2 stride-2 conv 96->192, 2x96x28x28",
          _convnext_downsample, 2, ("conv", "cliff")),
    _spec("dense_block", "torchvision DenseNet _DenseBlock, 6 layers, growth 32, 2x64x28x28", _dense_block,
          3, ("cnn", "cliff", "torchvision"), requires=TV),
    _spec("whisper_layer_750", "Whisper-tiny-wide encoder layer (384, 6 heads, MLP 1536) over 1x750 frames",
          _whisper_layer, 4, ("transformer", "audio", "cliff")),
]


def _check_names() -> None:
    names = [s["name"] for s in SPECS]
    assert len(names) == len(set(names)), names


_check_names()
