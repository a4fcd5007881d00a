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
echo "== running the pipeline (configs/small.yaml: small images, few views) into $out/run"
"$mvs" run "$out/scene" -o "$out/run" -c small
echo "== workspace summary"
"$mvs" info "$out/run"
echo
echo "outputs in $out/run (a COLMAP dense workspace):"
echo "  fused.ply, fused.ply.vis   dense cloud (open it in MeshLab/CloudCompare/Open3D) and COLMAP visibility"
echo "  fused_fps.ply              farthest point sample of the fused cloud"
echo "  stereo/                    final depth/normal maps (COLMAP .bin) and PNG previews of depth, normal, cost"
echo "  report.html, eval/         evaluation against the scene's ground truth"
echo "  run.json                   per-stage timings and counts; config.resolved.yaml"
echo "ground truth of the synthetic scene: $out/scene/gt"
