"""Fusion's floater filters: a point that a neighbour saw a surface through is dropped when more
than `max_free_space_violations` neighbours did, and one without `min_triangulation_angle` of
parallax (CPU backend; the GPU kernel is compared with this twin in test_fusion_gpu.py)."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.io.colmap_maps import write_colmap_array
from tests.fusion.fusion_scene import make_scene
from tests.fusion.test_fusion import H, W, concat, depth_path, fuse, identical_poses

PATCH = (slice(10, 30), slice(20, 44))  # rows, cols of the floating patch


def floater_scene(tmp_path):
    """Four views from one pose above the plane z = 0. Views 0-2 agree on a patch floating at half
    the plane's depth; view 3 sees the plane through it: one free-space violation per patch point."""
    scene, sel, truth = make_scene(tmp_path, identical_poses(4), W, H)
    for k in (0, 1, 2):
        depth = truth["depth"][k].copy()
        depth[PATCH] *= 0.5
        write_colmap_array(depth_path(tmp_path, k), depth)
    return scene, sel


def patch_size():
    return (PATCH[0].stop - PATCH[0].start) * (PATCH[1].stop - PATCH[1].start)


@pytest.mark.parametrize("limit", [None, 1])
def test_floater_kept_without_check_or_with_enough_allowed(tmp_path, limit):
    scene, sel = floater_scene(tmp_path)
    chunks = fuse(scene, sel, tmp_path, max_free_space_violations=limit)
    xyz = concat(chunks, "xyz")
    assert len(xyz) == W * H                                   # view 0 emits every pixel
    assert (np.abs(xyz[:, 2]) > 0.5).sum() == patch_size()     # the patch floats 1.5 m above the plane
    assert (concat(chunks, "support")[np.abs(xyz[:, 2]) > 0.5] == 3).all()


def test_floater_dropped_and_surface_kept(tmp_path):
    scene, sel = floater_scene(tmp_path)
    chunks = fuse(scene, sel, tmp_path, max_free_space_violations=0)
    xyz = concat(chunks, "xyz")
    assert len(xyz) == W * H - patch_size()   # views 1 and 2 do not emit the patch either
    assert np.abs(xyz[:, 2]).max() < 1e-5     # only the plane remains


def test_points_behind_a_neighbours_surface_are_not_violations(tmp_path):
    """Five views: 0-2 float the patch, 3 and 4 see the plane. As references, 3 and 4 see the plane
    behind the others' patch: occluded there, not a floater, so with no violation allowed the patch
    area is still covered, by plane points from view 3 (support 2: views 3 and 4)."""
    scene, sel, truth = make_scene(tmp_path, identical_poses(5), W, H)
    for k in (0, 1, 2):
        depth = truth["depth"][k].copy()
        depth[PATCH] *= 0.5
        write_colmap_array(depth_path(tmp_path, k), depth)
    chunks = fuse(scene, sel, tmp_path, min_consistent=1, max_free_space_violations=0)
    xyz = concat(chunks, "xyz")
    assert len(xyz) == W * H
    assert np.abs(xyz[:, 2]).max() < 1e-5
    from_view_3 = [c for c in chunks if c.view_idx == 3]
    assert sum(len(c.pixel) for c in from_view_3) == patch_size()
    assert (from_view_3[0].support == 2).all()


def test_margin_decides_what_is_in_front(tmp_path):
    """The patch lies at 0.5 of view 3's depth: 'in front' with margin 0.45, not with 0.55."""
    scene, sel = floater_scene(tmp_path)
    strict = concat(fuse(scene, sel, tmp_path, max_free_space_violations=0, free_space_margin=0.45), "xyz")
    loose = concat(fuse(scene, sel, tmp_path, max_free_space_violations=0, free_space_margin=0.55), "xyz")
    assert len(strict) == W * H - patch_size()
    assert len(loose) == W * H


def test_triangulation_angle(tmp_path):
    """Neighbours 0.5 m to either side of the reference (view 0), 3 m above the plane: their rays
    meet view 0's at about 9.3-9.5 degrees, each other's at about 19. Identical poses (no parallax)
    fail any angle above 0."""
    from tests.fusion.test_fusion import look_at

    def emitted_by(chunks, view_idx):
        return sum(len(c.pixel) for c in chunks if c.view_idx == view_idx)

    poses = [look_at((x, 0.0, 3.0), (x, 0.0, 0.0), up=(0.0, -1.0, 0.0)) for x in (0.0, 0.5, -0.5)]
    root = tmp_path / "baseline"
    scene, sel, _ = make_scene(root, poses, W, H)
    unchecked = emitted_by(fuse(scene, sel, root), 0)
    assert unchecked > 0.6 * W * H
    assert emitted_by(fuse(scene, sel, root, min_triangulation_angle=8.0), 0) == unchecked
    wide = fuse(scene, sel, root, min_triangulation_angle=10.0)
    assert emitted_by(wide, 0) == 0                  # 9.5 degrees at most: too narrow
    assert emitted_by(wide, 1) > 0.6 * W * H         # views 1 and 2 still triangulate (19 degrees)
    assert len(concat(fuse(scene, sel, root, min_triangulation_angle=20.0), "pixel")) == 0
    root = tmp_path / "same"
    scene, sel, _ = make_scene(root, identical_poses(3), W, H)
    assert len(concat(fuse(scene, sel, root, min_triangulation_angle=0.0), "pixel")) == W * H
    assert len(concat(fuse(scene, sel, root, min_triangulation_angle=0.5), "pixel")) == 0
