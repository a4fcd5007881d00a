"""Read a COLMAP binary model (cameras.bin, images.bin, points3D.bin) into arrays, each record
checked as it is read; a damaged file raises MVSError naming it and the record.

Layouts (little-endian; COLMAP's src/colmap/scene/reconstruction_io_binary.cc):
    cameras.bin  u64 n; n x (u32 camera_id, i32 model_id, u64 width, u64 height, f64 params[k(model)])
    images.bin   u64 n; n x (u32 image_id, f64 qvec[4], f64 tvec[3], u32 camera_id, name '\\0',
                             u64 m, m x (f64 x, f64 y, i64 point3D_id))
    points3D.bin u64 n; n x (u64 point3D_id, f64 xyz[3], u8 rgb[3], f64 error, u64 t, t x (u32 image_id, u32 point2D_idx))
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np

from ..errors import MVSError
from .colmap_model_types import CAMERA_MODELS, KEYPOINT, ColmapModel, ModelCamera, ModelImages, ModelPoints

# A points3D.bin record before its track: 51 bytes, packed as COLMAP writes it.
POINT_HEAD = np.dtype([("id", "<u8"), ("xyz", "<f8", 3), ("rgb", "u1", 3), ("error", "<f8"), ("length", "<u8")])


class _Reader:
    """Sequential little-endian reads of one file's bytes; a short read names the file and record."""

    def __init__(self, path: Path, what: str):
        self.path, self.what = path, what
        try:
            self.data = path.read_bytes()
        except OSError as exc:
            raise MVSError(f"{path}: cannot read the COLMAP {what} file ({exc.strerror or exc})") from exc
        self.pos = 0
        self.record = "the header"

    def truncated(self) -> MVSError:
        return MVSError(f"{self.path}: truncated COLMAP {self.what} file ({len(self.data)} bytes end inside "
                        f"{self.record})")

    def take(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise self.truncated()
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return values

    def skip(self, size: int) -> None:
        if self.pos + size > len(self.data):
            raise self.truncated()
        self.pos += size

    def name(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            self.take(f"{len(self.data) - self.pos + 1}s")  # raises: the name runs past the end
        raw = self.data[self.pos:end]
        self.pos = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MVSError(f"{self.path}: {self.record} has a name that is not UTF-8 (corrupt file)") from exc

    def finish(self, count: int) -> None:
        if self.pos != len(self.data):
            raise MVSError(f"{self.path}: {len(self.data) - self.pos} unexpected bytes after the {count} records "
                           f"its header announces (corrupt COLMAP {self.what} file)")


def _count(r: _Reader, record_size_at_least: int) -> int:
    (n,) = r.take("<Q")
    if n * record_size_at_least > len(r.data):
        raise MVSError(f"{r.path}: header announces {n} records, more than its {len(r.data)} bytes can hold "
                       f"(truncated or corrupt COLMAP {r.what} file)")
    return n


def check_pose(path: Path, image_id: int, name: str, q, t) -> None:
    if not all(math.isfinite(v) for v in (*q, *t)):
        raise MVSError(f"{path}: image '{name}' (image_id {image_id}) has a non-finite pose "
                       f"(cam_from_world q={list(q)}, t={list(t)})")
    if sum(v * v for v in q) < 1e-12:
        raise MVSError(f"{path}: image '{name}' (image_id {image_id}) has a zero rotation quaternion")


def read_cameras(path: Path) -> dict:
    r = _Reader(path, "cameras")
    cameras = {}
    for k in range(_count(r, 24)):
        r.record = f"camera record {k + 1}"
        cam_id, model_id, w, h = r.take("<IiQQ")
        if model_id not in CAMERA_MODELS:
            raise MVSError(f"{r.path}: camera_id {cam_id} has unknown camera model id {model_id} (corrupt file?)")
        params = r.take(f"<{CAMERA_MODELS[model_id][1]}d")
        if w == 0 or h == 0 or not all(math.isfinite(p) for p in params):
            raise MVSError(f"{r.path}: camera_id {cam_id} has size {w}x{h} and parameters {list(params)}")
        if cam_id in cameras:
            raise MVSError(f"{r.path}: camera_id {cam_id} is defined more than once (corrupt COLMAP model)")
        cameras[cam_id] = ModelCamera(cam_id, model_id, w, h, params)
    r.finish(len(cameras))
    return cameras


def read_images(path: Path, cameras: dict) -> ModelImages:
    """One Python step per image; its keypoints stay in the file's bytes (a view, no copy)."""
    r = _Reader(path, "images")
    n = _count(r, 4 + 56 + 4 + 1 + 8)
    ids, cams, poses, names, keypoints = [], [], [], [], []
    for k in range(n):
        r.record = f"image record {k + 1}"
        image_id, *pose, cam_id = r.take("<I7dI")
        name = r.name()
        r.record = f"image record {k + 1} ('{name}')"
        check_pose(r.path, image_id, name, pose[:4], pose[4:])
        if cam_id not in cameras:
            raise MVSError(f"{r.path}: image '{name}' (image_id {image_id}) uses camera_id {cam_id}, which "
                           f"cameras.bin does not define")
        (m,) = r.take("<Q")
        start = r.pos
        r.skip(KEYPOINT.itemsize * m)
        ids.append(image_id)
        cams.append(cam_id)
        poses.append(pose)
        names.append(name)
        keypoints.append(np.frombuffer(r.data, KEYPOINT, count=m, offset=start))
    r.finish(n)
    poses = np.array(poses, dtype=np.float64).reshape(-1, 7)
    return ModelImages(np.array(ids, np.int64), np.array(cams, np.int64), poses[:, :4].copy(), poses[:, 4:].copy(),
                       names, keypoints)


def read_points(path: Path) -> ModelPoints:
    """One Python step per point (its track length locates the next record), collecting views of
    its header and its track; each kind is then joined into one buffer and read as an array (a
    gather per track element at its own byte offset cost 0.5 s of 9 M observations)."""
    r = _Reader(path, "points3D")
    n = _count(r, POINT_HEAD.itemsize)
    data, pos, end = r.data, r.pos, len(r.data)
    view = memoryview(data)
    heads, tracks = [], []
    length_at = struct.Struct("<Q").unpack_from
    for k in range(n):
        stop = pos + POINT_HEAD.itemsize
        track_end = stop + 8 * length_at(data, stop - 8)[0] if stop <= end else end + 1
        if track_end > end:
            r.record = f"point record {k + 1}"
            raise r.truncated()
        heads.append(view[pos:stop])
        tracks.append(view[stop:track_end])
        pos = track_end
    r.pos = pos
    r.finish(n)
    head = np.frombuffer(b"".join(heads), POINT_HEAD)
    track = np.frombuffer(b"".join(tracks), "<u4").reshape(-1, 2)  # kept as it is: views, no int64 copies
    return ModelPoints(head["id"].astype(np.int64), head["xyz"].astype(np.float64), head["rgb"].astype(np.uint8),
                       head["error"].astype(np.float64), head["length"].astype(np.int64), track[:, 0], track[:, 1])


def read_binary_model(folder: Path) -> ColmapModel:
    cameras = read_cameras(folder / "cameras.bin")
    images = read_images(folder / "images.bin", cameras)
    return ColmapModel(cameras, images, read_points(folder / "points3D.bin"), points_file=folder / "points3D.bin")
