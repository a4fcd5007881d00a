"""A small ETH3D case whose completeness depends on float32 rounding at voxel faces: a scanned
floor at z = 0.46 m (a face of the 1 cm grid), a wall at x = 0.3 m (another face), two scans at
rotated poses, and a reconstruction with a missing region (the half y > 0.05 m cut away, a hole
of 8 cm radius, 2 mm noise, 5 % outliers). Deterministic: the official program's scores of these
files are recorded in test_eval_official_cases.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mvs_pipeline.evaluation.mlp import write_mlp
from mvs_pipeline.io.ply import PointCloud, write_ply


def _pose(angle_deg: float, t) -> np.ndarray:
    a = np.radians(angle_deg)
    m = np.eye(4)
    m[:3, :3] = [[np.cos(a), -np.sin(a), 0.0], [np.sin(a), np.cos(a), 0.0], [0.0, 0.0, 1.0]]
    m[:3, 3] = t
    return m


def write_case(folder: Path, n_floor: int = 30000) -> tuple[Path, Path]:
    """(scan_alignment.mlp, reconstruction.ply) written into `folder`; the wall gets n_floor / 2
    points (a few thousand in all keeps the brute-force reference fast)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261125)
    floor = np.c_[rng.uniform(-0.4, 0.3, n_floor), rng.uniform(-0.4, 0.4, n_floor), np.full(n_floor, 0.46)]
    wall = np.c_[np.full(n_floor // 2, 0.3), rng.uniform(-0.4, 0.4, n_floor // 2), rng.uniform(0.46, 0.9, n_floor // 2)]
    world = np.concatenate([floor, wall])
    entries = []
    for k, (angle, t) in enumerate([(23.0, (1.3, 0.2, 1.1)), (-131.0, (-1.7, 0.9, 1.4))]):
        m = _pose(angle, t)
        part = world[k::2]
        local = (part - m[:3, 3]) @ m[:3, :3]   # scan frame: R^T (x - t)
        write_ply(folder / f"scan_{k}.ply", PointCloud(xyz=local.astype(np.float32)))
        entries.append((f"scan_{k}.ply", m))
    write_mlp(folder / "scan_alignment.mlp", entries)
    keep = (world[:, 1] <= 0.05) & (np.linalg.norm(world[:, :2] - (-0.2, -0.2), axis=1) > 0.08)
    recon = world[keep] + rng.normal(0.0, 0.002, (int(keep.sum()), 3))
    outliers = rng.uniform(world.min(0), world.max(0), (len(recon) // 20, 3))
    write_ply(folder / "reconstruction.ply", PointCloud(xyz=np.concatenate([recon, outliers]).astype(np.float32)))
    return folder / "scan_alignment.mlp", folder / "reconstruction.ply"
