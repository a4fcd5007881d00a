"""The voxel grid of one pooling, fixed once for the whole cloud: origin, voxel size, key layout.

    frame = voxel_frame(lo [3], hi [3], voxel_size, origin=None)
    coords = voxel_coordinates(pts [N, 3], voxel_size, origin)   # [N, 3] int64
    keys = voxel_keys(pts [N, 3], frame)                          # [N] int64

Voxel (i, j, k) of a point is floor((p - origin) * (1 / voxel_size)) per axis in float64, its key
i + D_i * (j + D_j * k); voxels come out of a pooling in increasing key order. `origin` defaults to
the cloud's minimum corner. Why a frame of its own: a pooling by parts (streamed.py) takes the
frame from the whole cloud's bounds, so every part computes each point's key (and the voxels'
order) exactly as one pooling of the whole cloud does; a part's own bounds would shift both.
NumPy or CuPy arrays alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mvs_pipeline.errors import MVSError

from ..validate import array_module

MAX_KEY = 2**62


@dataclass(frozen=True)
class VoxelFrame:
    origin: np.ndarray            # [3] float64, corner of voxel (0, 0, 0)
    dims: tuple[int, int, int]    # voxels per axis (the cloud's extent plus a spare one)
    voxel_size: float

    @property
    def num_keys(self) -> int:
        """Keys lie in [0, num_keys)."""
        return self.dims[0] * self.dims[1] * self.dims[2]


def voxel_frame(lo, hi, voxel_size: float, origin=None) -> VoxelFrame:
    """The frame of a cloud whose (checked, float32) points lie within [lo, hi] (host [3] arrays)."""
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    origin = lo if origin is None else np.asarray(origin, dtype=np.float64)
    if origin.shape != (3,) or np.any(origin > lo):
        raise MVSError(f"origin must be 3 numbers at or below the cloud's minimum corner {lo.tolist()}")
    dims_f = np.floor((hi - origin) * (1.0 / voxel_size)) + 2
    if float(np.prod(dims_f)) >= MAX_KEY:
        raise MVSError(f"voxel_size {voxel_size} is too small for this cloud ({dims_f.tolist()} voxels per axis)")
    dims = tuple(int(d) for d in dims_f)
    return VoxelFrame(origin=origin, dims=dims, voxel_size=float(voxel_size))


def voxel_coordinates(xyz, voxel_size: float, origin):
    """[N, 3] int64 voxel coordinates floor((p - origin) * (1 / voxel_size))."""
    xp = array_module(xyz)
    rel = (xyz.astype(xp.float64) - xp.asarray(origin, dtype=xp.float64)) * (1.0 / voxel_size)
    return xp.floor(rel).astype(xp.int64)


def coordinate_keys(coords, frame: VoxelFrame):
    """[N] int64 keys of [N, 3] int64 voxel coordinates."""
    return coords[:, 0] + frame.dims[0] * (coords[:, 1] + frame.dims[1] * coords[:, 2])


def voxel_keys(pts, frame: VoxelFrame):
    """[N] int64 key of each point of pts [N, 3] (checked float32, inside the frame's bounds):
    coordinate_keys(voxel_coordinates(...)) one axis at a time, the same float64 operations on each
    coordinate and exact integer ones after, so the same keys, with one float64 column alive at a
    time instead of [N, 3] float64 and int64 arrays (a third of the memory)."""
    xp = array_module(pts)
    scale = 1.0 / frame.voxel_size
    key = None
    for axis in (2, 1, 0):  # Horner: key = c0 + D0 * (c1 + D1 * c2)
        c = xp.floor((pts[:, axis].astype(xp.float64) - float(frame.origin[axis])) * scale).astype(xp.int64)
        key = c if key is None else c + frame.dims[axis] * key
    return key
