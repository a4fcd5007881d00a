"""ETH3D cases with oblique scan poses and missing regions, for comparisons with the official
program (test_eval_oblique_cases.py records its numbers; the one-off script that ran it,
`git show ec29931:scripts/check_eval_official.py`, was removed): GT floor,
wall and side surfaces on faces of the 1 cm voxel grid, 3 scans at random oblique poses (every
rotation entry non-zero, so float32 rounding of the transforms matters), and a reconstruction of
40 % of the GT + 3 mm noise + 10 % outliers with a slanted half-space cut, a hole, both, or
nothing missing (`kind`: cut, hole, cut_hole, full). Deterministic for a seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mvs_pipeline.evaluation.mlp import write_mlp
from mvs_pipeline.io.ply import PointCloud, write_ply

KINDS = ("cut", "hole", "cut_hole", "full")


def _oblique_pose(rng) -> np.ndarray:
    """Rz(a) Ry(b) Rx(c) with random angles (every entry non-zero) and a translation of a few metres."""
    a, b, c = rng.uniform(-np.pi, np.pi, 3)
    rz = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
    ry = np.array([[np.cos(b), 0, np.sin(b)], [0, 1, 0], [-np.sin(b), 0, np.cos(b)]])
    rx = np.array([[1, 0, 0], [0, np.cos(c), -np.sin(c)], [0, np.sin(c), np.cos(c)]])
    m = np.eye(4)
    m[:3, :3] = rz @ ry @ rx
    m[:3, 3] = rng.uniform(-3.0, 3.0, 3)
    return m


def write_case(folder: Path, seed: int, n: int, kind: str) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    floor = np.c_[rng.uniform(-0.5, 0.4, n), rng.uniform(-0.5, 0.5, n), np.full(n, 0.27)]
    wall = np.c_[np.full(n // 2, 0.4), rng.uniform(-0.5, 0.5, n // 2), rng.uniform(0.27, 0.8, n // 2)]
    side = np.c_[rng.uniform(-0.5, 0.4, n // 2), np.full(n // 2, -0.13), rng.uniform(0.27, 0.6, n // 2)]
    world = np.concatenate([floor, wall, side])
    entries = []
    for k in range(3):
        m = _oblique_pose(rng)
        local = (world[k::3] - m[:3, 3]) @ m[:3, :3]
        write_ply(folder / f"scan_{k}.ply", PointCloud(xyz=local.astype(np.float32)))
        entries.append((f"scan_{k}.ply", m))
    write_mlp(folder / "scan_alignment.mlp", entries)
    keep = np.ones(len(world), bool)
    if kind in ("cut", "cut_hole"):
        keep &= world @ np.array([0.6, 0.7, 0.38]) < 0.12
    if kind in ("hole", "cut_hole"):
        keep &= np.linalg.norm(world[:, :2] - (-0.1, 0.1), axis=1) > 0.11
    recon = world[keep][rng.random(int(keep.sum())) < 0.4]
    recon = recon + rng.normal(0.0, 0.003, recon.shape)
    outliers = rng.uniform(world.min(0) - 0.1, world.max(0) + 0.1, (len(recon) // 10, 3))
    write_ply(folder / "reconstruction.ply", PointCloud(xyz=np.concatenate([recon, outliers]).astype(np.float32)))
    return folder / "scan_alignment.mlp", folder / "reconstruction.ply"
