#!/usr/bin/env bash
# Set up a development environment: a venv in .venv with the Python
# dependencies, and the rdyn extension built into it (release mode).
# Idempotent: a rerun skips what is already installed and rebuilds
# incrementally.  Works from any directory.
#
#   tools/setup.sh            # venv + deps + maturin develop --release
#   RDYN_SKIP_BUILD=1 tools/setup.sh   # venv + deps only
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYTHON="${PYTHON:-python3}"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
# The project's, the tests' and the benchmark suite's (benches/requirements.txt;
# timm for the wide corpus, benches/corpus.py).
DEPS=(torch torchvision transformers maturin pytest pytest-xdist expecttest hypothesis numpy plotly matplotlib tqdm timm)
# Module names to probe for each dependency (same order as DEPS).
MODULES=(torch torchvision transformers maturin pytest xdist expecttest hypothesis numpy plotly matplotlib tqdm timm)

say() { printf '[setup] %s\n' "$*"; }

if [[ ! -x "$PY" ]]; then
    say "creating virtual environment in .venv ($("$PYTHON" --version 2>&1))"
    "$PYTHON" -m venv "$VENV"
    "$PY" -m pip install --quiet --upgrade pip
fi

missing=()
for i in "${!DEPS[@]}"; do
    if ! "$PY" -c "import ${MODULES[$i]}" >/dev/null 2>&1; then
        missing+=("${DEPS[$i]}")
    fi
done
if ((${#missing[@]})); then
    say "installing Python packages: ${missing[*]} (torch from PyPI is ~5 GB, a few minutes)"
    "$PY" -m pip install --quiet "${missing[@]}"
else
    say "Python packages already installed"
fi

if [[ "${RDYN_SKIP_BUILD:-0}" == "1" ]]; then
    say "RDYN_SKIP_BUILD=1: not building the extension"
    exit 0
fi

say "building rdyn (maturin develop --release)"
start=$SECONDS
VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" "$VENV/bin/maturin" develop --release --quiet
"$PY" -c "import rdyn" || { say "error: 'import rdyn' fails after the build"; exit 1; }
say "rdyn built and installed in $((SECONDS - start)) s"
