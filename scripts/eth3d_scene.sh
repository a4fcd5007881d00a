#!/usr/bin/env bash
# Run mvs-pipeline on an ETH3D high-res multi-view training scene and score it against the
# scene's laser scans (dslr_scan_eval/scan_alignment.mlp), then write the report.
#
#   scripts/eth3d_scene.sh SCENE_DIR [CONFIG]
#
# SCENE_DIR: an extracted ETH3D training scene (images/dslr_images_undistorted/,
#            dslr_calibration_undistorted/, dslr_scan_eval/). CONFIG: preset or YAML (default: eth3d).
# Environment: OUT (default SCENE_DIR/mvs_pipeline_out), BACKEND (auto|cuda|cpu, default auto),
#              ETH3D_BINARY (official ETH3DMultiViewEvaluation, printed side by side if given or on PATH),
#              MVS (command to run, default: mvs-pipeline, or `python -m mvs_pipeline`).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
SCENE_DIR=$1
CONFIG=${2:-eth3d}
OUT=${OUT:-$SCENE_DIR/mvs_pipeline_out}
BACKEND=${BACKEND:-auto}
MLP=$SCENE_DIR/dslr_scan_eval/scan_alignment.mlp
if [[ -z "${MVS:-}" ]]; then
  if command -v mvs-pipeline >/dev/null 2>&1; then MVS=mvs-pipeline; else MVS="python -m mvs_pipeline"; fi
fi

[[ -d "$SCENE_DIR" ]] || { echo "eth3d_scene.sh: $SCENE_DIR: not a folder" >&2; exit 2; }
[[ -f "$MLP" ]] || { echo "eth3d_scene.sh: $MLP not found (is this an ETH3D training scene with dslr_scan_eval?)" >&2; exit 2; }

echo "== run: $SCENE_DIR -> $OUT (config $CONFIG, backend $BACKEND)"
$MVS run "$SCENE_DIR" -o "$OUT" -c "$CONFIG" --set backend="$BACKEND" --gt "$MLP"

# Score every cloud the run produced (the run's evaluate stage may have done so already; this
# prints the table, and the official program's numbers next to ours when it is available).
mkdir -p "$OUT/eval"
for cloud in fused fused_fps; do
  ply=$OUT/$cloud.ply
  [[ -f "$ply" ]] || continue
  echo "== evaluate: $ply"
  $MVS evaluate "$ply" --gt "$MLP" --backend "$BACKEND" --json "$OUT/eval/eth3d_$cloud.json" \
    ${ETH3D_BINARY:+--eth3d-binary "$ETH3D_BINARY"}
done

$MVS report "$OUT"
