#!/usr/bin/env bash
# Run the CPU benchmark suite (rdyn vs eager vs Inductor).  Arguments go to
# benches/suite.py; see `tools/bench.sh --help`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

"$ROOT/tools/setup.sh"
exec "$ROOT/.venv/bin/python" benches/suite.py "$@"
