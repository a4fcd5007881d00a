"""Floaters known exactly (synth/background_points.py): on a synthetic courtyard with sky, the
ground truth's own points never project onto a view's background, and points put in front of a
view's sky pixels always do."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from mvs_pipeline.scene.workspace import read_scene
from mvs_pipeline.synth.background_points import points_against_background
from mvs_pipeline.synth.oracle import gt_depth, oracle_cloud


@pytest.fixture(scope="module")
def courtyard(synth_scene_factory):
    out = synth_scene_factory("courtyard", views=6, width=96, height=72, seed=5)
    return out, read_scene(out / "images", out / "sparse" / "0")


def test_surface_points_are_never_against_the_background(courtyard):
    out, scene = courtyard
    surface = oracle_cloud(scene, out / "gt" / "depth", min_views=1)
    assert len(surface) > 0.3 * 6 * 96 * 72
    assert not points_against_background(scene.views, out / "gt" / "depth", surface).any()


def test_points_in_front_of_the_sky_are_floaters(courtyard):
    out, scene = courtyard
    view = max(scene.views, key=lambda v: (gt_depth(out / "gt" / "depth", v) <= 0).sum())   # the most sky
    sky = ~(gt_depth(out / "gt" / "depth", view) > 0)
    inner = cv2.erode(sky.astype(np.uint8), np.ones((3, 3), np.uint8), borderValue=0).astype(bool)
    ys, xs = np.nonzero(inner)
    assert len(ys) > 100   # the courtyard's views see sky above the walls
    rng = np.random.default_rng(0)
    depth = rng.uniform(1.0, 30.0, len(ys))   # any depth: the view's ray there meets nothing
    rays = np.linalg.inv(view.K) @ np.vstack([xs + 0.5, ys + 0.5, np.ones(len(ys))])
    in_world = ((rays * depth).T - view.t) @ view.R   # camera to world: R^T (x - t)
    assert points_against_background(scene.views, out / "gt" / "depth", in_world).all()
    # behind every camera or outside every image: no view sees them at all
    far = np.array([[1e6, 1e6, 1e6], [-1e6, -1e6, -1e6]])
    assert not points_against_background(scene.views, out / "gt" / "depth", far).any()
