#!/usr/bin/env bash
# On a machine with a CUDA GPU: build, verify and time a handful of workloads with scripts
# sampled from MetaSchedule and with the baselines, and print one table.
#
#   benchmarks/gpu_check.sh [--trials 32] [--scripts 4]
#
# Exit status: 0 when every baseline and at least one script per workload is correct, 1 when
# not, 2 when there is no GPU.  It needs the project installed (make test does that).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
if ! nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; then
    echo "gpu_check: no CUDA GPU here (nvidia-smi failed)" >&2
    exit 2
fi
exec "$PY" benchmarks/gpu_check.py "$@"
