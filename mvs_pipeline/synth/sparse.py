"""A sparse SfM-like model from the ground truth: surface points and tracks (colmap_writer.py writes it).

Points are seeded per view (random pixels with GT depth, back-projected, so every point lies
exactly on the mesh), then observed in every view that sees them: in the image (2 px margin),
in front, not at grazing incidence, and not occluded (a ray from that camera's centre reaches
the point). Points seen by fewer than MIN_TRACK_LENGTH views or with less than
MIN_TRIANGULATION_ANGLE between their rays are dropped, as triangulation would drop them.
Observed keypoints get a little noise (< 0.5 px), as detected features would.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import open3d as o3d

from .camera import Camera
from .render import make_rays

MIN_TRACK_LENGTH = 3
MIN_TRIANGULATION_ANGLE = np.radians(2.0)
MAX_INCIDENCE = np.radians(78.0)  # angle between the surface normal and the viewing ray
BORDER_PX = 2.0
VISIBILITY_TOLERANCE = 2e-3  # m (plus 1e-4 of the distance): hit this close to the point = visible
KEYPOINT_NOISE_PX = 0.15  # std of the Gaussian noise on observed keypoints
KEYPOINT_NOISE_MAX_PX = 0.45  # the noise vector's length is clipped here
MIN_POINTS_PER_IMAGE = 50


@dataclass
class Candidates:
    points: np.ndarray  # [M, 3] float64, world
    normals: np.ndarray  # [M, 3] float64, world, unit, facing the seeding camera


def sample_candidates(cam: Camera, depth: np.ndarray, normal_cam: np.ndarray, count: int,
                      rng: np.random.Generator) -> Candidates:
    """`count` random surface points seen at pixel centres of one view (fewer if the view has fewer)."""
    valid = np.flatnonzero(depth.ravel() > 0)
    pick = rng.choice(valid, size=min(count, len(valid)), replace=False) if len(valid) else valid
    pick.sort()
    rows, cols = np.divmod(pick, cam.width)
    uv = np.stack([cols + 0.5, rows + 0.5], axis=1)
    z = depth.ravel()[pick].astype(np.float64)
    points = cam.center + z[:, None] * cam.ray_directions(uv)
    normals = normal_cam.reshape(-1, 3)[pick].astype(np.float64) @ cam.R  # camera -> world
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    return Candidates(points, normals)


REACH_MARGIN = (0.5, 0.05)  # m + share of the depth: how far past its pixels' surface a view may see


def surface_box(cam: Camera, depth: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(lo, hi) world box (m) around the surface a view's pixel centres see (depth [H, W], 0 =
    nothing), widened by REACH_MARGIN: what it sees between its pixel centres lies inside too.
    A street view sees ~30 m of street; the box around its viewing pyramid spans ~90 m."""
    rows, cols = np.nonzero(depth > 0)
    if len(rows) == 0:
        return None
    z = depth[rows, cols].astype(np.float64)
    points = cam.center + z[:, None] * cam.ray_directions(np.stack([cols + 0.5, rows + 0.5], axis=1))
    margin = REACH_MARGIN[0] + REACH_MARGIN[1] * z.max()
    return points.min(axis=0) - margin, points.max(axis=0) + margin


class AxisIndex:
    """Points sorted along their longest axis: which of them may lie in a camera's view, found in
    O(log N) plus the answer's size (a street's views each see a stretch of it)."""

    def __init__(self, points: np.ndarray):
        self.axis = int(np.argmax(np.ptp(points, axis=0))) if len(points) else 0
        self.order = np.argsort(points[:, self.axis], kind="stable")
        self.coord = points[self.order, self.axis]

    def in_slab(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Sorted indices of the points between lo and hi [3] (m) along the indexed axis."""
        a = self.axis
        return np.sort(self.order[np.searchsorted(self.coord, lo[a], "left"):np.searchsorted(self.coord, hi[a], "right")])


def project_fast(cam: Camera, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Camera.project without BLAS: OpenBLAS spreads a [N, 3] @ [3, 3] product over every core,
    which on a loaded machine made it 10x slower than these six columns (70 vs 8 ms for 60k
    points, measured at load 10 on 2 cores); visibility projects every candidate into every view.
    Equal to Camera.project up to the last bit of rounding."""
    R, t, K = cam.R, cam.t, cam.K
    x, y, z = (points[:, 0] * R[i, 0] + points[:, 1] * R[i, 1] + points[:, 2] * R[i, 2] + t[i] for i in range(3))
    with np.errstate(divide="ignore", invalid="ignore"):
        uv = np.stack([(K[0, 0] * x + K[0, 2] * z) / z, (K[1, 1] * y + K[1, 2] * z) / z], axis=1)
    return uv, z


def visibility(cameras: list[Camera], rc: o3d.t.geometry.RaycastingScene, cand: Candidates,
               reach: list | None = None) -> np.ndarray:
    """[M, V] bool: which views observe which candidate points.

    reach[v]: None (view v sees nothing), or the world box (lo, hi) (m) that holds all it sees.
    Each view then tests only the candidates in the box (a range of the candidates sorted along
    the scene's longest axis, then the box), so a long scene costs each view a constant number
    of tests instead of one per candidate of the whole scene."""
    vis = np.zeros((len(cand.points), len(cameras)), dtype=bool)
    index = AxisIndex(cand.points)
    for v, cam in enumerate(cameras):
        subset = None
        if reach is not None:
            if reach[v] is None:
                continue
            lo, hi = reach[v]
            subset = index.in_slab(lo, hi)
            subset = subset[np.all((cand.points[subset] >= lo) & (cand.points[subset] <= hi), axis=1)]
        points = cand.points if subset is None else cand.points[subset]
        uv, z = project_fast(cam, points)
        inside = np.flatnonzero((z > 0) & (uv[:, 0] >= BORDER_PX) & (uv[:, 0] <= cam.width - BORDER_PX)
                                & (uv[:, 1] >= BORDER_PX) & (uv[:, 1] <= cam.height - BORDER_PX))
        to_point = points[inside] - cam.center
        dist = np.sqrt(to_point[:, 0] ** 2 + to_point[:, 1] ** 2 + to_point[:, 2] ** 2)
        normals = cand.normals[inside if subset is None else subset[inside]]
        cos_inc = -np.einsum("ij,ij->i", normals, to_point) / dist
        # A point seen from the back of its surface has cos_inc < 0: its own surface hides it.
        front = cos_inc > np.cos(MAX_INCIDENCE)
        idx, to_point, dist = inside[front], to_point[front], dist[front]
        if len(idx) == 0:
            continue
        # Direction = the full vector to the point, so t = 1 is the point itself.
        t_hit = rc.cast_rays(make_rays(cam.center, to_point))["t_hit"].numpy()
        tol = (VISIBILITY_TOLERANCE + 1e-4 * dist) / dist
        vis[idx if subset is None else subset[idx], v] = t_hit >= 1.0 - tol
    return vis


def _pairwise_min_cos(rays: np.ndarray) -> np.ndarray:
    """[m] smallest cosine between any two of each point's unit rays [m, L, 3]."""
    return np.einsum("mvc,mwc->mvw", rays, rays).min(axis=(1, 2))


def keep_triangulable(cameras: list[Camera], cand: Candidates, vis: np.ndarray) -> np.ndarray:
    """[M] bool: tracks of >= MIN_TRACK_LENGTH views, two of whose rays meet at >= MIN_TRIANGULATION_ANGLE.

    Work per observation, not per (point, view, view): a point whose rays include two at the
    angle already passes when one of them is its first ray (nearly every point); only the others
    compare all pairs of their own rays."""
    keep = vis.sum(axis=1) >= MIN_TRACK_LENGTH
    point, view = np.nonzero(vis & keep[:, None])   # by point, then view
    if len(point) == 0:
        return keep
    centers = np.stack([c.center for c in cameras])
    rays = cand.points[point] - centers[view]
    rays /= np.linalg.norm(rays, axis=1, keepdims=True)
    first = np.searchsorted(point, point, "left")   # index of each point's first observation
    cos_first = np.einsum("mc,mc->m", rays, rays[first])
    wide = np.zeros(len(keep), bool)
    np.logical_or.at(wide, point, np.arccos(np.clip(cos_first, -1.0, 1.0)) >= MIN_TRIANGULATION_ANGLE)
    # All rays within the angle of the first: the widest pair may still reach it (up to twice).
    narrow = np.flatnonzero(keep & ~wide)
    starts = np.searchsorted(point, narrow, "left")
    lengths = np.searchsorted(point, narrow, "right") - starts
    for length in np.unique(lengths):
        sel = lengths == length
        group = rays[starts[sel, None] + np.arange(length)]   # [m, L, 3]
        angle = np.arccos(np.clip(_pairwise_min_cos(group), -1.0, 1.0))
        wide[narrow[sel]] = angle >= MIN_TRIANGULATION_ANGLE
    return keep & wide


@dataclass
class SparseModel:
    points: np.ndarray  # [P, 3] float64, world
    visible: np.ndarray  # [P, V] bool, which views observe each point
    keypoints: list[np.ndarray]  # per view: [P_v, 2] float64 observed image coordinates
    keypoint_point_idx: list[np.ndarray]  # per view: [P_v] int64, index into `points`
    colors: np.ndarray  # [P, 3] uint8

    def observations_per_view(self) -> np.ndarray:
        return self.visible.sum(axis=0)


def observe(cameras: list[Camera], points: np.ndarray, vis: np.ndarray, rng: np.random.Generator
            ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Noisy keypoints of every visible point in every view, ordered by point index."""
    keypoints, point_idx = [], []
    for v, cam in enumerate(cameras):
        idx = np.flatnonzero(vis[:, v])
        uv, _ = cam.project(points[idx])
        noise = rng.normal(0.0, KEYPOINT_NOISE_PX, uv.shape)
        length = np.linalg.norm(noise, axis=1, keepdims=True)
        noise *= np.minimum(1.0, KEYPOINT_NOISE_MAX_PX / np.maximum(length, 1e-12))
        keypoints.append(uv + noise)
        point_idx.append(idx.astype(np.int64))
    return keypoints, point_idx


def point_colors(images: list[np.ndarray] | None, num_points: int, keypoints: list[np.ndarray],
                 point_idx: list[np.ndarray], load_image=None) -> np.ndarray:
    """[P, 3] uint8 mean colour of each point's observed pixels over its track.

    Images come either as a list of [H, W, 3] uint8 RGB arrays or one at a time from
    `load_image(view_idx)` (keeps memory flat for large scenes).
    """
    total = np.zeros((num_points, 3))
    count = np.zeros(num_points)
    for v, (kp, pidx) in enumerate(zip(keypoints, point_idx)):
        if len(pidx) == 0:
            continue
        img = images[v] if images is not None else load_image(v)
        cols = np.clip(np.floor(kp[:, 0]).astype(np.int64), 0, img.shape[1] - 1)
        rows = np.clip(np.floor(kp[:, 1]).astype(np.int64), 0, img.shape[0] - 1)
        np.add.at(total, pidx, img[rows, cols].astype(np.float64))
        np.add.at(count, pidx, 1.0)
    return np.clip(np.rint(total / np.maximum(count, 1.0)[:, None]), 0, 255).astype(np.uint8)
