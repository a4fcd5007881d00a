"""The evaluate stage reuses eval/depth.json while the depth maps, the GT files and the settings
are those it was made from (a resumed run compared every map again), and redoes it otherwise."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from mvs_pipeline.config.loader import load_config
from mvs_pipeline.evaluation import depth_metrics
from mvs_pipeline.evaluation.stage import evaluate_run
from mvs_pipeline.io.colmap_maps import write_colmap_array


@pytest.fixture
def run(tmp_path):
    rng = np.random.default_rng(3)
    (tmp_path / "out" / "stereo" / "depth_maps").mkdir(parents=True)
    (tmp_path / "ws" / "gt" / "depth").mkdir(parents=True)
    for name in ("a.png", "b.png"):
        gt = rng.uniform(1, 3, (12, 16)).astype(np.float32)
        np.save(tmp_path / "ws" / "gt" / "depth" / f"{name}.npy", gt)
        write_colmap_array(tmp_path / "out" / "stereo" / "depth_maps" / f"{name}.geometric.bin",
                           gt * np.float32(1.01))
    return tmp_path


def _evaluate(root, cfg, **kw):
    return evaluate_run(cfg, root / "out", workspace=root / "ws", backend="cpu", make_report=False, **kw)


def test_depth_metrics_reused_until_an_input_changes(run, monkeypatch):
    cfg = load_config(None).evaluate
    first = _evaluate(run, cfg)["depth"]
    assert first["within_2pct"] == 1.0
    calls = []
    real = depth_metrics.evaluate_run_depths
    monkeypatch.setattr(depth_metrics, "evaluate_run_depths", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert _evaluate(run, cfg)["depth"] == first and calls == []           # resumed: read back
    assert _evaluate(run, cfg, overwrite=True)["depth"] == first and len(calls) == 1
    # a map written again (new stamp) is compared again, and the result describes the new map
    path = run / "out" / "stereo" / "depth_maps" / "a.png.geometric.bin"
    gt = np.load(run / "ws" / "gt" / "depth" / "a.png.npy")
    write_colmap_array(path, gt * np.float32(1.05))
    os.utime(path, ns=(1, 1))
    redone = _evaluate(run, cfg)["depth"]
    assert len(calls) == 2 and redone["within_2pct"] == pytest.approx(0.5)
    # another setting of the error images: redone; the stored result keeps its inputs
    _evaluate(run, load_config(None, ["evaluate.error_images=all"]).evaluate)
    assert len(calls) == 3
    stored = json.loads((run / "out" / "eval" / "depth.json").read_text())
    assert stored["inputs"]["error_images"] == "all" and set(stored["inputs"]["depth_maps"]) == {
        "a.png.geometric.bin", "b.png.geometric.bin"}
