"""Voxel weighting: the one-pass scores (voxels.tolerance_scores, Numba on the CPU) against the
implementation they replaced, which voxels.py keeps for reference.py (issue 21: numbers unchanged)."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.evaluation.voxels import (
    GRID_SHIFTS,
    cell_coords,
    cell_ids,
    pooled_cell_mean,
    sorted_cell_counts,
    tolerance_levels,
    tolerance_scores,
)

TOL = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)


# ---- the replaced implementation: voxels.py's per-grid ids and per-cell mean (unchanged since
# d7279ba, still what reference.py uses), composed as eth3d._scores_from_point_results did -------
def old_scores(xyz, dist2, tol, voxel_size, front=None):
    """What eth3d._scores_from_point_results computed before (completeness when front is None)."""
    tol2 = np.asarray(tol, dtype=np.float64)[:, None] ** 2
    ok = dist2[None, :] <= tol2
    ids, ns = zip(*(cell_ids(np, xyz, voxel_size, s) for s in GRID_SHIFTS))
    if front is None:
        return pooled_cell_mean(np, ids, ns, ok, np.ones(xyz.shape[0]))
    return pooled_cell_mean(np, ids, ns, ok, ok | (~ok & front[None, :]))
# ---------------------------------------------------------------------------------------------


def random_cloud(seed: int, n: int, spread: float = 2.0):
    """Clustered points (many per cell), distances with exact tolerance hits, inf and NaN."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-spread, spread, (max(n // 50, 1), 3))
    xyz = (centres[rng.integers(len(centres), size=n)] + rng.normal(scale=0.02, size=(n, 3))).astype(np.float32)
    xyz[: n // 20] = np.round(xyz[: n // 20] / 0.01) * 0.01  # on (or next to) cell faces
    dist2 = rng.exponential(0.01, n) ** 2
    dist2[rng.random(n) < 0.05] = np.inf
    dist2[rng.random(n) < 0.01] = np.nan
    hit = rng.random(n) < 0.05
    dist2[hit] = (np.asarray(TOL)[rng.integers(len(TOL), size=int(hit.sum()))]) ** 2  # exactly on a tolerance
    front = rng.random(n) < 0.3
    return xyz, dist2, front


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("voxel", [0.01, 0.037])
def test_scores_equal_old_implementation_bit_for_bit(seed, voxel):
    xyz, dist2, front = random_cloud(seed, 60000 + 7919 * seed)
    for fr in (None, front):
        new = tolerance_scores(np, xyz, dist2, TOL, voxel, front=fr)
        old = old_scores(xyz, dist2, TOL, voxel, front=fr)
        np.testing.assert_array_equal(new, old)
        assert 0.05 < new.min() and new.max() < 1.0  # real ratios, not all 0 or 1


def test_far_outlier_span_falls_back_and_matches():
    """A point 1e15 m away: the packed key would overflow, both take the row-sort path."""
    xyz, dist2, front = random_cloud(9, 5000)
    xyz[7] = (1e15, -3e14, 2e15)
    for fr in (None, front):
        np.testing.assert_array_equal(tolerance_scores(np, xyz, dist2, TOL, 0.01, front=fr),
                                      old_scores(xyz, dist2, TOL, 0.01, front=fr))


def test_single_point_and_empty():
    xyz = np.array([[0.5, 0.5, 0.5]], np.float32)
    np.testing.assert_array_equal(tolerance_scores(np, xyz, np.array([0.03**2]), TOL, 0.01),
                                  [0, 0, 1, 1, 1, 1])
    # not accurate anywhere, not in front: no cell counts -> 0; in front: counts, ratio 0
    assert tolerance_scores(np, xyz, np.array([np.inf]), TOL, 0.01, front=np.array([False])).tolist() == [0.0] * 6
    assert tolerance_scores(np, np.zeros((0, 3), np.float32), np.zeros(0), TOL, 0.01).tolist() == [0.0] * 6


def test_levels_and_sorted_counts_match_numba_counts():
    """The GPU's sort/segment algorithm, run with numpy, against the Numba radix sort; both against
    np.unique counts."""
    from mvs_pipeline.evaluation.cpu import cell_code_counts_cpu

    xyz, dist2, front = random_cloud(3, 30000)
    tol2 = np.asarray(TOL) ** 2
    lv = tolerance_levels(np, dist2, tol2)
    np.testing.assert_array_equal(lv, np.searchsorted(tol2, dist2, side="left"))  # NaN sorts last: T
    c = cell_coords(np, xyz, 0.01, 0.5)
    c -= c.min(0)
    span = c.max(0) + 1
    keys = (c[:, 2] * span[1] + c[:, 1]) * span[0] + c[:, 0]
    codes = front.astype(np.int64) * 7 + lv
    ref = sorted_cell_counts(np, keys, codes, 14)
    uniq, inverse = np.unique(keys, return_inverse=True)
    expect = np.zeros((14, len(uniq)), np.int64)
    np.add.at(expect, (codes, inverse.ravel()), 1)
    np.testing.assert_array_equal(ref, expect)
    np.testing.assert_array_equal(cell_code_counts_cpu(xyz, 0.01, 0.5, dist2, tol2, front), expect)
    assert len(uniq) > 1000 and expect[7:].sum() < expect.sum()  # many cells, both flags present


def test_cell_rounding_is_two_float32_steps():
    """Coordinates where one fused multiply-add would floor to another cell than float32(x * inv)
    followed by float32(+ shift): the Numba cells must be the two-step ones (the official program's)."""
    from mvs_pipeline.evaluation.cpu import cell_code_counts_cpu

    voxel, shift = 0.01, 0.5
    inv = np.float32(1.0 / voxel)
    # The two differ only where x * inv + shift lands next to a power of two: scan a few hundred
    # ulps around those coordinates.
    centres = [np.float32(sg * (2.0**m - shift) / inv) for m in range(1, 24) for sg in (1, -1)]
    x = np.concatenate([c + np.arange(-300, 301).astype(np.float32) * np.spacing(c) for c in centres])
    two_step = np.floor((x * inv) + np.float32(shift))
    fused = np.floor((x.astype(np.float64) * np.float64(inv) + shift).astype(np.float32))  # one rounding
    picked = x[two_step != fused][:300]
    assert len(picked) > 20  # the case exists
    xyz = np.stack([picked, np.zeros_like(picked), np.zeros_like(picked)], 1)
    xyz = np.concatenate([xyz, xyz + np.float32(1.0)]).astype(np.float32)
    d2 = np.zeros(len(xyz))
    c = cell_coords(np, xyz, voxel, shift)
    c -= c.min(0)
    span = c.max(0) + 1
    expect = np.unique((c[:, 2] * span[1] + c[:, 1]) * span[0] + c[:, 0], return_counts=True)[1]
    got = cell_code_counts_cpu(xyz, voxel, shift, d2, np.asarray(TOL) ** 2, None)
    np.testing.assert_array_equal(got.sum(axis=0), expect)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(3))
def test_cuda_scores_equal_cpu(cupy, seed):
    """CuPy's sort/segment against the Numba radix sort: the same per-cell counts exactly, scores to
    the last bits (the GPU sums the per-cell ratios in another order)."""
    from mvs_pipeline.evaluation.cpu import cell_code_counts_cpu

    xyz, dist2, front = random_cloud(seed, 300000 + 1000 * seed)
    if seed == 2:
        xyz[11] = (1e15, 0.0, 0.0)  # key span beyond int64: the definition's row-sort path
    for fr in (None, front):
        a = tolerance_scores(np, xyz, dist2, TOL, 0.01, front=fr)
        b = tolerance_scores(cupy, cupy.asarray(xyz), cupy.asarray(dist2), TOL, 0.01,
                             front=None if fr is None else cupy.asarray(fr))
        np.testing.assert_allclose(b, a, rtol=1e-13, atol=0)
    if seed < 2:
        tol2 = np.asarray(TOL) ** 2
        c = cell_coords(np, xyz, 0.01, 0.0)
        c -= c.min(0)
        span = c.max(0) + 1
        keys = (c[:, 2] * span[1] + c[:, 1]) * span[0] + c[:, 0]
        codes = front.astype(np.int64) * 7 + tolerance_levels(np, dist2, tol2)
        got = sorted_cell_counts(cupy, cupy.asarray(keys), cupy.asarray(codes), 14).get()
        np.testing.assert_array_equal(got, cell_code_counts_cpu(xyz, 0.01, 0.0, dist2, tol2, front))
        np.testing.assert_array_equal(tolerance_levels(cupy, cupy.asarray(dist2), tol2).get(),
                                      tolerance_levels(np, dist2, tol2))
