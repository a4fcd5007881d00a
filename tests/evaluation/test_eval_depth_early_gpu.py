"""A GPU run compares its depth maps beside fusion and sampling (evaluation/depth_job.py): run.json
records the comparison's seconds, and eval/depth.json holds what comparing the same maps after the
run gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mvs_pipeline.cli import main
from mvs_pipeline.evaluation.depth_metrics import evaluate_run_depths

pytestmark = pytest.mark.gpu


def test_a_gpu_run_takes_the_early_comparison(synth_scene_factory, tmp_path):
    scene = synth_scene_factory("object", views=6, width=160, height=120)
    out = tmp_path / "out"
    assert main(["-q", "run", str(scene), "-o", str(out), "--set", "backend=cuda",
                 "--set", "patchmatch.iterations=1", "--set", "depth.geometric_passes=1"]) == 0
    early = json.loads((out / "run.json").read_text())["counts"]["evaluate_depth_early"]
    assert early["seconds"] > 0 and early["wait_seconds"] >= 0
    stored = json.loads((out / "eval" / "depth.json").read_text())
    direct = evaluate_run_depths(out, Path(scene) / "gt" / "depth", backend="cpu")
    assert set(stored["images"]) == set(direct["images"]) and len(direct["images"]) == 6
    for key in ("gt_pixels", "evaluated_pixels", "within_2cm", "within_1pct"):
        assert stored["overall"][key] == pytest.approx(direct["overall"][key], rel=1e-9)
    assert len(list((out / "eval" / "depth_errors").glob("*.png"))) == 6


def test_its_own_stream_gives_the_default_stream_numbers(cupy, tmp_path):
    import numpy as np  # noqa: PLC0415

    from mvs_pipeline.io.colmap_maps import write_colmap_array  # noqa: PLC0415

    rng = np.random.default_rng(9)
    (tmp_path / "run" / "stereo" / "depth_maps").mkdir(parents=True)
    (tmp_path / "gt").mkdir()
    for i in range(20):
        gt = rng.uniform(1, 4, (96, 128)).astype(np.float32)
        np.save(tmp_path / "gt" / f"v{i}.png.npy", gt)
        est = gt * np.float32(1 + 0.003 * i) + rng.normal(0, 0.02, gt.shape).astype(np.float32)
        write_colmap_array(tmp_path / "run" / "stereo" / "depth_maps" / f"v{i}.png.geometric.bin", est)
    ref = evaluate_run_depths(tmp_path / "run", tmp_path / "gt", backend="cpu")
    for own in (False, True):
        got = evaluate_run_depths(tmp_path / "run", tmp_path / "gt", backend="cuda", own_stream=own)
        assert got["histograms"] == ref["histograms"]
        for key, value in ref["overall"].items():
            assert got["overall"][key] == pytest.approx(value, rel=1e-9), key
