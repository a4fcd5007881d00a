"""Completeness on the CPU: distance from every GT point to its nearest reconstruction point."""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree


def nearest_dist2_cpu(gt_world: np.ndarray, recon_xyz: np.ndarray, max_dist: float) -> np.ndarray:
    """[M] float64 squared distance of each GT point [M, 3] to the nearest reconstruction point.

    Exact for distances <= max_dist; +inf beyond (the scores never look further).
    """
    gt = np.asarray(gt_world, dtype=np.float64)
    if len(gt) == 0 or len(recon_xyz) == 0:
        return np.full(len(gt), np.inf)
    tree = cKDTree(np.asarray(recon_xyz, dtype=np.float64), balanced_tree=False, compact_nodes=False)
    # Slightly larger bound: cKDTree's bound is strict (<), the metric's tolerance test is <=.
    dist, _ = tree.query(gt, k=1, distance_upper_bound=max_dist * (1 + 1e-9) + 1e-12, workers=-1)
    return dist * dist
