#!/usr/bin/env bash
# Run the CPU benchmark suite (rdyn vs eager vs Inductor).  Arguments go to
# benches/suite.py; see `tools/bench.sh --help`.
#
#   tools/bench.sh                    # the default suite (11 models, a few minutes)
#   tools/bench.sh --suite wide       # the wide corpus: 43 models, inference + training (hours)
#   tools/bench.sh --suite wide --list
#   tools/bench.sh --target my_model:make   # your model (also: python -m rdyn.bench my_model:make)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# A --target's module is found from the folder this was run from.
export RDYN_BENCH_CWD="${RDYN_BENCH_CWD:-$PWD}"
cd "$ROOT"

"$ROOT/tools/setup.sh"
exec "$ROOT/.venv/bin/python" benches/suite.py "$@"
