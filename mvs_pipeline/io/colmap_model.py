"""Structural check of a COLMAP sparse model's files before pycolmap reads them.

pycolmap reports a damaged model with a C++ message about the folder (`unordered_map::at`,
`[reconstruction.cc:535] Check failed: ...`), or not at all: a truncated cameras.bin reads as
cameras with zero focal length. `check_model_files` walks cameras, images and points3D (.bin or
.txt) the way COLMAP's readers do and raises MVSError naming the file, the record and what is
wrong: truncation, trailing bytes, an unknown camera model, a non-finite camera pose, or a
reference to a camera, image or keypoint that does not exist.

Binary layouts (little-endian; COLMAP's src/colmap/scene/reconstruction_io.cc):
    cameras.bin  u64 n; n x (u32 camera_id, i32 model_id, u64 width, u64 height, f64 params[k(model)])
    images.bin   u64 n; n x (u32 image_id, f64 qvec[4], f64 tvec[3], u32 camera_id, name '\\0',
                             u64 m, m x (f64 x, f64 y, i64 point3D_id))
    points3D.bin u64 n; n x (u64 point3D_id, f64 xyz[3], u8 rgb[3], f64 error, u64 t, t x (u32 image_id, u32 point2D_idx))
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import MVSError

# COLMAP camera models: id -> (name, number of parameters)
CAMERA_MODELS = {0: ("SIMPLE_PINHOLE", 3), 1: ("PINHOLE", 4), 2: ("SIMPLE_RADIAL", 4), 3: ("RADIAL", 5),
                 4: ("OPENCV", 8), 5: ("OPENCV_FISHEYE", 8), 6: ("FULL_OPENCV", 12), 7: ("FOV", 5),
                 8: ("SIMPLE_RADIAL_FISHEYE", 4), 9: ("RADIAL_FISHEYE", 5), 10: ("THIN_PRISM_FISHEYE", 12),
                 11: ("RAD_TAN_THIN_PRISM_FISHEYE", 16)}
_PARAMS_BY_NAME = {name: k for name, k in CAMERA_MODELS.values()}


@dataclass
class ModelPoints:
    """The sparse points of a model as flat arrays (in file order), read once for the check and
    for the Scene: a per-point loop through pycolmap took ~5 s at 200 views with long tracks."""
    point_ids: np.ndarray  # [P] int64
    xyz: np.ndarray  # [P, 3] float64
    rgb: np.ndarray  # [P, 3] uint8
    track_lengths: np.ndarray  # [P] int64
    track_image_ids: np.ndarray  # [T] int64, point p's elements after sum(track_lengths[:p])
    track_point2d: np.ndarray  # [T] int64, keypoint index of each element

    @staticmethod
    def from_lists(point_ids, xyz, rgb, image_ids: list, point2d: list) -> "ModelPoints":
        """From per-point lists (the text reader, in-memory pycolmap models)."""
        lengths = np.array([len(t) for t in image_ids], dtype=np.int64)
        flat = (lambda parts: np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64))
        return ModelPoints(np.asarray(point_ids, np.int64).reshape(-1), np.asarray(xyz, np.float64).reshape(-1, 3),
                           np.asarray(rgb, np.uint8).reshape(-1, 3), lengths, flat(image_ids), flat(point2d))


@dataclass
class _Model:
    cameras: set = field(default_factory=set)
    points2d_per_image: dict = field(default_factory=dict)  # image_id -> number of keypoints
    points: ModelPoints | None = None


class _Reader:
    """Sequential little-endian reads of one file's bytes; a short read names the file and record."""

    def __init__(self, path: Path, what: str):
        self.path, self.what = path, what
        self.data = path.read_bytes()
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


def _check_pose(path: Path, image_id: int, name: str, q, t) -> None:
    if not all(math.isfinite(v) for v in (*q, *t)):
        raise MVSError(f"{path}: image '{name}' (image_id {image_id}) has a non-finite pose "
                       f"(cam_from_world q={list(q)}, t={list(t)})")
    if sum(v * v for v in q) < 1e-12:
        raise MVSError(f"{path}: image '{name}' (image_id {image_id}) has a zero rotation quaternion")


def _read_binary(folder: Path) -> _Model:
    model = _Model()
    r = _Reader(folder / "cameras.bin", "cameras")
    for k in range(_count(r, 24)):
        r.record = f"camera record {k + 1}"
        cam_id, model_id, w, h = r.take("<IiQQ")
        if model_id not in CAMERA_MODELS:
            raise MVSError(f"{r.path}: camera_id {cam_id} has unknown camera model id {model_id} (corrupt file?)")
        params = r.take(f"<{CAMERA_MODELS[model_id][1]}d")
        if w == 0 or h == 0 or not all(math.isfinite(p) for p in params):
            raise MVSError(f"{r.path}: camera_id {cam_id} has size {w}x{h} and parameters {list(params)}")
        model.cameras.add(cam_id)
    r.finish(len(model.cameras))

    r = _Reader(folder / "images.bin", "images")
    n = _count(r, 4 + 56 + 4 + 1 + 8)
    for k in range(n):
        r.record = f"image record {k + 1}"
        image_id, *pose, cam_id = r.take("<I7dI")
        name = r.name()
        r.record = f"image record {k + 1} ('{name}')"
        _check_pose(r.path, image_id, name, pose[:4], pose[4:])
        if cam_id not in model.cameras:
            raise MVSError(f"{r.path}: image '{name}' (image_id {image_id}) uses camera_id {cam_id}, which "
                           f"cameras.bin does not define")
        (m,) = r.take("<Q")
        r.skip(24 * m)
        model.points2d_per_image[image_id] = m
    r.finish(n)

    model.points = _read_points_binary(_Reader(folder / "points3D.bin", "points3D"))
    return model


def _gather(data: bytes, offsets: np.ndarray, dtype: str) -> np.ndarray:
    """The little-endian values of `dtype` at byte `offsets` of `data` (any alignment): one
    zero-copy view of the buffer per byte phase, each value taken from the view of its phase."""
    dt = np.dtype(dtype).newbyteorder("<")
    offsets = offsets.reshape(-1)
    out = np.empty(len(offsets), dtype=dt)
    phase = offsets % dt.itemsize
    for k in range(dt.itemsize):
        sel = phase == k
        if sel.any():
            view = np.frombuffer(data, dtype=dt, offset=k, count=(len(data) - k) // dt.itemsize)
            out[sel] = view[(offsets[sel] - k) // dt.itemsize]
    return out


def _read_points_binary(r: _Reader) -> ModelPoints:
    """One Python step per point (its track length locates the next record); the fields and the
    track elements are then gathered with NumPy."""
    n = _count(r, 51)
    data, pos, end = r.data, r.pos, len(r.data)
    starts = np.empty(n, dtype=np.int64)
    lengths = np.empty(n, dtype=np.int64)
    unpack = struct.Struct("<Q").unpack_from
    for k in range(n):
        if pos + 51 > end:
            r.record = f"point record {k + 1}"
            raise r.truncated()
        t = unpack(data, pos + 43)[0]
        starts[k], lengths[k] = pos, t
        pos += 51 + 8 * t
        if pos > end:
            r.record = f"point record {k + 1}"
            raise r.truncated()
    r.pos = pos
    r.finish(n)
    # element e of point p sits at starts[p] + 51 + 8 (e - first element of p)
    element_starts = np.repeat(starts + 51 - 8 * (np.cumsum(lengths) - lengths), lengths) + 8 * np.arange(lengths.sum())
    return ModelPoints(_gather(data, starts, "u8").astype(np.int64),
                       _gather(data, (starts + 8)[:, None] + np.array([0, 8, 16]), "f8").reshape(-1, 3),
                       _gather(data, (starts + 32)[:, None] + np.arange(3), "u1").reshape(-1, 3), lengths,
                       _gather(data, element_starts, "u4").astype(np.int64),
                       _gather(data, element_starts + 4, "u4").astype(np.int64))


def _lines(path: Path):
    """(line number, text) of a COLMAP text file, comments and blank lines included."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MVSError(f"{path}: not a readable COLMAP text file ({exc.__class__.__name__})") from exc
    return list(enumerate(text.splitlines(), start=1))


def _numbers(path: Path, line_no: int, tokens: list[str], kind=float) -> list:
    try:
        return [kind(t) for t in tokens]
    except ValueError as exc:
        raise MVSError(f"{path}: line {line_no} holds a non-number ({exc})") from exc


def _read_text(folder: Path) -> _Model:
    model = _Model()
    path = folder / "cameras.txt"
    for no, line in _lines(path):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        tok = line.split()
        if len(tok) < 4 or tok[1] not in _PARAMS_BY_NAME or len(tok) != 4 + _PARAMS_BY_NAME[tok[1]]:
            raise MVSError(f"{path}: line {no} is not 'CAMERA_ID MODEL WIDTH HEIGHT PARAMS' for a known model")
        cam_id, w, h = _numbers(path, no, tok[:1] + tok[2:4], int)
        params = _numbers(path, no, tok[4:])
        if w <= 0 or h <= 0 or not all(math.isfinite(p) for p in params):
            raise MVSError(f"{path}: line {no}: camera_id {cam_id} has size {w}x{h} and parameters {params}")
        model.cameras.add(cam_id)

    path = folder / "images.txt"
    lines = _lines(path)
    i = 0
    while i < len(lines):
        no, line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        tok = line.split(maxsplit=9)
        if len(tok) != 10:
            raise MVSError(f"{path}: line {no} is not 'IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME'")
        image_id, cam_id = _numbers(path, no, [tok[0], tok[8]], int)
        pose = _numbers(path, no, tok[1:8])
        name = tok[9]
        _check_pose(path, image_id, name, pose[:4], pose[4:])
        if cam_id not in model.cameras:
            raise MVSError(f"{path}: line {no}: image '{name}' (image_id {image_id}) uses camera_id {cam_id}, "
                           f"which cameras.txt does not define")
        points = lines[i][1].split() if i < len(lines) else []
        i += 1
        if len(points) % 3:
            raise MVSError(f"{path}: line {no + 1}: keypoints of image '{name}' are not (X, Y, POINT3D_ID) triples")
        model.points2d_per_image[image_id] = len(points) // 3

    path = folder / "points3D.txt"
    ids, xyz, rgb, image_ids, point2d = [], [], [], [], []
    for no, line in _lines(path):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        tok = line.split()
        if len(tok) < 8 or (len(tok) - 8) % 2:
            raise MVSError(f"{path}: line {no} is not 'POINT3D_ID X Y Z R G B ERROR (IMAGE_ID POINT2D_IDX)...'")
        values = _numbers(path, no, tok[1:8])
        track = np.asarray(_numbers(path, no, tok[8:], int), dtype=np.int64).reshape(-1, 2)
        ids.append(int(tok[0]))
        xyz.append(values[:3])
        rgb.append(values[3:6])
        image_ids.append(track[:, 0])
        point2d.append(track[:, 1])
    model.points = ModelPoints.from_lists(ids, xyz, rgb, image_ids, point2d)
    return model


def _check_tracks(model: _Model, path: Path) -> None:
    """Every track element names an existing image and one of its keypoints."""
    pts = model.points
    if not len(pts.point_ids):
        return
    image_ids, point2d = pts.track_image_ids, pts.track_point2d
    known = np.array(sorted(model.points2d_per_image), dtype=np.int64)
    counts = np.array([model.points2d_per_image[i] for i in known], dtype=np.int64)
    pos = np.clip(np.searchsorted(known, image_ids), 0, max(len(known) - 1, 0))
    exists = (known[pos] == image_ids) if len(known) else np.zeros(len(image_ids), bool)
    bad = ~exists | (point2d >= np.where(exists, counts[pos] if len(known) else 0, 0))
    if bad.any():
        e = int(np.flatnonzero(bad)[0])
        point_id = pts.point_ids[int(np.searchsorted(np.cumsum(pts.track_lengths), e, side="right"))]
        what = (f"keypoint {point2d[e]} of image_id {image_ids[e]}, which has {counts[pos[e]]}" if exists[e]
                else f"image_id {image_ids[e]}, which the images file does not define")
        raise MVSError(f"{path}: point3D_id {point_id} is observed in {what} ({int(bad.sum())} such observation(s))")


def check_model_files(folder: str | Path) -> ModelPoints:
    """Raise MVSError naming the file if the model in `folder` (.bin preferred, as pycolmap) is
    truncated, corrupt or inconsistent; a sound model's sparse points as arrays."""
    folder = Path(folder)
    binary = all((folder / f"{n}.bin").is_file() for n in ("cameras", "images", "points3D"))
    model = _read_binary(folder) if binary else _read_text(folder)
    _check_tracks(model, folder / ("points3D.bin" if binary else "points3D.txt"))
    return model.points
