#!/usr/bin/env bash
# Run every check CI runs: setup, rustfmt, clippy, the Rust tests, and the
# Python tests (pytest, with RDYN_STRICT=1 so a compile failure is an error,
# not a silent eager fallback).  Extra arguments go to pytest:
#
#   tools/test.sh                       # everything
#   tools/test.sh -k guards -x          # pytest selection
#   tools/test.sh tests/test_api.py     # only these files
#   RDYN_OPINFO_LIMIT=50 tools/test.sh  # cap the OpInfo conformance suite
#   RDYN_SKIP_RUST_CHECKS=1 tools/test.sh   # skip fmt/clippy/cargo test
#   RDYN_TEST_WORKERS=0 tools/test.sh --pdb # pytest in one process
#
# All steps run even when one fails; the exit status is non-zero if any did.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# wgpu/Vulkan wants a runtime dir; without one it only warns.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

say() { printf '[test] %s\n' "$*"; }

"$ROOT/tools/setup.sh"

failed=()
step() {
    local name="$1"
    shift
    say "$name: $*"
    local start=$SECONDS
    if "$@"; then
        say "$name: ok ($((SECONDS - start)) s)"
    else
        say "$name: FAILED ($((SECONDS - start)) s)"
        failed+=("$name")
    fi
}

if [[ "${RDYN_SKIP_RUST_CHECKS:-0}" != "1" ]]; then
    step rustfmt cargo fmt --all --check
    step clippy cargo clippy --workspace --all-targets --quiet -- -D warnings
    step cargo-test cargo test --quiet
fi

# Run all of tests/ unless the arguments name test files or directories.
pytest_paths=(tests)
for arg in "$@"; do
    if [[ "$arg" != -* && -e "${arg%%::*}" ]]; then
        pytest_paths=()
        break
    fi
done
# pytest-xdist spreads the tests over one worker per core (at most 8): the
# tests are independent (each worker process gets its own compile cache,
# tests/conftest.py; distributed tests pick free ports), and on CI's 2 cores
# this halves the run (1,270 s -> 700 s).  RDYN_TEST_WORKERS=N sets the count,
# 0 runs in this process (for --pdb); an explicit -n/-p argument wins.
workers="${RDYN_TEST_WORKERS:-$(( $(nproc) < 8 ? $(nproc) : 8 ))}"
xdist=()
if ((workers > 1)); then
    xdist=(-n "$workers")
    for arg in "$@"; do
        case "$arg" in
            -n* | --numprocesses* | -p | --pdb) xdist=() ;;
        esac
    done
fi
step pytest env RDYN_STRICT=1 "$ROOT/.venv/bin/python" -m pytest "${pytest_paths[@]}" -q "${xdist[@]}" "$@"

if ((${#failed[@]})); then
    say "FAILED steps: ${failed[*]}"
    exit 1
fi
say "all checks passed"
