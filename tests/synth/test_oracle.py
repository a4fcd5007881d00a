"""The oracle cloud (synth/oracle.py): a synthetic scene's ground-truth depth back-projected is
accurate against the scene's independent laser scans (ray cast from the scanners, not the views),
and requiring two views keeps a subset."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.evaluation.eth3d import evaluate_eth3d
from mvs_pipeline.evaluation.mlp import load_scans
from mvs_pipeline.scene.workspace import read_scene
from mvs_pipeline.synth.oracle import oracle_cloud


@pytest.fixture(scope="module")
def room(synth_scene_factory):
    out = synth_scene_factory("room", views=6, width=96, height=72, seed=3)
    return out, read_scene(out / "images", out / "sparse" / "0")


def test_the_views_ground_truth_lies_on_the_scanned_surface(room):
    out, scene = room
    every = oracle_cloud(scene, out / "gt" / "depth", min_views=1)
    assert len(every) > 0.9 * 6 * 96 * 72   # a room: nearly every pixel has a surface
    scores = evaluate_eth3d(every, load_scans(out / "gt" / "eth3d" / "scan_alignment.mlp"),
                            tolerances=[0.01, 0.02], backend="cpu")
    assert scores["accuracy"][0] > 0.99, scores["accuracy"]   # a wrong pose or K would miss by metres
    # 6 views turning 22 degrees each see a part of the room: the scans cover more
    assert 0.05 < scores["completeness"][1] < 0.6, scores["completeness"]
    stereo = oracle_cloud(scene, out / "gt" / "depth", min_views=2)
    assert 0.3 * len(every) < len(stereo) < len(every)
    # a subset: every point seen by two views is one of the back-projected pixels
    assert len(np.unique(np.concatenate([every, stereo]), axis=0)) == len(np.unique(every, axis=0))


def test_max_points_takes_every_kth_pixel(room):
    out, scene = room
    few = oracle_cloud(scene, out / "gt" / "depth", min_views=1, max_points=6 * 96 * 72 // 4)
    every = oracle_cloud(scene, out / "gt" / "depth", min_views=1)
    assert len(every) / 5 < len(few) <= len(every) / 4 + 6 * (96 + 72)


def test_a_missing_depth_map_names_the_file(room, tmp_path):
    out, scene = room
    with pytest.raises(MVSError, match="view_000.npy: ground-truth depth of image 'view_000.png'"):
        oracle_cloud(scene, tmp_path)
