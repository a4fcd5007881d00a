"""benchmarks/analyse_errors.py's breakdowns against the synthetic scene's own ground truth: with the
true depth maps as "ours", every scan point seen by two views has two right views; with no depth,
none; a depth 0.5 % too far is within 1 % everywhere and within 2 cm up to 4 m."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from mvs_pipeline.evaluation.mlp import load_scans
from mvs_pipeline.scene.workspace import read_scene

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def analyse():
    spec = importlib.util.spec_from_file_location("analyse_errors", REPO / "benchmarks" / "analyse_errors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def courtyard(synth_scene_factory):
    root = Path(synth_scene_factory("courtyard", views=6, width=96, height=72, seed=3))
    scene = read_scene(root / "images", root / "sparse" / "0")
    truth = [np.load(root / "gt" / "depth" / f"{Path(v.name).stem}.npy").astype(np.float64) for v in scene.views]
    points = np.concatenate([s.points_in_world() for s in load_scans(root / "gt" / "eth3d" / "scan_alignment.mlp")])
    points = points[np.random.default_rng(0).choice(len(points), 20_000, replace=False)]
    return scene, truth, points


def test_true_maps_have_every_twice_seen_point_right_and_empty_maps_none(analyse, courtyard):
    scene, truth, points = courtyard
    right = analyse.classify_scan_points(scene, [t.astype(np.float32) for t in truth], truth, points, 0.02)
    assert 0.05 < right["seen_by_fewer_than_2"] < 0.95   # the scans reach beyond what the cameras see
    assert right["no_view_right"] == right["one_view_right"] == 0.0
    assert right["two_or_more_right"] == pytest.approx(1.0 - right["seen_by_fewer_than_2"])
    empty = analyse.classify_scan_points(scene, [np.zeros_like(t) for t in truth], truth, points, 0.02)
    assert empty["seen_by_fewer_than_2"] == right["seen_by_fewer_than_2"]
    assert empty["no_view_right"] == pytest.approx(right["two_or_more_right"])
    assert empty["one_view_right"] == empty["two_or_more_right"] == 0.0


def test_depth_bins_of_a_map_half_a_percent_too_far(analyse, courtyard):
    _, truth, _ = courtyard
    rows = analyse.depth_breakdown([np.where(t > 0, t * 1.005, 0) for t in truth], truth, 0.02)
    assert sum(r["pixels"] for r in rows) == sum(int((np.isfinite(t) & (t > 0)).sum()) for t in truth)
    for r in rows:
        assert r["with_depth"] == 1.0 and r["within_1pct"] == 1.0
        assert r["signed_rel_median"] == pytest.approx(0.005, abs=1e-6)
        hi = float(r["depth"].split("-")[1].split()[0]) if "-" in r["depth"] else np.inf
        if hi <= 4.0:   # 0.5 % of at most 4 m is at most 2 cm
            assert r["within_tol"] == 1.0
        lo = float(r["depth"].lstrip(">").split("-")[0].split()[0])
        if lo >= 4.0:
            assert r["within_tol"] == 0.0
