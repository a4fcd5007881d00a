"""View selection and depth ranges against exact ground truth on the synthetic scenes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mvs_pipeline.config.loader import load_config
from mvs_pipeline.scene.workspace import read_scene
from mvs_pipeline.views.selection import select_views


@pytest.fixture(params=["object", "courtyard", "room"])
def scene_dir(request, synth_scene_factory) -> Path:
    return synth_scene_factory(request.param, views=10, seed=1)


def _gt_depth(scene_dir: Path, view) -> np.ndarray:
    return np.load(scene_dir / "gt" / "depth" / f"{Path(view.name).stem}.npy")


def _visible_fraction(scene_dir, ref, src) -> float:
    """Fraction of the reference's surface pixels that the source sees (GT depth reprojection)."""
    gt = _gt_depth(scene_dir, ref)
    rows, cols = np.nonzero(gt > 0)
    z = gt[rows, cols]
    cam = np.linalg.inv(ref.K) @ np.stack([cols + 0.5, rows + 0.5, np.ones_like(z)]) * z
    world = (ref.R.T @ (cam - ref.t[:, None])).T
    uv, zs = src.project(world)
    px = np.floor(uv).astype(int)
    inside = (zs > 0) & (px[:, 0] >= 0) & (px[:, 0] < src.width) & (px[:, 1] >= 0) & (px[:, 1] < src.height)
    gt_src = _gt_depth(scene_dir, src)
    k = np.flatnonzero(inside)
    seen = np.abs(gt_src[px[k, 1], px[k, 0]] - zs[k]) < 0.01 * zs[k]
    return seen.sum() / len(z)


def test_depth_range_contains_gt_depths(scene_dir):
    scene = read_scene(scene_dir / "images", scene_dir / "sparse" / "0")
    sel = select_views(scene, load_config(None).views)
    for i, view in enumerate(scene.views):
        z = _gt_depth(scene_dir, view)
        z = z[z > 0]
        lo, hi = sel.depth_ranges[i]
        assert np.mean((z >= lo) & (z <= hi)) >= 0.99, view.name


def test_chosen_neighbours_overlap_the_reference(scene_dir):
    scene = read_scene(scene_dir / "images", scene_dir / "sparse" / "0")
    sel = select_views(scene, load_config(None, ["views.num_neighbors=4"]).views)
    chosen_overlap, other_overlap = [], []
    for i, ref in enumerate(scene.views):
        assert len(sel.neighbors[i]) == 4
        fractions = {j: _visible_fraction(scene_dir, ref, scene.views[j]) for j in range(scene.num_views) if j != i}
        assert min(fractions[j] for j in sel.neighbors[i]) > 0.05, ref.name  # every source sees some of it
        assert fractions[sel.neighbors[i][0]] >= 0.5 * max(fractions.values()), ref.name  # best is near the best
        chosen_overlap += [fractions[j] for j in sel.neighbors[i]]
        other_overlap += [f for j, f in fractions.items() if j not in sel.neighbors[i]]
    assert np.mean(chosen_overlap) > 1.5 * np.mean(other_overlap)
