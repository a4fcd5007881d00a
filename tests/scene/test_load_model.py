"""The model the load stage writes into OUT/sparse (io/colmap_model_write.py, no pycolmap): what
pycolmap wrote for the same model before, and images in the order io/vis_file.py relies on."""

from __future__ import annotations

import numpy as np
import pycolmap
import pytest

from mvs_pipeline.config.loader import load_config
from mvs_pipeline.io.vis_file import colmap_image_indices
from mvs_pipeline.scene import stage as load
from mvs_pipeline.scene.workspace import read_scene, scene_from_reconstruction
from tests.tiny_model import build_tiny_reconstruction, write_colmap_project, write_images


@pytest.mark.parametrize("model", ["PINHOLE", "SIMPLE_PINHOLE"])
def test_rescaled_model_is_what_pycolmap_writes(tmp_path, model):
    """max_image_size 50 makes 80x60 images 50x38 (x and y scale differently: SIMPLE_PINHOLE's one
    focal length takes their mean). The reference is pycolmap's model of the input with its
    cameras rescaled and its keypoints scaled, as the stage made it through pycolmap."""
    write_colmap_project(tmp_path / "ws", width=80, height=60, model=model)
    load.prepare_workspace(load_config(None, ["max_image_size=50"]), tmp_path / "ws", tmp_path / "out",
                           progress=False)
    ref = pycolmap.Reconstruction(str(tmp_path / "ws" / "sparse" / "0"))
    for image in ref.images.values():
        for p in image.points2D:
            p.xy = np.asarray(p.xy) * np.array([50 / 80, 38 / 60])
    for cam in ref.cameras.values():
        cam.rescale(50, 38)
    (tmp_path / "ref").mkdir()
    ref.write_binary(str(tmp_path / "ref"))
    for name in ("cameras.bin", "images.bin", "points3D.bin"):
        assert (tmp_path / "out" / "sparse" / name).read_bytes() == (tmp_path / "ref" / name).read_bytes(), name


def test_prepared_images_are_in_image_id_order(tmp_path):
    """An input whose images.bin lists images out of id order (no frames.bin: COLMAP then registers
    them in file order): OUT/sparse lists them by id, so RegImageIds() of every COLMAP version is
    ascending, as colmap_image_indices (fused.ply.vis) assumes."""
    tiny = build_tiny_reconstruction(num_views=5)
    rec = pycolmap.Reconstruction()
    rec.add_camera_with_trivial_rig(tiny.cameras[1])
    for image_id in (4, 2, 5, 1, 3):
        im = tiny.images[image_id]
        rec.add_image_with_trivial_frame(pycolmap.Image(name=im.name, keypoints=np.array([p.xy for p in im.points2D]),
                                                        camera_id=1, image_id=image_id), im.cam_from_world())
    for point in tiny.points3D.values():
        rec.add_point3D(point.xyz, point.track, point.color)
    sparse = tmp_path / "ws" / "sparse"
    sparse.mkdir(parents=True)
    rec.write_binary(str(sparse))
    for extra in ("rigs.bin", "frames.bin"):
        (sparse / extra).unlink()
    write_images(rec, tmp_path / "ws" / "images")
    assert pycolmap.Reconstruction(str(sparse)).reg_image_ids() == [4, 2, 5, 1, 3]

    scene = load.prepare_workspace(load_config(None, []), tmp_path / "ws", tmp_path / "out", progress=False)
    reg = pycolmap.Reconstruction(str(tmp_path / "out" / "sparse")).reg_image_ids()
    assert reg == [1, 2, 3, 4, 5]
    assert colmap_image_indices([v.image_id for v in scene.views]).tolist() == [reg.index(v.image_id) for v in scene.views]
    reference = scene_from_reconstruction(pycolmap.Reconstruction(str(tmp_path / "out" / "sparse")),
                                          tmp_path / "out" / "images", tmp_path / "out" / "sparse")
    ours = read_scene(tmp_path / "out" / "images", tmp_path / "out" / "sparse")
    for a, b in zip(ours.views, reference.views):
        assert (a.image_id, a.name, a.camera_model, a.width, a.height) == (b.image_id, b.name, b.camera_model,
                                                                           b.width, b.height)
        np.testing.assert_array_equal(a.K, b.K)
        np.testing.assert_allclose(np.c_[a.R, a.t], np.c_[b.R, b.t], rtol=0, atol=1e-15)
    for field in ("points_in_world", "point_colors", "track_offsets", "track_view_idx"):
        np.testing.assert_array_equal(getattr(ours, field), getattr(reference, field))
