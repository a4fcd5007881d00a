"""The planar prior's support points as the host built them before the kernels (vectorized NumPy:
every reliable pixel checked against every source, then the lowest cost per cell by a sort), kept
as an independent reference for the per-cell kernel and its twin."""

from __future__ import annotations

import numpy as np


def _rays(K, xs, ys):
    pts = np.stack([xs + 0.5, ys + 0.5, np.ones(len(xs))], -1)
    return pts @ np.linalg.inv(K).T


def consistent_views(K, xs, ys, depth, sources, max_reproj_error):
    """[N] number of sources (planar_prior.SourceMaps) whose depth map sends each pixel's 3-D point
    back within max_reproj_error px of where it came from."""
    X = _rays(K, xs, ys) * depth[:, None]
    u0 = np.stack([xs + 0.5, ys + 0.5], -1)
    count = np.zeros(len(xs), np.int32)
    for s in sources:
        Xs = X @ np.asarray(s.R).T + s.t
        with np.errstate(divide="ignore", invalid="ignore"):
            p = Xs @ np.asarray(s.K).T
            us, vs = p[:, 0] / p[:, 2], p[:, 1] / p[:, 2]
        hs, ws = s.depth.shape
        ok = (Xs[:, 2] > 0) & (us >= 0) & (us < ws) & (vs >= 0) & (vs < hs)
        ds = np.zeros(len(xs))
        ds[ok] = s.depth[vs[ok].astype(np.int64), us[ok].astype(np.int64)]
        ok &= np.isfinite(ds) & (ds > 0)
        back = (np.stack([us, vs, np.ones(len(xs))], -1) @ np.linalg.inv(s.K).T) * ds[:, None]
        Xb = (back - s.t) @ np.asarray(s.R)
        with np.errstate(divide="ignore", invalid="ignore"):
            q = Xb @ np.asarray(K).T
            err = np.hypot(q[:, 0] / q[:, 2] - u0[:, 0], q[:, 1] / q[:, 2] - u0[:, 1])
        count += (ok & (Xb[:, 2] > 0) & (err <= max_reproj_error)).astype(np.int32)
    return count


def support_points(depth, cost, K, settings, sources=None):
    """(xs, ys) int64 of the support points in cell order: reliable pixels, consistent with
    settings.min_consistent sources, the lowest cost per grid cell (row-major first on ties)."""
    H, W = depth.shape
    reliable = np.isfinite(depth) & (depth > 0) & (cost < settings.max_cost)
    ys, xs = np.nonzero(reliable)
    if sources and settings.min_consistent > 0 and len(xs):
        keep = consistent_views(K, xs, ys, depth[ys, xs].astype(np.float64), sources,
                                settings.max_reproj_error) >= settings.min_consistent
        xs, ys = xs[keep], ys[keep]
    g = settings.grid
    cell = (ys // g) * ((W + g - 1) // g) + xs // g
    order = np.lexsort((cost[ys, xs], cell))
    first = np.ones(len(order), bool)
    first[1:] = cell[order][1:] != cell[order][:-1]
    pick = order[first]
    return xs[pick], ys[pick]
