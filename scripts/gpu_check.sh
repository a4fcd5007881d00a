#!/usr/bin/env bash
# One whole GPU session on a machine where CuPy works but the package is not installed
# (the project's GPU test machine): gpu-marked tests, then every benchmark, logs under $OUT.
#   OUT=/some/dir bash scripts/gpu_check.sh [PYTEST -k EXPR] [BENCH GLOB]
# Staged wheels (pycolmap, open3d, ...) are expected in /tmp/site (see ../shared/device/).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu_out}"; mkdir -p "$out"
export PYTHONPATH="$PWD:/tmp/site:${PYTHONPATH:-}" LD_LIBRARY_PATH="/tmp/site/_libs:${LD_LIBRARY_PATH:-}" PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; git rev-parse HEAD 2>/dev/null;
  python3 -c 'import cupy; print("cupy", cupy.__version__)'; } > "$out/gpu_info.txt" 2>&1
kexpr="${1:-}"; bench_glob="${2:-benchmarks/bench_*.py}"
python3 -m pytest -m gpu -q -p no:cacheprovider ${kexpr:+-k "$kexpr"} 2>&1 | tee "$out/gpu_tests.log"
for b in $bench_glob; do
  [ -f "$b" ] || continue
  echo "== $b" | tee -a "$out/bench.log"
  timeout 240 python3 "$b" --json "$out/$(basename "$b" .py).json" 2>&1 | tee -a "$out/bench.log"
done
