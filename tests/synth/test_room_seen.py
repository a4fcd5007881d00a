"""room_seen: the room's images and depth maps, its scans kept to what the views see, so that
perfect depth maps (the oracle, synth/oracle.py) score ~1 where the old room's stay low."""

from __future__ import annotations

import filecmp

import numpy as np
import pytest

from mvs_pipeline.evaluation.eth3d import evaluate_eth3d
from mvs_pipeline.evaluation.mlp import load_scans
from mvs_pipeline.scene.workspace import read_scene
from mvs_pipeline.synth.oracle import oracle_cloud

SIZE = dict(views=8, width=320, height=240, seed=0)   # test_synth.py's room: made once per session


def _oracle_f1_2cm(scene_dir) -> tuple[float, float]:
    scene = read_scene(scene_dir / "images", scene_dir / "sparse" / "0")
    cloud = oracle_cloud(scene, scene_dir / "gt" / "depth", min_views=2)
    scores = evaluate_eth3d(cloud, load_scans(scene_dir / "gt" / "eth3d" / "scan_alignment.mlp"),
                            tolerances=[0.02], backend="cpu")
    return scores["f1"][0], scores["completeness"][0]


@pytest.fixture(scope="module")
def rooms(synth_scene_factory):
    return synth_scene_factory("room", **SIZE), synth_scene_factory("room_seen", **SIZE)


def test_same_views_fewer_scan_points(rooms):
    room, seen = rooms
    for folder in ("images", "gt/depth", "gt/normal"):
        for path in sorted((room / folder).iterdir()):
            assert filecmp.cmp(path, seen / folder / path.name, shallow=False), path
    old = load_scans(room / "gt" / "eth3d" / "scan_alignment.mlp")
    new = load_scans(seen / "gt" / "eth3d" / "scan_alignment.mlp")
    assert [s.name for s in old] == [s.name for s in new]
    for a, b in zip(old, new):
        np.testing.assert_array_equal(a.world_from_scan, b.world_from_scan)
        kept = {tuple(p) for p in b.points.tolist()}
        assert 0.1 * len(a.points) < len(kept) < 0.9 * len(a.points)
        assert kept <= {tuple(p) for p in a.points.tolist()}   # a subset, not new points


def test_the_oracle_scores_about_one_on_room_seen_only(rooms):
    room, seen = rooms
    f1, completeness = _oracle_f1_2cm(seen)
    assert f1 >= 0.95 and completeness >= 0.9, (f1, completeness)
    f1_old, _ = _oracle_f1_2cm(room)
    assert f1_old < 0.8, f1_old   # the ceiling and upper walls no view sees
