"""Write a COLMAP binary model (cameras.bin, images.bin, points3D.bin) from arrays, in time linear
in its observations: pycolmap's write_binary took 1.9 s of a 500-view courtyard's load stage.

The bytes are the ones pycolmap writes for the same model (tests/io/test_colmap_model_write.py
compares them), less its rigs.bin and frames.bin: COLMAP reads a model without them as one rig per
camera and one frame per image (an input's rigs are not kept; stereo needs each image's pose,
which images.bin holds). Every file lists its records by ascending id, as pycolmap does for
cameras and points, and for images when its frames are numbered as they are; without frames.bin
COLMAP registers images in images.bin's order, so RegImageIds() is ascending for every COLMAP
version (io/vis_file.py relies on it). Layouts: see io/colmap_model_binary.py.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np

from .colmap_model_binary import POINT_HEAD
from .colmap_model_types import KEYPOINT, ColmapModel, ModelImages, ModelPoints

CHUNK_ELEMENTS = 4_000_000  # track elements per NumPy batch of points3D.bin: ~150 MB of temporaries
CHUNK_POINTS = 65_536  # points per batch: a 27 MB byte index of their 51-byte headers


def write_cameras(path: Path, cameras: dict) -> None:
    parts = [struct.pack("<Q", len(cameras))]
    for cam_id in sorted(cameras):
        cam = cameras[cam_id]
        parts.append(struct.pack(f"<IiQQ{len(cam.params)}d", cam_id, cam.model_id, cam.width, cam.height, *cam.params))
    Path(path).write_bytes(b"".join(parts))


def write_images(path: Path, images: ModelImages) -> None:
    """One Python step per image; its keypoints are written as one block."""
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(images.image_ids)))
        for i in np.argsort(images.image_ids, kind="stable"):
            kp = np.ascontiguousarray(images.keypoints[i], dtype=KEYPOINT)
            f.write(struct.pack("<I7dI", images.image_ids[i], *images.quaternions[i], *images.translations[i],
                                images.camera_ids[i]))
            f.write(images.names[i].encode("utf-8") + b"\0" + struct.pack("<Q", len(kp)))
            f.write(kp.view(np.uint8))


def points3d_bytes(points: ModelPoints) -> np.ndarray:
    """points3D.bin as a uint8 array: points by ascending id, each track in its stored order.

    No step per point: each batch of points has its 51-byte headers stored through one byte index,
    and its tracks as 8-byte words (u32 image_id, u32 point2D_idx). A track starts at byte
    3 (j + 1) mod 8 of its 8-byte word grid (j: the point's place in the file), so the tracks of the
    points sharing that phase are contiguous runs of words in one uint64 view of the buffer."""
    order = np.argsort(points.point_ids, kind="stable")
    lengths = points.track_lengths[order]
    stored_first = (np.cumsum(points.track_lengths) - points.track_lengths)[order]  # each track's first element
    ends = np.cumsum(lengths)
    n, head_size = len(order), POINT_HEAD.itemsize
    starts = 8 + head_size * np.arange(n) + 8 * (ends - lengths)  # each record's first byte
    buf = np.empty(8 + head_size * n + 8 * (int(ends[-1]) if n else 0), np.uint8)
    buf[:8] = np.array([n], "<u8").view(np.uint8)
    words = [buf[k:k + (len(buf) - k) // 8 * 8].view("<u8") for k in range(8)]  # the grid of each phase
    lo = 0
    while lo < n:
        # a batch: at most CHUNK_POINTS points and about CHUNK_ELEMENTS track elements
        done = int(ends[lo - 1]) if lo else 0
        hi = min(n, lo + CHUNK_POINTS, max(lo + 1, int(np.searchsorted(ends, done + CHUNK_ELEMENTS, side="right"))))
        p = order[lo:hi]
        head = np.zeros(hi - lo, POINT_HEAD)
        head["id"], head["xyz"], head["rgb"] = points.point_ids[p], points.xyz[p], points.rgb[p]
        head["error"], head["length"] = points.error[p], lengths[lo:hi]
        buf[starts[lo:hi, None] + np.arange(head_size)] = head.view(np.uint8).reshape(-1, head_size)
        track_starts = starts[lo:hi] + head_size
        phase = track_starts % 8
        for k in np.unique(phase):
            sel = np.flatnonzero(phase == k)
            n_el = lengths[lo:hi][sel]
            before = np.cumsum(n_el) - n_el  # of each selected track, among the selected elements
            element = np.repeat(stored_first[lo:hi][sel] - before, n_el) + np.arange(int(n_el.sum()))
            pair = np.empty((len(element), 2), "<u4")
            pair[:, 0], pair[:, 1] = points.track_image_ids[element], points.track_point2d[element]
            slot = element + np.repeat((track_starts[sel] - k) // 8 - stored_first[lo:hi][sel], n_el)
            words[k][slot] = pair.view("<u8")[:, 0]
        lo = hi
    return buf


def write_binary_model(folder: Path, model: ColmapModel) -> None:
    """cameras.bin, images.bin and points3D.bin into the existing `folder`. The model's points3D.bin
    (`points_file`) is copied when its points are in ascending id order, as this module writes
    them: the same bytes, without building them (0.2 s of CPU at 9 M observations)."""
    folder = Path(folder)
    write_cameras(folder / "cameras.bin", model.cameras)
    write_images(folder / "images.bin", model.images)
    ids = model.points.point_ids
    if model.points_file is not None and np.all(ids[1:] > ids[:-1]):
        shutil.copyfile(model.points_file, folder / "points3D.bin")
        return
    with open(folder / "points3D.bin", "wb") as f:
        f.write(points3d_bytes(model.points))
