"""Every input layout, built from one synthetic scene, loads to the same views and points."""

from __future__ import annotations

import shutil

import numpy as np
import pycolmap
import pytest

from mvs_pipeline.config.loader import load_config
from mvs_pipeline.scene import stage as load
from mvs_pipeline.scene.workspace import detect_layout


def _make_variant(src, root, kind):
    rec = pycolmap.Reconstruction(str(src / "sparse" / "0"))
    if kind == "eth3d":
        for im in list(rec.images.values()):
            im.name = f"dslr_images_undistorted/{im.name}"
        shutil.copytree(src / "images", root / "images" / "dslr_images_undistorted")
        calib = root / "dslr_calibration_undistorted"
        calib.mkdir(parents=True)
        rec.write_text(str(calib))
        for extra in ("rigs.txt", "frames.txt"):
            (calib / extra).unlink()
        return root
    shutil.copytree(src / "images", root / "images")
    sparse = root / "sparse" if kind in ("txt_flat", "dense") else root / "sparse" / "0"
    sparse.mkdir(parents=True)
    (rec.write_text if kind.startswith("txt") else rec.write_binary)(str(sparse))
    if kind == "dense":
        (root / "stereo").mkdir()
    return root


@pytest.mark.parametrize("kind,layout", [("bin", "colmap"), ("txt_nested", "colmap"), ("txt_flat", "colmap"),
                                         ("dense", "dense"), ("eth3d", "eth3d")])
def test_layouts_from_synthetic_scene(synth_scene_factory, tmp_path, kind, layout):
    src = synth_scene_factory("object", views=6, width=160, height=120)
    ws = _make_variant(src, tmp_path / "ws", kind)
    assert detect_layout(ws).kind == layout
    scene = load.prepare_workspace(load_config(None), ws, tmp_path / "out", progress=False)
    ref = pycolmap.Reconstruction(str(src / "sparse" / "0"))
    assert scene.num_views == ref.num_reg_images() == 6
    assert len(scene.points_in_world) == ref.num_points3D()
    for view in scene.views:
        im = ref.images[view.image_id]
        assert view.name.endswith(im.name)
        np.testing.assert_allclose(np.c_[view.R, view.t], im.cam_from_world().matrix(), atol=1e-9)
        np.testing.assert_array_equal(view.K, ref.cameras[im.camera_id].calibration_matrix())
        assert view.image_path.read_bytes() == (src / "images" / im.name).read_bytes()
