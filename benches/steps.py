"""Benchmark models on a device: their inputs, one inference call or training
step, what is compared, and the comparison with eager's (for
``measure.py``, the worker; no state of its own).
"""

from __future__ import annotations

import math

import torch

import models as zoo


def tensor_device(device: str) -> str:
    """Where tensors live: wgpu runs on CPU tensors (rdyn copies to the GPU)."""
    return "cuda" if device == "cuda" else "cpu"


def json_number(x):
    """JSON has no NaN or infinity: report them as None."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def half_dtype(name: str | None):
    return {None: None, "float32": None, "float64": torch.float64, "bfloat16": torch.bfloat16,
            "float16": torch.float16}[name]


def prepare(model_name: str, device: str, dtype_name: str | None, mode: str):
    module, inputs = zoo.spec(model_name).build()
    dtype = half_dtype(dtype_name)
    dev = tensor_device(device)
    module = module.to(dev)
    if dtype is not None:
        module = module.to(dtype)
    inputs = tuple(
        (x.to(dev, dtype) if (dtype is not None and x.is_floating_point()) else x.to(dev)) for x in inputs
    )
    if mode == "train":
        module.train()
    return module, inputs


def flatten(out) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flatten(o)]
    if isinstance(out, dict):
        return [t for k in sorted(out) for t in flatten(out[k])]
    if hasattr(out, "to_tuple"):
        return flatten(out.to_tuple())
    return []


def make_step(fn, module, mode: str):
    """A callable running one inference call or one training step."""
    if mode == "inference":

        def infer(*inputs):
            with torch.no_grad():
                return fn(*inputs)

        return infer

    params = [p for p in module.parameters() if p.requires_grad]
    cotangents: list = []

    def train_step(*inputs):
        for p in params:
            p.grad = None
        outs = [t for t in flatten(fn(*inputs)) if t.is_floating_point()]
        if not cotangents:
            # loss = sum(out * w) with fixed random w: a plain sum of a
            # LayerNorm'd output is ~0 and so would be every gradient.
            gen = torch.Generator().manual_seed(1234)
            cotangents.extend(torch.randn(t.shape, generator=gen).to(t.device) for t in outs)
        loss = sum((t.float() * w).sum() for t, w in zip(outs, cotangents))
        loss.backward()
        return loss

    return train_step


def observed(module, mode: str, step_result) -> list:
    """The tensors correctness compares: outputs, or loss and gradients."""
    if mode == "inference":
        return [t.detach() for t in flatten(step_result)]
    grads = [p.grad if p.grad is not None else torch.zeros(()) for p in module.parameters() if p.requires_grad]
    return [step_result.detach()] + [g.detach() for g in grads]


TOLERANCE = {"float32": 1e-3, "float16": 1e-2, "bfloat16": 5e-2}


def compare(got: list, ref: list, dtype_name: str, check_dtype: bool = True) -> dict:
    """Max abs error, max error relative to the reference's largest value, pass flag.

    ``max_rel_err`` is ``max|got - ref| / max|ref|`` per output tensor (the
    worst over tensors): an elementwise relative error explodes near zero.
    Non-float outputs must match exactly; NaN and inf must sit in the same places.
    """
    tol = TOLERANCE.get(dtype_name or "float32", 1e-3)
    if len(got) != len(ref):
        return {"correct": False, "max_abs_err": None, "max_rel_err": None, "tolerance": tol,
                "mismatch": f"{len(got)} outputs, eager gives {len(ref)}"}
    worst_abs, worst_rel, problems = 0.0, 0.0, []
    for i, (g, r) in enumerate(zip(got, ref)):
        if tuple(g.shape) != tuple(r.shape):
            problems.append(f"output {i}: shape {tuple(g.shape)} vs eager {tuple(r.shape)}")
            continue
        if check_dtype and g.dtype != r.dtype:
            problems.append(f"output {i}: dtype {g.dtype} vs eager {r.dtype}")
            continue
        if g.numel() == 0:
            continue
        g64, r64 = g.detach().cpu().double(), r.detach().cpu().double()
        if not (r.is_floating_point() or r.is_complex() or g.is_floating_point()):
            if not torch.equal(g64, r64):
                problems.append(f"output {i}: integer values differ")
            continue
        if not torch.equal(torch.isnan(g64), torch.isnan(r64)):
            problems.append(f"output {i}: NaN in different places")
        finite = torch.isfinite(r64) & torch.isfinite(g64)
        if not torch.equal(g64[~finite & ~torch.isnan(r64)], r64[~finite & ~torch.isnan(r64)]):
            problems.append(f"output {i}: infinities differ")
        if finite.any():
            err = (g64[finite] - r64[finite]).abs().max().item()
            scale = r64[finite].abs().max().item()
            worst_abs = max(worst_abs, err)
            worst_rel = max(worst_rel, err / scale if scale > 0 else (0.0 if err == 0 else math.inf))
    correct = not problems and worst_rel <= tol
    result = {"correct": correct, "max_abs_err": json_number(worst_abs), "max_rel_err": json_number(worst_rel), "tolerance": tol}
    if problems:
        result["mismatch"] = "; ".join(problems[:3])
    return result
