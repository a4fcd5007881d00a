"""Key ranges for pooling by parts (voxel_pool/partition.py, streamed.py) against brute force:
disjoint, in key order, every point in exactly one, none over the cap but a single heavy key."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.io.ply import PointCloud
from mvs_pipeline.sampling.points.cloud_source import parts_source
from mvs_pipeline.sampling.points.voxel_pool.frame import voxel_frame, voxel_keys
from mvs_pipeline.sampling.points.voxel_pool.ops import voxel_coordinates
from mvs_pipeline.sampling.points.voxel_pool.partition import bin_shift, group_bins, num_bins
from mvs_pipeline.sampling.points.voxel_pool.streamed import plan_key_ranges


def check_ranges(ranges, keys: np.ndarray, cap: int) -> None:
    """Brute force: each range's count is the number of keys inside it, the ranges are disjoint
    and increasing, they hold every key, and only single-key ranges exceed the cap."""
    total = 0
    for a, b in zip(ranges, ranges[1:]):
        assert a.hi <= b.lo
    for r in ranges:
        inside = int(np.count_nonzero((keys >= r.lo) & (keys < r.hi)))
        assert inside == r.count > 0
        assert r.count <= cap or r.hi - r.lo == 1
        total += inside
    assert total == len(keys)


@pytest.mark.parametrize("seed", range(4))
def test_group_bins_brute_force(seed):
    rng = np.random.default_rng(seed)
    lo, hi = int(rng.integers(0, 1000)), int(rng.integers(5000, 100000))
    shift = bin_shift(hi - lo, bits=8)
    keys = rng.integers(lo, hi, 3000)
    keys[:400] = keys[0]  # one heavy key
    counts = np.bincount((keys - lo) >> shift, minlength=num_bins(lo, hi, shift))
    assert len(counts) <= 256
    cap = 150
    parts, heavy = group_bins(counts, lo, hi, shift, cap)
    assert all(h.count > cap for h in heavy) and heavy
    check_ranges(sorted(parts + heavy, key=lambda r: r.lo), keys, max(cap, max(h.count for h in heavy)))
    for p in parts:
        assert p.count <= cap


def test_bin_shift():
    assert bin_shift(1) == 0 and bin_shift(2**20) == 0 and bin_shift(2**20 + 1) == 1
    assert bin_shift(2**62 - 1, 20) == 42 and bin_shift(1000, 4) == 6  # 16 bins of 64 keys hold 1000


def test_frame_keys_match_the_coordinates_rule():
    """voxel_keys (one axis at a time) equals the key of voxel_coordinates (the documented rule)."""
    rng = np.random.default_rng(1)
    pts = (rng.random((5000, 3)) * [3, 40, 0.5] - 7).astype(np.float32)
    frame = voxel_frame(pts.min(0), pts.max(0), 0.0137)
    c = voxel_coordinates(pts, frame.voxel_size, frame.origin)
    np.testing.assert_array_equal(voxel_keys(pts, frame), c[:, 0] + frame.dims[0] * (c[:, 1] + frame.dims[1] * c[:, 2]))
    assert voxel_keys(pts, frame).max() < frame.num_keys


@pytest.mark.parametrize("cap", [50, 700, 10**6])
def test_plan_key_ranges_with_dense_spots(cap):
    rng = np.random.default_rng(cap)
    xyz = (rng.random((20000, 3)) * [4, 4, 0.3]).astype(np.float32)
    xyz[:3000] = xyz[0]                                                    # one voxel of 3000 points
    xyz[3000:6000] = xyz[1] + rng.normal(0, 1e-3, (3000, 3)).astype(np.float32)  # a dense spot
    frame = voxel_frame(xyz.min(0), xyz.max(0), 0.01)
    ranges = plan_key_ranges(parts_source([PointCloud(xyz=xyz)]), frame, np.zeros(3), cap, 4096, bin_bits=10)
    check_ranges(ranges, voxel_keys(xyz, frame), cap)
    if cap == 10**6:
        assert len(ranges) == 1
