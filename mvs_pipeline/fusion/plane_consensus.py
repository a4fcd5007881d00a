"""One plane per wall across views (`fusion.weak_plane_consensus`): the weak planes of a view and its neighbours
that lie on the same wall, fitted jointly before fusing (issue #37).

Each view fits its weakly textured regions' planes to its own depths (weak_planes.py). On a far blank wall those
depths are noisy with a long tail, and one view's plane can be off by more than the evaluation's 2 cm where its
region is small or its matching was poor, while other views see the same wall with better depths: on the CPU maps
of a synthetic 320x240 room the planes' pixels lay within 2 cm of the truth at 0.889, and at 0.930 once each plane
was replaced by the least-squares plane of the 3-D points of every plane of the view and its neighbours within
`angle` and `offset` of it (BENCHMARKS.md, Quality suite, session 43). A view with no such partner keeps its own
plane. Neighbours' planes also agree better with each other, which is what fusion's depth agreement asks.

What is computed here depends only on the view's and its neighbours' maps and images (each view's planes come from
the generator seeded by the view, as in weak_planes.py), so every path that loads a view (CPU and CUDA fusion, a
cluster's ranges, a fusion beside the depth stage) puts its depths on the same planes. Beside the depth stage a
view's loader waits for its neighbours' final maps too.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from .weak_planes import WeakPlanes, _centres, find_planes, plane_depth, resolved

SAMPLE_POINTS = 1000   # 3-D points kept per plane (on the view's plane, evenly over its inliers) for the joint fit:
#                        the study's 3000 gave the CPU maps of room_seen 320x240 the same F1 (0.8077), and 1000 views
#                        x 5 planes stay ~120 MB
TRIM_ROUNDS = 3   # joint refits on the points within TRIM_SIGMAS robust deviations of the plane
TRIM_SIGMAS = 2.0


@dataclass(frozen=True)
class WorldPlane:
    view_idx: int
    region: int     # the region's number in find_planes' order
    k: int          # the plane's number within its region
    normal: np.ndarray   # [3] unit, world frame, n . X = offset, facing the view's camera (n . C > offset)
    offset: float   # metres
    depth: float    # metres: the median depth of its inliers in its view (the scale of `offset`'s tolerance)
    points: np.ndarray   # [m, 3] world points on the plane at its inliers (at most SAMPLE_POINTS)


def view_regions(view_idx: int, depth: np.ndarray, weak: np.ndarray, K: np.ndarray, params: WeakPlanes) -> list:
    """find_planes of a view, as snap_weak_planes finds them (seeded by the view)."""
    return find_planes(depth, weak, resolved(params, K), seed=view_idx)


def world_planes(view_idx: int, regions: list, K: np.ndarray, R: np.ndarray, t: np.ndarray) -> list[WorldPlane]:
    """The view's weak planes (`regions`: view_regions) in the world frame (R, t: cam_from_world)."""
    k_inv = np.linalg.inv(K)
    centre = -R.T @ t
    out = []
    for r, (y, x, planes) in enumerate(regions):
        for k, (coef, on) in enumerate(planes):
            step = max(1, len(on) // SAMPLE_POINTS)
            u, v = _centres(y[on][::step], x[on][::step])
            z = plane_depth(coef, u, v)
            cam = (np.stack([u, v, np.ones_like(u)], axis=1) @ k_inv.T) * z[:, None]
            n_cam = K.T @ coef   # n_cam . X_cam = 1 (weak_planes.plane_normal)
            normal = R.T @ n_cam
            offset = 1.0 - float(n_cam @ t)   # n_cam . (R X + t) = 1
            scale = float(np.linalg.norm(normal))
            normal, offset = normal / scale, offset / scale
            if float(normal @ centre) < offset:   # facing the camera: one wall seen from its front by every view
                normal, offset = -normal, -offset
            out.append(WorldPlane(view_idx, r, k, normal, offset, float(np.median(z)), (cam - t) @ R))
    return out


def joint_coefs(view_planes: list[WorldPlane], others: list[WorldPlane], K: np.ndarray, R: np.ndarray,
                t: np.ndarray, angle_deg: float, offset: float) -> dict:
    """{(region, k): coef} of the view's planes that share their wall with a plane of another view (`others`: its
    neighbours' planes): each replaced by the plane fitted to the points of all planes within angle_deg of its
    normal and offset x its depth of its offset, as 1/z = coef . (u, v, 1) in the view (K, R, t)."""
    cos = np.cos(np.radians(angle_deg))
    k_inv_t = np.linalg.inv(K).T
    out = {}
    pool = view_planes + others
    for p in view_planes:
        members = [q for q in pool if float(p.normal @ q.normal) > cos and abs(p.offset - q.offset) < offset * p.depth]
        if all(q.view_idx == p.view_idx for q in members):
            continue
        normal, off = _fit(np.concatenate([q.points for q in members]))
        if float(normal @ p.normal) < 0:
            normal, off = -normal, -off
        n_cam = R @ normal
        d_cam = off + float(n_cam @ t)   # n . X = off with X = R^T (X_cam - t)
        if abs(d_cam) < 1e-9:   # the camera on the plane (either side will do: n_cam / d_cam is the same plane)
            continue
        out[p.region, p.k] = k_inv_t @ n_cam / d_cam
    return out


def _fit(points: np.ndarray) -> tuple[np.ndarray, float]:
    """(unit normal, offset) of the total-least-squares plane of `points`, refitted TRIM_ROUNDS times on those
    within TRIM_SIGMAS robust deviations (the walls' planes of some views are off; they must not pull)."""
    keep = np.ones(len(points), bool)
    for _ in range(TRIM_ROUNDS + 1):
        centre = points[keep].mean(axis=0)
        normal = np.linalg.svd(points[keep] - centre, full_matrices=False)[2][2]
        off = float(normal @ centre)
        r = points @ normal - off
        med = np.median(r[keep])
        keep = np.abs(r - med) <= max(1e-4, TRIM_SIGMAS * 1.4826 * float(np.median(np.abs(r[keep] - med))))
        if np.count_nonzero(keep) < 3:
            break
    return normal, off


class PlaneConsensus:
    """Each view's joint planes (joint_coefs), computed when its loader first asks: the view's and its neighbours'
    world planes, each view's once (cached, one computation at a time per view), waiting for their final maps on
    `gate` when fusion runs beside the depth stage (fusion/trailing.MapsGate; None: every map is written).
    neighbours(v) -> the views whose planes may share v's walls; regions_of(v) -> view_regions of v;
    camera(v) -> (K, R, t). A view's regions are kept until its load takes them (take), so its planes are found
    once, not again by snap_weak_planes."""

    def __init__(self, neighbours, regions_of, camera, angle_deg: float, offset: float, gate=None):
        self.neighbours, self.regions_of, self.camera = neighbours, regions_of, camera
        self.angle_deg, self.offset, self.gate = angle_deg, offset, gate
        self._lock = threading.Lock()
        self._view_locks: dict[int, threading.Lock] = {}
        self._planes: dict[int, list[WorldPlane]] = {}
        self._regions: dict[int, list] = {}   # found, not yet taken by the view's load
        self._joint: dict[int, dict] = {}
        self.seconds = 0.0   # summed over the loader threads

    def take(self, v: int) -> tuple[dict, list | None]:
        """(joint coefs, found regions) for view v's load: the regions once (a reload finds them again)."""
        coefs = self.joint(v)
        with self._lock:
            return coefs, self._regions.pop(v, None)

    def joint(self, v: int) -> dict:
        """{(region, plane): coef} of view v (joint_coefs against its neighbours' planes)."""
        with self._view_lock(("joint", v)):
            if v not in self._joint:
                own = self._planes_of(v)
                others = [q for j in self.neighbours(v) for q in self._planes_of(j)] if own else []
                t0 = time.perf_counter()
                found = joint_coefs(own, others, *self.camera(v), self.angle_deg, self.offset) if others else {}
                self._add_seconds(time.perf_counter() - t0)
                self._joint[v] = found
            return self._joint[v]

    def replaced(self, views) -> int:
        """Planes replaced by their wall's joint fit among `views` (those asked for so far)."""
        return sum(len(self._joint.get(v, {})) for v in views)

    def _planes_of(self, v: int) -> list[WorldPlane]:
        with self._view_lock(("planes", v)):
            if v not in self._planes:
                if self.gate is not None:
                    self.gate.wait(v)   # DepthStopped if the depth stage ends without its maps
                t0 = time.perf_counter()
                regions = self.regions_of(v)
                self._planes[v] = world_planes(v, regions, *self.camera(v))
                with self._lock:
                    self._regions[v] = regions
                self._add_seconds(time.perf_counter() - t0)
            return self._planes[v]

    def _view_lock(self, key) -> threading.Lock:
        with self._lock:
            return self._view_locks.setdefault(key, threading.Lock())

    def _add_seconds(self, seconds: float) -> None:
        with self._lock:
            self.seconds += seconds
