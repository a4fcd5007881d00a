"""A COLMAP sparse model's files as arrays, checked as they are read (no pycolmap).

`read_model_files(folder)` reads cameras, images and points3D (.bin preferred, as COLMAP does;
.txt otherwise) into a `ColmapModel`. pycolmap's Reconstruction took 2.5 s of a 500-view
courtyard's load stage (9 M observations) building per-keypoint objects that nothing used, and it
reports a damaged model with a C++ message about the folder (`unordered_map::at`,
`[reconstruction.cc:535] Check failed: ...`) or not at all (a truncated cameras.bin read as cameras
with zero focal length). Here every problem raises MVSError naming the file, the record and what is
wrong: truncation, trailing bytes, an unknown camera model, a repeated id, a non-finite camera pose,
or a reference to a camera, image or keypoint that does not exist.

Every image in the files is a registered one: COLMAP writes only registered images, and the pose in
images.bin is the image's cam_from_world (newer COLMAP's rigs.bin and frames.bin, which compose
that pose, are not read). The byte layouts are in io/colmap_model_binary.py, the text layouts in
io/colmap_model_text.py; io/colmap_model_write.py writes a binary model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import MVSError
from .colmap_model_binary import read_binary_model
from .colmap_model_text import read_text_model
from .colmap_model_types import ColmapModel, ModelImages, ModelPoints


def positions_of(ids: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """[len(queries)] int64: the index in `ids` (unique, any order) of each query, -1 where absent.
    COLMAP numbers images 1..N, so a table indexed by id usually replaces the binary search (one
    gather per observation instead of ~20 cache-missing steps: 0.17 s of 9 M at 500 views)."""
    ids = np.asarray(ids, dtype=np.int64)
    queries = np.asarray(queries)
    if not len(ids) or not len(queries):
        return np.full(len(queries), -1, np.int64)
    low, high = min(int(ids.min()), int(queries.min())), max(int(ids.max()), int(queries.max()))
    if low >= 0 and high <= 4 * len(ids) + 1024:
        table = np.full(high + 1, -1, np.int64)
        table[ids] = np.arange(len(ids))
        return table[queries]
    order = np.argsort(ids, kind="stable")
    pos = np.clip(np.searchsorted(ids[order], queries), 0, len(ids) - 1)
    return np.where(ids[order][pos] == queries, order[pos], -1)


def _check_unique(path: Path, what: str, ids: np.ndarray) -> None:
    if len(ids) > 1 and not np.all(ids[1:] > ids[:-1]):  # COLMAP writes ids ascending: no sort then
        ordered = np.sort(ids)
        repeated = ordered[1:][ordered[1:] == ordered[:-1]]
        if len(repeated):
            raise MVSError(f"{path}: {what} {int(repeated[0])} is defined more than once (corrupt COLMAP model)")


def _check_tracks(images: ModelImages, points: ModelPoints, path: Path) -> None:
    """Every track element names an existing image and one of its keypoints."""
    if not len(points.track_image_ids):
        return
    counts = np.array([len(k) for k in images.keypoints] + [0], dtype=np.int64)  # [-1]: no image
    pos = positions_of(images.image_ids, points.track_image_ids)
    point2d = points.track_point2d
    bad = point2d >= counts[pos]
    if point2d.dtype.kind == "i":   # a text model's; a .bin's are unsigned
        bad |= point2d < 0
    if bad.any():
        e = int(np.flatnonzero(bad)[0])
        point_id = points.point_ids[int(np.searchsorted(np.cumsum(points.track_lengths), e, side="right"))]
        what = (f"keypoint {point2d[e]} of image_id {points.track_image_ids[e]}, which has {counts[pos[e]]}"
                if pos[e] >= 0 else f"image_id {points.track_image_ids[e]}, which the images file does not define")
        raise MVSError(f"{path}: point3D_id {point_id} is observed in {what} ({int(bad.sum())} such observation(s))")


def read_model_files(folder: str | Path) -> ColmapModel:
    """The model in `folder` (.bin preferred, as COLMAP) as arrays; raises MVSError naming the file
    if it is truncated, corrupt or inconsistent."""
    folder = Path(folder)
    binary = all((folder / f"{n}.bin").is_file() for n in ("cameras", "images", "points3D"))
    model = read_binary_model(folder) if binary else read_text_model(folder)
    ext = ".bin" if binary else ".txt"
    _check_unique(folder / f"images{ext}", "image_id", model.images.image_ids)
    _check_unique(folder / f"points3D{ext}", "point3D_id", model.points.point_ids)
    _check_tracks(model.images, model.points, folder / f"points3D{ext}")
    return model
