"""What the TSDF kernel (cuda/mesh_tsdf.cu, launched by cuda.py) and its twin (cpu.py) share: the
camera table and the accumulator layout. NumPy only: the CUDA path imports this, never Numba.

Camera row v of `cams` [V, CAM_STRIDE] float32 is pixel_from_world = K [R | t] (3x4, row-major):
(a, b, c) = P (x, y, z, 1), depth z = c, image point (a / c, b / c), pixel (floor(a / c), floor(b / c))
(COLMAP's convention: pixel (col, row) covers [col, col + 1) x [row, row + 1), centre at +0.5).

Accumulators of a tile of nx x ny x nz voxels, index (i * ny + j) * nz + k for voxel (i, j, k)
whose centre is origin + (i, j, k) * voxel:
  sdf_sum [N] float32   sum over the views that observed the voxel of min(1, sdf / truncation)
  weight  [N] float32   how many views observed it (sdf >= -truncation)
  rgb_sum [N, 3] float32 sum of the image colours of the views whose |sdf| < truncation
  rgb_weight [N] float32 how many such views
Sums run over views in index order, one voxel per thread: the kernel and the twin agree bit for bit.
"""

from __future__ import annotations

import numpy as np

CAM_STRIDE = 12


def camera_table(views) -> np.ndarray:
    """[V, CAM_STRIDE] float32 pixel_from_world matrices of scene Views (K, R, t)."""
    table = np.zeros((len(views), CAM_STRIDE), np.float32)
    for v, view in enumerate(views):
        P = np.asarray(view.K, np.float64) @ np.concatenate([np.asarray(view.R, np.float64),
                                                             np.asarray(view.t, np.float64).reshape(3, 1)], axis=1)
        table[v] = P.ravel().astype(np.float32)
    return table


def empty_accumulators(xp, shape: tuple[int, int, int]) -> dict:
    n = int(np.prod(shape))
    return {"sdf_sum": xp.zeros(n, xp.float32), "weight": xp.zeros(n, xp.float32),
            "rgb_sum": xp.zeros((n, 3), xp.float32), "rgb_weight": xp.zeros(n, xp.float32)}


def finish(xp, acc: dict, shape: tuple[int, int, int], min_weight: float):
    """(tsdf [nx, ny, nz] float32: the mean over the views, NaN where fewer than min_weight views
    observed the voxel; rgb [nx, ny, nz, 3] float32 mean colour, 0 where no view coloured it). Array
    code that runs on NumPy or CuPy alike; only the field (4 bytes a voxel) leaves the GPU, the
    colours are gathered at the vertices (tsdf.py)."""
    w = acc["weight"]
    observed = w >= xp.float32(max(min_weight, 1.0))
    tsdf = xp.where(observed, acc["sdf_sum"] / xp.maximum(w, xp.float32(1.0)), xp.float32(xp.nan))
    cw = xp.maximum(acc["rgb_weight"], xp.float32(1.0))[:, None]
    rgb = acc["rgb_sum"] / cw
    return tsdf.reshape(shape), rgb.reshape(*shape, 3)
