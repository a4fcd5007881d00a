"""The synthetic sparse model as a COLMAP binary model, written in time linear in its observations.

pycolmap writes the cameras, rigs, frames and images (with their keypoints); the tracks are
not handed to it: adding them one element at a time from Python cost ~4 us per observation,
and a 500-view courtyard has ~9 million observations (35 s, more than its rendering on 16
cores). Instead points3D.bin is written with NumPy and the keypoints' point3D ids are filled
into pycolmap's images.bin, giving the bytes pycolmap itself writes for the same model
(tests/synth/test_colmap_writer.py compares them):

    points3D.bin   uint64 count; per point: uint64 id, 3 float64 xyz, 3 uint8 rgb, float64 error
                   (-1: not computed), uint64 track length, (uint32 image_id, uint32 point2D_idx) each
    images.bin     per image: ..., uint64 count, (float64 x, float64 y, uint64 point3D_id) each
"""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path

import numpy as np
import pycolmap

from .camera import Camera

_POINT_HEADER = np.dtype([("id", "<u8"), ("xyz", "<f8", 3), ("rgb", "u1", 3), ("error", "<f8"),
                          ("length", "<u8")])  # packed: 51 bytes, as COLMAP writes it
_KEYPOINT = np.dtype([("x", "<f8"), ("y", "<f8"), ("point3D_id", "<u8")])


def _tracks(keypoint_point_idx: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(point, image_id, point2D_idx) of every observation, sorted by point, then image: the order
    in which COLMAP lists a track (views added in index order)."""
    views = np.concatenate([np.full(len(p), v, np.int64) for v, p in enumerate(keypoint_point_idx)] or [[]])
    points = np.concatenate(keypoint_point_idx or [[]]).astype(np.int64)
    slots = np.concatenate([np.arange(len(p)) for p in keypoint_point_idx] or [[]]).astype(np.int64)
    order = np.lexsort((views, points))
    return points[order], views[order] + 1, slots[order]


def points3d_bytes(points: np.ndarray, colors: np.ndarray, keypoint_point_idx: list[np.ndarray]) -> bytes:
    """points3D.bin of points [P, 3] (id = index + 1) with colours [P, 3] uint8, observed by view v
    at keypoint j where keypoint_point_idx[v][j] is the point's index."""
    point, image_id, slot = _tracks(keypoint_point_idx)
    lengths = np.bincount(point, minlength=len(points))
    header = np.zeros(len(points), _POINT_HEADER)
    header["id"] = np.arange(1, len(points) + 1)
    header["xyz"], header["rgb"], header["error"], header["length"] = points, colors, -1.0, lengths
    track = np.empty((len(point), 2), "<u4")
    track[:, 0], track[:, 1] = image_id, slot
    head, body = header.tobytes(), track.tobytes()
    ends = np.cumsum(lengths) * 8
    parts = [struct.pack("<Q", len(points))]
    for p in range(len(points)):   # per point, not per observation: ~75k joins for 500 views
        parts.append(head[p * 51:(p + 1) * 51])
        parts.append(body[ends[p] - lengths[p] * 8:ends[p]])
    return b"".join(parts)


def fill_point3d_ids(images_bin: bytes, keypoint_point_idx: list[np.ndarray]) -> bytes:
    """images.bin (images in id order, ids 1..V) with keypoint j of image v + 1 pointing at point
    keypoint_point_idx[v][j] + 1."""
    data = bytearray(images_bin)
    count, off = struct.unpack_from("<Q", data, 0)[0], 8
    for v in range(count):
        image_id = struct.unpack_from("<I", data, off)[0]
        off = data.index(b"\0", off + 4 + 32 + 24 + 4) + 1   # id, quaternion, translation, camera id, name
        n = struct.unpack_from("<Q", data, off)[0]
        off += 8
        keypoints = np.frombuffer(data, _KEYPOINT, n, off).copy()
        keypoints["point3D_id"] = keypoint_point_idx[image_id - 1] + 1
        data[off:off + n * _KEYPOINT.itemsize] = keypoints.tobytes()
        off += n * _KEYPOINT.itemsize
    return bytes(data)


def write_colmap_model(sparse_dir: Path, cameras: list[Camera], names: list[str], keypoints: list[np.ndarray],
                       keypoint_point_idx: list[np.ndarray], points: np.ndarray, colors: np.ndarray) -> None:
    """COLMAP binary model (one shared PINHOLE camera, image_id = view_idx + 1) into `sparse_dir`.

    Written into a temporary sibling folder; each file is then renamed into place, so a reader
    never sees a half-written file."""
    K = cameras[0].K
    rec = pycolmap.Reconstruction()
    rec.add_camera_with_trivial_rig(pycolmap.Camera(
        camera_id=1, model="PINHOLE", width=cameras[0].width, height=cameras[0].height,
        params=[K[0, 0], K[1, 1], K[0, 2], K[1, 2]]))
    for v, (cam, name) in enumerate(zip(cameras, names)):
        kp = keypoints[v] if len(keypoints[v]) else np.zeros((0, 2))
        image = pycolmap.Image(name=name, keypoints=np.ascontiguousarray(kp, dtype=np.float64),
                               camera_id=1, image_id=v + 1)
        rec.add_image_with_trivial_frame(image, pycolmap.Rigid3d(pycolmap.Rotation3d(cam.R), cam.t))
    sparse_dir = Path(sparse_dir)
    sparse_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".sparse.", dir=sparse_dir.parent) as staging:
        rec.write_binary(staging)
        images = Path(staging) / "images.bin"
        images.write_bytes(fill_point3d_ids(images.read_bytes(), keypoint_point_idx))
        (Path(staging) / "points3D.bin").write_bytes(points3d_bytes(points, colors, keypoint_point_idx))
        for name in sorted(os.listdir(staging)):
            with open(Path(staging) / name, "rb+") as f:
                os.fsync(f.fileno())
            os.replace(Path(staging) / name, sparse_dir / name)
