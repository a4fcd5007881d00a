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


def _low_bits(masks: np.ndarray, k: int) -> np.ndarray:
    """uint32 masks with only bits 0 .. k-1 kept (the bits that name neighbours)."""
    return np.asarray(masks, dtype=np.uint32) & np.uint32((1 << k) - 1)


def _popcount(v: np.ndarray) -> np.ndarray:
    """Set bits of each uint32 (the SWAR count: np.bitwise_count needs NumPy 2)."""
    v = v - ((v >> 1) & np.uint32(0x55555555))
    v = (v & np.uint32(0x33333333)) + ((v >> 2) & np.uint32(0x33333333))
    return (((v + (v >> 4)) & np.uint32(0x0F0F0F0F)) * np.uint32(0x01010101)) >> np.uint32(24)


def visibility_word_count(num_neighbors: int, vis_masks: np.ndarray) -> int:
    """len(visibility_records(..., vis_masks)) for num_neighbors neighbours, without making them:
    where a chunk's records go in the file is known before they are packed."""
    masks = _low_bits(vis_masks, num_neighbors)
    return 2 * len(masks) + int(_popcount(masks).sum(dtype=np.int64))


BLOCK_POINTS = 1 << 16  # points whose records visibility_records makes at once (bounds its temporaries)


def visibility_records(ref_index: int, neighbor_indices: Sequence[int], vis_masks: np.ndarray) -> np.ndarray:
    """The uint32 words of len(vis_masks) consecutive records: n, ref_index, agreeing neighbours.

    vis_masks: [P] uint32, bit k set when neighbour k agreed (bits at and above
    len(neighbor_indices) are ignored); neighbor_indices: COLMAP image index of neighbour k.
    Neighbours are listed in neighbour order, after the reference.
    NumPy only (no Numba): fusion on the CPU packs in threads beside its Numba kernel, and the
    GPU packs on the device (cuda/fusion_records.cu, which tests compare with this).
    """
    nb = np.asarray(neighbor_indices, dtype=np.uint32)
    if len(nb) > 32:
        raise ValueError(f"neighbor_indices: {len(nb)} entries, a uint32 mask holds at most 32")
    k = len(nb)
    masks = _low_bits(vis_masks, k)
    agreeing = _popcount(masks)
    out = np.empty(2 * len(masks) + int(agreeing.sum(dtype=np.int64)), np.uint32)
    # Each point as a full row [n, ref, nb_0 .. nb_K-1] and a row of "keep" flags (n and ref always,
    # nb_k where bit k is set): the kept words in row-major order are exactly the records. Made
    # BLOCK_POINTS points at a time, each block's kept words compressed straight into `out`
    # (np.compress: a third of the time of boolean indexing, but it makes an int64 index per kept
    # word, which over a whole 3200x2130 view would be more memory than the records themselves).
    pos = 0
    for s in range(0, len(masks), BLOCK_POINTS):
        block, n_agree = masks[s:s + BLOCK_POINTS], agreeing[s:s + BLOCK_POINTS]
        keep = np.empty((len(block), k + 2), np.uint8)
        keep[:, :2] = 1
        keep[:, 2:] = np.unpackbits(block.astype("<u4", copy=False).view(np.uint8).reshape(-1, 4), axis=1,
                                    count=k, bitorder="little")
        rows = np.empty(keep.shape, np.uint32)
        rows[:, 0] = n_agree + np.uint32(1)  # the reference and the agreeing neighbours
        rows[:, 1] = ref_index
        rows[:, 2:] = nb
        n = 2 * len(block) + int(n_agree.sum(dtype=np.int64))
        np.compress(keep.reshape(-1).view(bool), rows.reshape(-1), out=out[pos:pos + n])
        pos += n
    return out


def vis_header(num_points: int) -> bytes:
    """The 8 bytes before the records: the point count, uint64 little-endian."""
    return np.uint64(num_points).astype("<u8").tobytes()


def write_vis_header(f: BinaryIO, num_points: int) -> None:
    f.write(vis_header(num_points))


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
