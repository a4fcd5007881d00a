"""CPU twins of `cuda/depth_scale_ops.cu` (Numba, float32): joint bilateral upsampling and the depth
post-filter used between the scales of multi-scale PatchMatch.

    jbu_upsample(coarse_depth [h, w], coarse_normal [h, w, 3], guide [H, W], radius, a_s, a_r)
        -> depth [H, W] float32, normal [H, W, 3] float32
    postfilter_depth(depth [H, W], cost [H, W], max_cost, median) -> depth [H, W] float32

Same float32 arithmetic in the same order as the kernels, so CPU and GPU agree to a few ulps
(expf may differ in the last bit). Arguments are assumed validated by ops.py:
a_s = 1 / (2 sigma_spatial^2) and a_r = 1 / (2 sigma_range^2) as float32 scalars, max_cost the
largest float32 not above the requested threshold.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

# Other-colour checkerboard neighbours (dx, dy), in the order of PF_OFF_X / PF_OFF_Y.
CHECKERBOARD_OFFSETS = np.array(
    [(-1, 0), (1, 0), (-3, 0), (3, 0), (-5, 0), (5, 0),
     (0, -1), (0, 1), (0, -3), (0, 3), (0, -5), (0, 5),
     (-1, -2), (1, -2), (-1, 2), (1, 2), (-2, -1), (2, -1), (-2, 1), (2, 1)], dtype=np.int64)


@njit(cache=True, nogil=True, inline="always")
def _log_weight(qx, qy, cx, cy, g0, guide, w, h, a_s, a_r):  # pragma: no cover (compiled)
    """Log-weight of coarse pixel (qx, qy); the guide pixel under q's centre in integer arithmetic."""
    H, W = guide.shape
    fx = min(max(((2 * qx + 1) * W) // (2 * w), 0), W - 1)
    fy = min(max(((2 * qy + 1) * H) // (2 * h), 0), H - 1)
    dx = np.float32(qx) - cx
    dy = np.float32(qy) - cy
    dg = g0 - guide[fy, fx]
    return -(dx * dx + dy * dy) * a_s - dg * dg * a_r


@njit(cache=True, nogil=True, inline="always")
def _valid(d):  # pragma: no cover (compiled)
    return d > 0 and np.isfinite(d)


@njit(cache=True, parallel=True)
def jbu_upsample(coarse_depth, coarse_normal, guide, radius, a_s, a_r):  # pragma: no cover (compiled)
    """Twin of the jbu_upsample kernel: (depth [H, W], normal [H, W, 3]) float32."""
    h, w = coarse_depth.shape
    H, W = guide.shape
    depth = np.empty((H, W), np.float32)
    normal = np.empty((H, W, 3), np.float32)
    half = np.float32(0.5)
    for Y in prange(H):
        cy = np.float32((2 * Y + 1) * h) / np.float32(2 * H) - half
        iy = ((2 * Y + 1) * h) // (2 * H)
        for X in range(W):
            cx = np.float32((2 * X + 1) * w) / np.float32(2 * W) - half
            ix = ((2 * X + 1) * w) // (2 * W)
            g0 = guide[Y, X]
            # pass 1: largest log-weight (first in row-major window order on ties)
            e_max = np.float32(-np.inf)
            qx_max = qy_max = -1
            for j in range(-radius, radius + 1):
                qy = iy + j
                if qy < 0 or qy >= h:
                    continue
                for i in range(-radius, radius + 1):
                    qx = ix + i
                    if qx < 0 or qx >= w or not _valid(coarse_depth[qy, qx]):
                        continue
                    e = _log_weight(qx, qy, cx, cy, g0, guide, w, h, a_s, a_r)
                    if qx_max < 0 or e > e_max:
                        e_max, qx_max, qy_max = e, qx, qy
            if qx_max < 0:
                depth[Y, X] = 0
                normal[Y, X, :] = 0
                continue
            # pass 2: weighted sums with weights exp(e - e_max) in (0, 1]
            sw = sd = snx = sny = snz = np.float32(0)
            for j in range(-radius, radius + 1):
                qy = iy + j
                if qy < 0 or qy >= h:
                    continue
                for i in range(-radius, radius + 1):
                    qx = ix + i
                    if qx < 0 or qx >= w:
                        continue
                    d = coarse_depth[qy, qx]
                    if not _valid(d):
                        continue
                    wt = np.float32(np.exp(_log_weight(qx, qy, cx, cy, g0, guide, w, h, a_s, a_r) - e_max))
                    sw += wt
                    sd += wt * d
                    snx += wt * coarse_normal[qy, qx, 0]
                    sny += wt * coarse_normal[qy, qx, 1]
                    snz += wt * coarse_normal[qy, qx, 2]
            depth[Y, X] = sd / sw
            len2 = snx * snx + sny * sny + snz * snz
            if len2 > 0:
                inv = np.float32(1) / np.float32(np.sqrt(len2))
                normal[Y, X, 0] = snx * inv
                normal[Y, X, 1] = sny * inv
                normal[Y, X, 2] = snz * inv
            else:  # the weighted normals cancel: keep the normal of the strongest neighbour
                normal[Y, X, :] = coarse_normal[qy_max, qx_max, :]
    return depth, normal


@njit(cache=True, parallel=True)
def _kept_depth(depth, cost, max_cost):  # pragma: no cover (compiled)
    """depth where cost <= max_cost and depth is positive and finite, else 0."""
    H, W = depth.shape
    out = np.empty((H, W), np.float32)
    for y in prange(H):
        for x in range(W):
            d = depth[y, x]
            out[y, x] = d if (cost[y, x] <= max_cost and _valid(d)) else np.float32(0)
    return out


@njit(cache=True, parallel=True)
def _checkerboard_median(kept, offsets):  # pragma: no cover (compiled)
    """Median of each non-zero pixel and its non-zero checkerboard neighbours; reads only `kept`."""
    H, W = kept.shape
    out = np.empty((H, W), np.float32)
    half = np.float32(0.5)
    for y in prange(H):
        v = np.empty(offsets.shape[0] + 1, np.float32)
        for x in range(W):
            d0 = kept[y, x]
            if d0 == 0:
                out[y, x] = 0
                continue
            v[0] = d0
            n = 1
            for k in range(offsets.shape[0]):
                qx = x + offsets[k, 0]
                qy = y + offsets[k, 1]
                if qx < 0 or qx >= W or qy < 0 or qy >= H:
                    continue
                d = kept[qy, qx]
                if d == 0:
                    continue
                m = n
                n += 1
                while m > 0 and v[m - 1] > d:  # insertion sort, as in the kernel
                    v[m] = v[m - 1]
                    m -= 1
                v[m] = d
            out[y, x] = v[n // 2] if n % 2 == 1 else (v[n // 2 - 1] + v[n // 2]) * half
    return out


def postfilter_depth(depth: np.ndarray, cost: np.ndarray, max_cost: np.float32, median: bool) -> np.ndarray:
    """Twin of the postfilter_depth kernel: cost threshold, then the optional checkerboard median."""
    kept = _kept_depth(depth, cost, np.float32(max_cost))
    return _checkerboard_median(kept, CHECKERBOARD_OFFSETS) if median else kept
