"""Object masks at the input images' size when `max_image_size` rescaled the images (io/object_masks.py),
and the check of the mask folders before the depth stage (pipeline._check_masks_once)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from mvs_pipeline.cli import main
from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.image_size import rescaled_size
from mvs_pipeline.io.object_masks import check_mask_files, read_object_mask
from mvs_pipeline.scene.workspace import read_scene


def test_mask_of_the_input_size_is_rescaled_by_area_majority(tmp_path):
    rng = np.random.default_rng(3)
    big = (rng.random((120, 160)) < 0.5).astype(np.uint8) * 255
    big[10:50, 20:90] = 255                        # a solid block survives whole
    path = tmp_path / "a.png.png"
    cv2.imwrite(str(path), big)
    assert rescaled_size(160, 120, 80) == (80, 60)
    small = read_object_mask(path, "a.png", 80, 60)
    # independent reference: each 2x2 block of the input is inside when at least half of it is
    expected = (big.reshape(60, 2, 80, 2) != 0).mean(axis=(1, 3)) >= 0.5
    np.testing.assert_array_equal(small, expected)
    assert small[5:25, 10:45].all()
    assert read_object_mask(path, "a.png", 160, 120).sum() == (big != 0).sum()   # same size: as it is


def test_mask_of_another_shape_is_refused_naming_both_sizes(tmp_path):
    path = tmp_path / "a.png.png"
    cv2.imwrite(str(path), np.full((100, 160), 255, np.uint8))     # 16:10, not the camera's 4:3
    with pytest.raises(MVSError, match=r"a.png.png: mask of image 'a.png' is 160x100 px but the camera is 80x60 "
                                       r"\(masks must have the image's size in the prepared workspace"):
        read_object_mask(path, "a.png", 80, 60)
    with pytest.raises(MVSError, match=r"a.png.png: mask of image 'a.png' is 160x100 px but the camera is 80x60 .*"
                                       r"fusion.mask_dir\)$"):
        check_mask_files(tmp_path, [SimpleNamespace(name="a.png", width=80, height=60)], "fusion.mask_dir", False)


def test_check_mask_files_missing_unreadable_and_fine(tmp_path):
    views = [SimpleNamespace(name=n, width=80, height=60) for n in ("a.png", "b.png")]
    cv2.imwrite(str(tmp_path / "a.png.png"), np.full((120, 160), 255, np.uint8))   # input size: fine
    check_mask_files(tmp_path, views, "fusion.mask_dir", required=False)         # b.png has none: allowed
    with pytest.raises(MVSError, match=r"b.png.png: mask of image 'b.png' not found \(evaluate.mask_dir\)"):
        check_mask_files(tmp_path, views, "evaluate.mask_dir", required=True)
    (tmp_path / "b.png.png").write_bytes(b"not a png")
    with pytest.raises(MVSError, match=r"b.png.png: mask of image 'b.png' is not a readable image"):
        check_mask_files(tmp_path, views, "fusion.mask_dir", required=False)
    with pytest.raises(MVSError, match=r"fusion.mask_dir: .*nope is not a folder"):
        check_mask_files(tmp_path / "nope", views, "fusion.mask_dir", required=False)


FAST = ["--set", "backend=cpu", "--set", "patchmatch.iterations=1", "--set", "depth.geometric_passes=0",
        "--set", "depth.multi_scale=false"]


def test_run_with_max_image_size_uses_masks_of_the_input_images(synth_scene_factory, tmp_path, capsys):
    """DTU-like use: masks drawn on the 96x72 photos, the run at max_image_size 48 (48x36 images)."""
    scene = synth_scene_factory("object", views=4, width=96, height=72)
    views = read_scene(scene / "images", scene / "sparse" / "0").views
    masks = tmp_path / "masks"
    masks.mkdir()
    for v in views:   # left half masked out
        m = np.full((72, 96), 255, np.uint8)
        m[:, :48] = 0
        cv2.imwrite(str(masks / f"{v.name}.png"), m)
    out = tmp_path / "out"
    assert main(["-q", "run", str(scene), "-o", str(out), "--stages", "load,views,depth,fusion",
                 "--set", "max_image_size=48", "--set", f"fusion.mask_dir={masks}", *FAST]) == 0
    prepared = read_scene(out / "images", out / "sparse")
    assert (prepared.views[0].width, prepared.views[0].height) == (48, 36)
    counts = json.loads((out / "run.json").read_text())["counts"]
    assert counts["fusion_ignored_pixels"]["masked"] == 4 * 36 * 24   # half of every 48x36 view
    # a mask of neither size stops the run before the depth stage, naming the file
    cv2.imwrite(str(masks / f"{views[1].name}.png"), np.full((50, 50), 255, np.uint8))
    out2 = tmp_path / "out2"
    capsys.readouterr()
    assert main(["-q", "run", str(scene), "-o", str(out2), "--set", "max_image_size=48",
                 "--set", f"fusion.mask_dir={masks}", *FAST]) == 2
    err = capsys.readouterr().err
    assert f"{views[1].name}.png: mask of image '{views[1].name}' is 50x50 px but the camera is 48x36" in err
    assert not (out2 / "stereo" / "depth_maps").exists()
