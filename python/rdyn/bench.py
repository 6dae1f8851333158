"""Benchmark your own model: rdyn against eager PyTorch and Inductor.

    python -m rdyn.bench my_model:make
    python -m rdyn.bench my_model:make --backends eager,rdyn --rounds 3 --train
    python -m rdyn.bench path/to/file.py:build_model

``make()`` (any name: ``MODULE:FUNCTION``; ``MODULE`` alone means
``MODULE:make``) takes no arguments and returns ``(model, inputs)``: an
``nn.Module`` (or a plain function) and a tensor or a tuple of tensors, on
the CPU in float32. ``MODULE`` is a module importable from the current
folder or a path to a ``.py`` file. It is called in fresh processes, after
``torch.manual_seed(0)``, so every process builds the same weights.

Your model goes through the benchmark suite's own measurement
(``benches/suite.py`` and its worker ``benches/measure.py``): correctness
of each backend against eager, speedups from interleaved timing rounds,
the first-compile time in a fresh process with caches disabled, the
warm-start time and peak memory in another (``--no-warm`` skips those two),
rdyn's native and fallback nodes and its interpreted CPU stages. It prints
a table, appends the run to ``build/bench/history.json`` and rebuilds
``build/bench/dashboard.html``.

This needs rdyn's source tree (the suite lives in ``benches/``, beside
``python/rdyn``), as in a development install (``tools/setup.sh``); with
rdyn installed from a wheel, set ``RDYN_BENCHES`` to a checkout's
``benches`` folder.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

BACKENDS = ("eager", "inductor", "rdyn")


def find_benches() -> Path:
    """The ``benches/`` folder of rdyn's source tree (``$RDYN_BENCHES`` first)."""
    here = Path(__file__).resolve().parents[2] / "benches"
    for candidate in [Path(p) for p in [os.environ.get("RDYN_BENCHES")] if p] + [here]:
        if (candidate / "suite.py").is_file() and (candidate / "measure.py").is_file():
            return candidate.resolve()
    raise SystemExit(
        f"rdyn.bench: the benchmark suite is not here (no suite.py in {here}): rdyn.bench runs rdyn's "
        "benches/suite.py, which a wheel does not ship; set RDYN_BENCHES=/path/to/rdyn/benches (a checkout), "
        "or install rdyn from its source tree (tools/setup.sh)"
    )


def load_suite(benches: Path):
    """benches/suite.py as a module (under its own name: a ``suite`` module
    of the user's cannot shadow it)."""
    spec = importlib.util.spec_from_file_location("_rdyn_bench_suite", benches / "suite.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m rdyn.bench",
        description="Benchmark your own model with rdyn, eager PyTorch and Inductor (the suite's measurement "
        "and dashboard).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="make() returns (model, inputs): an nn.Module (or a function) and a tensor or a tuple of tensors.\n"
        "Results: build/bench/history.json and build/bench/dashboard.html (--out to change).",
    )
    p.add_argument("target", metavar="MODULE:FUNCTION",
                   help="FUNCTION() in MODULE returns (model, inputs); MODULE is importable from here or a .py "
                   "file; MODULE alone means MODULE:make")
    p.add_argument("--backends", help=f"comma-separated, from {','.join(BACKENDS)} (default: all); eager always "
                   "runs: it is the baseline")
    p.add_argument("--rounds", type=int, help="interleaved timing rounds (default 7)")
    p.add_argument("--target-ms", type=float, help="length of one timing round per backend (default 200)")
    p.add_argument("--train", action="store_true", help="also time a training step (forward + backward)")
    p.add_argument("--half", nargs="?", const="auto", choices=["auto", "bf16", "fp16"],
                   help="run in half precision instead of float32")
    p.add_argument("--devices", help="comma-separated, from cpu,wgpu,cuda (default: cpu)")
    p.add_argument("--no-warm", action="store_true",
                   help="skip the fresh-process first compile, warm start and memory (faster)")
    p.add_argument("--threads", type=int, help="torch.set_num_threads in the workers")
    p.add_argument("--timeout", type=float, help="seconds without progress before a worker is killed (default 900)")
    p.add_argument("--out", help="output folder (default: build/bench in rdyn's source tree)")
    p.add_argument("--no-dashboard", action="store_true", help="do not rebuild the dashboard")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def suite_argv(args: argparse.Namespace) -> list[str]:
    """The same run as benches/suite.py arguments."""
    target = args.target if ":" in args.target else f"{args.target}:make"
    out = ["--target", target]
    for flag, value in (("--backends", args.backends), ("--rounds", args.rounds), ("--target-ms", args.target_ms),
                        ("--devices", args.devices), ("--threads", args.threads), ("--timeout", args.timeout),
                        ("--out", args.out and str(Path(args.out).resolve()))):
        if value is not None:
            out += [flag, str(value)]
    if args.half:
        out += ["--half", args.half]
    for flag in ("train", "no_warm", "no_dashboard", "no_progress"):
        if getattr(args, flag):
            out.append("--" + flag.replace("_", "-"))
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("RDYN_BENCH_CWD", os.getcwd())
    suite = load_suite(find_benches())
    return suite.main(suite_argv(args))


if __name__ == "__main__":
    sys.exit(main())
