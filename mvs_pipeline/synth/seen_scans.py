"""Laser scans kept to what the cameras see (scenes whose SceneSpec has `scans_seen_by`).

A room's scanners cover its ceiling and upper walls, which its cameras never look at, so no
reconstruction, not even perfect depth maps, can complete them: the oracle of a 14-view room
scores F1@2cm 0.66-0.70 (synth/oracle.py). ETH3D's own ground truth is, in effect, limited to
what its images show. Here a scan point is kept where at least `min_views` cameras see it: it
projects inside the image, in front, and the ray from that camera's centre reaches it (the
same test as the sparse model's tracks, without their incidence limit, as the oracle has none).
The scanner frames, poses and everything else stay as simulated.
"""

from __future__ import annotations

import numpy as np
import open3d as o3d

from .camera import Camera
from .render import make_rays
from .scans import Scan
from .sparse import VISIBILITY_TOLERANCE, AxisIndex, project_fast

POINT_CHUNK = 1_000_000  # scan points tested at once: bounds the per-view temporaries
COARSE_GRID = (96, 72)  # rays per view (columns, rows, the image's edges included) that bound what it sees
REACH_MARGIN = 2.0  # m around the coarse rays' hits: what the rays between them may still reach


def reach(cam: Camera, rc: o3d.t.geometry.RaycastingScene) -> tuple[np.ndarray, np.ndarray] | None:
    """(lo, hi) world box (m) of what `cam` sees: a coarse grid of its rays' hits and a margin
    (None: it sees no surface). A view of a long street sees ~30 m of it, far less than the box
    around its viewing pyramid, so each view tests only the scan points near its own stretch.
    A surface seen only between two coarse rays (0.7 degrees apart at 800 px) and more than
    REACH_MARGIN beyond every hit would be missed; the scenes have none."""
    cols, rows = COARSE_GRID
    uu, vv = np.meshgrid(np.linspace(0.0, cam.width, cols), np.linspace(0.0, cam.height, rows))
    dirs = cam.ray_directions(np.stack([uu.ravel(), vv.ravel()], 1))
    t = rc.cast_rays(make_rays(cam.center, dirs))["t_hit"].numpy().astype(np.float64)
    hit = np.isfinite(t)
    if not hit.any():
        return None
    points = cam.center + t[hit, None] * dirs[hit]
    return points.min(axis=0) - REACH_MARGIN, points.max(axis=0) + REACH_MARGIN


def views_seeing(cameras: list[Camera], rc: o3d.t.geometry.RaycastingScene, world: np.ndarray,
                 boxes: list | None = None) -> np.ndarray:
    """[N] int32: how many of `cameras` see each world point [N, 3] (m) of a surface in `rc`
    (`boxes`: each camera's reach, computed when not given)."""
    count = np.zeros(len(world), np.int32)
    boxes = [reach(cam, rc) for cam in cameras] if boxes is None else boxes
    for s in range(0, len(world), POINT_CHUNK):
        chunk = world[s:s + POINT_CHUNK]
        index = AxisIndex(chunk)
        for cam, box in zip(cameras, boxes):
            if box is None:
                continue
            near = index.in_slab(*box)
            near = near[np.all((chunk[near] >= box[0]) & (chunk[near] <= box[1]), axis=1)]
            points = chunk[near]
            uv, z = project_fast(cam, points)
            idx = np.flatnonzero((z > 0) & (uv[:, 0] >= 0) & (uv[:, 0] < cam.width)
                                 & (uv[:, 1] >= 0) & (uv[:, 1] < cam.height))
            if len(idx) == 0:
                continue
            to_point = points[idx] - cam.center
            dist = np.sqrt(to_point[:, 0] ** 2 + to_point[:, 1] ** 2 + to_point[:, 2] ** 2)
            # Direction = the full vector to the point, so t = 1 is the point itself.
            t_hit = rc.cast_rays(make_rays(cam.center, to_point))["t_hit"].numpy()
            count[s + near[idx]] += t_hit >= 1.0 - (VISIBILITY_TOLERANCE + 1e-4 * dist) / dist
    return count


def keep_seen(scans: list[Scan], cameras: list[Camera], rc: o3d.t.geometry.RaycastingScene,
              min_views: int) -> list[Scan]:
    """The scans with only their points that >= `min_views` of `cameras` see (scanner frames kept)."""
    out = []
    boxes = [reach(cam, rc) for cam in cameras]
    for scan in scans:
        pose = scan.world_from_scan
        world = scan.points.astype(np.float64) @ pose[:3, :3].T + pose[:3, 3]
        seen = views_seeing(cameras, rc, world, boxes) >= min_views
        out.append(Scan(scan.name, pose, scan.points[seen], scan.angular_step))
    return out
