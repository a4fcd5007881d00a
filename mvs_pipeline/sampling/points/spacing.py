"""The typical point spacing of a cloud: the median distance from a point to its nearest neighbour.

    estimate_spacing(xyz [N, 3], max_points=100_000, seed=0) -> float (same unit as xyz)
    rows = sample_rows(N, max_points, seed)        # the rows it looks at (None: all of them)
    spacing_of_sample(sub [S, 3], N, max_points)   # the estimate from those rows' points

Exact (SciPy's KD-tree over the whole cloud) when N <= max_points. Larger clouds are estimated
from a random subsample of `max_points` points: on a surface (what fused MVS clouds are) the
nearest-neighbour distance scales with 1 / sqrt(density), so the subsample's median is multiplied
by sqrt(max_points / N). A KD-tree over 50 M points would cost tens of seconds; the subsample
costs ~0.2 s. On thin surfaces it is within a few per cent (tests/sampling/test_spacing.py
compares it with a brute-force reference); where noise makes the surface thick compared to the
spacing it reads low (a 1.6 M-point courtyard cloud with 4 mm noise: 7.3 mm estimated, 8.9 mm
exact), which only makes the pooling voxel (a multiple of it) a little finer. Duplicate points
count with distance 0, as they are.

Only the subsample is checked (finite, float32, subnormals flushed: validate.as_points) and
copied: checking all N points first cost a pass over the whole cloud for 100 k of them (the
sampling stage checks the whole cloud once, where it pools). The rows are split out
(`sample_rows`, `spacing_of_sample`) so that a pass over a cloud read in chunks picks the same
points and gets the same estimate (sampling/points/cloud_scan.py).
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


def sample_rows(n: int, max_points: int = DEFAULT_MAX_POINTS, seed: int = 0) -> np.ndarray | None:
    """Increasing row indices of the subsample of a cloud of n points (None: n <= max_points, all)."""
    if max_points < 2:
        raise MVSError(f"max_points must be at least 2, got {max_points}")
    if n <= max_points:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, size=max_points, replace=False))


def spacing_of_sample(sub: np.ndarray, n: int, max_points: int = DEFAULT_MAX_POINTS) -> float:
    """The estimate from the checked host points `sub` of sample_rows(n, max_points) (all n if None)."""
    if n < 2:
        raise MVSError(f"the point spacing needs at least 2 points, got {n}")
    if n <= max_points:
        return median_nn_distance(sub)
    return median_nn_distance(sub) * float(np.sqrt(max_points / n))


def estimate_spacing(xyz, max_points: int = DEFAULT_MAX_POINTS, seed: int = 0) -> float:
    """Median nearest-neighbour distance of xyz [N, 3] (NumPy or CuPy), exact up to `max_points`
    points, estimated from a subsample above (surface scaling, see the module docstring)."""
    if max_points < 2:
        raise MVSError(f"max_points must be at least 2, got {max_points}")
    xyz = array_module(xyz).asarray(xyz)
    if xyz.ndim != 2 or xyz.shape[1] != 3:
        as_points(xyz)  # raises its shape error
    n = int(xyz.shape[0])
    if n < 2:
        raise MVSError(f"the point spacing needs at least 2 points, got {n}")
    rows = sample_rows(n, max_points, seed)
    if rows is not None:
        xyz = xyz[array_module(xyz).asarray(rows)]  # CuPy arrays take CuPy indices only
    return spacing_of_sample(to_host(as_points(xyz)), n, max_points)
