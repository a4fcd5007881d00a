"""The point-spacing estimate (sampling/points/spacing.py) against a brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.sampling.points.spacing import estimate_spacing


def brute_median_nn(xyz: np.ndarray, chunk: int = 1000) -> float:
    """Median nearest-neighbour distance by all pairwise distances (no tree)."""
    pts = xyz.astype(np.float64)
    nearest = np.empty(len(pts))
    for s in range(0, len(pts), chunk):
        d2 = ((pts[s:s + chunk, None, :] - pts[None, :, :]) ** 2).sum(-1)
        d2[np.arange(d2.shape[0]), np.arange(s, s + d2.shape[0])] = np.inf  # not the point itself
        nearest[s:s + chunk] = np.sqrt(d2.min(1))
    return float(np.median(nearest))


def surface_cloud(n: int, seed: int) -> np.ndarray:
    """Points on a wavy sheet and a wall (surface-like, as fused clouds are), with 1 mm noise."""
    rng = np.random.default_rng(seed)
    k = n * 2 // 3
    xy = rng.uniform(0, 3, (k, 2))
    sheet = np.c_[xy, 0.2 * np.sin(2 * xy[:, 0])]
    wall = np.c_[np.full(n - k, 3.2), rng.uniform(0, 3, (n - k, 2))]
    return (np.concatenate([sheet, wall]) + rng.normal(0, 1e-3, (n, 3))).astype(np.float32)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_below_max_points(seed):
    rng = np.random.default_rng(seed)
    xyz = rng.normal(size=(700, 3)).astype(np.float32)
    assert estimate_spacing(xyz, max_points=700) == pytest.approx(brute_median_nn(xyz), rel=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_subsample_estimate_on_surfaces(seed):
    xyz = surface_cloud(12000, seed)
    ref = brute_median_nn(xyz)
    est = estimate_spacing(xyz, max_points=2000, seed=seed)
    assert abs(est / ref - 1) < 0.08, (est, ref)


def test_duplicates_and_errors():
    xyz = np.repeat(np.random.default_rng(0).random((50, 3), dtype=np.float32), 2, axis=0)
    assert estimate_spacing(xyz) == 0.0  # every point has a twin at distance 0
    with pytest.raises(MVSError, match="at least 2 points"):
        estimate_spacing(np.zeros((1, 3), np.float32))
    with pytest.raises(MVSError, match="max_points"):
        estimate_spacing(xyz, max_points=1)


@pytest.mark.gpu
def test_cupy_input_gives_the_numpy_result(cupy):
    xyz = surface_cloud(5000, 3)
    for cap in (1000, 10000):
        assert estimate_spacing(cupy.asarray(xyz), max_points=cap) == estimate_spacing(xyz, max_points=cap)
