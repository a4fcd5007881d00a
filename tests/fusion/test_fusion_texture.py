"""fusion.min_texture: pixels whose neighbourhood has no texture are neither references nor support."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from mvs_pipeline.fusion.inputs import TEXTURE_WINDOW, local_grey_std
from mvs_pipeline.fusion.params import FusionConfig
from mvs_pipeline.fusion.stage import fuse_chunks
from tests.fusion.fusion_scene import arc_poses, make_scene

W, H = 64, 48


def test_local_grey_std_matches_a_window_loop():
    rng = np.random.default_rng(3)
    bgr = rng.integers(0, 256, (17, 23, 3), dtype=np.uint8)
    bgr[4:12, 6:15] = (40, 90, 200)  # a flat block: std 0 where the window stays inside it
    grey = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY).astype(np.float64)
    r = TEXTURE_WINDOW // 2
    padded = np.pad(grey, r, mode="reflect")  # NumPy's reflect = OpenCV's default BORDER_REFLECT_101
    expected = np.array([[padded[y:y + 2 * r + 1, x:x + 2 * r + 1].std() for x in range(23)] for y in range(17)])
    got = local_grey_std(bgr)
    assert got.dtype == np.float32 and got.shape == (17, 23)
    np.testing.assert_allclose(got, expected, atol=2e-3)
    small = local_grey_std(bgr, window=3)
    assert small[8, 10] == 0.0 and small[0, 0] > 0  # inside the block vs random pixels


def _fuse(scene, sel, root, **cfg):
    stats = {}
    rules = dict(max_reproj_error=1.0, max_depth_diff=0.01, max_normal_angle=10.0, min_consistent=1)
    chunks = list(fuse_chunks(FusionConfig(**{**rules, **cfg}), scene, sel, root / "stereo", "cpu", progress=False,
                              stats=stats))
    return chunks, stats


def test_min_texture_blocks_flat_pixels_as_reference_and_as_support(tmp_path):
    scene, sel, _ = make_scene(tmp_path, arc_poses(4), W, H)
    path = tmp_path / "images" / "view_000.png"
    bgr = cv2.imread(str(path))
    bgr[:, : W // 2] = (120, 160, 210)  # sky-like: no texture in the left half of view 0
    cv2.imwrite(str(path), bgr)
    flat = local_grey_std(bgr) < 2.0
    assert flat[:, : W // 2 - TEXTURE_WINDOW // 2].all() and not flat[:, W // 2 + TEXTURE_WINDOW // 2:].any()

    before, _ = _fuse(scene, sel, tmp_path, min_texture=0.0)
    assert (before[0].pixel % W < W // 2).sum() > 100  # without the check the flat half is fused
    default, _ = _fuse(scene, sel, tmp_path)   # the default, 1 grey level, blocks it too (its std is 0)
    assert not (local_grey_std(bgr) < 1.0).ravel()[default[0].pixel].any()
    assert (default[0].pixel % W < W // 2 - TEXTURE_WINDOW // 2).sum() == 0

    chunks, stats = _fuse(scene, sel, tmp_path, min_texture=2.0)
    ref0 = chunks[0]
    assert ref0.view_idx == 0 and len(ref0.pixel) > 0
    assert not flat.ravel()[ref0.pixel].any()  # no reference pixel from the flat part
    assert stats["textureless_pixels"] == int(flat.sum())  # the other views are random texture
    view0 = scene.views[0]
    for c in chunks[1:]:
        k = c.neighbors.index(0)
        uses0 = (c.vis >> k) & 1 == 1
        uv, _ = view0.project(c.xyz[uses0].astype(np.float64))
        px = np.clip(np.floor(uv).astype(int), 0, [W - 1, H - 1])
        assert not flat[px[:, 1], px[:, 0]].any()  # view 0 supports points only where it has texture


@pytest.mark.parametrize("value", [-1.0, 256.0])
def test_min_texture_out_of_range_is_refused(value, tmp_path):
    from mvs_pipeline.config.loader import load_config
    from mvs_pipeline.errors import MVSError

    with pytest.raises(MVSError, match="min_texture"):
        load_config(None, [f"fusion.min_texture={value}"])
