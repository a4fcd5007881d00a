"""CPU twins of `cuda/depth_planar_prior.cu` (Numba): the support point of each grid cell, the
triangle owning each pixel, each pixel's prior plane. The same double arithmetic in the same order
as the kernels (built without fused multiply-adds), so both backends give the same maps.

    support_cells(depth, cost, grid, max_cost, K, K_inv, min_consistent, max_err, src_depth, src_offset,
                  src_size, src_K, src_K_inv, src_R, src_t) -> best [cells_y, cells_x] int32 (pixel or -1)
    prior_owner(tri [T, 6] int32, W, H) -> owner [H, W] int32 (lowest owning triangle, NO_OWNER where none)
    prior_fill(depth, cost, owner, planes [T, 4], max_cost, K_inv) -> prior [H, W, 4] float32

Arguments as ops.py prepares them: depth and cost float32 [H, W], max_cost a float32, matrices
row-major float64 [9] (sources [S, 9], t [S, 3]), source depth maps concatenated flat (float32)
with their offsets (int64) and (w, h) sizes (int32 [S, 2]).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .layout import NO_OWNER


@njit(cache=True, nogil=True, inline="always")
def _reliable(d, c, max_cost):  # pragma: no cover (compiled)
    return np.isfinite(d) and d > 0 and c < max_cost


@njit(cache=True, nogil=True)
def _consistent(x, y, d, K, K_inv, min_consistent, max_err, src_depth, src_offset, src_size, src_K, src_K_inv,
                src_R, src_t):  # pragma: no cover (compiled)
    """Twin of pp_consistent: at least min_consistent sources send (x, y) at depth d back within max_err px."""
    u0 = x + 0.5
    v0 = y + 0.5
    X0 = (K_inv[0] * u0 + K_inv[1] * v0 + K_inv[2]) * d
    X1 = (K_inv[3] * u0 + K_inv[4] * v0 + K_inv[5]) * d
    X2 = (K_inv[6] * u0 + K_inv[7] * v0 + K_inv[8]) * d
    count = 0
    for s in range(src_R.shape[0]):
        R = src_R[s]
        t = src_t[s]
        Ks = src_K[s]
        Ki = src_K_inv[s]
        s0 = R[0] * X0 + R[1] * X1 + R[2] * X2 + t[0]
        s1 = R[3] * X0 + R[4] * X1 + R[5] * X2 + t[1]
        s2 = R[6] * X0 + R[7] * X1 + R[8] * X2 + t[2]
        if not s2 > 0.0:
            continue
        p0 = Ks[0] * s0 + Ks[1] * s1 + Ks[2] * s2
        p1 = Ks[3] * s0 + Ks[4] * s1 + Ks[5] * s2
        p2 = Ks[6] * s0 + Ks[7] * s1 + Ks[8] * s2
        us = p0 / p2
        vs = p1 / p2
        ws = src_size[s, 0]
        hs = src_size[s, 1]
        if not (us >= 0.0 and us < ws and vs >= 0.0 and vs < hs):   # NaN fails too
            continue
        ds = np.float64(src_depth[src_offset[s] + np.int64(vs) * ws + np.int64(us)])
        if not (np.isfinite(ds) and ds > 0.0):
            continue
        b0 = (Ki[0] * us + Ki[1] * vs + Ki[2]) * ds - t[0]
        b1 = (Ki[3] * us + Ki[4] * vs + Ki[5]) * ds - t[1]
        b2 = (Ki[6] * us + Ki[7] * vs + Ki[8]) * ds - t[2]
        r0 = R[0] * b0 + R[3] * b1 + R[6] * b2     # R^T (back - t): the reference frame
        r1 = R[1] * b0 + R[4] * b1 + R[7] * b2
        r2 = R[2] * b0 + R[5] * b1 + R[8] * b2
        if not r2 > 0.0:
            continue
        q0 = K[0] * r0 + K[1] * r1 + K[2] * r2
        q1 = K[3] * r0 + K[4] * r1 + K[5] * r2
        q2 = K[6] * r0 + K[7] * r1 + K[8] * r2
        du = q0 / q2 - u0
        dv = q1 / q2 - v0
        if np.sqrt(du * du + dv * dv) <= max_err:
            count += 1
            if count >= min_consistent:
                return True
    return False


@njit(cache=True, parallel=True)
def support_cells(depth, cost, grid, max_cost, K, K_inv, min_consistent, max_err, src_depth, src_offset, src_size,
                  src_K, src_K_inv, src_R, src_t):  # pragma: no cover (compiled)
    """Twin of prior_support_cells: per cell its reliable, consistent pixel of lowest cost (first in
    row-major order on ties), y * W + x, or -1."""
    H, W = depth.shape
    cells_x = (W + grid - 1) // grid
    cells_y = (H + grid - 1) // grid
    best = np.empty((cells_y, cells_x), np.int32)
    check = min_consistent > 0 and src_R.shape[0] > 0
    for cy in prange(cells_y):
        for cx in range(cells_x):
            pick = -1
            pick_cost = np.float32(0)
            for y in range(cy * grid, min(H, (cy + 1) * grid)):
                for x in range(cx * grid, min(W, (cx + 1) * grid)):
                    d = depth[y, x]
                    c = cost[y, x]
                    if not _reliable(d, c, max_cost):
                        continue
                    if pick >= 0 and not c < pick_cost:
                        continue
                    if check and not _consistent(x, y, np.float64(d), K, K_inv, min_consistent, max_err, src_depth,
                                                 src_offset, src_size, src_K, src_K_inv, src_R, src_t):
                        continue
                    pick = y * W + x
                    pick_cost = c
            best[cy, cx] = pick
    return best


@njit(cache=True)
def prior_owner(tri, W, H):  # pragma: no cover (compiled)
    """Twin of prior_owner: each pixel whose centre lies inside or on the edges of triangles takes
    the lowest of their indices (triangles in index order, so the first one wins); exact integer
    edge tests, zero-area triangles own nothing."""
    owner = np.full((H, W), NO_OWNER, np.int32)
    for t in range(tri.shape[0]):
        x0, y0, x1, y1, x2, y2 = (np.int64(tri[t, 0]), np.int64(tri[t, 1]), np.int64(tri[t, 2]),
                                  np.int64(tri[t, 3]), np.int64(tri[t, 4]), np.int64(tri[t, 5]))
        area = (x1 - x0) * (y2 - y0) - (y1 - y0) * (x2 - x0)
        if area == 0:
            continue
        xmin, xmax = max(0, min(x0, x1, x2)), min(W - 1, max(x0, x1, x2))
        ymin, ymax = max(0, min(y0, y1, y2)), min(H - 1, max(y0, y1, y2))
        for py in range(ymin, ymax + 1):
            for px in range(xmin, xmax + 1):
                e0 = (x1 - x0) * (py - y0) - (y1 - y0) * (px - x0)
                e1 = (x2 - x1) * (py - y1) - (y2 - y1) * (px - x1)
                e2 = (x0 - x2) * (py - y2) - (y0 - y2) * (px - x2)
                inside = (e0 >= 0 and e1 >= 0 and e2 >= 0) if area > 0 else (e0 <= 0 and e1 <= 0 and e2 <= 0)
                if inside and owner[py, px] > t:
                    owner[py, px] = t
    return owner


@njit(cache=True, parallel=True)
def prior_fill(depth, cost, owner, planes, max_cost, K_inv):  # pragma: no cover (compiled)
    """Twin of prior_fill: (nx, ny, nz, depth) of the owning triangle's plane where the pixel is
    not reliable and the ray meets the plane in front of the camera, else zeros."""
    H, W = depth.shape
    T = planes.shape[0]
    prior = np.zeros((H, W, 4), np.float32)
    for y in prange(H):
        for x in range(W):
            t = owner[y, x]
            if t < 0 or t >= T or _reliable(depth[y, x], cost[y, x], max_cost):
                continue
            u = x + 0.5
            v = y + 0.5
            r0 = K_inv[0] * u + K_inv[1] * v + K_inv[2]
            r1 = K_inv[3] * u + K_inv[4] * v + K_inv[5]
            r2 = K_inv[6] * u + K_inv[7] * v + K_inv[8]
            z = planes[t, 3] / -(planes[t, 0] * r0 + planes[t, 1] * r1 + planes[t, 2] * r2)
            if np.isfinite(z) and z > 0.0:
                prior[y, x, 0] = np.float32(planes[t, 0])
                prior[y, x, 1] = np.float32(planes[t, 1])
                prior[y, x, 2] = np.float32(planes[t, 2])
                prior[y, x, 3] = np.float32(z)
    return prior
