"""Synthetic laser-scan scenes for tests and benchmarks of the ETH3D metric.

A room (axis-aligned box) with box-shaped objects inside, scanned by scanners placed in the room:
each scan casts rays on a regular (inclination, azimuth) raster, like a terrestrial laser
scanner, and keeps the first hit. Points are returned in the scanner frame with a random
rotation about the vertical axis as the scan pose, as ETH3D's scans are.
"""

from __future__ import annotations

import numpy as np

from .mlp import Scan


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    """Uniform random rotation [3, 3] (QR of a Gaussian matrix, sign-fixed, det +1)."""
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    if np.linalg.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


def pose(rotation: np.ndarray, translation) -> np.ndarray:
    m = np.eye(4)
    m[:3, :3] = rotation
    m[:3, 3] = translation
    return m


def ray_boxes(origin: np.ndarray, dirs: np.ndarray, boxes: list[tuple[np.ndarray, np.ndarray]],
              room: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Distance along each unit ray [K, 3] from `origin` to the first surface: the room's inside
    walls or the outside of any box (lo, hi)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 1.0 / dirs
        lo, hi = room
        t_far = np.maximum((lo - origin) * inv, (hi - origin) * inv).min(axis=1)  # leave the room
        best = t_far
        for blo, bhi in boxes:
            t1 = (blo - origin) * inv
            t2 = (bhi - origin) * inv
            t_near = np.minimum(t1, t2).max(axis=1)
            t_exit = np.maximum(t1, t2).min(axis=1)
            hit = (t_near <= t_exit) & (t_near > 0)
            best = np.where(hit & (t_near < best), t_near, best)
    return best


def scan_room(origin, n_incl: int, n_az: int, boxes, room, rng, noise: float = 0.0,
              incl_range=(0.3, np.pi - 0.05)) -> tuple[np.ndarray, np.ndarray]:
    """(points in the scanner frame [K, 3] float32, world_from_scan [4, 4])."""
    incl = np.linspace(incl_range[0], incl_range[1], n_incl)
    az = np.linspace(-np.pi, np.pi, n_az, endpoint=False) + rng.uniform(0, 2 * np.pi / n_az)
    ii, aa = np.meshgrid(incl, az, indexing="ij")
    d_world = np.stack([np.sin(ii) * np.cos(aa), np.sin(ii) * np.sin(aa), np.cos(ii)], -1).reshape(-1, 3)
    t = ray_boxes(np.asarray(origin, float), d_world, boxes, room)
    t = t + rng.normal(scale=noise, size=t.shape) if noise else t
    p_world = origin + d_world * t[:, None]
    yaw = rng.uniform(-np.pi, np.pi)
    c, s = np.cos(yaw), np.sin(yaw)
    rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])  # world_from_scan rotation
    m = pose(rot, origin)
    local = (p_world - origin) @ rot  # R^T (p - t)
    return local.astype(np.float32), m


def room_scene(n_scan_points: int, n_scans: int = 3, seed: int = 0, size=(8.0, 6.0, 3.0)):
    """A furnished room scanned from `n_scans` positions, ~n_scan_points points in total."""
    rng = np.random.default_rng(seed)
    room = (np.zeros(3), np.asarray(size, float))
    boxes = []
    for _ in range(6):
        lo = rng.uniform([0.5, 0.5, 0.0], [size[0] - 1.5, size[1] - 1.5, 0.0])
        boxes.append((lo, lo + rng.uniform([0.3, 0.3, 0.3], [1.0, 1.0, 1.5])))
    per_scan = max(n_scan_points // n_scans, 16)
    n_incl = max(int(np.sqrt(per_scan / 2)), 4)
    n_az = max(per_scan // n_incl, 8)
    scans = []
    for k in range(n_scans):
        origin = rng.uniform([1.0, 1.0, 1.2], [size[0] - 1.0, size[1] - 1.0, 1.8])
        pts, m = scan_room(origin, n_incl, n_az, boxes, room, rng, noise=0.001)
        scans.append(Scan(name=f"scan{k}", path=None, world_from_scan=m, points=pts))
    return scans, boxes, room


def perturbed_reconstruction(gt_world: np.ndarray, n_points: int, seed: int = 0, noise: float = 0.01,
                             outlier_fraction: float = 0.05, hole_fraction: float = 0.2,
                             bounds=None) -> np.ndarray:
    """A fake reconstruction: GT points (minus a hole) with Gaussian noise, plus uniform outliers."""
    rng = np.random.default_rng(seed)
    centre = gt_world[rng.integers(len(gt_world))]
    dist = np.linalg.norm(gt_world - centre, axis=1)
    keep = dist > np.quantile(dist, hole_fraction)  # a hole around a random point
    pool = gt_world[keep]
    n_out = int(n_points * outlier_fraction)
    base = pool[rng.integers(len(pool), size=n_points - n_out)]
    pts = base + rng.normal(scale=noise, size=base.shape)
    lo = gt_world.min(axis=0) if bounds is None else bounds[0]
    hi = gt_world.max(axis=0) if bounds is None else bounds[1]
    out = rng.uniform(lo, hi, size=(n_out, 3))
    return np.concatenate([pts, out]).astype(np.float32)
