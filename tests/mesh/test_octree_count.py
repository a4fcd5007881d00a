"""The depth cap's count (mesh/octree_count.py) against np.unique of the pooling's voxel coordinates
at each depth, on random clouds (uniform, clustered, float64, several chunks)."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.mesh.octree_count import SCALE, morton_codes, octree_points


def unique_voxels(xyz: np.ndarray, depth: int) -> int:
    """Voxels of half the depth's cell holding a point: np.unique of their integer coordinates."""
    xyz = np.asarray(xyz, np.float64)
    lo = xyz.min(axis=0)
    extent = float((xyz.max(axis=0) - lo).max())
    coords = np.floor((xyz - lo) / (SCALE * extent / 2 ** (depth + 1))).astype(np.int64)
    return len(np.unique(coords, axis=0))


def clouds():
    rng = np.random.default_rng(7)
    centres = rng.uniform(0, 40, (50, 3))
    yield "uniform", rng.uniform(-3, 5, (30000, 3)).astype(np.float32)
    yield "clustered", (centres[rng.integers(0, 50, 200000)] + rng.normal(scale=0.3, size=(200000, 3))).astype(np.float32)
    yield "float64 far", rng.normal(size=(20000, 3)) * [1, 2, 0.1] + 4e5
    yield "flat", np.c_[rng.uniform(0, 1, (5000, 2)), np.zeros(5000)].astype(np.float32)


@pytest.mark.parametrize("name,xyz", list(clouds()), ids=[c[0] for c in clouds()])
def test_counts_equal_unique_voxels(name, xyz):
    depths = range(3, 13)
    counts = octree_points(xyz, depths)   # the 200 k cloud is coded in 4 chunks
    for d in depths:
        assert counts[d] == unique_voxels(xyz, d), (name, d)
    assert counts[3] < counts[12]


def test_morton_codes_interleave_the_cells():
    cells = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [3, 5, 6], [2**21 - 1, 0, 1]], np.float64)
    codes = morton_codes(cells, np.zeros(3), 1.0)
    expect = [sum(((int(c[a]) >> b) & 1) << (3 * b + a) for a in range(3) for b in range(21)) for c in cells]
    assert codes.tolist() == expect


def test_degenerate_clouds():
    assert octree_points(np.zeros((5, 3), np.float32), [6, 7]) == {6: 1, 7: 1}
    assert octree_points(np.zeros((0, 3), np.float32), [6]) == {6: 0}
