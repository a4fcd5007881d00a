"""fusion.mask_silhouettes (fusion/silhouettes.py): with object masks, a fused point must project
inside the mask of every view that has it in front and inside the frame. Checked against a
point-by-point loop over `View.project` and, in the fusion stage, on the analytic plane scene."""

from __future__ import annotations

from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from mvs_pipeline.fusion.silhouettes import SilhouetteCheck
from mvs_pipeline.scene.scene import View
from mvs_pipeline.synth.camera import look_at
from tests.fusion.fusion_scene import arc_poses, intrinsics, make_scene
from tests.fusion.test_fusion import W, H, concat, fuse


def _views(width=40, height=30):
    poses = [look_at((0.0, 0.0, 3.0), (0.0, 0.0, 0.0), up=(0.0, -1.0, 0.0)),
             look_at((2.0, 0.5, 2.5), (0.0, 0.0, 0.0), up=(0.0, -1.0, 0.0)),
             look_at((-2.5, 0.0, 1.0), (0.0, 0.0, 0.0), up=(0.0, -1.0, 0.0))]
    K = intrinsics(width, height)
    return [View(image_id=10 + k, name=f"v{k}.png", image_path=None, camera_model="PINHOLE", width=width,
                 height=height, K=K, R=R, t=t) for k, (R, t) in enumerate(poses)]


def _reference(views, masks, xyz):
    """Point by point: inside the mask wherever a masked view sees it in front and in frame."""
    keep = np.ones(len(xyz), bool)
    for i, X in enumerate(xyz):
        for view, mask in zip(views, masks):
            if mask is None:
                continue
            uv, z = view.project(X[None].astype(np.float64))
            col, row = int(np.floor(uv[0, 0])), int(np.floor(uv[0, 1]))
            if z[0] > 0 and 0 <= col < view.width and 0 <= row < view.height and mask[row, col] == 0:
                keep[i] = False
    return keep


@pytest.fixture
def masked_views(tmp_path):
    views = _views()
    rng = np.random.default_rng(3)
    masks = []
    for k, view in enumerate(views):
        if k == 2:   # no mask file: this view constrains nothing
            masks.append(None)
            continue
        mask = (rng.random((view.height, view.width)) < 0.8).astype(np.uint8) * 255
        cv2.imwrite(str(tmp_path / f"{view.name}.png"), mask)
        masks.append(mask)
    # points around the origin, some far out of every frame, some behind camera 0 (z > 3)
    xyz = rng.normal(0.0, 0.8, (3000, 3)).astype(np.float32)
    xyz[:200, 2] = rng.uniform(3.5, 6.0, 200)
    return SimpleNamespace(views=views), masks, xyz


def test_silhouette_check_matches_a_point_by_point_loop(masked_views, tmp_path):
    scene, masks, xyz = masked_views
    check = SilhouetteCheck(scene, tmp_path)
    assert check.num_views == 2
    keep = check.inside(xyz)
    expected = _reference(scene.views, masks, xyz)
    np.testing.assert_array_equal(keep, expected)
    assert 0.2 < keep.mean() < 0.9   # the random masks drop a real share, not all or none
    # in batches smaller than the points: the same answer
    import mvs_pipeline.fusion.silhouettes as silhouettes
    saved = silhouettes.BATCH_ELEMENTS
    try:
        silhouettes.BATCH_ELEMENTS = 2 * 7
        np.testing.assert_array_equal(check.inside(xyz), expected)
    finally:
        silhouettes.BATCH_ELEMENTS = saved


@pytest.mark.gpu
def test_silhouette_check_on_the_gpu_matches_numpy(masked_views, tmp_path, cupy):
    cp = cupy
    scene, _, xyz = masked_views
    on_gpu = SilhouetteCheck(scene, tmp_path, cp).inside(cp.asarray(xyz)).get()
    np.testing.assert_array_equal(on_gpu, SilhouetteCheck(scene, tmp_path).inside(xyz))


def test_fusion_drops_points_outside_a_views_silhouette(tmp_path):
    scene, sel, _ = make_scene(tmp_path, arc_poses(4), W, H)
    masks = tmp_path / "masks"
    masks.mkdir()
    half = np.full((H, W), 255, np.uint8)
    half[:, : W // 3] = 0   # view 1's left third is "background"
    cv2.imwrite(str(masks / "view_001.png.png"), half)
    plain_stats, stats = {}, {}
    plain = fuse(scene, sel, tmp_path, stats=plain_stats, mask_dir=str(masks))
    checked = fuse(scene, sel, tmp_path, stats=stats, mask_dir=str(masks), mask_silhouettes=True)
    xyz_plain, xyz = concat(plain, "xyz"), concat(checked, "xyz")
    # what lands on view 1's background, by View.project (pixel (i, j) covers [j, j+1) x [i, i+1))
    uv, z = scene.views[1].project(xyz_plain.astype(np.float64))
    col, row = np.floor(uv[:, 0]), np.floor(uv[:, 1])
    on_background = (z > 0) & (col >= 0) & (col < W // 3) & (row >= 0) & (row < H)
    assert 0 < on_background.sum() < len(xyz_plain)
    # the same fusion, less exactly those points, in the same order
    np.testing.assert_array_equal(xyz, xyz_plain[~on_background])
    assert stats["silhouette_dropped"] == on_background.sum() and plain_stats["silhouette_dropped"] == 0
    assert stats["points"] == len(xyz) == plain_stats["points"] - on_background.sum()
    # every per-point array was filtered alike
    for key in ("normal", "color", "support", "vis"):
        assert len(concat(checked, key)) == len(xyz)
