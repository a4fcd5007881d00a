"""io/colmap_model.py reads what pycolmap reads from the same files (binary and text), and names the
file in one line for every damaged one."""

from __future__ import annotations

import struct

import numpy as np
import pycolmap
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.colmap_model import positions_of, read_model_files
from mvs_pipeline.io.colmap_model_types import CAMERA_MODELS, ModelCamera
from mvs_pipeline.scene.workspace import rotation_matrices
from tests.io.colmap_reference import INVALID_POINT3D_ID, keypoints_of, track_of, varied_reconstruction


@pytest.mark.parametrize("write", ["write_binary", "write_text"])
def test_reader_gives_what_pycolmap_reads(tmp_path, write):
    getattr(varied_reconstruction(), write)(str(tmp_path))
    ref = pycolmap.Reconstruction(str(tmp_path))
    model = read_model_files(tmp_path)

    assert sorted(model.cameras) == sorted(ref.cameras)
    for cam_id, cam in model.cameras.items():
        other = ref.cameras[cam_id]
        assert (cam.model_name, cam.width, cam.height) == (other.model.name, other.width, other.height)
        np.testing.assert_array_equal(cam.params, other.params)
        np.testing.assert_array_equal(cam.calibration_matrix(), other.calibration_matrix())

    images = model.images
    assert sorted(images.image_ids.tolist()) == sorted(ref.reg_image_ids()) and len(images.names) == 6
    rotations = rotation_matrices(images.quaternions)
    for i, image_id in enumerate(images.image_ids.tolist()):
        other = ref.images[image_id]
        assert (images.names[i], images.camera_ids[i]) == (other.name, other.camera_id)
        pose = other.cam_from_world()
        np.testing.assert_array_equal(images.quaternions[i], pose.rotation.quat[[3, 0, 1, 2]])  # (w, x, y, z)
        np.testing.assert_array_equal(images.translations[i], pose.translation)
        np.testing.assert_array_equal(rotations[i], pose.rotation.matrix())
        np.testing.assert_array_equal(images.keypoints[i]["xy"], keypoints_of(other))
        np.testing.assert_array_equal(images.keypoints[i]["point3D_id"].astype(np.uint64),
                                      [p.point3D_id for p in other.points2D])
    unobserved = [i for i, k in enumerate(images.keypoints) if (k["point3D_id"] == -1).any()]  # INVALID_POINT3D_ID
    assert unobserved
    assert INVALID_POINT3D_ID in [p.point3D_id for p in ref.images[images.image_ids[unobserved[0]]].points2D]

    points = model.points
    assert sorted(points.point_ids.tolist()) == sorted(ref.point3D_ids()) and len(points.point_ids) > 30
    ends = np.cumsum(points.track_lengths)
    for p, point_id in enumerate(points.point_ids.tolist()):
        other = ref.points3D[point_id]
        np.testing.assert_array_equal(points.xyz[p], other.xyz)
        np.testing.assert_array_equal(points.rgb[p], other.color)
        assert points.error[p] == other.error
        e = slice(ends[p] - points.track_lengths[p], ends[p])
        assert list(zip(points.track_image_ids[e].tolist(), points.track_point2d[e].tolist())) == track_of(other)


def test_quaternions_off_unit_length_are_normalised():
    """pycolmap would turn 2 q into a matrix with determinant 64; we use q / |q|."""
    q = np.random.default_rng(1).normal(size=(5, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    rotations = rotation_matrices(q * np.array([1, 2, 0.5, 1, 3.0])[:, None])
    np.testing.assert_allclose(rotations, rotation_matrices(q), rtol=0, atol=1e-15)
    np.testing.assert_allclose(rotations @ rotations.transpose(0, 2, 1), np.broadcast_to(np.eye(3), (5, 3, 3)),
                               rtol=0, atol=1e-15)
    for quat, rotation in zip(q, rotation_matrices(q)):
        np.testing.assert_array_equal(rotation, pycolmap.Rotation3d(quat[[1, 2, 3, 0]]).matrix())


@pytest.mark.parametrize("model_id", sorted(CAMERA_MODELS))
def test_camera_models_match_pycolmap(model_id):
    """The pinhole part and the rescaling of every camera model, against pycolmap's own."""
    name, num_params, _ = CAMERA_MODELS[model_id]
    params = np.random.default_rng(model_id).uniform(0.1, 1.0, num_params) * 100
    ref = pycolmap.Camera(model=name, width=641, height=479, params=params)
    ours = ModelCamera(1, model_id, 641, 479, tuple(params))
    assert ref.model.value == model_id and len(ref.params) == num_params
    np.testing.assert_array_equal(ours.calibration_matrix(), ref.calibration_matrix())
    ref.rescale(320, 240)
    small = ours.rescaled(320, 240)
    assert (small.width, small.height) == (ref.width, ref.height)
    np.testing.assert_array_equal(small.params, ref.params)


def test_positions_of_against_a_dict():
    rng = np.random.default_rng(3)
    for ids in (rng.permutation(np.arange(1, 501)), rng.choice(2**40, 300, replace=False)):  # dense; sparse
        queries = np.concatenate([rng.choice(ids, 1000), [-5, 0, ids.max() + 1, 2**41]])
        where = {int(i): k for k, i in enumerate(ids)}
        assert positions_of(ids, queries).tolist() == [where.get(int(q), -1) for q in queries]
    assert positions_of(np.zeros(0, np.int64), np.array([1, 2])).tolist() == [-1, -1]


# ---- damaged files: MVSError, one line, naming the file ----------------------------------------

def _assert_names(path, exc_info):
    message = str(exc_info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message, message


@pytest.mark.parametrize("name", ["cameras.bin", "images.bin", "points3D.bin"])
def test_truncated_binary_file_named(tmp_path, name):
    varied_reconstruction(num_points=10).write_binary(str(tmp_path))
    path = tmp_path / name
    data = path.read_bytes()
    cuts = sorted(set(range(0, min(len(data), 200))) | set(range(0, len(data), max(1, len(data) // 150))))
    for cut in cuts:
        path.write_bytes(data[:cut])
        with pytest.raises(MVSError) as exc_info:
            read_model_files(tmp_path)
        _assert_names(path, exc_info)
        assert "truncated" in str(exc_info.value), (cut, str(exc_info.value))
    path.write_bytes(data + b"\0" * 3)
    with pytest.raises(MVSError, match="3 unexpected bytes") as exc_info:
        read_model_files(tmp_path)
    _assert_names(path, exc_info)


def _patched(path, offset, fmt, value):
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, offset, value)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name,offset,fmt,value,needle", [
    ("cameras.bin", 0, "<Q", 10**9, "header announces 1000000000 records"),
    ("cameras.bin", 8 + 4, "<i", 99, "unknown camera model id 99"),
    ("cameras.bin", 8 + 8, "<Q", 0, "has size 0x"),
    ("images.bin", 0, "<Q", 10**12, "header announces"),
    ("images.bin", 8 + 4 + 56, "<I", 77, "uses camera_id 77, which cameras.bin does not define"),
    ("images.bin", 8 + 4 + 56 + 4, "<B", 0xFF, "not UTF-8"),
    ("points3D.bin", 8 + 43 + 8, "<I", 12345, "image_id 12345, which the images file does not define"),
    ("points3D.bin", 8 + 43 + 12, "<I", 10**6, "keypoint 1000000 of image_id"),
])
def test_corrupt_binary_file_named(tmp_path, name, offset, fmt, value, needle):
    varied_reconstruction(num_points=10).write_binary(str(tmp_path))
    _patched(tmp_path / name, offset, fmt, value)
    with pytest.raises(MVSError, match=needle) as exc_info:
        read_model_files(tmp_path)
    _assert_names(tmp_path / name, exc_info)


def test_repeated_image_id_named(tmp_path):
    varied_reconstruction(num_points=10).write_binary(str(tmp_path))
    path = tmp_path / "images.bin"
    data = path.read_bytes()
    first_id = struct.unpack_from("<I", data, 8)[0]
    name_end = data.index(b"\0", 8 + 64)   # count, then id, pose and camera_id before the first name
    second = name_end + 1 + 8 + 24 * struct.unpack_from("<Q", data, name_end + 1)[0]
    _patched(path, second, "<I", first_id)
    with pytest.raises(MVSError, match=f"image_id {first_id} is defined more than once") as exc_info:
        read_model_files(tmp_path)
    _assert_names(path, exc_info)


def _first_data_line(text: str) -> str:
    return next(line for line in text.splitlines() if line and not line.startswith("#"))


@pytest.mark.parametrize("name,damage,needle", [
    ("cameras.txt", lambda t: t.replace("SIMPLE_RADIAL 120", "SIMPLE_RADIAL x120"), "line 5 holds a non-number"),
    ("cameras.txt", lambda t: t.replace("SIMPLE_RADIAL 120", "FISHEYE_X 120"), "line 5 is not 'CAMERA_ID MODEL"),
    ("cameras.txt", lambda t: t + _first_data_line(t) + "\n", "camera_id 1 is defined more than once"),
    ("images.txt", lambda t: t.replace("\n" + _first_data_line(t), "\n7 1 0 0 x.png", 1), "not 'IMAGE_ID"),
    ("points3D.txt", lambda t: t + _first_data_line(t) + "\n", "is defined more than once"),
    ("points3D.txt", lambda t: t + "999 1 2 3 4 5 6 0.5 3 0 5\n", "not 'POINT3D_ID X Y Z"),
])
def test_damaged_text_file_named(tmp_path, name, damage, needle):
    varied_reconstruction(num_points=10).write_text(str(tmp_path))
    path = tmp_path / name
    path.write_text(damage(path.read_text()))
    with pytest.raises(MVSError, match=needle) as exc_info:
        read_model_files(tmp_path)
    _assert_names(path, exc_info)
