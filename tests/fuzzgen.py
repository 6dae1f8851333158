"""Random tensor programs for differential fuzzing of rdyn against eager.

:func:`generate` turns a seed into a :class:`Case`: the Python source of a
small function (pointwise math on float, integer and bool tensors, casts,
reductions, views, cat/pad/gather, boolean-mask assignment, matrix
products, pooling, mutation of a clone), the specs of its inputs (sizes, dtype, a contiguous, transposed,
strided, expanded or channels-last layout) and how to run it (through AOTAutograd, through
``torch.compile`` with dynamic sizes, or as a training step). Each line is
run eagerly while the program is built, so every program is valid and its
values stay finite and moderate; a line that raises or overflows is dropped.

Ops whose result jumps (floor, sign, comparisons, argmax, casts to an
integer) read only *exact* values: inputs, and what views, negation, abs,
max/min, clamp, integer and bool ops make of them. A rounding difference
that fusion may legitimately introduce (an FMA, a reassociated sum) then
never flips a comparison, and a mismatch is a bug, not noise.

``tests/test_fuzz.py`` runs each case with rdyn and eagerly and compares
them; every failure message carries the reproducer (:meth:`Case.describe`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F

# Elements per value at most, and the magnitude a float value may reach.
MAX_NUMEL = 4096
MAX_MAGNITUDE = 1e4
SIZES = (1, 1, 2, 3, 4, 5, 7, 8, 13, 16, 31, 33)
INPUT_DTYPES = (
    (torch.float32, 60),
    (torch.float64, 6),
    (torch.float16, 6),
    (torch.bfloat16, 6),
    (torch.int64, 10),
    (torch.int32, 6),
    (torch.bool, 6),
)
MODES = (("aot", 60), ("dynamic", 20), ("train", 20))


@dataclass
class Input:
    sizes: tuple[int, ...]
    dtype: torch.dtype
    layout: str  # contiguous | transposed | strided | expanded | channels_last

    def make(self, gen: torch.Generator, requires_grad: bool) -> torch.Tensor:
        sizes = list(self.sizes)
        if self.layout == "transposed":
            base = _values(sizes[:-2] + [sizes[-1], sizes[-2]], self.dtype, gen).transpose(-1, -2)
        elif self.layout == "strided":
            base = _values(sizes[:-1] + [2 * sizes[-1]], self.dtype, gen)[..., ::2]
        elif self.layout == "channels_last":
            base = _values(sizes, self.dtype, gen).contiguous(memory_format=torch.channels_last)
        elif self.layout == "expanded":
            one = [1 if i == 0 else s for i, s in enumerate(sizes)]
            base = _values(one, self.dtype, gen).expand(sizes)
        else:
            base = _values(sizes, self.dtype, gen)
        if requires_grad:
            base = base.detach().requires_grad_(True)
        return base

    def __str__(self) -> str:
        return f"{self.layout} {list(self.sizes)} {str(self.dtype).removeprefix('torch.')}"


def _values(sizes: list[int], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(sizes, generator=gen) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(-20, 21, sizes, generator=gen).to(dtype)
    return torch.randn(sizes, generator=gen, dtype=torch.float64).to(dtype)


@dataclass
class Case:
    seed: int
    inputs: list[Input]
    lines: list[str]
    outputs: list[str]
    mode: str  # aot | dynamic | train
    names: list[str] = field(default_factory=list)
    # The least precise float dtype among the program's values (None if
    # all are float64): compiled code may keep a half value in float32
    # between ops, as Inductor does, and a float32 value cast to float64
    # carries float32's error, so every output gets that tolerance.
    narrowest: torch.dtype | None = None

    @property
    def source(self) -> str:
        body = "\n".join(f"    {line}" for line in self.lines)
        ret = ", ".join(self.outputs)
        return f"def program({', '.join(self.names)}):\n{body}\n    return ({ret},)\n"

    def function(self, reference: bool = False) -> Callable[..., Any]:
        """The program; with ``reference``, the same with every float dtype
        it names float64 (run on float64 inputs: the precise answer)."""
        source = self.source
        if reference:
            for name in ("float16", "bfloat16", "float32"):
                source = source.replace(f"torch.{name}", "torch.float64")
        scope: dict[str, Any] = {"torch": torch, "F": F}
        exec(compile(source, f"<fuzz case {self.seed}>", "exec"), scope)
        return scope["program"]

    def make_inputs(self) -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed)
        train = self.mode == "train"
        return [i.make(gen, train and i.dtype in (torch.float32, torch.float64)) for i in self.inputs]

    def describe(self) -> str:
        args = "; ".join(f"{n}: {i}" for n, i in zip(self.names, self.inputs))
        return f"fuzz case {self.seed} ({self.mode}; inputs {args}):\n{self.source}"


# --------------------------------------------------------------------------
# Generation


@dataclass
class Value:
    name: str
    tensor: torch.Tensor
    exact: bool

    @property
    def kind(self) -> str:
        if self.tensor.dtype == torch.bool:
            return "b"
        return "f" if self.tensor.is_floating_point() else "i"


class _Builder:
    def __init__(self, rng: random.Random, train: bool) -> None:
        self.rng = rng
        self.train = train  # only differentiable ops
        self.values: list[Value] = []
        self.lines: list[str] = []
        self.count = 0

    def pick(self, kinds: str, exact: bool = False, rank: int = 0) -> Value | None:
        pool = [
            v
            for v in self.values
            if v.kind in kinds and (v.exact or not exact) and v.tensor.dim() >= rank
        ]
        if not pool:
            return None
        # Prefer recent values: programs then read as chains, as models do.
        weights = [1 + i for i in range(len(pool))]
        return self.rng.choices(pool, weights)[0]

    def partner(self, first: Value, kinds: str, exact: bool = False) -> Value | str | None:
        """A value broadcastable with ``first``, or a Python scalar."""
        if self.rng.random() < 0.2:
            return self.rng.choice(("2.5", "-3", "0.5", "7"))
        pool = [
            v
            for v in self.values
            if v.kind in kinds and (v.exact or not exact) and _broadcasts(v.tensor.shape, first.tensor.shape)
        ]
        return self.rng.choice(pool) if pool else None

    def try_line(self, template: str, exact: bool, operands: dict[str, Any]) -> bool:
        """Run ``name = template`` eagerly; keep it if it gives a moderate tensor."""
        name = f"v{self.count}"
        text = template.format(out="{out}", **{k: getattr(v, "name", v) for k, v in operands.items()})
        scope: dict[str, Any] = {"torch": torch, "F": F, **{v.name: v.tensor for v in self.values}}
        statements = text.replace("{out}", name) if "{out}" in text else f"{name} = {text}"
        try:
            with torch.no_grad():
                exec(statements, scope)
        except Exception:  # noqa: BLE001 - an invalid combination: try another
            return False
        result = scope.get(name)
        if not isinstance(result, torch.Tensor) or result.numel() > MAX_NUMEL or result.is_complex():
            return False
        if result.is_floating_point() and result.numel():
            finite = result.detach().double()
            if not torch.isfinite(finite).all() or finite.abs().max() > MAX_MAGNITUDE:
                return False
            # std's gradient divides by std: where it is (nearly) 0, as
            # over repeated values, rounding decides the gradient.
            if self.train and "torch.std(" in template and finite.abs().min() < 1e-3:
                return False
            # A normalisation over single values is 0 plus rounding noise,
            # which a log then makes -inf or not (seed 7391, new generator).
            if "_norm(" in template and finite.abs().max() < 1e-4:
                return False
            # normalize's gradient at a zero row is 1/eps = 1e12 times
            # the rounding noise of the gradient reaching it (seed 23691).
            if self.train and "F.normalize(" in template and (finite == 0).any():
                return False
        self.count += 1
        self.lines.extend(part.strip() for part in statements.split(";"))
        self.values.append(Value(name, result, exact))
        return True


def _broadcasts(a: torch.Size, b: torch.Size) -> bool:
    try:
        return torch.broadcast_shapes(a, b) == b
    except RuntimeError:
        return False


def _dims(rng: random.Random, rank: int) -> str:
    """A dim (maybe negative) or a pair of dims for a reduction."""
    if rank >= 2 and rng.random() < 0.3:
        first, second = rng.sample(range(rank), 2)
        return f"({first}, {second - rank})"
    return str(rng.randrange(-rank, rank))


def _step(b: _Builder) -> bool:
    """Add one random line to the program; False if the chosen op did not fit."""
    rng = b.rng
    family = rng.choices(list(WEIGHTS), list(WEIGHTS.values()))[0]
    return FAMILIES[family](b, rng)


def _float_unary(b: _Builder, rng: random.Random) -> bool:
    a = b.pick("f")
    if a is None:
        return False
    template = rng.choice(FLOAT_UNARY)
    return b.try_line(template, False, {"a": a})


FLOAT_UNARY = (
    "torch.tanh({a})", "torch.sigmoid({a})", "torch.sin({a})", "torch.cos({a})", "torch.erf({a})",
    "torch.atan({a})", "torch.exp(-{a}.abs())", "torch.exp({a}.clamp(max=4))", "torch.log1p({a}.abs())",
    "torch.log({a}.abs() + 0.5)", "torch.sqrt({a}.abs())", "torch.rsqrt({a} * {a} + 1)", "F.gelu({a})",
    "F.gelu({a}, approximate='tanh')", "F.silu({a})", "F.softplus({a})", "F.elu({a})", "F.mish({a})",
    "F.hardswish({a})", "F.hardsigmoid({a})", "torch.reciprocal({a}.abs() + 1)", "{a} * {a}",
    "torch.pow({a}.abs(), 1.5)", "torch.expm1({a}.clamp(max=4))", "torch.log2({a}.abs() + 1)",
    "{a} * 0.1 + 2.5", "torch.erfinv(torch.tanh({a}) * 0.9)", "torch.asinh({a})", "{a}.sinh()",
    "torch.nan_to_num(torch.log({a}))",
)


def _float_exact(b: _Builder, rng: random.Random) -> bool:
    a = b.pick("fi")
    if a is None:
        return False
    template = rng.choice(
        ("-{a}", "{a}.abs()", "torch.relu({a})", "F.relu6({a})", "torch.clamp({a}, -2, 3)", "F.hardtanh({a})",
         "{a}.clamp(min=0)", "{a}.clone()", "{a}.contiguous()", "torch.square({a})", "{a} * 4")
    )
    if a.kind == "i" and template in ("F.relu6({a})", "F.hardtanh({a})"):
        return False
    return b.try_line(template, a.exact, {"a": a})


def _jump(b: _Builder, rng: random.Random) -> bool:
    """Ops whose result jumps: they read exact values only."""
    a = b.pick("fi", exact=True)
    if a is None:
        return False
    if rng.random() < 0.4:
        other = b.partner(a, "fi", exact=True)
        if other is None:
            return False
        template = rng.choice(
            ("{a} > {c}", "{a} <= {c}", "{a} == {c}", "{a} != {c}", "torch.where({a} > {c}, {a}, {c})",
             "torch.maximum({a}, {a} * 0 + {c})", "torch.copysign({a}, {a} * 0 + {c})")
        )
        return b.try_line(template, True, {"a": a, "c": other})
    template = rng.choice(
        ("torch.floor({a})", "torch.ceil({a})", "torch.round({a})", "torch.trunc({a})", "torch.sign({a})",
         "torch.frac({a})", "{a} > 0", "{a}.to(torch.int32)", "{a}.to(torch.int64)", "{a}.clamp(0, 255).to(torch.uint8)",
         "torch.signbit({a})", "torch.fmod({a}, 1.5)", "torch.remainder({a}, 1.5)", "torch.round({a}, decimals=1)",
         "{a}.to(torch.bool)", "torch.isnan({a})", "(~torch.isfinite({a})).int()")
    )
    return b.try_line(template, template != "torch.round({a}, decimals=1)", {"a": a})


def _binary(b: _Builder, rng: random.Random) -> bool:
    a = b.pick("f")
    if a is None:
        return False
    other = b.partner(a, "fib")
    if other is None:
        return False
    template = rng.choice(
        ("{a} + {c}", "{a} - {c}", "{a} * {c}", "{a} / ({c} * {c} + 1)", "torch.atan2({a}, {c})",
         "torch.hypot({a}, {c})", "torch.lerp({a}, {a} * 0 + {c}, 0.3)", "torch.addcmul({a}, {a}, {c}, value=0.5)",
         "torch.maximum({a}, {a} * 0 + {c})", "torch.minimum({a}, {a} * 0 + {c})", "{c} - {a}",
         "torch.clamp({a}, min={c} * 0 - 1)", "torch.xlogy({a}.abs(), {c} * {c} + 1)", "torch.pow({a}.abs() + 0.5, 2)")
    )
    exact = a.exact and getattr(other, "exact", True) and template in ("torch.maximum({a}, {a} * 0 + {c})", "torch.minimum({a}, {a} * 0 + {c})")
    return b.try_line(template, exact, {"a": a, "c": other})


def _int(b: _Builder, rng: random.Random) -> bool:
    a = b.pick("i")
    if a is None:
        return False
    other = b.partner(a, "i")
    if other is None or (isinstance(other, str) and "." in other):
        other = str(rng.randint(-6, 6))
    template = rng.choice(
        ("{a} + {c}", "{a} - {c}", "{a} * {c}", "{a} // ({c} * {c} + 1)", "{a} % ({c} * {c} + 1)",
         "torch.div({a}, {c} * {c} + 1, rounding_mode='trunc')", "{a} & {c}", "{a} | {c}", "{a} ^ {c}",
         "{a} << ({c}.abs() % 4)" if not isinstance(other, str) else "{a} << 2", "{a} >> 1", "{a}.abs()", "-{a}",
         "torch.maximum({a}, {a} * 0 + {c})", "torch.bitwise_not({a})", "torch.clamp({a}, -5, 5)",
         "{a} > {c}", "torch.sign({a})", "{a} * {a}", "{a} / ({c} * {c} + 1)", "{a}.to(torch.float32)",
         "torch.fmod({a}, 3)", "torch.remainder({a}, -4)")
    )
    exact = template not in ("{a} / ({c} * {c} + 1)",)
    return b.try_line(template, exact, {"a": a, "c": other})


def _bool(b: _Builder, rng: random.Random) -> bool:
    a = b.pick("b")
    if a is None:
        return False
    template = rng.choice(
        ("~{a}", "{a} & {c}", "{a} | {c}", "{a} ^ {c}", "torch.logical_and({a}, {c})", "{a}.to(torch.float32)",
         "{a}.int()", "torch.where({a}, {x}, {y})", "torch.where({a}, {x}, 0.5)", "{a}.sum()", "{x}.masked_fill({a}, -1)")
    )
    c = b.pick("b") or a
    x = b.partner(a, "fi")
    y = b.partner(a, "fi")
    if x is None or y is None:
        return False
    if "masked_fill" in template and isinstance(x, str):
        return False
    exact = all(getattr(v, "exact", True) for v in (x, y))
    return b.try_line(template, exact, {"a": a, "c": c, "x": x, "y": y})


def _cast(b: _Builder, rng: random.Random) -> bool:
    a = b.pick("fib")
    if a is None:
        return False
    target = rng.choice(("float16", "bfloat16", "float64", "float32", "int32"))
    if target == "int32" and a.kind == "f":
        return False
    return b.try_line(f"{{a}}.to(torch.{target})", a.exact, {"a": a})


def _reduce(b: _Builder, rng: random.Random) -> bool:
    a = b.pick("fib", rank=1)
    if a is None:
        return False
    rank = a.tensor.dim()
    dims, keep = _dims(rng, rank), rng.choice(("True", "False"))
    one = str(rng.randrange(-rank, rank))
    if a.kind == "b":
        template, exact = rng.choice(("torch.any({a}, {d})", "torch.all({a}, {d})", "{a}.sum({d})")), True
    elif a.kind == "i":
        template = rng.choice(
            ("torch.sum({a}, {dims}, keepdim={k})", "torch.amax({a}, {dims})", "torch.prod({a}.clamp(-2, 2), {d})",
             "torch.argmax({a}, {d}, keepdim={k})", "torch.amin({a}, {d}, keepdim={k})", "{a}.sum()",
             "torch.mean({a}.float(), {dims})")
        )
        exact = "mean" not in template
    else:
        exact_ones = ("torch.amax({a}, {dims}, keepdim={k})", "torch.amin({a}, {d})", "torch.argmax({a}, {d}, keepdim={k})",
                      "torch.argmin({a}, {d})", "torch.max({a}, {d})[1]", "{a}.max({d}).values", "torch.any({a} > 0, {d})",
                      "torch.amax({a}, {dims}) - torch.amin({a}, {dims})")
        smooth = ("torch.sum({a}, {dims}, keepdim={k})", "torch.mean({a}, {dims}, keepdim={k})", "torch.var({a}, {dims}, keepdim={k})",
                  "torch.std({a}, {d})", "torch.var({a}, {dims}, correction=0)", "torch.logsumexp({a}, {d})",
                  "torch.prod(torch.sigmoid({a}) + 0.5, {d})", "torch.softmax({a}, {d})", "torch.log_softmax({a}, {d})",
                  "torch.linalg.vector_norm({a}, dim={d})", "{a}.sum()", "{a}.mean()", "torch.cumsum({a}, {d})",
                  "torch.var_mean({a}, {d})[0]", "torch.var_mean({a}, {d})[1]", "{a} - {a}.mean({d}, keepdim=True)")
        if a.exact and rng.random() < 0.4:
            template, exact = rng.choice(exact_ones), True
        else:
            template, exact = rng.choice(smooth), False
    return b.try_line(template, exact and a.exact, {"a": a, "d": one, "dims": dims, "k": keep})


def _view(b: _Builder, rng: random.Random) -> bool:
    a = b.pick("fib")
    if a is None:
        return False
    t = a.tensor
    rank = t.dim()
    options = ["{a}.reshape(-1)", "{a}.unsqueeze({u})", "{a}.clone()"]
    if rank >= 1:
        d = rng.randrange(rank)
        size = t.shape[d]
        options += [f"{{a}}.flip({d})", f"{{a}}.narrow({d}, {size // 3}, {max(size - size // 3 - 1, 0)})",
                    f"{{a}}.select({d}, {rng.randrange(size) if size else 0})", f"torch.roll({{a}}, 1, {d})",
                    f"{{a}}[{':, ' * d}1::2]", f"{{a}}[{':, ' * d}:-1]"]
        if size == 1:
            options += [f"{{a}}.squeeze({d})", f"{{a}}.expand({', '.join(str(s if i != d else 3) for i, s in enumerate(t.shape))})"]
        if size > 1:
            for f in (2, 3):
                if size % f == 0:
                    new = list(t.shape[:d]) + [f, size // f] + list(t.shape[d + 1:])
                    options.append(f"{{a}}.reshape({', '.join(map(str, new))})")
        if size >= 4:
            options.append(f"{{a}}.unfold({d}, 2, 2)")
    if rank >= 2:
        perm = list(range(rank))
        rng.shuffle(perm)
        i, j = rng.sample(range(rank), 2)
        options += [f"{{a}}.permute({', '.join(map(str, perm))})", f"{{a}}.transpose({i}, {j})", "{a}.mT",
                    f"{{a}}.flatten({min(i, j)}, {max(i, j)})", f"{{a}}.movedim({i}, {j})", f"{{a}}.unbind({i})[0]",
                    "{a}.mT.contiguous()"]
    template = rng.choice(options)
    return b.try_line(template, a.exact, {"a": a, "u": rng.randrange(rank + 1)})


def _shape(b: _Builder, rng: random.Random) -> bool:
    a = b.pick("fib", rank=1)
    if a is None:
        return False
    rank = a.tensor.dim()
    d = rng.randrange(rank)
    other = b.partner(a, a.kind, exact=a.exact)
    if other is None or isinstance(other, str):
        other = a
    n = a.tensor.shape[d]
    index = [rng.randrange(n) for _ in range(3)] if n else []
    options = [
        "torch.cat([{a}, {c}], {d})", "torch.stack([{a}, {c}], {d})", "torch.cat([{a}, {a}[:1]], 0)",
        "F.pad({a}, (1, 2))", "F.pad({a}, (0, 1, 2, 0), value=1.5)" if a.kind == "f" else "F.pad({a}, (2, 0))",
        f"torch.index_select({{a}}, {d}, torch.tensor({index}))", f"{{a}}[torch.tensor({index})]" if d == 0 else "{a}.flip(0)",
        "torch.gather({a}, {d}, torch.argmax({a}, {d}, keepdim=True))" if a.kind != "b" and a.exact else "{a}.flip(-1)",
        "torch.tril({a})" if rank >= 2 else "torch.cat([{a}, {a}])",
        "torch.triu({a}, 1)" if rank >= 2 else "{a}.repeat(2)",
        "{a}.repeat(" + ", ".join(["2"] + ["1"] * (rank - 1)) + ")", "torch.full_like({a}, 3) + {a}",
        "torch.arange({n}) + {a}.movedim({d}, -1)", "torch.zeros_like({a}).index_add({d}, torch.tensor([0] * {n}), {a})",
        "{a}.new_ones(()) * {a}",
    ]
    template = rng.choice(options)
    exact = a.exact and getattr(other, "exact", True)
    return b.try_line(template, exact, {"a": a, "c": other, "d": d, "n": n})


def _matmul(b: _Builder, rng: random.Random) -> bool:
    a = b.pick("f", rank=1)
    if a is None or a.tensor.dtype not in (torch.float32, torch.float64):
        return False
    other = b.pick("f", rank=1) or a
    template = rng.choice(("{a} @ {a}.mT", "{a}.mT @ {a}", "torch.matmul({a}, {c})", "F.linear({a}, {c})",
                           "torch.matmul({a}, {c}.mT)", "F.linear({a}, {c}, {a}[..., 0].flatten()[:1])"))
    if ".mT" in template and a.tensor.dim() < 2:
        return False
    return b.try_line(template, False, {"a": a, "c": other})


def _nn(b: _Builder, rng: random.Random) -> bool:
    a = b.pick("f", rank=1)
    if a is None:
        return False
    rank = a.tensor.dim()
    # eps 1e-3 as in _norm: a row of (nearly) equal values is rounding noise
    # times 1/sqrt(eps) (fuzz seed 20807, a row of 13, 13, 13 + 2^-19).
    options = ["F.layer_norm({a}, ({a}.shape[-1],), eps=1e-3)", "F.normalize({a}, dim=-1)", "F.softmax({a}, -1)",
               "torch.nn.functional.dropout({a}, 0.0)"]
    if rank >= 3:
        options += ["F.max_pool1d({a}, 2)", "F.avg_pool1d({a}, 2, ceil_mode=True)", "F.adaptive_avg_pool1d({a}, 3)",
                    "F.interpolate({a}, scale_factor=2, mode='nearest')", "F.interpolate({a}, size=5, mode='linear')",
                    "F.group_norm({a}, 1, eps=1e-3)"]
    if rank == 4:
        options += ["F.max_pool2d({a}, 2)", "F.avg_pool2d({a}, 3, stride=1, padding=1)", "F.adaptive_avg_pool2d({a}, 1)",
                    "F.interpolate({a}, scale_factor=2, mode='bilinear')", "F.pixel_shuffle({a}, 1)",
                    "F.max_pool2d({a}, 3, stride=2, padding=1)"]
    if a.tensor.dtype in (torch.float32, torch.float64) and rng.random() < 0.3:
        index = b.pick("i")
        if index is not None and rank == 2 and a.tensor.shape[0]:
            return b.try_line("F.embedding({i}.remainder({a}.shape[0]), {a})", a.exact, {"a": a, "i": index})
    return b.try_line(rng.choice(options), False, {"a": a})


def _mutate(b: _Builder, rng: random.Random) -> bool:
    """An in-place op on a clone (AOTAutograd functionalises it)."""
    a = b.pick("f", rank=1)
    if a is None:
        return False
    other = b.partner(a, "f") or "1.5"
    template = rng.choice(
        ("{out} = {a}.clone(); {out}.add_({c})", "{out} = {a}.clone(); {out}.mul_(2)",
         "{out} = {a}.clone(); {out}[0] = 1.5", "{out} = {a}.clone(); {out}[..., 1:] *= 3",
         "{out} = {a}.clone(); {out}.masked_fill_({a} > 0, 0.0)" if a.exact else "{out} = {a}.clone(); {out}.relu_()",
         "{out} = torch.zeros_like({a}); {out}.copy_({a}); {out}.sub_(1)")
    )
    exact = a.exact and getattr(other, "exact", True) and "add_" not in template
    return b.try_line(template, exact, {"a": a, "c": other})


def _index(b: _Builder, rng: random.Random) -> bool:
    """Scatter, index_put and friends, with indices built in the program."""
    a = b.pick("fi", rank=1)
    if a is None:
        return False
    rank = a.tensor.dim()
    d = rng.randrange(rank)
    n = a.tensor.shape[d]
    if n == 0:
        return False
    idx = [rng.randrange(n) for _ in range(rng.randint(1, 4))]
    src = b.partner(a, a.kind) or a
    one = "1.5" if a.kind == "f" else "3"
    template = rng.choice(
        (f"{{out}} = {{a}}.clone(); {{out}}[torch.tensor({idx})] = {one}" if d == 0 else "{out} = {a}.clone(); {out}[..., 0] = 2",
         "torch.scatter({a}, {d}, torch.argmax({a}, {d}, keepdim=True), {one})" if a.exact else "{a}.index_fill({d}, torch.tensor([0]), -1)",
         "torch.scatter_add({a}, {d}, torch.zeros_like({a}, dtype=torch.int64), {a})",
         "torch.scatter_reduce({a}, {d}, torch.zeros_like({a}, dtype=torch.int64), {c}, 'amax')" if a.exact else "torch.take_along_dim({a}, torch.argsort({a}, {d}, stable=True), {d})",
         f"{{a}}.index_fill({{d}}, torch.tensor({idx}), {one})",
         f"{{a}}.index_copy({{d}}, torch.tensor([{idx[0]}]), {{a}}.narrow({{d}}, 0, 1))",
         f"torch.zeros_like({{a}}).index_put_((torch.tensor({idx}),), torch.tensor({one}, dtype={{a}}.dtype), accumulate=True)" if d == 0 else "{a}.roll(-1, -1)",
         "{out} = {a}.clone(); {out}.masked_fill_({a} > 0, 0)" if a.exact else "{a}.clamp(-1, 1)",
         # Boolean masks: `x[mask] = v`, rows picked by a mask over the
         # leading dims, and a masked scatter-add.
         f"{{out}} = {{a}}.clone(); {{out}}[{{a}} > 0] = {one}",
         # (A 0-dim mask is Python's `if`: data-dependent, so rank >= 2.)
         f"{{out}} = {{a}}.clone(); {{out}}[{{a}}.sum(-1) > 0] = {one}" if rank >= 2 else "{a} * 2",
         f"torch.zeros_like({{a}}).index_put_(({{a}} > 0,), torch.tensor({one}, dtype={{a}}.dtype), accumulate=True)")
    )
    exact = a.exact and getattr(src, "exact", True)
    return b.try_line(template, exact, {"a": a, "c": src, "d": d, "one": one})


def _norm(b: _Builder, rng: random.Random) -> bool:
    """Normalisations with affine parameters taken from other values. A
    group of equal values has variance 0, and its rounding error in the
    mean is multiplied by ``1/sqrt(eps)``: eps is 1e-3, not 1e-5, so that
    noise stays below the tolerances."""
    a = b.pick("f", rank=2)
    if a is None or a.tensor.dtype not in (torch.float32, torch.float64):
        return False
    shape = a.tensor.shape
    options = [
        "F.layer_norm({a}, {a}.shape[-1:], {a}[(0,) * ({a}.dim() - 1)], {a}[(0,) * ({a}.dim() - 1)] * 0.5, eps=1e-3)",
        "F.layer_norm({a}, {a}.shape[-2:], eps=1e-3)",
        "F.rms_norm({a}, {a}.shape[-1:], eps=1e-3)",
        "F.batch_norm({a}, None, None, training=True, eps=1e-3)",
        "F.batch_norm({a}, torch.zeros({a}.shape[1], dtype={a}.dtype), torch.ones({a}.shape[1], dtype={a}.dtype), {a}[0].flatten()[:{a}.shape[1]] if {a}[0].numel() >= {a}.shape[1] else None, eps=1e-3)",
        "F.instance_norm({a}, eps=1e-3)" if len(shape) >= 3 else "F.normalize({a}, p=1.0, dim=0)",
        "F.group_norm({a}, 1, {a}[0].flatten()[:{a}.shape[1]] if {a}[0].numel() >= {a}.shape[1] else None, eps=1e-3)",
        "torch.nn.functional.local_response_norm({a}, 2)" if len(shape) >= 3 else "F.softmin({a}, 0)",
    ]
    return b.try_line(rng.choice(options), False, {"a": a})


def _conv(b: _Builder, rng: random.Random) -> bool:
    """Convolutions whose weights are slices of the input itself."""
    a = b.pick("f", rank=3)
    if a is None or a.tensor.dtype not in (torch.float32, torch.float64):
        return False
    if a.tensor.dim() == 3:
        options = ["F.conv1d({a}, {a}[:2, :, :2])", "F.conv1d({a}, {a}[:1, :, :3], padding=1)",
                   "F.conv_transpose1d({a}, {a}[:, :2, :2].transpose(0, 1).contiguous().transpose(0, 1)[:{a}.shape[1]])"]
    elif a.tensor.dim() == 4:
        options = ["F.conv2d({a}, {a}[:2, :, :2, :2])", "F.conv2d({a}, {a}[:3, :, :3, :3], padding=1, stride=2)",
                   "F.conv2d({a}, {a}[:{a}.shape[1], :1, :2, :2], groups={a}.shape[1])",
                   "F.conv2d({a}, {a}[:2, :, :1, :1], {a}[0, 0, 0, :2])", "F.avg_pool2d({a}, 2, ceil_mode=True)"]
    else:
        return False
    return b.try_line(rng.choice(options), False, {"a": a})


def _order_stats(b: _Builder, rng: random.Random) -> bool:
    """Sorting, scans and order statistics (values only: tie order is free;
    training uses stable sorts, see below).
    Eager's ``median`` along a dim of an expanded integer tensor reads
    memory outside it (torch 2.15), so it gets a contiguous copy."""
    a = b.pick("fi", rank=1)
    if a is None:
        return False
    d = rng.randrange(a.tensor.dim())
    k = max(min(2, a.tensor.shape[d]), 1)
    template = rng.choice(
        ("torch.sort({a}, {d})[0]", "torch.sort({a}, {d}, descending=True)[0]", f"torch.topk({{a}}, {k}, {{d}})[0]",
         "torch.cummax({a}, {d})[0]", "torch.cumsum({a}, {d})", "torch.cumprod({a}.clamp(-2, 2), {d})",
         "torch.logcumsumexp({a}.float(), {d})", "torch.msort({a})", "torch.median({a}.contiguous(), {d})[0]",
         "torch.kthvalue({a}, 1, {d})[0]", "torch.amax({a}, {d}) - torch.amin({a}, {d})")
    )
    if b.train and any(op in template for op in ("sort", "topk", "median", "kthvalue")):
        # Which of several tied elements a sort or selection takes is
        # unspecified (ATen's CPU sort is unstable, rdyn's is stable), and
        # a gradient shows it: train with stable sorts, whose order is fixed.
        template = (
            f"torch.sort({{a}}, {{d}}, descending=True, stable=True)[0].narrow({{d}}, 0, {k})"
            if "topk" in template or "descending" in template
            else "torch.sort({a}, {d}, stable=True)[0]"
        )
    exact = a.exact and "logcumsumexp" not in template and (a.kind == "i" or "cumsum" not in template and "cumprod" not in template)
    return b.try_line(template, exact, {"a": a, "d": d})


def _special(b: _Builder, rng: random.Random) -> bool:
    a = b.pick("f")
    if a is None:
        return False
    other = b.partner(a, "f") or a
    template = rng.choice(
        ("torch.special.ndtr({a})", "torch.special.log_ndtr({a})", "torch.special.i0({a}.clamp(-5, 5))",
         "torch.special.i1e({a})", "torch.special.entr({a}.abs())", "torch.special.erfcx({a}.clamp(min=-3))",
         "torch.special.sinc({a})", "torch.digamma({a}.abs() + 1)", "torch.lgamma({a}.abs() + 0.5)",
         "torch.atanh(torch.tanh({a}) * 0.9)", "torch.acos(torch.tanh({a}))", "torch.logit(torch.sigmoid({a}), 1e-6)",
         "torch.logaddexp({a}, {c})", "torch.fmax({a}, {c})", "torch.fmin({a}, {c})", "torch.addcdiv({a}, {a}, {c} * {c} + 1)",
         "torch.special.xlog1py({a}, {c}.abs())", "torch.pow({a}.abs() + 0.5, {c}.clamp(-2, 2))", "torch.ldexp({a}, torch.tensor(3))",
         "torch.heaviside({a}, {c})", "torch.nextafter({a}, {c})", "torch.float_power({a}.abs(), 2)")
    )
    exact = template in ("torch.fmax({a}, {c})", "torch.fmin({a}, {c})") and a.exact and getattr(other, "exact", True)
    if template.startswith(("torch.heaviside", "torch.nextafter")) and (b.train or not (a.exact and getattr(other, "exact", True))):
        return False  # no derivative; a jump
    if template.startswith("torch.special.entr") and b.train:
        # entr's derivative is infinite at 0, and exact zeros (softshrink's,
        # relu's) make eager's gradient NaN there, times the zero slope
        # behind them. PyTorch's own softshrink decomposition (`a * 0` on
        # its flat side), which AOTAutograd differentiates for Inductor and
        # rdyn alike, passes that NaN on where ATen's backward gives 0
        # (seed 50999): an upstream difference, not a compiler's.
        template = "torch.special.entr({a}.abs() + 0.01)"
    return b.try_line(template, exact or template.startswith("torch.heaviside"), {"a": a, "c": other})


def _narrow_int(b: _Builder, rng: random.Random) -> bool:
    """Integer arithmetic that wraps around in narrow integer dtypes."""
    a = b.pick("i", exact=True)
    if a is None:
        return False
    dtype = rng.choice(("uint8", "int8", "int16", "int32"))
    template = rng.choice(
        ("{a}.to(torch.{t}) + 200", "{a}.to(torch.{t}) * 77", "{a}.to(torch.{t}) - {a}.to(torch.{t}) * 9",
         "({a}.to(torch.{t}) << 5) >> 2", "torch.floor_divide({a}.to(torch.{t}), -3)", "{a}.to(torch.{t}) % -3",
         "torch.fmod({a}.to(torch.{t}), -3)", "{a}.to(torch.{t}) ** 2", "torch.bitwise_xor({a}.to(torch.{t}), 0x5A)",
         "{a}.to(torch.{t}).sum(-1, dtype=torch.{t})" if a.tensor.dim() else "{a}.to(torch.{t}).neg()")
    )
    return b.try_line(template, True, {"a": a, "t": dtype})


def _extra(b: _Builder, rng: random.Random) -> bool:
    """Less common ops: more views and shapes, activations, distances,
    contractions, im2col, one-hot and bucketing."""
    a = b.pick("f", rank=1)
    if a is None:
        return False
    t, rank = a.tensor, a.tensor.dim()
    d = rng.randrange(rank)
    other = b.partner(a, "f")
    other = a if other is None or isinstance(other, str) else other
    smooth = [
        f"torch.diff({{a}}, dim={d})", "F.leaky_relu({a}, 0.1)", "F.logsigmoid({a})", "F.celu({a})", "F.selu({a})",
        "F.softsign({a})", "F.tanhshrink({a})", "torch.clamp_min({a}, -0.5)", f"torch.nansum({{a}}, {d})",
        f"torch.nanmean({{a}}, {d}, keepdim=True)", f"torch.std_mean({{a}}, {d}, correction=0)[1]",
        f"torch.linalg.vector_norm({{a}}, 1, {d})", f"torch.norm({{a}}, float('inf'), {d})",
        "torch.einsum('...i,...i->...', {a}, {c})", "F.cosine_similarity({a}, {c}, dim=-1)",
        "F.pairwise_distance({a}, {c})", "torch.dist({a}, {c})", "{a}.tile(2)", "{a}.expand_as({c}) * 1.5",
        "torch.outer({a}.flatten()[:7], {c}.flatten()[:5])", "torch.diag_embed({a}.flatten()[:6])",
    ]
    if t.shape[-1] % 2 == 0:
        smooth.append("F.glu({a}, -1)")
    if rank >= 2:
        i, j = rng.sample(range(rank), 2)
        smooth += [f"torch.rot90({{a}}, 1, ({i}, {j}))", f"torch.diagonal({{a}}, 0, {i}, {j})",
                   f"torch.diagonal({{a}}, 1, {i}, {j}) * 2", "torch.einsum('...ij->...ji', {a}) - 1",
                   "{a}.flatten(0, -2)[:, :4].sum(1, keepdim=True).mT @ {a}.flatten(0, -2)[:, :4]"]
    if rank == 2:
        smooth += ["torch.trace({a})", "torch.cdist({a}, {c}.reshape(-1, {a}.shape[-1])[:3])",
                   "torch.addmm({a}[:1, :1], {a}, {a}.mT, alpha=0.5)"]
    if rank == 3:
        smooth += ["torch.baddbmm({a}[:, :, :1], {a}, {a}.mT, beta=0.5)", "torch.bmm({a}.mT, {a})"]
    if rank == 4:
        smooth += ["F.unfold({a}, 2)", "F.unfold({a}, 3, padding=1, stride=2)", "F.pixel_unshuffle({a}[..., :2, :2], 2)",
                   "F.grid_sample({a}, torch.tanh({a}[:, :1].movedim(1, -1).expand(-1, -1, -1, 2)), align_corners=False)"]
    jumps = ["F.hardshrink({a}, 0.5)", "F.softshrink({a}, 0.5)", "F.threshold({a}, 0.2, -1.0)",
             f"torch.count_nonzero({{a}}, {d})", "torch.aminmax({a})[0]"]
    if not b.train:
        jumps += ["torch.bucketize({a}, torch.tensor([-1.0, 0.0, 0.5, 2.0], dtype={a}.dtype))",
                  "torch.searchsorted(torch.tensor([-1.0, 0.0, 0.5, 2.0], dtype={a}.dtype), {a}, right=True)",
                  "F.one_hot(({a}.abs() * 2).to(torch.int64).clamp(max=3), 4)"]
    if a.exact and rng.random() < 0.3:
        template = rng.choice(jumps)
        # Each keeps or counts exact values, but softshrink subtracts.
        return b.try_line(template, not template.startswith("F.softshrink"), {"a": a})
    return b.try_line(rng.choice(smooth), False, {"a": a, "c": other})


FAMILIES: dict[str, Callable[[_Builder, random.Random], bool]] = {
    "float_unary": _float_unary,
    "float_exact": _float_exact,
    "jump": _jump,
    "binary": _binary,
    "int": _int,
    "bool": _bool,
    "cast": _cast,
    "reduce": _reduce,
    "view": _view,
    "shape": _shape,
    "matmul": _matmul,
    "nn": _nn,
    "mutate": _mutate,
    "index": _index,
    "norm": _norm,
    "conv": _conv,
    "order": _order_stats,
    "special": _special,
    "narrow_int": _narrow_int,
    "extra": _extra,
}
# How often each family is drawn.
WEIGHTS = {
    "float_unary": 14, "float_exact": 6, "jump": 6, "binary": 14, "int": 7, "bool": 4, "cast": 4, "reduce": 12,
    "view": 14, "shape": 7, "matmul": 3, "nn": 5, "mutate": 4, "index": 5, "norm": 3, "conv": 3, "order": 4,
    "special": 5, "narrow_int": 3, "extra": 8,
}


def _random_sizes(rng: random.Random) -> tuple[int, ...]:
    while True:
        rank = rng.choices((0, 1, 2, 3, 4), (1, 3, 5, 4, 3))[0]
        sizes = tuple(rng.choice(SIZES) for _ in range(rank))
        numel = 1
        for s in sizes:
            numel *= s
        if numel <= 1024:
            return sizes


def _random_input(rng: random.Random, like: tuple[int, ...] | None) -> Input:
    dtype = rng.choices([d for d, _ in INPUT_DTYPES], [w for _, w in INPUT_DTYPES])[0]
    if like is not None and rng.random() < 0.7:
        # Broadcastable with the first input: some of its sizes set to 1, or a suffix.
        sizes = tuple(1 if rng.random() < 0.3 else s for s in like)
        if sizes and rng.random() < 0.3:
            sizes = sizes[rng.randrange(len(sizes)):]
    else:
        sizes = _random_sizes(rng)
    layouts = ["contiguous"] * 6
    if len(sizes) >= 2:
        layouts += ["transposed"] * 2
    if len(sizes) == 4:
        layouts += ["channels_last"] * 2
    if len(sizes) >= 1:
        layouts += ["strided"] * 2
        if sizes[0] > 1:
            layouts += ["expanded"]
    return Input(sizes, dtype, rng.choice(layouts))


def generate(seed: int) -> Case:
    """The random program of ``seed`` (the same for every run and platform)."""
    rng = random.Random(seed)
    mode = rng.choices([m for m, _ in MODES], [w for _, w in MODES])[0]
    inputs: list[Input] = []
    for _ in range(rng.choice((1, 2, 2, 3))):
        inputs.append(_random_input(rng, inputs[0].sizes if inputs else None))
    if mode == "train":
        # A float32 input to differentiate.
        inputs[0] = Input(inputs[0].sizes, torch.float32, inputs[0].layout)
    names = [chr(ord("a") + i) for i in range(len(inputs))]
    case = Case(seed, inputs, [], [], mode, names)
    b = _Builder(rng, mode == "train")
    for name, tensor in zip(names, case.make_inputs()):
        b.values.append(Value(name, tensor.detach(), True))
    target = rng.randint(2, 8)
    tries = 0
    while b.count < target and tries < 200:
        tries += 1
        _step(b)
    made = b.values[len(inputs):]
    if not made:
        b.try_line("{a} * 1", True, {"a": b.values[0]})
        made = b.values[len(inputs):]
    outputs = [made[-1].name]
    for v in rng.sample(made[:-1], min(len(made) - 1, rng.choice((0, 0, 1, 2)))):
        outputs.append(v.name)
    case.lines, case.outputs = b.lines, outputs
    dtypes = {v.tensor.dtype for v in b.values}
    case.narrowest = next((d for d in (torch.bfloat16, torch.float16, torch.float32) if d in dtypes), None)
    return case
