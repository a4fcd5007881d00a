#!/usr/bin/env bash
# Compile every cuda/*.cu with nvcc for sm_80 and sm_90 (no GPU needed): catches syntax and
# resource errors in CI. CuPy compiles the same files with NVRTC at run time.
# A .cu whose constants come from -D options lists its variants in lines of the form
#   // ci-variant: -DNAME=value -DOTHER=value
# and each variant is compiled; a file without such lines is compiled once as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
files=(cuda/*.cu)
if ! command -v nvcc >/dev/null; then echo "nvcc not found; skipping kernel compilation"; exit 0; fi
[ ${#files[@]} -gt 0 ] || { echo "no CUDA sources"; exit 0; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for f in "${files[@]}"; do
  mapfile -t variants < <(sed -n 's|^// ci-variant:||p' "$f")
  [ ${#variants[@]} -gt 0 ] || variants=("")
  for v in "${variants[@]}"; do
    for arch in sm_80 sm_90; do
      # shellcheck disable=SC2086  # a variant is a list of options
      nvcc -std=c++17 -arch="$arch" -Icuda $v -c "$f" -o "$tmp/$(basename "$f").$arch.o"
    done
    echo "compiled $f${v:+ with$v} (sm_80, sm_90)"
  done
done
