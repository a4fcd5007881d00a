"""The typical point spacing of a cloud: the median distance from a point to its nearest neighbour.

    estimate_spacing(xyz [N, 3], max_points=100_000, seed=0) -> float (same unit as xyz)

Exact (SciPy's KD-tree over the whole cloud) when N <= max_points. Larger clouds are estimated
from a random subsample of `max_points` points: on a surface (what fused MVS clouds are) the
nearest-neighbour distance scales with 1 / sqrt(density), so the subsample's median is multiplied
by sqrt(max_points / N). A KD-tree over 50 M points would cost tens of seconds; the subsample
costs ~0.2 s. On thin surfaces it is within a few per cent (tests/sampling/test_spacing.py
compares it with a brute-force reference); where noise makes the surface thick compared to the
spacing it reads low (a 1.6 M-point courtyard cloud with 4 mm noise: 7.3 mm estimated, 8.9 mm
exact), which only makes the pooling voxel (a multiple of it) a little finer. Duplicate points
count with distance 0, as they are.
"""

from __future__ import annotations

import numpy as np

from mvs_pipeline.errors import MVSError

from .validate import array_module, as_points, to_host

DEFAULT_MAX_POINTS = 100_000


def median_nn_distance(xyz: np.ndarray) -> float:
    """Exact median nearest-neighbour distance of xyz [N, 3] (N >= 2)."""
    from scipy.spatial import cKDTree  # noqa: PLC0415

    pts = np.asarray(xyz, dtype=np.float64)
    dist, _ = cKDTree(pts).query(pts, k=2, workers=-1)  # column 0 is the point itself; all cores
    return float(np.median(dist[:, 1]))


def estimate_spacing(xyz, max_points: int = DEFAULT_MAX_POINTS, seed: int = 0) -> float:
    """Median nearest-neighbour distance of xyz [N, 3] (NumPy or CuPy), exact up to `max_points`
    points, estimated from a subsample above (surface scaling, see the module docstring)."""
    if max_points < 2:
        raise MVSError(f"max_points must be at least 2, got {max_points}")
    pts = as_points(xyz)
    n = int(pts.shape[0])
    if n < 2:
        raise MVSError(f"the point spacing needs at least 2 points, got {n}")
    if n <= max_points:
        return median_nn_distance(to_host(pts))
    pick = np.sort(np.random.default_rng(seed).choice(n, size=max_points, replace=False))
    sub = to_host(pts[array_module(pts).asarray(pick)])  # CuPy arrays take CuPy indices only
    return median_nn_distance(sub) * float(np.sqrt(max_points / n))
