"""Coloured point clouds of an ETH3D evaluation, like the official program's visualisations.

For each tolerance t:
  <completeness_prefix>.tolerance_<t>.ply   GT points (world): green complete, red incomplete
  <accuracy_prefix>.tolerance_<t>.ply       reconstruction points: green accurate, red inaccurate,
                                            blue unobserved
(t formatted with %g, as the official program's C++ stream does.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..io.ply import PointCloud, write_ply
from .eth3d import ACCURATE, INACCURATE, UNOBSERVED, classify_accuracy

GREEN, RED, BLUE = (0, 255, 0), (255, 0, 0), (0, 0, 255)


def tolerance_path(prefix: str | Path, tolerance: float) -> Path:
    return Path(f"{prefix}.tolerance_{tolerance:g}.ply")


def write_completeness_clouds(prefix, gt_xyz, gt_dist2, tolerances) -> list[Path]:
    paths = []
    for t in tolerances:
        complete = np.asarray(gt_dist2) <= t * t
        colors = np.where(complete[:, None], np.array(GREEN, np.uint8), np.array(RED, np.uint8))
        path = tolerance_path(prefix, t)
        write_ply(path, PointCloud(xyz=np.asarray(gt_xyz, np.float32), colors=colors))
        paths.append(path)
    return paths


def write_accuracy_clouds(prefix, recon_xyz, best_dist2, front, tolerances) -> list[Path]:
    palette = np.zeros((3, 3), np.uint8)
    palette[ACCURATE], palette[INACCURATE], palette[UNOBSERVED] = GREEN, RED, BLUE
    classes = classify_accuracy(best_dist2, front, tolerances)
    paths = []
    for k, t in enumerate(tolerances):
        path = tolerance_path(prefix, t)
        write_ply(path, PointCloud(xyz=np.asarray(recon_xyz, np.float32), colors=palette[classes[k]]))
        paths.append(path)
    return paths
