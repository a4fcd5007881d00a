#!/usr/bin/env bash
# Demo: install into .venv, render a small synthetic scene, run the pipeline on it with the
# default config (CPU backend when no GPU is usable), print where the outputs are.
#   bash scripts/demo.sh [OUT_DIR]     (default: demo_out)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
venv="${MVS_VENV:-.venv}"
out="${1:-demo_out}"
mvs="$venv/bin/mvs-pipeline"
echo "== rendering a synthetic 'object' scene (8 views, 320x240) into $out/scene"
"$mvs" synth --scene object --out "$out/scene" --views 8 --width 320 --height 240 --seed 0
echo "== running the pipeline (configs/default.yaml) into $out/run"
"$mvs" run "$out/scene" -o "$out/run"
echo "== workspace summary"
"$mvs" info "$out/run"
echo
echo "outputs: $out/run  (COLMAP dense workspace: images/, sparse/, stereo/, run.json, config.resolved.yaml)"
echo "ground truth of the synthetic scene: $out/scene/gt"
