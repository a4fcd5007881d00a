"""The one-pass scan of a chunked cloud (points/cloud_scan.py) against the whole-cloud computations
it stands in for: the checked offsets' bounds, the centre and the spacing estimate's subsample."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.arrays import column_bounds
from mvs_pipeline.io.ply import PointCloud
from mvs_pipeline.sampling.points.cloud_scan import scan_cloud
from mvs_pipeline.sampling.points.cloud_source import parts_source
from mvs_pipeline.sampling.points.local_frame import frame_centre, offsets
from mvs_pipeline.sampling.points.spacing import estimate_spacing, sample_rows, spacing_of_sample
from mvs_pipeline.sampling.points.validate import as_points


def chunked(xyz: np.ndarray, pieces: int = 3):
    """The cloud as several parts (the chunks then also break at the parts' ends)."""
    return parts_source([PointCloud(xyz=p) for p in np.array_split(xyz, pieces)])


@pytest.mark.parametrize("double", [False, True])
def test_bounds_centre_and_sample_match_the_whole_cloud(double):
    rng = np.random.default_rng(2)
    xyz = rng.normal(size=(5000, 3)) * [3, 1, 0.2]
    xyz[7] = [1e-39, -1e-40, 0]    # subnormal coordinates: flushed in the offsets, as as_points does
    xyz[8] = [-2e-39, 3e-39, 5e-41]
    if double:
        xyz = xyz + [4.5e5, 5.2e6, 310.0]
    else:
        xyz = xyz.astype(np.float32)
    rows = sample_rows(len(xyz), 1000, seed=3)
    scan = scan_cloud(chunked(xyz), 777, rows)
    centre = frame_centre(xyz)
    np.testing.assert_array_equal(scan.centre, centre)
    pts = as_points(offsets(xyz, centre))
    lo, hi = column_bounds(pts)
    np.testing.assert_array_equal(scan.lo, lo.astype(np.float64))
    np.testing.assert_array_equal(scan.hi, hi.astype(np.float64))
    np.testing.assert_array_equal(scan.sample, as_points(xyz)[rows])
    assert spacing_of_sample(scan.sample, len(xyz), 1000) == estimate_spacing(xyz, max_points=1000, seed=3)


def test_subnormal_bounds_are_flushed():
    xyz = np.array([[-1e-40, 1.0, 2.0], [5.0, 1e-39, 3.0]], np.float32)
    scan = scan_cloud(chunked(xyz, 2), 1)
    np.testing.assert_array_equal(scan.lo, [0.0, 0.0, 2.0])   # as_points flushes -1e-40 and 1e-39 to 0
    np.testing.assert_array_equal(scan.hi, [5.0, 1.0, 3.0])
    assert scan.sample is None


@pytest.mark.parametrize("values", [
    [1.0, -2.5, 3e-38],              # all normal: returned as they are, no copy
    [0.0, -0.0, 1.0],                # zeros: the full test, nothing to flush
    [1e-40, -1e-39, 0.0, 2.0],       # subnormals of both signs beside a zero
    [],
])
def test_flush_subnormals_against_the_definition(values):
    from mvs_pipeline.sampling.points.validate import flush_subnormals

    arr = np.array(values, np.float32)
    got = flush_subnormals(arr)
    want = np.where(np.abs(arr) < np.finfo(np.float32).tiny, np.float32(0), arr)
    np.testing.assert_array_equal(got, want)
    assert (got is arr) == (not np.any((arr != 0) & (np.abs(arr) < np.finfo(np.float32).tiny)))
