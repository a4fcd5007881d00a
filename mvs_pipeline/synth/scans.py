"""Simulated terrestrial laser scans in the ETH3D ground-truth format.

A scanner sits levelled at a position with some heading and casts rays on a uniform
azimuth x elevation grid; each hit is stored in the scanner's own frame (scanner at the
origin, as ETH3D's scans are, which its free-space test relies on). The scan-to-world pose
goes into a MeshLab project:

    gt/eth3d/scan_alignment.mlp   <MLMesh label="scan_00" filename="scan_00.ply"><MLMatrix44>
                                  4 rows of 4 numbers, row-major world_from_scan, last row 0 0 0 1
    gt/eth3d/scan_00.ply ...      float32 x, y, z vertices (binary little-endian)

The angular step is `spacing / reference distance`, so points are `spacing` apart on a
surface facing the scanner at that distance (closer is denser, further or oblique sparser).
If all scans together would exceed `max_points` rays, the step grows until they fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import open3d as o3d

from ..io.atomic import atomic_write_text
from ..io.ply import PointCloud, write_ply
from .render import make_rays
from .scenes import Scanner, SceneSpec

RAY_CHUNK = 1_000_000  # rays per cast_rays call: bounds the [N, 6] float32 ray buffer
WINDOW_PAD = np.radians(1.0)  # margin around a region of interest's angular extent


@dataclass
class Scan:
    name: str  # "scan_00", ...
    world_from_scan: np.ndarray  # [4, 4] float64, rigid
    points: np.ndarray  # [N, 3] float32, scanner frame
    angular_step: float  # rad


@dataclass(frozen=True)
class ScanPlan:
    scanner: Scanner
    azimuth: tuple[float, float]  # rad, scanner frame
    elevation: tuple[float, float]  # rad
    step: float  # rad

    def grid_shape(self) -> tuple[int, int]:
        """(n_elevation, n_azimuth) rays."""
        n_az = max(1, int(np.ceil((self.azimuth[1] - self.azimuth[0]) / self.step)))
        n_el = max(1, int(np.ceil((self.elevation[1] - self.elevation[0]) / self.step)))
        return n_el, n_az


def world_from_scan(scanner: Scanner) -> np.ndarray:
    """[4, 4] rigid pose: a rotation about the vertical by the heading, then the position."""
    c, s = np.cos(scanner.yaw), np.sin(scanner.yaw)
    m = np.eye(4)
    m[:3, :3] = [[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]
    m[:3, 3] = scanner.position
    return m


def _box_surface_samples(lo: np.ndarray, hi: np.ndarray, n: int = 21) -> np.ndarray:
    """[6 * n * n, 3] points on the faces of the box [lo, hi]."""
    g = np.linspace(0.0, 1.0, n)
    a, b = np.meshgrid(g, g)
    a, b = a.ravel(), b.ravel()
    faces = []
    for axis in range(3):
        u, v = [x for x in range(3) if x != axis]
        for side in (0.0, 1.0):
            f = np.empty((len(a), 3))
            f[:, axis] = side
            f[:, u], f[:, v] = a, b
            faces.append(f)
    return lo + np.concatenate(faces) * (hi - lo)


def angular_window(scanner: Scanner) -> tuple[tuple[float, float], tuple[float, float]]:
    """(azimuth range, elevation range) in the scanner frame, radians."""
    if scanner.roi is None:
        return (-np.pi, np.pi), tuple(scanner.elevation_range)
    lo, hi = (np.asarray(x, dtype=np.float64) for x in scanner.roi)
    pose = world_from_scan(scanner)
    local = (_box_surface_samples(lo, hi) - pose[:3, 3]) @ pose[:3, :3]  # world -> scanner frame
    el = np.arctan2(local[:, 2], np.linalg.norm(local[:, :2], axis=1))
    el_range = (max(-np.pi / 2, el.min() - WINDOW_PAD), min(np.pi / 2, el.max() + WINDOW_PAD))
    pos = np.asarray(scanner.position)
    if np.all(pos[:2] >= lo[:2]) and np.all(pos[:2] <= hi[:2]):
        return (-np.pi, np.pi), el_range  # standing inside the region: it surrounds the scanner
    # Azimuths relative to the direction of the box centre, so the window never wraps.
    centre = ((lo + hi) / 2 - pos) @ pose[:3, :3]
    az_c = np.arctan2(centre[1], centre[0])
    rel = np.angle(np.exp(1j * (np.arctan2(local[:, 1], local[:, 0]) - az_c)))
    return (az_c + rel.min() - WINDOW_PAD, az_c + rel.max() + WINDOW_PAD), el_range


def plan_scans(spec: SceneSpec, spacing: float, max_points: int) -> list[ScanPlan]:
    plans = []
    for sc in spec.scanners:
        if spec.scan_reference_distance is not None:
            ref = spec.scan_reference_distance
        else:
            lo, hi = (np.asarray(x) for x in sc.roi)
            ref = float(np.linalg.norm((lo + hi) / 2 - np.asarray(sc.position)))
        az, el = angular_window(sc)
        plans.append(ScanPlan(sc, az, el, spacing / ref))
    for _ in range(50):  # rays scale as 1/step^2, so this converges in one or two rounds
        total = sum(np.prod(p.grid_shape()) for p in plans)
        if total <= max_points:
            break
        factor = np.sqrt(total / max_points) * 1.001
        plans = [ScanPlan(p.scanner, p.azimuth, p.elevation, p.step * factor) for p in plans]
    return plans


def simulate_scan(rc: o3d.t.geometry.RaycastingScene, plan: ScanPlan, name: str) -> Scan:
    pose = world_from_scan(plan.scanner)
    n_el, n_az = plan.grid_shape()
    az = plan.azimuth[0] + (np.arange(n_az) + 0.5) * plan.step
    el = plan.elevation[0] + (np.arange(n_el) + 0.5) * plan.step
    el = el[el <= plan.elevation[1]]
    ee, aa = np.meshgrid(el, az, indexing="ij")
    dirs = np.stack([np.cos(ee) * np.cos(aa), np.cos(ee) * np.sin(aa), np.sin(ee)], axis=-1).reshape(-1, 3)
    chunks = []
    for s in range(0, len(dirs), RAY_CHUNK):
        d_local = dirs[s:s + RAY_CHUNK]
        d_world = d_local @ pose[:3, :3].T
        t = rc.cast_rays(make_rays(pose[:3, 3], d_world))["t_hit"].numpy().astype(np.float64)
        hit = np.isfinite(t)
        pts = t[hit, None] * d_local[hit]  # scanner frame, range = t (unit directions)
        if plan.scanner.roi is not None:
            lo, hi = (np.asarray(x) for x in plan.scanner.roi)
            world = pts @ pose[:3, :3].T + pose[:3, 3]
            pts = pts[np.all((world >= lo) & (world <= hi), axis=1)]
        chunks.append(pts)
    points = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros((0, 3), np.float32)
    return Scan(name=name, world_from_scan=pose, points=points, angular_step=plan.step)


def simulate_scans(spec: SceneSpec, rc: o3d.t.geometry.RaycastingScene, spacing: float,
                   max_points: int) -> list[Scan]:
    return [simulate_scan(rc, plan, f"scan_{i:02d}")
            for i, plan in enumerate(plan_scans(spec, spacing, max_points))]


def mlp_text(scans: list[Scan]) -> str:
    lines = ["<!DOCTYPE MeshLabDocument>", "<MeshLabProject>", " <MeshGroup>"]
    for scan in scans:
        rows = "\n".join(" ".join(f"{v:.17g}" for v in row) for row in scan.world_from_scan)
        lines += [f'  <MLMesh label="{scan.name}" filename="{scan.name}.ply">',
                  f"   <MLMatrix44>\n{rows}\n</MLMatrix44>", "  </MLMesh>"]
    lines += [" </MeshGroup>", " <RasterGroup/>", "</MeshLabProject>", ""]
    return "\n".join(lines)


def write_scans(eth3d_dir: Path, scans: list[Scan]) -> None:
    """scan_XX.ply files, then scan_alignment.mlp (written last: it names the finished scans)."""
    eth3d_dir = Path(eth3d_dir)
    for scan in scans:
        write_ply(eth3d_dir / f"{scan.name}.ply", PointCloud(xyz=scan.points))
    atomic_write_text(eth3d_dir / "scan_alignment.mlp", mlp_text(scans))
