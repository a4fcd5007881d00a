"""`fused.ply.vis`: which images see each fused point, in COLMAP's binary format.

Layout (all little-endian), as COLMAP's `WritePointsVisibility` / `ReadPointsVisibility`
(src/colmap/mvs/fusion.cc) write and read it:
    uint64                number of points N (equal to the vertex count of fused.ply)
    N times:  uint32 n,   then n uint32 image indices
COLMAP's Delaunay mesher reads it next to `fused.ply` in a dense workspace and uses each index as
a position in `Reconstruction::RegImageIds()` of the workspace's `sparse/` model (`images.at(idx)`).
Those indices are neither COLMAP image_ids nor our view_idx.

Which index we write: the rank of a view's image_id among all registered image_ids
(`colmap_image_indices`), i.e. RegImageIds() in ascending order. COLMAP 3.12+ and pycolmap 4 list
registered images by frame: in frame_id order for a model with frames.bin (tests/test_fusion_io.py
checks this against pycolmap's own `reg_image_ids()` on a model written with shuffled ids), in
images.bin's order for one without, as older COLMAP versions do. Our `load` stage writes
`OUT/sparse` without frames.bin and with images.bin in ascending image_id order
(io/colmap_model_write.py; tests/scene/test_load_model.py), so every reading agrees on our outputs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Sequence

import numpy as np

from ..errors import MVSError
from .atomic import atomic_path


def colmap_image_indices(image_ids: Sequence[int]) -> np.ndarray:
    """[N] int64: for each view (our view_idx order), its index in COLMAP's RegImageIds()."""
    ids = np.asarray(image_ids, dtype=np.int64)
    if len(np.unique(ids)) != len(ids):
        raise MVSError("duplicate image_ids: cannot map views to COLMAP image indices")
    order = np.argsort(ids, kind="stable")
    rank = np.empty(len(ids), np.int64)
    rank[order] = np.arange(len(ids))
    return rank


def visibility_records(ref_index: int, neighbor_indices: Sequence[int], vis_masks: np.ndarray) -> np.ndarray:
    """The uint32 words of len(vis_masks) consecutive records: n, ref_index, agreeing neighbours.

    vis_masks: [P] uint32, bit k set when neighbour k agreed; neighbor_indices: COLMAP image
    index of neighbour k. Neighbours are listed in neighbour order, after the reference.
    NumPy only (no Numba): fusion on the GPU would otherwise pay Numba's first-use start-up
    (about 0.5 s) for this alone.
    """
    masks = np.ascontiguousarray(vis_masks, dtype=np.uint32)
    nb = np.asarray(neighbor_indices, dtype=np.uint32)
    if len(nb) > 32:
        raise ValueError(f"neighbor_indices: {len(nb)} entries, a uint32 mask holds at most 32")
    # Each point as a full row [n, ref, nb_0 .. nb_K-1] and a row of "keep" flags (n and ref always,
    # nb_k where bit k is set): the kept words in row-major order are exactly the records.
    k = len(nb)
    bits = np.unpackbits(masks.astype("<u4").view(np.uint8).reshape(-1, 4), axis=1, count=k,
                         bitorder="little").view(bool)  # [P, K]: bit k of each mask
    keep = np.empty((len(masks), k + 2), bool)
    keep[:, :2] = True
    keep[:, 2:] = bits
    rows = np.empty(keep.shape, np.uint32)
    rows[:, 0] = np.count_nonzero(bits, axis=1) + 1  # the reference and the agreeing neighbours
    rows[:, 1] = ref_index
    rows[:, 2:] = nb
    return rows[keep]


def write_vis_header(f: BinaryIO, num_points: int) -> None:
    f.write(np.uint64(num_points).astype("<u8").tobytes())


def write_vis(path: str | os.PathLike, visibility: Sequence[Sequence[int]]) -> None:
    """Write a whole visibility list atomically (small outputs and tests)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        write_vis_header(f, len(visibility))
        for vis in visibility:
            np.asarray([len(vis), *vis], dtype="<u4").tofile(f)


def read_vis(path: str | os.PathLike, num_points: int | None = None) -> list[np.ndarray]:
    """[N] lists of uint32 image indices; a truncated or oversized file raises naming the path."""
    path = Path(path)
    if not path.is_file():
        raise MVSError(f"{path}: visibility file not found")
    data = np.fromfile(path, dtype=np.uint8)
    if len(data) < 8:
        raise MVSError(f"{path}: too short for a visibility file ({len(data)} bytes)")
    n = int(data[:8].view("<u8")[0])
    if num_points is not None and n != num_points:
        raise MVSError(f"{path}: holds {n} points, expected {num_points}")
    if (len(data) - 8) % 4:
        raise MVSError(f"{path}: body is not a whole number of uint32 words")
    words = data[8:].view("<u4")
    out, pos = [], 0
    for i in range(n):
        if pos >= len(words):
            raise MVSError(f"{path}: truncated at point {i} of {n}")
        count = int(words[pos])
        if pos + 1 + count > len(words):
            raise MVSError(f"{path}: truncated at point {i} of {n}")
        out.append(words[pos + 1: pos + 1 + count].astype(np.uint32))
        pos += 1 + count
    if pos != len(words):
        raise MVSError(f"{path}: {len(words) - pos} trailing words after {n} points")
    return out
