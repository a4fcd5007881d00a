"""The view graph's pair statistics (views/pair_stats.py) against a brute-force reference that
materialises every (view a, view b, angle) triple, as the views stage did before: exact under the
budget, unbiased and close above it (long tracks sampled), in bounded memory."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.views.pair_stats import _cap_for_budget, pair_stats, sampling_weights

MIN_ANGLE = 3.0


def _weight(theta):
    return np.exp(-((theta - 5.0) ** 2) / (2.0 * np.where(theta <= 5.0, 1.0, 10.0) ** 2))


def _random_tracks(rng, num_views, num_points, max_len):
    centers = rng.normal(size=(num_views, 3)) * 2.0
    points = rng.normal(size=(num_points, 3)) * 0.5 + np.array([0, 0, 6.0])
    lengths = rng.integers(1, max_len + 1, num_points)
    tracks = [np.sort(rng.choice(num_views, size=L, replace=False)) for L in lengths]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return centers, points, offsets, np.concatenate(tracks).astype(np.int32)


def _brute_force(centers, points, offsets, track):
    """Every ordered pair of every track, its angle, then per pair: count, score, 75th percentile."""
    n = len(centers)
    a, b, theta = [], [], []
    for p in range(len(points)):
        vis = track[offsets[p]:offsets[p + 1]]
        for i in vis:
            for j in vis:
                if i != j:
                    ra, rb = centers[i] - points[p], centers[j] - points[p]
                    cos = ra @ rb / np.linalg.norm(ra) / np.linalg.norm(rb)
                    a.append(i), b.append(j), theta.append(np.degrees(np.arccos(np.clip(cos, -1, 1))))
    a, b, theta = np.array(a), np.array(b), np.array(theta)
    count, score, p75 = np.zeros((n, n)), np.zeros((n, n)), np.full((n, n), -1.0)
    for i in range(n):
        for j in range(n):
            sel = np.sort(theta[(a == i) & (b == j)])
            count[i, j], score[i, j] = len(sel), _weight(sel).sum()
            if len(sel):
                p75[i, j] = sel[int(np.floor(0.75 * (len(sel) - 1)))]
    return count, score, p75


@pytest.mark.parametrize("seed", range(3))
def test_exact_under_the_budget(seed):
    rng = np.random.default_rng(seed)
    centers, points, offsets, track = _random_tracks(rng, 9, 120, 7)
    stats = pair_stats(centers, points, offsets, track, _weight, MIN_ANGLE)
    count, score, p75 = _brute_force(centers, points, offsets, track)
    assert not stats.sampled
    np.testing.assert_array_equal(stats.count, count)
    np.testing.assert_allclose(stats.score, score, rtol=1e-12, atol=1e-12)
    for min_shared in (1, 5, 20):
        expect = (count >= min_shared) & (p75 >= MIN_ANGLE)
        np.testing.assert_array_equal(stats.passing(min_shared), expect)


def test_the_percentile_rule_at_its_boundary():
    """Sorted angles 1, 2, 4, 5 degrees: the 75th percentile is the third, so 3 deg passes, 4.5 fails,
    and min_shared_points counts the shared points."""
    centers = np.array([[-1.0, 0, 0], [1.0, 0, 0]])
    # four points seen by both views; half-angle atan(1/z): z chosen so the angles straddle 3 deg
    z = 1.0 / np.tan(np.radians(np.array([1.0, 2.0, 4.0, 5.0]) / 2))
    points = np.stack([np.zeros(4), np.zeros(4), z], axis=1)
    offsets = np.arange(0, 10, 2)
    track = np.tile([0, 1], 4).astype(np.int32)
    # sorted angles 1, 2, 4, 5: index floor(0.75 * 3) = 2 -> 4 deg >= 3 passes, >= 4.5 fails
    assert pair_stats(centers, points, offsets, track, _weight, 3.0).passing(1)[0, 1]
    assert not pair_stats(centers, points, offsets, track, _weight, 4.5).passing(1)[0, 1]
    assert pair_stats(centers, points, offsets, track, _weight, 3.9).passing(4)[0, 1]
    assert not pair_stats(centers, points, offsets, track, _weight, 3.9).passing(5)[0, 1]


def test_cap_meets_the_budget():
    rng = np.random.default_rng(3)
    pairs = rng.integers(1, 5000, 2000).astype(np.float64)
    for budget in (pairs.sum() / 10, pairs.sum() / 2, 2500.0 * 1000):
        cap = _cap_for_budget(pairs, budget)
        assert np.minimum(pairs, cap).sum() == pytest.approx(budget, rel=1e-9)


def test_long_tracks_are_sampled_close_to_exact():
    """Tracks of up to 40 of 40 views, a budget of a sixth of the pairs: scores within ~10 per
    cent of the exact ones (unbiased: weighted 1/q), short tracks kept whole, same sample
    on every call."""
    rng = np.random.default_rng(7)
    centers, points, offsets, track = _random_tracks(rng, 40, 3000, 40)
    lengths = np.diff(offsets)
    total = float((lengths * (lengths - 1) / 2).sum())
    exact = pair_stats(centers, points, offsets, track, _weight, MIN_ANGLE)
    budget = int(total / 6)
    sampled = pair_stats(centers, points, offsets, track, _weight, MIN_ANGLE, budget=budget)
    again = pair_stats(centers, points, offsets, track, _weight, MIN_ANGLE, budget=budget)
    assert sampled.sampled and not exact.sampled
    np.testing.assert_array_equal(sampled.score, again.score)
    w = sampling_weights(lengths, budget)
    kept = w > 0
    assert (lengths[kept] * (lengths[kept] - 1) / 2).sum() < 1.2 * budget  # the work is bounded
    short = lengths * (lengths - 1) / 2 <= _cap_for_budget(lengths * (lengths - 1) / 2.0, budget)
    assert short.any() and np.all(w[short] == 1.0)
    off = ~np.eye(40, dtype=bool)
    rel = np.abs(sampled.score[off] - exact.score[off]) / exact.score[off]
    assert np.median(rel) < 0.12 and rel.max() < 0.45  # seen: 0.073 and 0.33 (about 1/sqrt of the points kept)
    rel_count = np.abs(sampled.count[off] - exact.count[off]) / exact.count[off]
    assert np.median(rel_count) < 0.15  # seen: 0.092; unweighted counts would be ~0.8 low
    # the top 10 sources of each view mostly survive sampling
    top = lambda s: [set(np.argsort(-np.where(off[i], s[i], -1))[:10]) for i in range(40)]
    overlap = np.mean([len(x & y) / 10 for x, y in zip(top(exact.score), top(sampled.score))])
    assert overlap >= 0.9  # seen: 0.975
