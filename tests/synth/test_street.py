"""The street scene grows with the views: its length does, each surface point is seen by a
bounded number of views (a survey's overlap, not every view's)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mvs_pipeline.evaluation.mlp import load_scans
from mvs_pipeline.scene.workspace import read_scene
from mvs_pipeline.synth import generate_scene
from mvs_pipeline.synth.scenes import build_scene
from mvs_pipeline.synth.seen_scans import views_seeing

SIZE = dict(width=96, height=72)
END = 4.0  # m at each end of the cameras' stretch left out of the overlap count


@pytest.fixture(scope="module")
def streets(tmp_path_factory):
    """{views: scene folder} for 100 and 300 views (the work per view is timed by
    benchmarks/bench_synth.py: tests assert no timings)."""
    root = tmp_path_factory.mktemp("street")
    return {views: generate_scene("street", root / f"v{views}", views=views, seed=4, workers=1, **SIZE)
            for views in (100, 300)}


def test_the_street_grows_with_the_views(streets):
    lengths = {}
    for views, path in streets.items():
        scene = read_scene(path / "images", path / "sparse" / "0")
        centers = np.array([-v.R.T @ v.t for v in scene.views])
        lengths[views] = np.ptp(centers[:, 0])
        meta = json.loads((path / "gt" / "scene.json").read_text())
        assert meta["scans"]["count"] == len(build_scene("street", views, 96, 72, 4).scanners)
    assert 2.5 < lengths[300] / lengths[100] < 3.5, lengths   # 0.8 m of street per 6 views
    assert len(json.loads((streets[300] / "gt" / "scene.json").read_text())["scans"]["points"]) > \
        len(json.loads((streets[100] / "gt" / "scene.json").read_text())["scans"]["points"])


@pytest.mark.parametrize("views", [100, 300])
def test_each_surface_point_is_seen_by_tens_of_views(streets, views):
    """Counted on the ground truth (the scan points, all of them seen by >= 2 views; away from
    the stretch's ends, where a survey's overlap thins out) and on the sparse model's tracks:
    the median does not grow with the views."""
    path = streets[views]
    spec = build_scene("street", views, 96, 72, 4)
    scans = load_scans(path / "gt" / "eth3d" / "scan_alignment.mlp")
    world = np.concatenate([s.points @ s.world_from_scan[:3, :3].T + s.world_from_scan[:3, 3] for s in scans])
    world = world[np.random.default_rng(0).choice(len(world), 20000, replace=False)]
    seen = views_seeing(spec.cameras, spec.mesh.raycasting_scene(), world)
    assert seen.min() >= 2   # scans_seen_by
    x = np.array([c.center[0] for c in spec.cameras])
    seen = seen[(world[:, 0] > x.min() + END) & (world[:, 0] < x.max() - END)]
    assert 10 <= np.median(seen) <= 30, np.median(seen)
    assert np.percentile(seen, 95) <= 60
    tracks = json.loads((path / "gt" / "scene.json").read_text())["sparse"]["mean_track_length"]
    assert 5 <= tracks <= 30, tracks
