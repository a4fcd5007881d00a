"""The load stage on every input layout, rescaling, undistortion, and each bad input."""

from __future__ import annotations

import shutil

import cv2
import numpy as np
import pycolmap
import pytest

from mvs_pipeline.config.loader import load_config
from mvs_pipeline.errors import MVSError
from mvs_pipeline.scene import stage as load
from mvs_pipeline.scene.scene import check_intrinsics
from mvs_pipeline.scene.workspace import detect_layout, read_scene
from tests.tiny_model import build_tiny_reconstruction, write_colmap_project, write_images


def _cfg(*overrides):
    return load_config(None, list(overrides))


def _assert_same_geometry(scene, rec):
    assert scene.num_views == rec.num_reg_images()
    for v in scene.views:
        im = rec.images[v.image_id]
        assert v.name == im.name
        np.testing.assert_allclose(np.c_[v.R, v.t], im.cam_from_world().matrix(), atol=1e-9)
    assert len(scene.points_in_world) == rec.num_points3D()


@pytest.mark.parametrize("text,nested", [(False, True), (True, False), (True, True), (False, False)])
def test_colmap_project_layouts(tmp_path, text, nested):
    rec = write_colmap_project(tmp_path / "ws", text=text, nested=nested)
    layout = detect_layout(tmp_path / "ws")
    assert layout.kind == "colmap"
    scene = load.prepare_workspace(_cfg(), tmp_path / "ws", tmp_path / "out", progress=False)
    _assert_same_geometry(scene, rec)
    assert (tmp_path / "out" / "sparse" / "cameras.bin").is_file()
    for v in scene.views:  # identical pixels when no rescale is needed
        a = cv2.imread(str(tmp_path / "ws" / "images" / v.name))
        b = cv2.imread(str(v.image_path))
        assert np.array_equal(a, b)
    assert not (tmp_path / "out" / ".load.partial").exists()


def test_dense_workspace_input(tmp_path):
    write_colmap_project(tmp_path / "ws")
    load.prepare_workspace(_cfg(), tmp_path / "ws", tmp_path / "dense", progress=False)
    assert detect_layout(tmp_path / "dense").kind == "dense"
    scene = load.prepare_workspace(_cfg(), tmp_path / "dense", tmp_path / "out2", progress=False)
    assert scene.num_views == 5


def test_eth3d_layout(tmp_path):
    rec = build_tiny_reconstruction()
    root = tmp_path / "eth3d_scene"
    for im in list(rec.images.values()):  # ETH3D names are relative to images/
        im.name = f"dslr_images_undistorted/{im.name.replace('.png', '.JPG')}"
    write_images(rec, root / "images")
    calib = root / "dslr_calibration_undistorted"
    calib.mkdir(parents=True)
    rec.write_text(str(calib))
    for extra in ("rigs.txt", "frames.txt"):  # ETH3D ships the legacy three files only
        (calib / extra).unlink()
    layout = detect_layout(root)
    assert layout.kind == "eth3d" and layout.images_dir == root / "images"
    scene = load.prepare_workspace(_cfg(), root, tmp_path / "out", progress=False)
    assert scene.views[0].name.startswith("dslr_images_undistorted/")
    assert scene.views[0].image_path.is_file()


def test_max_image_size_rescales_images_and_intrinsics(tmp_path):
    rec = write_colmap_project(tmp_path / "ws", width=80, height=60)
    scene = load.prepare_workspace(_cfg("max_image_size=40"), tmp_path / "ws", tmp_path / "out", progress=False)
    for v in scene.views:
        assert (v.width, v.height) == (40, 30)
        assert cv2.imread(str(v.image_path)).shape[:2] == (30, 40)
    out_rec = pycolmap.Reconstruction(str(tmp_path / "out" / "sparse"))
    # a sparse point projects with the rescaled K onto its rescaled keypoint
    for im in out_rec.images.values():
        cam = out_rec.cameras[im.camera_id]
        for p2d in im.points2D[:20]:
            xyz = out_rec.points3D[p2d.point3D_id].xyz
            proj = cam.img_from_cam(im.cam_from_world() * xyz)
            np.testing.assert_allclose(proj, p2d.xy, atol=1e-6)
    assert rec.cameras[1].width == 80  # input untouched
    # the scene the stage returns (built from the model it wrote, not read back) is the one on disk
    _assert_same_scene(scene, read_scene(tmp_path / "out" / "images", tmp_path / "out" / "sparse"))


def _assert_same_scene(a, b):
    assert [(v.image_id, v.name, v.image_path, v.width, v.height) for v in a.views] == \
        [(v.image_id, v.name, v.image_path, v.width, v.height) for v in b.views]
    for va, vb in zip(a.views, b.views):
        for field in ("K", "R", "t"):
            np.testing.assert_array_equal(getattr(va, field), getattr(vb, field))
    for field in ("points_in_world", "point_colors", "track_offsets", "track_view_idx"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert (a.images_dir, a.sparse_dir) == (b.images_dir, b.sparse_dir)


def test_non_pinhole_is_undistorted(tmp_path):
    write_colmap_project(tmp_path / "ws", model="OPENCV", width=96, height=72)
    scene = load.prepare_workspace(_cfg(), tmp_path / "ws", tmp_path / "out", progress=False)
    assert {v.camera_model for v in scene.views} <= {"PINHOLE", "SIMPLE_PINHOLE"}
    for v in scene.views:
        assert cv2.imread(str(v.image_path)).shape[:2] == (v.height, v.width)


def test_rerun_skips_and_overwrite_redoes(tmp_path):
    write_colmap_project(tmp_path / "ws")
    load.prepare_workspace(_cfg(), tmp_path / "ws", tmp_path / "out", progress=False)
    marker = tmp_path / "out" / "sparse" / "cameras.bin"
    before = marker.stat().st_mtime_ns
    load.prepare_workspace(_cfg(), tmp_path / "ws", tmp_path / "out", progress=False)
    assert marker.stat().st_mtime_ns == before
    load.prepare_workspace(_cfg(), tmp_path / "ws", tmp_path / "out", overwrite=True, progress=False)
    assert marker.stat().st_mtime_ns != before


# ---- bad input ---------------------------------------------------------------------------------

def test_missing_image_named(tmp_path):
    write_colmap_project(tmp_path / "ws")
    (tmp_path / "ws" / "images" / "img_02.png").unlink()
    with pytest.raises(MVSError, match=r"img_02\.png.*not found"):
        load.prepare_workspace(_cfg(), tmp_path / "ws", tmp_path / "out", progress=False)
    assert not (tmp_path / "out" / "sparse").exists()


def test_unreadable_image_named(tmp_path):
    write_colmap_project(tmp_path / "ws")
    (tmp_path / "ws" / "images" / "img_01.png").write_bytes(b"not a png")
    with pytest.raises(MVSError, match=r"img_01\.png' is not readable"):
        load.prepare_workspace(_cfg(), tmp_path / "ws", tmp_path / "out", progress=False)


def test_image_size_mismatch_named(tmp_path):
    write_colmap_project(tmp_path / "ws")
    cv2.imwrite(str(tmp_path / "ws" / "images" / "img_03.png"), np.zeros((10, 20, 3), np.uint8))
    with pytest.raises(MVSError, match=r"img_03\.png' is 20x10 px but its camera says 64x48"):
        load.prepare_workspace(_cfg(), tmp_path / "ws", tmp_path / "out", progress=False)


def test_corrupt_model_named(tmp_path):
    write_colmap_project(tmp_path / "ws")
    images_bin = tmp_path / "ws" / "sparse" / "0" / "images.bin"
    images_bin.write_bytes(images_bin.read_bytes()[:50])
    with pytest.raises(MVSError, match=r"sparse/0/images\.bin: .*truncated"):
        load.prepare_workspace(_cfg(), tmp_path / "ws", tmp_path / "out", progress=False)


def test_empty_model(tmp_path):
    (tmp_path / "ws" / "images").mkdir(parents=True)
    sparse = tmp_path / "ws" / "sparse"
    sparse.mkdir()
    for n in ("cameras", "images", "points3D"):
        (sparse / f"{n}.txt").write_text("# empty\n")
    with pytest.raises(MVSError, match=r"sparse: COLMAP model has no registered images"):
        load.prepare_workspace(_cfg(), tmp_path / "ws", tmp_path / "out", progress=False)


def test_single_registered_image(tmp_path):
    write_colmap_project(tmp_path / "ws", num_views=1, text=True)
    with pytest.raises(MVSError, match="1 registered image.*at least 2"):
        load.prepare_workspace(_cfg(), tmp_path / "ws", tmp_path / "out", progress=False)


def test_duplicate_names(tmp_path):
    write_colmap_project(tmp_path / "ws", text=True, nested=False)
    images_txt = tmp_path / "ws" / "sparse" / "images.txt"
    images_txt.write_text(images_txt.read_text().replace("img_01.png", "img_00.png"))
    with pytest.raises(MVSError, match="duplicate image names.*img_00.png"):
        load.prepare_workspace(_cfg(), tmp_path / "ws", tmp_path / "out", progress=False)


def test_skew_and_bad_focal_rejected():
    K = np.array([[100.0, 0.5, 32], [0, 100, 24], [0, 0, 1]])
    with pytest.raises(MVSError, match="skew"):
        check_intrinsics(K, "cam 1")
    K[0, 1] = 0
    K[1, 1] = -3
    with pytest.raises(MVSError, match="non-positive focal"):
        check_intrinsics(K, "cam 1")


def test_missing_workspace_and_model(tmp_path):
    with pytest.raises(MVSError, match="workspace folder not found"):
        detect_layout(tmp_path / "nope")
    (tmp_path / "ws" / "images").mkdir(parents=True)
    with pytest.raises(MVSError, match="no COLMAP model"):
        detect_layout(tmp_path / "ws")


def test_output_must_differ_from_input(tmp_path):
    write_colmap_project(tmp_path / "ws")
    with pytest.raises(MVSError, match="must not be the input"):
        load.prepare_workspace(_cfg(), tmp_path / "ws", tmp_path / "ws", progress=False)
    assert (tmp_path / "ws" / "images" / "img_00.png").is_file()


def test_explicit_images_and_sparse(tmp_path):
    write_colmap_project(tmp_path / "ws")
    shutil.move(tmp_path / "ws" / "images", tmp_path / "pics")
    scene = load.prepare_workspace(_cfg(), tmp_path / "x", tmp_path / "out", images=tmp_path / "pics",
                     sparse=tmp_path / "ws" / "sparse" / "0", progress=False)
    assert scene.num_views == 5
    assert read_scene(tmp_path / "out" / "images", tmp_path / "out" / "sparse").num_views == 5


def test_several_models_warn_once_and_use_the_first(tmp_path, caplog):
    """A run reads the layout several times (input checks, fingerprints, the load stage): the
    warning about sparse/1 comes once, not once per reading."""
    write_colmap_project(tmp_path)
    shutil.copytree(tmp_path / "sparse" / "0", tmp_path / "sparse" / "1")
    with caplog.at_level("WARNING", logger="mvs_pipeline.scene.workspace"):
        layouts = [detect_layout(tmp_path) for _ in range(3)]
    assert all(lay.sparse_dir == tmp_path / "sparse" / "0" for lay in layouts)
    warnings = [r.getMessage() for r in caplog.records if "several models" in r.getMessage()]
    assert warnings == [f"{tmp_path / 'sparse'} holds several models (0, 1); using sparse/0"]


@pytest.mark.parametrize("write", ["write_binary", "write_text"])
def test_model_files_give_the_scene_pycolmap_gives(tmp_path, write):
    """read_scene takes the sparse points from the model files as arrays (io/colmap_model.py); the
    scene must equal the one built through pycolmap's objects, points seen by an unregistered image
    included."""
    from mvs_pipeline.scene.workspace import read_scene, scene_from_reconstruction
    rec = build_tiny_reconstruction(num_views=6, num_points=150, seed=4)
    rec.deregister_frame(rec.images[max(rec.reg_image_ids())].frame_id)
    getattr(rec, write)(str(tmp_path))
    fast = read_scene(tmp_path, tmp_path)
    slow = scene_from_reconstruction(pycolmap.Reconstruction(str(tmp_path)), tmp_path, tmp_path)
    assert [v.name for v in fast.views] == [v.name for v in slow.views] and fast.num_views == 5
    for field in ("points_in_world", "point_colors", "track_offsets", "track_view_idx"):
        a, b = getattr(fast, field), getattr(slow, field)
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert len(fast.points_in_world) > 100 and fast.track_lengths.max() <= 5
