"""The Numba twin of cuda/mesh_tsdf.cu's `tsdf_integrate`: the CPU backend of the TSDF fusion and
the reference the GPU test compares the kernel with (tests/mesh/test_tsdf_gpu.py).

Same arguments, same float32 arithmetic in the same order (no fused multiply-adds: the kernel
uses __fmul_rn / __fadd_rn / __fdiv_rn), so both give the same sums bit for bit.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .layout import CAM_STRIDE


@numba.njit(cache=True, inline="always")
def _dot4(P, r, x, y, z):
    # ((P0 x + P1 y) + P2 z) + P3, each step rounded to float32
    a = np.float32(P[r, 0] * x)
    a = np.float32(a + np.float32(P[r, 1] * y))
    a = np.float32(a + np.float32(P[r, 2] * z))
    return np.float32(a + P[r, 3])


@numba.njit(cache=True, parallel=True)
def _integrate(depth, rgb, cams, offsets, sizes, v0, v1, origin, voxel, trunc, nx, ny, nz,
               sdf_sum, weight, rgb_sum, rgb_weight):
    n = nx * ny * nz
    for t in numba.prange(n):
        i = t // (ny * nz)
        j = (t // nz) % ny
        k = t % nz
        x = np.float32(origin[0] + np.float32(np.float32(i) * voxel))
        y = np.float32(origin[1] + np.float32(np.float32(j) * voxel))
        z = np.float32(origin[2] + np.float32(np.float32(k) * voxel))
        s = sdf_sum[t]
        w = weight[t]
        cr = rgb_sum[t, 0]
        cg = rgb_sum[t, 1]
        cb = rgb_sum[t, 2]
        cw = rgb_weight[t]
        for v in range(v0, v1):
            P = cams[v].reshape(3, 4)
            c = _dot4(P, 2, x, y, z)
            if not c > np.float32(0.0):
                continue
            u = np.float32(_dot4(P, 0, x, y, z) / c)
            r = np.float32(_dot4(P, 1, x, y, z) / c)
            width = sizes[v, 0]
            height = sizes[v, 1]
            if not (u >= np.float32(0.0) and r >= np.float32(0.0) and u < np.float32(width)
                    and r < np.float32(height)):
                continue
            col = int(math.floor(u))
            row = int(math.floor(r))
            if col >= width or row >= height:
                continue
            pix = offsets[v] + row * width + col
            d = depth[pix]
            if not d > np.float32(0.0):
                continue
            sdf = np.float32(d - c)
            if sdf < -trunc:
                continue
            f = np.float32(sdf / trunc)
            if f > np.float32(1.0):
                f = np.float32(1.0)
            s = np.float32(s + f)
            w = np.float32(w + np.float32(1.0))
            if f < np.float32(1.0):
                cr = np.float32(cr + np.float32(rgb[pix, 0]))
                cg = np.float32(cg + np.float32(rgb[pix, 1]))
                cb = np.float32(cb + np.float32(rgb[pix, 2]))
                cw = np.float32(cw + np.float32(1.0))
        sdf_sum[t] = s
        weight[t] = w
        rgb_sum[t, 0] = cr
        rgb_sum[t, 1] = cg
        rgb_sum[t, 2] = cb
        rgb_weight[t] = cw


def tsdf_integrate(depth, rgb, cams, offsets, sizes, view_range, origin, voxel, truncation, shape, acc) -> None:
    """Add views view_range = (v0, v1) to a tile's accumulators (layout.py), in place.

    depth [P] float32: every view's depth map, flattened one after another (<= 0 or masked: no
    depth); rgb [P, 3] uint8 the views' colours; cams [V, 12] float32 (layout.camera_table); offsets
    [V] int64 where view v's pixels start; sizes [V, 2] int32 (width, height); origin (3,) the
    centre of voxel (0, 0, 0); voxel and truncation in metres; shape (nx, ny, nz)."""
    if cams.shape[1] != CAM_STRIDE:
        raise ValueError(f"cams: expected [V, {CAM_STRIDE}]")
    nx, ny, nz = (int(s) for s in shape)
    _integrate(np.ascontiguousarray(depth, np.float32), np.ascontiguousarray(rgb, np.uint8),
               np.ascontiguousarray(cams, np.float32), np.ascontiguousarray(offsets, np.int64),
               np.ascontiguousarray(sizes, np.int32), int(view_range[0]), int(view_range[1]),
               np.asarray(origin, np.float32), np.float32(voxel), np.float32(truncation), nx, ny, nz,
               acc["sdf_sum"], acc["weight"], acc["rgb_sum"], acc["rgb_weight"])
