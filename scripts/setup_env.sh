#!/usr/bin/env bash
# Create (or reuse) the virtual environment with mvs-pipeline installed editable.
#   bash scripts/setup_env.sh [EXTRAS]     e.g. EXTRAS=test
# Installs the system libraries open3d links (libusb, libgomp) when running as root on Debian, and
# with the test extras Chromium for the report's browser test.
# Adds the CuPy extra matching the driver's CUDA major when an NVIDIA GPU is visible.
# MVS_VENV overrides the environment folder (default .venv in the project root).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"

missing=()
ldconfig -p 2>/dev/null | grep -q 'libusb-1.0.so.0' || missing+=(libusb-1.0-0)
ldconfig -p 2>/dev/null | grep -q 'libgomp.so.1' || missing+=(libgomp1)
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
# With the test extras, as root on Debian: Chromium for the report's browser test (which skips,
# saying why, where there is none). ~19 s on CI (apt-get update included, no recommends).
optional=()
if [[ ",$extras," == *,test,* ]] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
    && ! command -v chromium >/dev/null; then
  optional+=(chromium)
fi
if [ ${#missing[@]} -gt 0 ] || [ ${#optional[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing system packages: ${missing[*]} ${optional[*]}"
    apt-get update -qq
    [ ${#missing[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    [ ${#optional[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${optional[@]}" >/dev/null || echo "warning: could not install ${optional[*]}; the browser test will skip" >&2
  else
    echo "error: please install these system packages first: ${missing[*]}" >&2
    exit 1
  fi
fi

venv="${MVS_VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# uv installs the package and its ~60 dependencies in 4-8 s where pip takes 21-32 s (2-core CI
# machine, warm and cold caches; session 19, docs/decisions.md "First-run compile"); pip stays the
# fallback.
if [ ! -x "$venv/bin/uv" ]; then
  "$venv/bin/python" -m pip install -q uv 2>&1 | grep -v '^WARNING' || true
fi

if command -v nvidia-smi >/dev/null && cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: \([0-9]*\).*/\1/p' | head -1) && [ -n "$cuda" ]; then
  case "$cuda" in 12) extras="${extras:+$extras,}cuda12" ;; 13|14) extras="${extras:+$extras,}cuda13" ;; esac
fi
spec="."
[ -n "$extras" ] && spec=".[$extras]"
echo "installing mvs-pipeline$([ -n "$extras" ] && echo "[$extras]") into $venv ..."
if ! { [ -x "$venv/bin/uv" ] && "$venv/bin/uv" pip install -q --python "$venv/bin/python" -e "$spec"; }; then
  [ -x "$venv/bin/uv" ] && echo "uv could not install; using pip" >&2
  "$venv/bin/python" -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING' || true
  "$venv/bin/python" -m pip install -q -e "$spec" 2>&1 | grep -v '^WARNING' || true
fi
"$venv/bin/python" -c 'import mvs_pipeline, open3d, pycolmap' || { echo "error: install check failed" >&2; exit 1; }
# Precompile the kernels for this machine's GPU when nvcc is here too (otherwise CuPy compiles
# them with NVRTC at first use, ~15 s on a fresh machine); `mvs-pipeline doctor` shows the result.
if command -v nvcc >/dev/null && cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1) \
    && [ -n "$cc" ]; then
  "$venv/bin/mvs-pipeline" -q build-kernels --archs "${cc/./}" \
    || echo "warning: kernel precompilation failed; kernels compile at first use instead" >&2
fi
# On a GPU machine, one tiny run fills CuPy's own kernel cache (its reductions, sorts, ...) so the
# first real run does not compile them; once per environment.
if [ ! -f "$venv/.mvs-warmed-up" ] && nvidia-smi >/dev/null 2>&1 \
    && "$venv/bin/mvs-pipeline" -q doctor --warm-up >/dev/null; then
  touch "$venv/.mvs-warmed-up"
fi
