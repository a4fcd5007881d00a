"""io/colmap_model_write.py writes the bytes pycolmap writes for the same model, so pycolmap reads
back an identical model, whatever order the arrays hold images, points and tracks in.

pycolmap writes images in the order of its RegImageIds(): by frame_id for a model read with its
frames.bin (the reference here), in images.bin's order for one read without (what we write)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pycolmap
import pytest

from mvs_pipeline.io import colmap_model_write
from mvs_pipeline.io.colmap_model import read_model_files
from mvs_pipeline.io.colmap_model_types import ModelPoints
from mvs_pipeline.io.colmap_model_write import write_binary_model
from tests.io.colmap_reference import assert_same_reconstruction, varied_reconstruction

FILES = ("cameras.bin", "images.bin", "points3D.bin")


def _pycolmap_writes(source, folder) -> None:
    """What pycolmap writes for the model in `source` (images by id: it reads source's frames)."""
    folder.mkdir()
    rec = pycolmap.Reconstruction(str(source))
    assert rec.reg_image_ids() == sorted(rec.reg_image_ids())
    rec.write_binary(str(folder))


def _shuffled(model, rng):
    """The same model with images and points (and so the tracks' places) in another order."""
    images = model.images
    i = rng.permutation(len(images.names))
    images = dataclasses.replace(images, image_ids=images.image_ids[i], camera_ids=images.camera_ids[i],
                                 quaternions=images.quaternions[i], translations=images.translations[i],
                                 names=[images.names[k] for k in i], keypoints=[images.keypoints[k] for k in i])
    pts = model.points
    p = rng.permutation(len(pts.point_ids))
    ends = np.cumsum(pts.track_lengths)
    tracks = [slice(ends[k] - pts.track_lengths[k], ends[k]) for k in p]
    points = ModelPoints(pts.point_ids[p], pts.xyz[p], pts.rgb[p], pts.error[p], pts.track_lengths[p],
                         np.concatenate([pts.track_image_ids[t] for t in tracks]),
                         np.concatenate([pts.track_point2d[t] for t in tracks]))
    return dataclasses.replace(model, images=images, points=points, points_file=None)


@pytest.mark.parametrize("shuffle", [False, True])
def test_writes_the_bytes_pycolmap_writes(tmp_path, shuffle, monkeypatch):
    monkeypatch.setattr(colmap_model_write, "CHUNK_ELEMENTS", 7)   # many batches of points3D.bin
    monkeypatch.setattr(colmap_model_write, "CHUNK_POINTS", 5)
    source, ref, ours = tmp_path / "source", tmp_path / "pycolmap", tmp_path / "ours"
    source.mkdir()
    ours.mkdir()
    varied_reconstruction(seed=2, num_points=60).write_binary(str(source))  # images in insertion order
    model = dataclasses.replace(read_model_files(source), points_file=None)  # points3D.bin written, not copied
    assert model.images.image_ids.tolist() != sorted(model.images.image_ids.tolist())
    if shuffle:
        model = _shuffled(model, np.random.default_rng(5))
    write_binary_model(ours, model)
    _pycolmap_writes(source, ref)
    for name in FILES:
        assert (ours / name).read_bytes() == (ref / name).read_bytes(), name
    assert_same_reconstruction(pycolmap.Reconstruction(str(ours)), pycolmap.Reconstruction(str(ref)))


def test_text_model_written_as_pycolmap_writes_it(tmp_path):
    """A text model (ETH3D's) read by us and written as binary: what pycolmap writes reading it."""
    (tmp_path / "text").mkdir()
    (tmp_path / "ours").mkdir()
    varied_reconstruction(seed=4).write_text(str(tmp_path / "text"))
    model = read_model_files(tmp_path / "text")
    write_binary_model(tmp_path / "ours", model)
    _pycolmap_writes(tmp_path / "text", tmp_path / "pycolmap")
    for name in FILES:
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "pycolmap" / name).read_bytes(), name


def test_model_without_points(tmp_path):
    rec = varied_reconstruction(num_points=0)
    (tmp_path / "ours").mkdir()
    rec.write_binary(str(tmp_path))
    model = read_model_files(tmp_path)
    write_binary_model(tmp_path / "ours", model)
    assert (tmp_path / "ours" / "points3D.bin").read_bytes() == bytes(8)
    assert_same_reconstruction(pycolmap.Reconstruction(str(tmp_path / "ours")), rec)


def test_points_file_copied_when_in_order(tmp_path, monkeypatch):
    """A points3D.bin in id order is copied (its bytes are what the writer would build); one out of
    order is written by id."""
    source = tmp_path / "source"
    source.mkdir()
    varied_reconstruction(seed=3).write_binary(str(source))
    model = read_model_files(source)
    assert model.points_file == source / "points3D.bin"
    monkeypatch.setattr(colmap_model_write, "points3d_bytes", None)  # the copy must not build them
    (tmp_path / "copied").mkdir()
    write_binary_model(tmp_path / "copied", model)
    assert (tmp_path / "copied" / "points3D.bin").read_bytes() == (source / "points3D.bin").read_bytes()
    monkeypatch.undo()
    shuffled = _shuffled(model, np.random.default_rng(1))
    (tmp_path / "written").mkdir()
    write_binary_model(tmp_path / "written", dataclasses.replace(shuffled, points_file=source / "points3D.bin"))
    assert (tmp_path / "written" / "points3D.bin").read_bytes() == (source / "points3D.bin").read_bytes()
