"""What the TSDF kernel (cuda/mesh_tsdf.cu, launched by cuda.py) and its twin (cpu.py) share: the
camera table and the accumulator layout. NumPy only: the CUDA path imports this, never Numba.

Camera row v of `cams` [V, CAM_STRIDE] float32 is pixel_from_world = K [R | t] (3x4, row-major):
(a, b, c) = P (x, y, z, 1), depth z = c, image point (a / c, b / c), pixel (floor(a / c), floor(b / c))
(COLMAP's convention: pixel (col, row) covers [col, col + 1) x [row, row + 1), centre at +0.5).

The grid's voxel centres are origin + g * voxel, g = (gx, gy, gz) >= 0. Only some blocks of
BLOCK^3 voxels hold voxels (blocks.py): `blocks` [B, 3] int32 lists them, and voxel (i, j, k)
(0 .. BLOCK-1 each) of block n is g = BLOCK * blocks[n] + (i, j, k), at index
n * BLOCK^3 + (i * BLOCK + j) * BLOCK + k of the accumulators (N = B * BLOCK^3 voxels):
  sdf_sum [N] float32   sum over the views that observed the voxel of min(1, sdf / truncation)
  weight  [N] float32   how many views observed it (sdf >= -truncation)
  rgb_sum [N, 3] float32 sum of the image colours of the views whose |sdf| < truncation
  rgb_weight [N] float32 how many such views
Sums run over views in index order, one voxel per thread: the kernel and the twin agree bit for bit.
"""

from __future__ import annotations

import numpy as np

CAM_STRIDE = 12
# 8: a block's 512 voxels are two CUDA thread blocks of 256; the surface band (2 x 4 voxels of
# truncation) crosses ~2 blocks, so coarser blocks allocate more empty voxels, finer ones more keys.
BLOCK = 8
BLOCK_VOXELS = BLOCK ** 3


def camera_table(views) -> np.ndarray:
    """[V, CAM_STRIDE] float32 pixel_from_world matrices of scene Views (K, R, t)."""
    table = np.zeros((len(views), CAM_STRIDE), np.float32)
    for v, view in enumerate(views):
        P = np.asarray(view.K, np.float64) @ np.concatenate([np.asarray(view.R, np.float64),
                                                             np.asarray(view.t, np.float64).reshape(3, 1)], axis=1)
        table[v] = P.ravel().astype(np.float32)
    return table


def empty_accumulators(xp, n: int) -> dict:
    """Zeroed accumulators of n voxels."""
    return {"sdf_sum": xp.zeros(n, xp.float32), "weight": xp.zeros(n, xp.float32),
            "rgb_sum": xp.zeros((n, 3), xp.float32), "rgb_weight": xp.zeros(n, xp.float32)}


def finish(xp, acc: dict, min_weight: float, min_surface: float = 1.0):
    """tsdf [N] float32: the mean over the views, NaN where fewer than min_weight views observed the
    voxel or fewer than min_surface views saw a surface within the truncation of it (rgb_weight).
    Array code that runs on NumPy or CuPy alike."""
    w = acc["weight"]
    observed = w >= xp.float32(max(min_weight, 1.0))
    if min_surface > 1:
        observed &= acc["rgb_weight"] >= xp.float32(min_surface)
    return xp.where(observed, acc["sdf_sum"] / xp.maximum(w, xp.float32(1.0)), xp.float32(xp.nan))


def vertex_colours(xp, acc: dict, voxels):
    """[V, 3] uint8: the mean colour of the given voxels (0 where no view coloured one)."""
    cw = xp.maximum(acc["rgb_weight"][voxels], xp.float32(1.0))[:, None]
    return (xp.clip(acc["rgb_sum"][voxels] / cw, 0, 255) + 0.5).astype(xp.uint8)
