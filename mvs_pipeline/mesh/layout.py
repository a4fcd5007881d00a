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
  rgb_sum [N, 3] float32 sum of the image colours of the surface views: sdf >= -truncation and
                         sdf |n . r| < truncation (the distance along the pixel's normal, n . r from
                         its normal map or its depths' slopes, at least mesh.incidence_floor)
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


def incidence_cos(xp, depth, K, floor: float):
    """[H, W] float32: |n . r| of each depth pixel, n its surface's unit normal and r = (u, v, 1) its
    ray in normalised camera coordinates, at least `floor`; 1 where there is no depth. A point at
    depth z off that surface by d - z along the ray is (d - z) |n . r| from it along the normal: the
    TSDF's surface-view count takes that distance (oblique views then count as head-on ones do). n comes from the depth map itself: the depth's slope per pixel along rows and columns,
    t = (dz / dpixel) f / z, each the smaller of the differences to the two neighbours with a depth
    (a depth edge reads its smooth side); for a plane t = -n_xy / (n . r), so n is along
    (-t_x, -t_y, 1 + t_x u + t_y v) and |n . r| = 1 / |that| (on a plane to the one-pixel
    differences' error, < 1 % at 60 degrees, 2.5 % at 80). Array code on NumPy
    or CuPy alike, one float32 operation at a time (the backends agree bit for bit)."""
    d = xp.asarray(depth, xp.float32)
    if floor >= 1.0:
        return xp.ones(d.shape, xp.float32)
    K = np.asarray(K, np.float64)
    fx, fy, cx, cy = (xp.float32(K[0, 0]), xp.float32(K[1, 1]), xp.float32(K[0, 2]), xp.float32(K[1, 2]))
    valid = d > 0
    inf = xp.float32(xp.inf)
    slopes = []
    for axis in (1, 0):
        diff = xp.diff(d, axis=axis)
        both = valid[:, 1:] & valid[:, :-1] if axis == 1 else valid[1:, :] & valid[:-1, :]
        diff = xp.where(both, diff, inf)
        pad = xp.full((d.shape[0], 1) if axis == 1 else (1, d.shape[1]), inf, xp.float32)
        fwd, bwd = xp.concatenate([diff, pad], axis=axis), xp.concatenate([pad, diff], axis=axis)
        g = xp.where(xp.abs(fwd) <= xp.abs(bwd), fwd, bwd)
        slopes.append(xp.where(xp.abs(g) < inf, g, xp.float32(0.0)))
    z = xp.where(valid, d, xp.float32(1.0))
    tx = (slopes[0] * fx) / z
    ty = (slopes[1] * fy) / z
    u = ((xp.arange(d.shape[1], dtype=xp.float32) + xp.float32(0.5)) - cx) / fx
    v = ((xp.arange(d.shape[0], dtype=xp.float32) + xp.float32(0.5)) - cy) / fy
    nz = (xp.float32(1.0) + tx * u[None, :]) + ty * v[:, None]
    norm2 = (tx * tx + ty * ty) + nz * nz
    cos = xp.float32(1.0) / xp.sqrt(norm2)
    return xp.where(valid, xp.maximum(cos, xp.float32(floor)), xp.float32(1.0)).astype(xp.float32)


def normal_cos(normals, K) -> np.ndarray:
    """[H, W] float32 |n . r| of a camera-frame normal map [H, W, 3] (the depth stage's unit normals;
    r = (u, v, 1) each pixel's ray, as in incidence_cos), 0 where a normal is not finite."""
    n = np.asarray(normals, np.float32)
    K = np.asarray(K, np.float64)
    h, w = n.shape[:2]
    u = ((np.arange(w, dtype=np.float32) + np.float32(0.5)) - np.float32(K[0, 2])) / np.float32(K[0, 0])
    v = ((np.arange(h, dtype=np.float32) + np.float32(0.5)) - np.float32(K[1, 2])) / np.float32(K[1, 1])
    cos = np.abs((n[:, :, 0] * u[None, :] + n[:, :, 1] * v[:, None]) + n[:, :, 2])
    return np.where(np.isfinite(cos), cos, np.float32(0.0)).astype(np.float32)


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
