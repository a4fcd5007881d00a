"""End to end: `mvs-pipeline run` on a synthetic object scene, scored by the native ETH3D evaluator.

The bars are the issue's. The run uses the `small` preset (configs/small.yaml), the one meant
for images of a few hundred pixels and ~10 views: ACMM's 1000 px bound would leave a single scale
at 320 px (the default's `auto` now picks 120 up to 640 px, one scale more than small's 160), and
with 8 views on a ring most surface points are seen by only 2-3 of them, so one agreeing
neighbour is enough for fusion. Measured on the CPU (320x240): default config, one
scale: F1@5cm 0.63; two scales: 0.73; two scales + min_consistent 1: 0.87 (accuracy 0.97).
"""

from __future__ import annotations

import json

import pytest

from mvs_pipeline.cli import main

CPU_F1_AT_5CM = 0.8
GPU_F1_AT_2CM = 0.85


def _require_full_pipeline():
    from mvs_pipeline.pipeline import STAGE_RUNNERS

    missing = [s for s in ("depth", "fusion") if s not in STAGE_RUNNERS]
    if missing:
        pytest.skip(f"pipeline stages not available yet: {', '.join(missing)}")


def _run_and_score(tmp_path, width, height, backend, tolerance):
    from mvs_pipeline.synth import generate_scene

    _require_full_pipeline()
    scene = generate_scene("object", tmp_path / "scene", views=8, width=width, height=height, seed=0)
    mlp = scene / "gt" / "eth3d" / "scan_alignment.mlp"
    out = tmp_path / "out"
    assert main(["-q", "run", str(scene), "-o", str(out), "-c", "small", "--set", f"backend={backend}",
                 "--gt", str(mlp)]) == 0
    assert (out / "fused.ply").is_file()
    res_path = tmp_path / "eval.json"
    assert main(["-q", "evaluate", str(out / "fused.ply"), "--gt", str(mlp), "--backend", backend,
                 "--tolerances", f"{tolerance}", "--no-official", "--json", str(res_path)]) == 0
    return json.loads(res_path.read_text())


@pytest.mark.slow
def test_cpu_pipeline_f1_at_5cm(tmp_path):
    res = _run_and_score(tmp_path, 320, 240, "cpu", 0.05)
    assert res["f1"][0] >= CPU_F1_AT_5CM, res


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_pipeline_f1_at_2cm(tmp_path):
    res = _run_and_score(tmp_path, 640, 480, "cuda", 0.02)
    assert res["f1"][0] >= GPU_F1_AT_2CM, res
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    peaks = run["stage_gpu_pool_peak_bytes"]
    # the depth stage's plane/cost/weight buffers alone are > 10 MB at 640x480 with 7 sources
    assert peaks["depth"] > 10e6, peaks
    # fusion on the GPU: as a stage of its own (its pool's peak), or beside the depth stage, whose peak then
    # holds fusion's buffers too (pipeline._take_trailing_fusion: no pool of its own to read)
    assert peaks.get("fusion", 0) > 0 or "fusion_beside_depth_seconds" in run["counts"], (peaks, run["counts"])
    assert run["counts"]["depth_gpu_used_peak_bytes"] >= peaks["depth"], run["counts"]
