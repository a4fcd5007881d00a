"""The scene's photos are read as stored, EXIF orientation ignored, as COLMAP reads them (io/photos.py)."""

from __future__ import annotations

import shutil

import cv2
import numpy as np
from PIL import Image

from mvs_pipeline.cli import main
from mvs_pipeline.io.colmap_maps import read_colmap_array
from mvs_pipeline.io.photos import read_colour, read_grey


def _jpeg(src, dst, orientation: int | None) -> None:
    """Write `src` (an image file) as a JPEG named `dst`, with an EXIF orientation tag when given."""
    im = Image.open(src).convert("RGB")
    exif = im.getexif()
    if orientation is not None:
        exif[0x0112] = orientation
    im.save(dst, format="JPEG", quality=95, exif=exif.tobytes())


def test_portrait_tag_is_not_applied(tmp_path):
    a = np.zeros((60, 100, 3), np.uint8)
    a[:, :50] = 255   # left half white, as stored
    cv2.imwrite(str(tmp_path / "a.png"), a)
    _jpeg(tmp_path / "a.png", tmp_path / "a.jpg", orientation=6)   # "rotate 90 degrees to display"
    assert cv2.imread(str(tmp_path / "a.jpg")).shape == (100, 60, 3)   # the premise: OpenCV applies the tag
    assert read_colour(tmp_path / "a.jpg").shape == (60, 100, 3)
    grey = read_grey(tmp_path / "a.jpg")
    assert grey.shape == (60, 100) and grey[:, :45].min() > 200 and grey[:, 55:].max() < 50


def test_tagged_photos_give_the_same_maps_as_untagged(synth_scene_factory, tmp_path):
    """Phone photos carry the tag; COLMAP's cameras describe the stored pixels. The same JPEG pixels
    with and without an orientation tag give byte-identical depth maps (before: the depth stage
    refused the tagged ones, '150x200 px but its camera says 200x150')."""
    scene = synth_scene_factory("object", views=4, width=96, height=72)
    runs = {}
    for tag in (None, 6):
        ws = tmp_path / f"ws{tag}"
        shutil.copytree(scene, ws)
        for png in sorted((ws / "images").glob("*.png")):
            _jpeg(png, png, tag)   # JPEG bytes under the model's .png names: OpenCV goes by content
        out = tmp_path / f"out{tag}"
        assert main(["-q", "run", str(ws), "-o", str(out), "--stages", "load,views,depth,fusion", "--set", "backend=cpu",
                     "--set", "patchmatch.iterations=1", "--set", "depth.geometric_passes=0",
                     "--set", "depth.multi_scale=false"]) == 0
        runs[tag] = out
    maps = sorted((runs[None] / "stereo" / "depth_maps").glob("*.bin"))
    assert maps
    for path in maps:
        np.testing.assert_array_equal(read_colmap_array(path), read_colmap_array(runs[6] / "stereo" / "depth_maps" / path.name))
    assert (runs[None] / "fused.ply").read_bytes() == (runs[6] / "fused.ply").read_bytes()
