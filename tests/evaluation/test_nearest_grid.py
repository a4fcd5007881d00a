"""The CPU completeness search (nearest_grid.py) equals the scipy cKDTree query it replaced, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial import cKDTree

from mvs_pipeline.evaluation.cpu import nearest_dist2_cpu


def previous_nearest_dist2(gt_world, recon_xyz, max_dist):
    """nearest_dist2_cpu as it was before issue #21 item 2 (commit 6e4cd73)."""
    gt = np.asarray(gt_world, dtype=np.float64)
    if len(gt) == 0 or len(recon_xyz) == 0:
        return np.full(len(gt), np.inf)
    tree = cKDTree(np.asarray(recon_xyz, dtype=np.float64), balanced_tree=False, compact_nodes=False)
    dist, _ = tree.query(gt, k=1, distance_upper_bound=max_dist * (1 + 1e-9) + 1e-12, workers=-1)
    return dist * dist


def _clouds(seed: int):
    """Points on a dense blob, sparse noise and far outliers; queries near and far, some on the points."""
    rng = np.random.default_rng(seed)
    pts = np.concatenate([rng.normal(scale=0.05, size=(30000, 3)),  # far denser than the finest cells
                          rng.normal(scale=0.5, size=(20000, 3)), rng.uniform(-10, 10, (500, 3))]).astype(np.float32)
    q = np.concatenate([rng.normal(scale=0.7, size=(40000, 3)), rng.uniform(-30, 30, (2000, 3)), pts[:300],
                        pts[300:400] + np.float32(0.01)]).astype(np.float32)
    return q, pts


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("max_dist", [0.5, 0.05, 0.0])
def test_equals_kdtree(seed, max_dist):
    q, pts = _clouds(seed)
    got = nearest_dist2_cpu(q, pts, max_dist)
    np.testing.assert_array_equal(got, previous_nearest_dist2(q, pts, max_dist))
    # float64 queries holding float32 values (the CUDA tests' reference call) give the same numbers
    np.testing.assert_array_equal(nearest_dist2_cpu(q.astype(np.float64), pts, max_dist), got)


def test_scan_order_and_ties():
    """Queries in scan order (the warm start from the previous query's point) and exact duplicates."""
    rng = np.random.default_rng(7)
    t = np.linspace(0, 20, 50000)
    q = np.stack([np.cos(t) * 2, np.sin(t) * 2, t * 0.05], axis=1).astype(np.float32)  # a helix, in order
    pts = np.concatenate([q[::7] + rng.normal(scale=0.01, size=q[::7].shape), q[::11]]).astype(np.float32)
    pts = np.concatenate([pts, pts[:100]])  # duplicates
    np.testing.assert_array_equal(nearest_dist2_cpu(q, pts, 0.2), previous_nearest_dist2(q, pts, 0.2))


def test_far_outlier_and_empty():
    rng = np.random.default_rng(4)
    pts = np.concatenate([rng.normal(size=(5000, 3)), [[1e8, 0, 0], [0, -1e12, 0]]]).astype(np.float32)
    q = np.concatenate([rng.normal(size=(5000, 3)), [[1e8, 0, 0.1]]]).astype(np.float32)
    np.testing.assert_array_equal(nearest_dist2_cpu(q, pts, 0.2), previous_nearest_dist2(q, pts, 0.2))
    assert np.isinf(nearest_dist2_cpu(q, np.zeros((0, 3), np.float32), 0.2)).all()
    assert nearest_dist2_cpu(np.zeros((0, 3), np.float32), pts, 0.2).shape == (0,)
