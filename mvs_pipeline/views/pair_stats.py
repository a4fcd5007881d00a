"""Per view pair: shared sparse points, the angle-weighted score, and the triangulation-angle test,
in bounded memory and time linear in the observations.

A point seen by L views adds L(L-1)/2 unordered pairs. Materialising all of them (with their
angles) was fine at 80 views (5 M entries) but a courtyard seen by 500 views has tracks of
hundreds of views: 59 GB of host memory before the load stage ended. So:
- Every statistic the view graph needs is a sum over points, accumulated chunk by chunk into
  dense [N, N] arrays: the count, the score sum of G(theta), and the count of angles below
  `min_triangulation_angle`. The 75th-percentile test needs no sort: with the angles of a pair
  sorted, the one at index floor(0.75 (count - 1)) is >= T exactly when at most that many are
  below T.
- Above PAIR_BUDGET pairs in all, long tracks are sampled: point p is kept with probability
  q_p = min(1, C / pairs_p) and its contributions weighted 1/q_p (unbiased counts and scores),
  C chosen so that the expected work is PAIR_BUDGET. Short tracks (pairs_p <= C) are always
  kept, so scenes under the budget (every scene of the quality suite) get the exact graph.
The sample is drawn from a generator seeded by the point count, so a scene gives the same graph
on every run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Unordered point pairs over all tracks above which long tracks are sampled. 80 views of the
# courtyard (tracks of up to 80) have 2.6 M; ~1 s of NumPy per 10 M on one core.
PAIR_BUDGET = 12_000_000
CHUNK_PAIRS = 2_000_000  # unordered pairs per NumPy batch: ~100 MB of temporaries


@dataclass
class PairStats:
    """[N, N] float64 each, symmetric, zero diagonal; estimates when `sampled`."""
    count: np.ndarray  # shared points
    score: np.ndarray  # sum over shared points of G(theta)
    below: np.ndarray  # shared points whose triangulation angle is under the threshold
    sampled: bool  # long tracks were sampled (the scene has more than PAIR_BUDGET pairs)

    def passing(self, min_shared_points: int) -> np.ndarray:
        """[N, N] bool: pairs with enough shared points whose 75th-percentile angle reaches the
        threshold (at most floor(0.75 (count - 1)) angles below it)."""
        p75_index = np.floor(0.75 * (self.count - 1.0))
        ok = (self.count >= max(min_shared_points, 1)) & (self.below <= p75_index)
        np.fill_diagonal(ok, False)
        return ok


def sampling_weights(track_lengths: np.ndarray, budget: int = PAIR_BUDGET, seed: int | None = None) -> np.ndarray:
    """Per point: 0 (left out) or 1/q_p (kept), q_p = min(1, C / pairs_p) with the expected number
    of pairs kept <= budget. All ones when the scene is within the budget."""
    pairs = track_lengths.astype(np.float64) * (track_lengths - 1) / 2.0
    if pairs.sum() <= budget:
        return np.ones(len(pairs))
    cap = _cap_for_budget(pairs, budget)
    q = np.minimum(1.0, cap / np.maximum(pairs, 1.0))
    rng = np.random.default_rng(len(pairs) if seed is None else seed)
    keep = rng.random(len(pairs)) < q
    return np.where(keep, 1.0 / q, 0.0)


def _cap_for_budget(pairs: np.ndarray, budget: float) -> float:
    """The largest C with sum(min(pairs_p, C)) <= budget (the expected pairs kept)."""
    sorted_pairs = np.sort(pairs)
    n = len(sorted_pairs)
    smaller = np.concatenate([[0.0], np.cumsum(sorted_pairs)[:-1]])  # sum of the k smallest
    # the k smallest kept whole, the rest capped at C: smaller[k] + (n - k) C = budget, which holds
    # for the first k whose own pair count reaches that C
    caps = (budget - smaller) / (n - np.arange(n))
    k = int(np.argmax(caps <= sorted_pairs))
    return max(float(caps[k]), 0.0)


def pair_stats(centers: np.ndarray, points: np.ndarray, track_offsets: np.ndarray, track_view_idx: np.ndarray,
               weight_fn, min_angle_deg: float, budget: int = PAIR_BUDGET) -> PairStats:
    """Accumulate the pair statistics of every track (sampled above `budget` pairs).

    centers [N, 3] camera centres, points [P, 3], tracks as in Scene; weight_fn maps angles in
    degrees to G(theta)."""
    n = len(centers)
    lengths = np.diff(track_offsets)
    weights = sampling_weights(lengths, budget)
    totals = np.zeros((3, n * n))  # count, score, below; flat [a * n + b]
    pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    pending_size = 0

    def flush():
        nonlocal pending, pending_size
        if pending:
            key, w, theta = (np.concatenate(parts) for parts in zip(*pending))
            totals[0] += np.bincount(key, weights=w, minlength=n * n)
            totals[1] += np.bincount(key, weights=w * weight_fn(theta), minlength=n * n)
            totals[2] += np.bincount(key, weights=w * (theta < min_angle_deg), minlength=n * n)
        pending, pending_size = [], 0

    for L in np.unique(lengths[weights > 0]):
        if L < 2:
            continue
        pts = np.flatnonzero((lengths == L) & (weights > 0))
        ii, jj = np.triu_indices(L, k=1)
        batch = max(1, CHUNK_PAIRS // len(ii))
        for start in range(0, len(pts), batch):
            p = pts[start:start + batch]
            vis = track_view_idx[track_offsets[p][:, None] + np.arange(L)[None, :]]  # [b, L]
            rays = centers[vis] - points[p][:, None, :]  # [b, L, 3]
            rays /= np.linalg.norm(rays, axis=2, keepdims=True)
            cos = (rays @ rays.transpose(0, 2, 1))[:, ii, jj]  # [b, pairs]; matmul: 5x einsum's speed
            theta = np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))).ravel()
            w = np.repeat(weights[p], len(ii))
            pending.append(((vis[:, ii].astype(np.int64) * n + vis[:, jj]).ravel(), w, theta))
            pending_size += len(theta)
            if pending_size >= CHUNK_PAIRS:  # one bincount pass over [N, N] per chunk, not per batch
                flush()
    flush()
    count, score, below = (a.reshape(n, n) for a in totals)
    return PairStats(count + count.T, score + score.T, below + below.T, sampled=bool((weights != 1.0).any()))
