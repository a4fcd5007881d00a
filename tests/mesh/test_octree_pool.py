"""The Poisson path's pooling (mesh/octree_pool.py): in parts within a budget it gives the cloud one
pooling of the whole cloud gives, bit for bit, and the means of an independent np.unique pooling; its
per-point estimates hold for the array code (NumPy's allocations, traced) and for the H200's
measurement of the whole-cloud pooling."""

from __future__ import annotations

import logging
import tracemalloc

import numpy as np
import pytest

from mvs_pipeline.io.point_cloud import PointCloud
from mvs_pipeline.mesh import octree_pool
from mvs_pipeline.mesh.octree_pool import (FeatureSource, chunk_bytes, part_bytes, pooled_for_octree, raw_columns,
                                           row_bytes)
from mvs_pipeline.sampling.memory_plan import BIN_BYTES, HEADROOM, streamed_plan


def clustered_cloud(n: int, seed: int, colors: bool = True, support: bool = True) -> PointCloud:
    """n points around 300 centres (voxels of several points and of one), random normals and attributes."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-2, 3, (300, 3))
    xyz = centres[rng.integers(0, 300, n)] + rng.normal(scale=0.05, size=(n, 3))
    extra = {"support": rng.integers(0, 7, n).astype(np.uint8)} if support else {}
    return PointCloud(xyz=xyz.astype(np.float32), normals=rng.normal(size=(n, 3)).astype(np.float32),
                      colors=rng.integers(0, 256, (n, 3)).astype(np.uint8) if colors else None, extra=extra)


def reference_pooling(cloud: PointCloud, voxel: float):
    """(xyz, normals, colours) by np.unique of the voxel coordinates and float64 sums: the pooling's
    definition written independently of voxel_pool's sort and of the features' float32 rounding; voxels
    in the pooling's key order (k, then j, then i)."""
    xyz = cloud.xyz.astype(np.float64)
    lo = cloud.xyz.min(axis=0).astype(np.float64)
    coords = np.floor((xyz - lo) * (1.0 / voxel)).astype(np.int64)
    uniq, inverse = np.unique(coords, axis=0, return_inverse=True)
    rank = np.empty(len(uniq), np.int64)
    rank[np.lexsort(uniq.T)] = np.arange(len(uniq))   # lexsort's last key (k) first
    inverse = rank[inverse.ravel()]
    w = np.maximum(cloud.extra["support"].astype(np.float64), 1) if "support" in cloud.extra else np.ones(len(xyz))
    sums = lambda v: np.bincount(inverse, weights=v)  # noqa: E731
    wsum = sums(w)
    pos = np.stack([sums(xyz[:, a] * w) for a in range(3)], axis=1) / wsum[:, None]
    nrm = np.stack([sums(cloud.normals[:, a].astype(np.float64) * w) for a in range(3)], axis=1)
    nrm /= np.linalg.norm(nrm, axis=1, keepdims=True)
    rgb = None
    if cloud.colors is not None:
        cnt = np.bincount(inverse)
        rgb = np.stack([sums(cloud.colors[:, a].astype(np.float64)) for a in range(3)], axis=1) / cnt[:, None]
    return pos, nrm, rgb


@pytest.mark.parametrize("colors,support", [(True, True), (False, False)])
def test_pieces_within_a_tiny_budget_give_the_whole_pooling(caplog, colors, support):
    cloud = clustered_cloud(40000, seed=3, colors=colors, support=support)
    cell = 0.06
    whole = pooled_for_octree(cloud, cell, "cpu")
    budget = 2_000_000   # the whole pooling needs ~8 MB here
    with caplog.at_level(logging.INFO):
        parts = pooled_for_octree(cloud, cell, "cpu", budget)
    assert "in parts of at most" in caplog.text
    assert "sampling: pooling 40000 points in" in caplog.text
    n_parts = int(caplog.text.split("sampling: pooling 40000 points in ")[1].split()[0])
    assert n_parts >= 3
    # the same voxels in the same order, bit for bit
    assert len(parts) == len(whole) and 1000 < len(whole) < 35000
    np.testing.assert_array_equal(parts.xyz, whole.xyz)
    np.testing.assert_array_equal(parts.normals, whole.normals)
    if colors:
        np.testing.assert_array_equal(parts.colors, whole.colors)
    else:
        assert parts.colors is None and whole.colors is None
    # and the pooling's definition, to float32 rounding
    pos, nrm, rgb = reference_pooling(cloud, 0.5 * cell)
    np.testing.assert_allclose(parts.xyz, pos, rtol=0, atol=2e-6)
    np.testing.assert_allclose(parts.normals, nrm, rtol=0, atol=1e-5)
    if colors:   # float32 means, then rounded: a mean at a half may round either way
        assert np.abs(parts.colors.astype(np.float64) - np.floor(rgb + 0.5)).max() <= 1
        assert np.mean(parts.colors == np.floor(rgb + 0.5)) > 0.99


def test_the_old_whole_cloud_voxel_pool_gives_the_same_cloud():
    """The features pooled before parts existed (voxel_pool of the whole cloud's feature rows)."""
    from mvs_pipeline.sampling.points.voxel_pool.ops import voxel_pool

    cloud = clustered_cloud(20000, seed=5)
    cell = 0.08
    w = np.maximum(cloud.extra["support"].astype(np.float64), 1.0)[:, None]
    feats = np.concatenate([cloud.xyz * w, cloud.normals.astype(np.float64) * w, w, cloud.colors], axis=1)
    f = voxel_pool(cloud.xyz, feats.astype(np.float32), voxel_size=0.5 * cell, backend="cpu").features.astype(np.float64)
    got = pooled_for_octree(cloud, cell, "cpu", 1_000_000)
    np.testing.assert_array_equal(got.xyz, (f[:, :3] / f[:, 6:7]).astype(np.float32))
    np.testing.assert_array_equal(got.colors, np.clip(f[:, 7:10] + 0.5, 0, 255).astype(np.uint8))


def test_part_estimate_holds_for_the_array_code():
    """pool_range of one part with a voxel per point (the most means) allocates at most part_bytes a
    point plus chunk_bytes a chunk row on NumPy, and not much less: the estimate is not slack."""
    from mvs_pipeline.sampling.points.voxel_pool.frame import voxel_frame
    from mvs_pipeline.sampling.points.voxel_pool.partition import KeyRange
    from mvs_pipeline.sampling.points.voxel_pool.streamed import pool_range

    n = 100000
    cloud = clustered_cloud(n, seed=1)
    cloud.xyz = np.random.default_rng(2).uniform(0, 1, (n, 3)).astype(np.float32)
    source = FeatureSource(raw_columns(cloud), on_gpu=False)
    frame = voxel_frame(cloud.xyz.min(axis=0), cloud.xyz.max(axis=0), 1e-4)
    part, rows = KeyRange(0, frame.num_keys, n), n // 4
    pool_range(source, frame, np.zeros(3), part, n, rows)   # compiles the twin outside the measurement
    tracemalloc.start()
    try:
        out = pool_range(source, frame, np.zeros(3), part, n, rows)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(out) == n
    assert 0.8 * part_bytes(10) * n <= peak <= part_bytes(10) * n + chunk_bytes(10) * rows, peak / n


def test_estimates_at_the_issues_size():
    """40 x 3200x2130: 64.2 M points with colours and uint8 support. The whole pooling's estimate covers
    the 12.07 GB the H200 measured for voxel_pool of the whole cloud (without being far above it),
    and the plan for 6 GiB holds the columns, a chunk and a part within it."""
    n = 64_191_609
    cloud = clustered_cloud(10, seed=0)
    record = row_bytes(raw_columns(cloud))
    assert record == 12 + 12 + 3 + 1
    whole = n * (record + part_bytes(10))
    assert 12.07e9 <= whole <= 1.25 * 12.07e9
    budget = octree_pool.MESH_GPU_BYTES
    plan = streamed_plan(n, record, budget, part_bytes(10), chunk_bytes(10))
    assert plan.resident and 4 <= -(-n // plan.part_points) <= 8
    held = n * record + plan.chunk_rows * (record + chunk_bytes(10)) + plan.part_points * part_bytes(10)
    assert held + BIN_BYTES * (1 << plan.bin_bits) <= HEADROOM * budget <= 6 * 2**30
