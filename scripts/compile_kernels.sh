#!/usr/bin/env bash
# Compile every cuda/*.cu with nvcc for sm_80 and sm_90 (no GPU needed): catches syntax and
# resource errors in CI. CuPy compiles the same files with NVRTC at run time.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
files=(cuda/*.cu)
if ! command -v nvcc >/dev/null; then echo "nvcc not found; skipping kernel compilation"; exit 0; fi
[ ${#files[@]} -gt 0 ] || { echo "no CUDA sources"; exit 0; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for f in "${files[@]}"; do
  for arch in sm_80 sm_90; do
    nvcc -std=c++17 -arch="$arch" -Icuda -c "$f" -o "$tmp/$(basename "$f").$arch.o"
  done
  echo "compiled $f (sm_80, sm_90)"
done
