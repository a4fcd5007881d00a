"""The model the load stage reads and writes without pycolmap: OUT/sparse is what pycolmap wrote
for the same model before, its images in the order io/vis_file.py relies on, and the Scene's
tracks are the same whatever order the files hold points and tracks in."""

from __future__ import annotations

import dataclasses

import numpy as np
import pycolmap
import pytest

from mvs_pipeline.config.loader import load_config
from mvs_pipeline.io.colmap_model import read_model_files
from mvs_pipeline.io.colmap_model_types import ModelPoints
from mvs_pipeline.io.vis_file import colmap_image_indices
from mvs_pipeline.scene import stage as load
from mvs_pipeline.scene.workspace import read_scene, scene_from_model, scene_from_reconstruction
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
    indices = colmap_image_indices([v.image_id for v in scene.views])
    assert indices.tolist() == [reg.index(v.image_id) for v in scene.views]
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


def _tracks_by_hand(model, views):
    """Per point by id: the sorted view_idx set of its registered observations (points none sees left out)."""
    view_of = {v.image_id: i for i, v in enumerate(views)}
    ends = np.cumsum(model.points.track_lengths)
    rows = []
    for p in np.argsort(model.points.point_ids):
        track = model.points.track_image_ids[ends[p] - model.points.track_lengths[p]:ends[p]]
        seen = sorted({view_of[int(i)] for i in track if int(i) in view_of})
        if seen:
            rows.append((model.points.xyz[p], seen))
    return rows


def _reordered(points: ModelPoints, rng) -> ModelPoints:
    """Points in another order, each track reversed and its first observation repeated."""
    ends = np.cumsum(points.track_lengths)
    order = rng.permutation(len(points.point_ids))
    tracks = [np.arange(ends[p] - points.track_lengths[p], ends[p])[::-1] for p in order]
    tracks = [np.concatenate([t, t[:1]]) for t in tracks]
    every = np.concatenate(tracks)
    return ModelPoints(points.point_ids[order], points.xyz[order], points.rgb[order], points.error[order],
                       np.array([len(t) for t in tracks]), points.track_image_ids[every], points.track_point2d[every])


@pytest.mark.parametrize("drop_image", [False, True])
def test_tracks_in_any_order_give_the_same_scene(tmp_path, drop_image):
    """COLMAP's files (points by id, tracks by image) need no sort; shuffled points, reversed tracks
    and repeated observations go through the sort; both give the tracks a loop gives. With images
    left out of the model their observations are dropped, and the points only they saw."""
    rec = build_tiny_reconstruction(num_views=6, num_points=150, seed=4)
    rec.write_binary(str(tmp_path))
    model = read_model_files(tmp_path)
    if drop_image:   # images 5 and 6 not registered; the first three points seen by them only
        image_ids = model.points.track_image_ids.astype(np.int64)
        image_ids[:np.sum(model.points.track_lengths[:3])] = 5 + np.arange(np.sum(model.points.track_lengths[:3])) % 2
        model = dataclasses.replace(model, points=dataclasses.replace(model.points, track_image_ids=image_ids))
        keep = model.images.image_ids < 5
        images = model.images
        model = dataclasses.replace(model, images=dataclasses.replace(
            images, image_ids=images.image_ids[keep], camera_ids=images.camera_ids[keep],
            quaternions=images.quaternions[keep], translations=images.translations[keep],
            names=[n for n, k in zip(images.names, keep) if k],
            keypoints=[kp for kp, k in zip(images.keypoints, keep) if k]))
    in_order = scene_from_model(model, tmp_path, tmp_path)
    shuffled = scene_from_model(dataclasses.replace(model, points=_reordered(model.points, np.random.default_rng(0))),
                                tmp_path, tmp_path)
    expected = _tracks_by_hand(model, in_order.views)
    assert len(expected) == len(model.points.point_ids) - 3 * drop_image
    for scene in (in_order, shuffled):
        assert len(scene.points_in_world) == len(expected)
        tracks = np.split(scene.track_view_idx, scene.track_offsets[1:-1])
        for (xyz, seen), point, track in zip(expected, scene.points_in_world, tracks):
            np.testing.assert_array_equal(point, xyz)
            assert track.tolist() == seen
    assert scene.track_view_idx.dtype == np.int32 and scene.track_offsets.dtype == np.int64
