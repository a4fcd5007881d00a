"""The Numba binning of scan points (sphere_bins.bin_scan_cpu via build_sphere_grids) against the NumPy
version it replaced: the same cells on random scans and the same accuracy results."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mvs_pipeline.evaluation.cpu import classify_points_cpu
from mvs_pipeline.evaluation.sphere_grid import build_sphere_grids, direction_cells, grid_shape
from mvs_pipeline.evaluation.toy_scenes import perturbed_reconstruction, room_scene


def previous_bins(points):
    """build_sphere_grids' per-scan binning before issue #21 item 2 (commit 6e4cd73)."""
    p = np.asarray(points, dtype=np.float64)
    nrm = np.sqrt((p * p).sum(axis=1))
    keep = np.flatnonzero(nrm > 0)
    p = p[keep]
    n_incl, n_az = grid_shape(len(p))
    cells = direction_cells(p, n_incl, n_az) if len(p) else np.zeros(0, np.int64)
    order = np.argsort(cells, kind="stable")
    starts = np.searchsorted(cells[order], np.arange(n_incl * n_az + 1))
    return keep[order], starts


@pytest.mark.parametrize("seed", range(3))
def test_bins_equal_previous(seed):
    scans, _, _ = room_scene(40000, n_scans=3, seed=seed)
    extra = np.array([[0, 0, 0], [0, 0, 1], [0, 0, -2], [-1, 0, 0], [-1, -1e-9, 0], [0, 0, 0]], np.float32)
    scans[0].points = np.concatenate([scans[0].points, extra])  # origin points are dropped, poles kept
    g = build_sphere_grids(scans)
    off = 0
    for s, scan in enumerate(scans):
        src, starts = previous_bins(scan.points)
        np.testing.assert_array_equal(g.source_index[s], src)
        base = g.start_base[s]
        np.testing.assert_array_equal(g.starts[base:base + len(starts)], starts + off)
        np.testing.assert_array_equal(g.points[off:off + len(src)], scan.points[src])
        off += len(src)


@pytest.mark.parametrize("seed", range(2))
def test_classify_unchanged(seed):
    """classify on the new grids (float32 points) equals classify on the previous float64 grids."""
    scans, _, _ = room_scene(60000, n_scans=3, seed=seed)
    gt = np.concatenate([s.points_in_world() for s in scans])
    recon = perturbed_reconstruction(gt, 20000, seed=seed, noise=0.03, outlier_fraction=0.1)
    g = build_sphere_grids(scans)
    old = build_sphere_grids(scans)
    old.points = old.points.astype(np.float64)  # the previous layout
    for b0, div in ((1.125e-3, 0.011), (0.01, 0.2)):
        td = math.tan(math.radians(div))
        for stop in (-1.0, 0.01**2):
            a = classify_points_cpu(recon, g, b0, td, stop)
            b = classify_points_cpu(recon, old, b0, td, stop)
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])
