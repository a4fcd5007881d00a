"""benchmarks/analyse_errors.py's breakdowns against the synthetic scene's own ground truth: with the
true depth maps as "ours", every scan point seen by two views has two right views; with no depth,
none; a depth 0.5 % too far is within 1 % everywhere and within 2 cm up to 4 m."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mvs_pipeline.evaluation.mlp import load_scans
from mvs_pipeline.scene.workspace import read_scene
from tests.script_module import load_script


@pytest.fixture(scope="module")
def analyse():
    return load_script("benchmarks/analyse_errors.py")


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


def test_incidence_bins_of_true_and_empty_maps(analyse, courtyard, synth_scene_factory):
    """The courtyard's ground is seen at grazing angles, its walls more head-on: with the true maps every bin's
    twice-seen points have two right views, with empty maps none; the bins hold every twice-seen point once, and
    the coverage passed in is reported per bin."""
    scene, truth, points = courtyard
    root = Path(synth_scene_factory("courtyard", views=6, width=96, height=72, seed=3))
    seen, right, best = analyse.view_counts(scene, [t.astype(np.float32) for t in truth], truth, points, 0.02, root)
    assert (right == seen).all()   # the true maps are right wherever a view sees the point
    assert ((best >= 0) & (best <= 90)).all() and (best[seen == 0] == 90).all()
    assert (best[seen >= 2] < 90).all()
    covered = np.arange(len(points)) % 2 == 0
    rows = analyse.incidence_breakdown(scene, root, [t.astype(np.float32) for t in truth], truth, points, covered, 0.02)
    assert sum(r["share"] for r in rows) == pytest.approx((seen >= 2).mean())
    filled = [r for r in rows if r["share"] > 0]
    assert len(filled) >= 3   # head-on walls and grazing ground both
    assert all(r["two_or_more_right"] == 1.0 for r in filled)
    assert all(abs(r["covered"] - 0.5) < 0.1 for r in filled if r["share"] > 0.05)
    empty = analyse.incidence_breakdown(scene, root, [np.zeros_like(t) for t in truth], truth, points, covered, 0.02)
    assert all(r["two_or_more_right"] == 0.0 for r in empty if r["share"] > 0)
