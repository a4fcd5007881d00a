"""Planar prior maps from a finished pass (ACMP, Xu & Tao AAAI 2020), built on the host.

    prior, stats = build_planar_prior(depth, normal, cost, K, settings, sources)

1. support points: pixels with a depth and cost below `max_cost`, geometrically consistent with
   at least `min_consistent` sources' maps of the same pass (forward-backward reprojection within
   `max_reproj_error` px, ACMM's check), at most one per `grid` x `grid` cell (its lowest cost);
2. Delaunay triangulation of their pixel centres (scipy.spatial.Delaunay);
3. per triangle the plane through its vertices' 3-D points; triangles with an image edge longer
   than `max_edge` px or seen at a grazing angle (typically spanning a depth discontinuity) are
   dropped;
4. rasterised: each pixel inside a kept triangle gets the plane's normal and its depth along the
   pixel's ray; pixels that were already reliable (cost below `max_cost`) get no prior, so the
   term acts only where the photometric cost was ambiguous.

prior: [H, W, 4] float32 (nx, ny, nz, depth), depth 0 where there is no prior: what
PatchMatchProblem.planar_prior takes. The CPU and the GPU run use the same host code, so the
prior does not depend on the backend.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A triangle whose plane meets its centroid's ray at more than this angle from the normal is
# dropped: near-grazing planes come from triangles joining a foreground and a background surface.
MAX_GRAZING_DEGREES = 80.0


@dataclass(frozen=True)
class PriorSettings:
    """The depth section's planar_prior_* keys (depth/params.py gives units and ranges)."""
    max_cost: float
    grid: int
    max_edge: float
    min_consistent: int
    max_reproj_error: float


@dataclass(frozen=True)
class SourceMaps:
    """One source's depth map of the same pass and its pose relative to the reference."""
    depth: np.ndarray    # [Hs, Ws] float32 z-depth, <= 0 or non-finite = none
    K: np.ndarray        # [3, 3]
    R: np.ndarray        # [3, 3] x_src = R x_ref + t
    t: np.ndarray        # [3]


def _rays(K: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """[N, 3] rays K^-1 (x + 0.5, y + 0.5, 1) (z = 1) of integer pixels."""
    pts = np.stack([xs + 0.5, ys + 0.5, np.ones(len(xs))], -1)
    return pts @ np.linalg.inv(K).T


def consistent_views(K: np.ndarray, xs, ys, depth: np.ndarray, sources: list[SourceMaps],
                     max_reproj_error: float) -> np.ndarray:
    """[N] number of sources whose depth map sends each pixel's 3-D point back within
    max_reproj_error px of where it came from (ACMM's forward-backward check, nearest pixel)."""
    X = _rays(K, xs, ys) * depth[:, None]                                  # [N, 3] reference frame
    u0 = np.stack([xs + 0.5, ys + 0.5], -1)
    count = np.zeros(len(xs), np.int32)
    for s in sources:
        Xs = X @ s.R.T + s.t
        with np.errstate(divide="ignore", invalid="ignore"):
            p = Xs @ s.K.T
            us, vs = p[:, 0] / p[:, 2], p[:, 1] / p[:, 2]
        hs, ws = s.depth.shape
        ok = (Xs[:, 2] > 0) & (us >= 0) & (us < ws) & (vs >= 0) & (vs < hs)
        ds = np.zeros(len(xs))
        ds[ok] = s.depth[vs[ok].astype(np.int64), us[ok].astype(np.int64)]
        ok &= np.isfinite(ds) & (ds > 0)
        back = (np.stack([us, vs, np.ones(len(xs))], -1) @ np.linalg.inv(s.K).T) * ds[:, None]   # source frame
        Xb = (back - s.t) @ s.R                                            # R^T (x - t), reference frame
        with np.errstate(divide="ignore", invalid="ignore"):
            q = Xb @ K.T
            err = np.hypot(q[:, 0] / q[:, 2] - u0[:, 0], q[:, 1] / q[:, 2] - u0[:, 1])
        count += (ok & (Xb[:, 2] > 0) & (err <= max_reproj_error)).astype(np.int32)
    return count


def support_points(depth: np.ndarray, cost: np.ndarray, K: np.ndarray, settings: PriorSettings,
                   sources: list[SourceMaps] | None) -> tuple[np.ndarray, np.ndarray]:
    """(xs, ys) int64 of the support points: reliable pixels, the lowest cost per grid cell."""
    H, W = depth.shape
    reliable = np.isfinite(depth) & (depth > 0) & (cost < settings.max_cost)
    ys, xs = np.nonzero(reliable)
    if sources and settings.min_consistent > 0 and len(xs):
        keep = consistent_views(K, xs, ys, depth[ys, xs].astype(np.float64), sources,
                                settings.max_reproj_error) >= settings.min_consistent
        xs, ys = xs[keep], ys[keep]
    g = settings.grid
    cell = (ys // g) * ((W + g - 1) // g) + xs // g
    order = np.lexsort((cost[ys, xs], cell))                               # by cell, then cost
    first = np.ones(len(order), bool)
    first[1:] = cell[order][1:] != cell[order][:-1]
    pick = order[first]
    return xs[pick], ys[pick]


def build_planar_prior(depth: np.ndarray, normal: np.ndarray, cost: np.ndarray, K: np.ndarray,
                       settings: PriorSettings, sources: list[SourceMaps] | None = None
                       ) -> tuple[np.ndarray, dict]:
    """Planar prior [H, W, 4] float32 of one view from its maps (depth, cost [H, W]; normal
    [H, W, 3] is not used by the planes, which come from the vertices' points, and is taken for
    a symmetric call) and optional sources' maps of the same pass; stats for the log."""
    from scipy.spatial import Delaunay  # noqa: PLC0415 (only the planar-prior pass needs it)

    del normal
    depth = np.asarray(depth, np.float32)
    cost = np.asarray(cost, np.float32)
    K = np.asarray(K, np.float64)
    H, W = depth.shape
    prior = np.zeros((H, W, 4), np.float32)
    xs, ys = support_points(depth, cost, K, settings, sources)
    stats = {"support_points": int(len(xs)), "triangles": 0, "triangles_kept": 0, "prior_pixels": 0}
    if len(xs) < 3:
        return prior, stats
    uv = np.stack([xs + 0.5, ys + 0.5], -1)
    try:
        tri = Delaunay(uv)
    except Exception:   # scipy.spatial.QhullError: all points on a line  # noqa: BLE001
        return prior, stats
    simp = tri.simplices                                                   # [T, 3]
    P = _rays(K, xs, ys) * depth[ys, xs].astype(np.float64)[:, None]       # [N, 3] vertices' points
    a, b, c = P[simp[:, 0]], P[simp[:, 1]], P[simp[:, 2]]
    n = np.cross(b - a, c - a)
    norm = np.linalg.norm(n, axis=1)
    valid = norm > 0
    n = n / np.where(valid, norm, 1.0)[:, None]
    centroid = (a + b + c) / 3.0
    facing = np.sign(-(n * centroid).sum(1))                               # face the camera: n . X < 0
    n *= np.where(facing == 0, 1.0, facing)[:, None]
    cos_view = -(n * centroid).sum(1) / np.linalg.norm(centroid, axis=1)
    valid &= cos_view > np.cos(np.radians(MAX_GRAZING_DEGREES))
    e = uv[simp]                                                           # [T, 3, 2]
    edges = np.stack([np.linalg.norm(e[:, i] - e[:, (i + 1) % 3], axis=1) for i in range(3)], 1)
    valid &= edges.max(1) <= settings.max_edge
    stats["triangles"], stats["triangles_kept"] = int(len(simp)), int(valid.sum())
    # rasterise: the pixels whose centre lies in a kept triangle, and not reliable themselves
    gy, gx = np.mgrid[0:H, 0:W]
    which = tri.find_simplex(np.stack([gx.ravel() + 0.5, gy.ravel() + 0.5], -1)).reshape(H, W)
    inside = which >= 0
    inside[inside] = valid[which[inside]]
    inside &= ~(np.isfinite(depth) & (depth > 0) & (cost < settings.max_cost))
    py, px = np.nonzero(inside)
    t = which[py, px]
    dist = -(n[t] * a[t]).sum(1)                                           # plane n.X + dist = 0, dist > 0
    rays = _rays(K, px, py)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = dist / -(n[t] * rays).sum(1)
    ok = np.isfinite(z) & (z > 0)
    prior[py[ok], px[ok], :3] = n[t[ok]]
    prior[py[ok], px[ok], 3] = z[ok]
    stats["prior_pixels"] = int(ok.sum())
    return prior, stats
