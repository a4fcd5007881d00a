"""The host part of the planar prior: the Delaunay triangulation of the support points and one
plane per triangle. Both act on the few thousand support points and triangles of a view, not on
its pixels, and serve both backends.

    simplices = triangulate(xs, ys, W, H)                                   # [T, 3] point indices
    tri, planes = triangle_planes(K, xs, ys, zs, simplices, max_edge)   # the kept triangles only

OpenCV's Subdiv2D rather than scipy's Qhull: 3-4x faster on an 800x600 view's support points
(BENCHMARKS.md, Planar prior), and ACMMP uses it too. Its outer triangle is built from the
bounding rectangle, so the rectangle is the image grown by MARGIN image sizes on every side: with
the image itself, thin hull triangles were missing (12 of 5,978 for 3,000 random points at
800x600; none with the margin there, 2 of 5,976 at 3200x2130).
"""

from __future__ import annotations

import numpy as np

# A triangle whose plane meets its centroid's ray at more than this angle from the normal is
# dropped: near-grazing planes come from triangles joining a foreground and a background surface.
MAX_GRAZING_DEGREES = 80.0

# Subdiv2D's bounding rectangle: the image plus this many image sizes on each side.
MARGIN = 10


def triangulate(xs: np.ndarray, ys: np.ndarray, width: int, height: int) -> np.ndarray:
    """[T, 3] int64 indices into (xs, ys) (distinct integer pixels of a width x height image) of
    their Delaunay triangles (cocircular points: one of the valid triangulations)."""
    import cv2  # noqa: PLC0415 (only the planar pass needs it here)

    xs, ys = np.asarray(xs, np.int64), np.asarray(ys, np.int64)
    if len(xs) < 3:
        return np.zeros((0, 3), np.int64)
    sub = cv2.Subdiv2D((-MARGIN * width, -MARGIN * height, (2 * MARGIN + 1) * width, (2 * MARGIN + 1) * height))
    sub.insert(np.stack([xs, ys], -1).astype(np.float32))
    corners = sub.getTriangleList().reshape(-1, 3, 2)    # vertex coordinates, the outer triangle's too
    if not len(corners):
        return np.zeros((0, 3), np.int64)
    cx, cy = corners[..., 0].astype(np.int64), corners[..., 1].astype(np.int64)
    real = ((corners[..., 0] >= 0) & (corners[..., 0] < width) & (corners[..., 1] >= 0)
            & (corners[..., 1] < height)).all(1)       # drops the triangles with an outer vertex
    keys = cy[real] * width + cx[real]
    pixel = ys * width + xs
    order = np.argsort(pixel)
    return order[np.searchsorted(pixel[order], keys)]


def _rays(K_inv: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """[N, 3] rays K^-1 (x + 0.5, y + 0.5, 1) of integer pixels, elementwise (no BLAS threads:
    they cost more than the work on small arrays, 10x with two of them on a busy 2-core machine)."""
    u, v = xs + 0.5, ys + 0.5
    return np.stack([K_inv[0, 0] * u + K_inv[0, 1] * v + K_inv[0, 2],
                     K_inv[1, 0] * u + K_inv[1, 1] * v + K_inv[1, 2],
                     K_inv[2, 0] * u + K_inv[2, 1] * v + K_inv[2, 2]], -1)


def triangle_planes(K: np.ndarray, xs: np.ndarray, ys: np.ndarray, zs: np.ndarray, simplices: np.ndarray,
                    max_edge: float) -> tuple[np.ndarray, np.ndarray]:
    """The plane through each triangle's vertices' 3-D points (pixel (x, y) at z-depth z), facing
    the camera; triangles with an image edge longer than max_edge px, a zero image area, or a
    plane seen at more than MAX_GRAZING_DEGREES are dropped. Returns (tri [Tk, 6] int32 vertex
    pixels x0 y0 x1 y1 x2 y2, planes [Tk, 4] float64 nx ny nz dist with n . X + dist = 0 and
    dist > 0) of the kept triangles, in their order in `simplices`."""
    xs, ys = np.asarray(xs, np.int64), np.asarray(ys, np.int64)
    P = _rays(np.linalg.inv(np.asarray(K, np.float64)), xs, ys) * np.asarray(zs, np.float64)[:, None]
    a, b, c = P[simplices[:, 0]], P[simplices[:, 1]], P[simplices[:, 2]]
    n = np.cross(b - a, c - a)
    norm = np.linalg.norm(n, axis=1)
    valid = norm > 0
    n = n / np.where(valid, norm, 1.0)[:, None]
    centroid = (a + b + c) / 3.0
    facing = np.sign(-(n * centroid).sum(1))                               # face the camera: n . X < 0
    n *= np.where(facing == 0, 1.0, facing)[:, None]
    cos_view = -(n * centroid).sum(1) / np.linalg.norm(centroid, axis=1)
    valid &= cos_view > np.cos(np.radians(MAX_GRAZING_DEGREES))
    tx, ty = xs[simplices], ys[simplices]                                  # [T, 3]
    edge = np.hypot(tx - np.roll(tx, -1, 1), ty - np.roll(ty, -1, 1)).max(1)
    valid &= edge <= max_edge
    area = (tx[:, 1] - tx[:, 0]) * (ty[:, 2] - ty[:, 0]) - (ty[:, 1] - ty[:, 0]) * (tx[:, 2] - tx[:, 0])
    valid &= area != 0
    dist = -(n * a).sum(1)
    tri = np.stack([tx[:, 0], ty[:, 0], tx[:, 1], ty[:, 1], tx[:, 2], ty[:, 2]], -1)[valid].astype(np.int32)
    planes = np.concatenate([n, dist[:, None]], -1)[valid]
    return np.ascontiguousarray(tri), np.ascontiguousarray(planes)
