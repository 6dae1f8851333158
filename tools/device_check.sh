#!/usr/bin/env bash
# rdyn's GPU checks, for a machine with an NVIDIA GPU and PyTorch but no
# Rust toolchain or network: the extension comes prebuilt as a wheel.
#
#   here:   maturin build --release -m frontend/Cargo.toml -o .whl
#           (plus any Python wheel the GPU machine lacks, e.g. expecttest)
#   there:  tools/device_check.sh STAGE [STAGE ...]
#
# Stages: smoke (tools/cuda_smoke.py), cuda (tests/test_cuda.py, the GEMMs of
# tests/test_cuda_gemm.py and the CUDA model tests), opinfo (OpInfo float32 on CUDA), half (OpInfo
# float16/bfloat16 on CUDA), bandwidth (benches/cuda_bandwidth.py), suite
# (benches/suite.py --devices cuda; RDYN_SUITE_ARGS adds options and
# RDYN_SUITE_MODELS picks models; suite2, suite3... name more runs). Each stage's log goes to
# $OUT/logs/STAGE.log (tarred into $OUT/logs-FIRSTSTAGE.tar.gz at the end); its last
# lines are printed. RDYN_STAGE_TIMEOUT bounds each stage (seconds), or
# STAGE:SECONDS bounds one. RDYN_OPINFO_K ("and (abs or exp)") narrows the
# opinfo stage.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT="${OUT:-build/device}"
LOGS="$OUT/logs"
mkdir -p "$LOGS"
PY="${PYTHON:-python3}"
if [[ -d .whl ]]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "device_check: installing the wheels failed"; exit 1; }
    export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1 RDYN_STRICT=1
TIMEOUT="${RDYN_STAGE_TIMEOUT:-540}"
PYTEST=("$PY" -m pytest -q -p no:randomly -p no:cacheprovider -W ignore --timeout 120 -o addopts="")

stage() {
    local name=$1
    shift
    local start=$SECONDS
    timeout "${limit:-$TIMEOUT}" "$@" >"$LOGS/$name.log" 2>&1
    local rc=$?
    echo "=== $name: rc=$rc in $((SECONDS - start)) s"
    tail -n "${RDYN_TAIL:-12}" "$LOGS/$name.log"
}

for arg in "$@"; do
    s=${arg%%:*}
    limit=""
    [[ "$arg" == *:* ]] && limit=${arg#*:}
    case "$s" in
        info) stage info bash -c "nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $PY -c 'import torch, rdyn; print(torch.__version__, rdyn.__file__)'" ;;
        smoke) stage smoke "$PY" tools/cuda_smoke.py ;;
        # The simulator's tests (`cuda_sim`, `cuda-sim`) need no GPU: CI runs them.
        cuda) stage cuda "${PYTEST[@]}" tests/test_cuda.py tests/test_cuda_gemm.py tests/test_models.py -k "(cuda or gpu) and not cuda_sim and not cuda-sim" -rf ;;
        opinfo) stage opinfo "${PYTEST[@]}" tests/test_opinfo.py -k "test_op_cuda and not half and not cuda_sim ${RDYN_OPINFO_K:-}" -rf ;;
        half) stage half "${PYTEST[@]}" tests/test_opinfo.py -k "test_op_cuda_half" -rf ;;
        bandwidth) stage bandwidth "$PY" benches/cuda_bandwidth.py --json "$OUT/cuda_bandwidth.json" ;;
        suite*) stage "$s" "$PY" benches/suite.py --devices cuda --no-dashboard ${RDYN_SUITE_ARGS:-} \
                    ${RDYN_SUITE_MODELS:+--models "$RDYN_SUITE_MODELS"} --out "/tmp/$s"
                cp "/tmp/$s/latest.json" "$LOGS/$s.json" 2>/dev/null
                cp /tmp/"$s"/logs/*.log "$LOGS/" 2>/dev/null ;;
        *) echo "device_check: unknown stage $s" ;;
    esac
done
[[ -f build/opinfo_summary.json ]] && cp build/opinfo_summary.json "$OUT/"
tar -C "$OUT" -czf "$OUT/logs-${1%%:*}.tar.gz" logs && rm -rf "$LOGS"
