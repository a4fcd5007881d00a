#!/usr/bin/env python3
"""How many exact FPS samples one global round could certify (issue #15's FPS goal, a study).

The GPU tree kernel (cuda/sampling_fps.cu) costs ~3 us a sample, nearly all of it latency: every
sample is one all-gather between the blocks plus one load of the leaves it changes. 12 M -> 1.2 M
in 1 s allows 0.83 us. The only way under one barrier per sample is to take several samples per
barrier without changing the result. This script measures how many a round could take, on the
CPU, with the rule such a kernel would use:

  * points Morton-sorted and cut into leaves of `leaf` points, leaf j owned by block j % G (as
    the kernel does); every leaf's key (its largest distance to the samples, exact) is known;
  * at the start of a round every block offers its T best leaves (key, best point, box), and
    the largest key it does not offer; the round's threshold is the largest of those;
  * then, on the G x T offered leaves alone, the next sample is certain while the offered leaf
    with the largest bound is exact (its best point is not nearer to any sample taken in this
    round than its key) and above the threshold: that leaf's best point is the sample. A leaf
    whose best point is nearer to a new sample becomes a bound: min(key, the largest squared
    distance from the new sample to its box). With leaves of one point (`--leaves 1`: what a
    kernel offering each block's T farthest points would do, whatever leaves it scans with) every
    offered point's new distance is exact, so the round runs until the offered points' largest
    distance falls below the threshold;
  * at the end of the round every point's distance is updated for the round's samples (one
    pass over the leaves those samples reach) and the keys are exact again.

Each round is checked against plain sequential FPS (the same indices in the same order). The
printed table: rounds, mean and median samples per round, per leaf size and T.

    python scripts/fps_batch_study.py --points 200000 --samples 20000 --leaves 4,8,32 --offers 4,16
"""

from __future__ import annotations

import argparse
import sys
import time

import numba
import numpy as np


def surface_cloud(n: int, seed: int) -> np.ndarray:
    """[n, 3] float32 points on a few surfaces (ground, walls, a sphere) with 2 mm noise, ~10 m."""
    rng = np.random.default_rng(seed)
    parts = []
    k = n // 4
    parts.append(np.column_stack([rng.uniform(0, 10, k), rng.uniform(0, 10, k), np.zeros(k)]))   # ground
    parts.append(np.column_stack([rng.uniform(0, 10, k), np.zeros(k), rng.uniform(0, 4, k)]))    # wall
    parts.append(np.column_stack([np.zeros(k), rng.uniform(0, 10, k), rng.uniform(0, 4, k)]))    # wall
    d = rng.normal(size=(n - 3 * k, 3))
    parts.append(np.array([5.0, 5.0, 1.5]) + 1.5 * d / np.linalg.norm(d, axis=1, keepdims=True))  # sphere
    xyz = np.concatenate(parts) + rng.normal(0, 0.002, (n, 3))
    return xyz.astype(np.float32)


def morton_order(xyz: np.ndarray) -> np.ndarray:
    lo, hi = xyz.min(0), xyz.max(0)
    q = ((xyz - lo) / max(float((hi - lo).max()), 1e-9) * 1023).astype(np.int64)
    code = np.zeros(len(xyz), np.int64)
    for bit in range(10):
        for axis in range(3):
            code |= ((q[:, axis] >> bit) & 1) << (3 * bit + axis)
    return np.argsort(code, kind="stable")


@numba.njit
def _key_greater(d_a, i_a, d_b, i_b):
    """FPS's order: larger distance first, ties to the lower index."""
    return d_a > d_b or (d_a == d_b and i_a < i_b)


@numba.njit
def _leaf_best(mind, begin, end):
    best = begin
    for p in range(begin + 1, end):
        if mind[p] > mind[best]:
            best = p
    return best


@numba.njit
def _box_far2(lo, hi, x, y, z):
    dx = max(abs(x - lo[0]), abs(x - hi[0]))
    dy = max(abs(y - lo[1]), abs(y - hi[1]))
    dz = max(abs(z - lo[2]), abs(z - hi[2]))
    return dx * dx + dy * dy + dz * dz


@numba.njit
def _box_near2(lo, hi, x, y, z):
    dx = max(lo[0] - x, 0.0, x - hi[0])
    dy = max(lo[1] - y, 0.0, y - hi[1])
    dz = max(lo[2] - z, 0.0, z - hi[2])
    return dx * dx + dy * dy + dz * dz


@numba.njit
def batched_fps(pts, m, leaf, blocks, offers):
    """(sample positions in the sorted order [m], samples per round [rounds])."""
    n = pts.shape[0]
    num_leaves = (n + leaf - 1) // leaf
    mind = np.full(n, np.inf)
    lo = np.empty((num_leaves, 3))
    hi = np.empty((num_leaves, 3))
    best = np.empty(num_leaves, np.int64)
    for j in range(num_leaves):
        b, e = j * leaf, min(n, (j + 1) * leaf)
        for a in range(3):
            lo[j, a] = pts[b:e, a].min()
            hi[j, a] = pts[b:e, a].max()
        best[j] = b
    out = np.empty(m, np.int64)
    rounds = np.empty(m, np.int64)
    num_rounds = 0
    taken = 0
    cand = np.empty(blocks * offers, np.int64)
    bound = np.empty(blocks * offers)
    exact = np.empty(blocks * offers, np.bool_)
    while taken < m:
        # every block's T best leaves and the best key it does not offer
        nc = 0
        thr_d, thr_i = -1.0, n
        for g in range(blocks):
            top = np.full(offers + 1, -1, np.int64)
            for j in range(g, num_leaves, blocks):
                # insert leaf j into this block's sorted top list (offers + 1 entries)
                d, i = mind[best[j]], best[j]
                if i < 0 or d < 0:
                    continue
                pos = offers + 1
                while pos > 0 and (top[pos - 1] < 0 or _key_greater(d, i, mind[best[top[pos - 1]]], best[top[pos - 1]])):
                    pos -= 1
                if pos <= offers:
                    for s in range(offers, pos, -1):
                        top[s] = top[s - 1]
                    top[pos] = j
            for s in range(offers):
                if top[s] >= 0:
                    cand[nc] = top[s]
                    bound[nc] = mind[best[top[s]]]
                    exact[nc] = True
                    nc += 1
            if top[offers] >= 0:
                j = top[offers]
                if _key_greater(mind[best[j]], best[j], thr_d, thr_i):
                    thr_d, thr_i = mind[best[j]], best[j]
        # certify samples on the offered leaves alone
        start = taken
        while taken < m:
            k = -1
            for c in range(nc):
                if k < 0 or bound[c] > bound[k] or (bound[c] == bound[k] and best[cand[c]] < best[cand[k]]):
                    k = c
            if k < 0 or not exact[k] or bound[k] < 0:
                break
            j = cand[k]
            s = best[j]
            if not _key_greater(bound[k], s, thr_d, thr_i):
                break
            out[taken] = s
            taken += 1
            x, y, z = pts[s, 0], pts[s, 1], pts[s, 2]
            for c in range(nc):
                jc = cand[c]
                bc = best[jc]
                if leaf == 1:   # a single point: its new distance is known exactly
                    if c == k:
                        bound[c] = -np.inf
                    else:
                        dx, dy, dz = pts[bc, 0] - x, pts[bc, 1] - y, pts[bc, 2] - z
                        bound[c] = min(bound[c], dx * dx + dy * dy + dz * dz)
                elif exact[c]:
                    dx, dy, dz = pts[bc, 0] - x, pts[bc, 1] - y, pts[bc, 2] - z
                    if c == k or dx * dx + dy * dy + dz * dz < mind[bc]:
                        exact[c] = False
                        bound[c] = min(bound[c], _box_far2(lo[jc], hi[jc], x, y, z))
                else:
                    bound[c] = min(bound[c], _box_far2(lo[jc], hi[jc], x, y, z))
        if taken == start:   # no offered leaf could be certified: take the true next one (a round of 1)
            s = -1
            for j in range(num_leaves):
                if s < 0 or _key_greater(mind[best[j]], best[j], mind[s], s):
                    s = best[j]
            out[taken] = s
            taken += 1
        rounds[num_rounds] = taken - start
        num_rounds += 1
        # the round's samples applied to every leaf they reach; keys exact again
        for j in range(num_leaves):
            b, e = j * leaf, min(n, (j + 1) * leaf)
            touched = False
            reach = mind[best[j]]   # the leaf's largest distance before this round's samples
            for t in range(start, taken):
                s = out[t]
                if _box_near2(lo[j], hi[j], pts[s, 0], pts[s, 1], pts[s, 2]) < reach or (b <= s < e):
                    touched = True
                    for p in range(b, e):
                        if p == s:
                            mind[p] = -1.0
                        elif mind[p] >= 0:
                            dx, dy, dz = pts[p, 0] - pts[s, 0], pts[p, 1] - pts[s, 1], pts[p, 2] - pts[s, 2]
                            mind[p] = min(mind[p], dx * dx + dy * dy + dz * dz)
            if touched:
                best[j] = _leaf_best(mind, b, e)
    return out, rounds[:num_rounds]


@numba.njit
def sequential_fps(pts, m):
    n = pts.shape[0]
    mind = np.full(n, np.inf)
    out = np.empty(m, np.int64)
    s = 0
    for k in range(m):
        out[k] = s
        mind[s] = -1.0
        nxt = -1
        for p in range(n):
            if mind[p] >= 0:
                dx, dy, dz = pts[p, 0] - pts[s, 0], pts[p, 1] - pts[s, 1], pts[p, 2] - pts[s, 2]
                mind[p] = min(mind[p], dx * dx + dy * dy + dz * dz)
                if nxt < 0 or mind[p] > mind[nxt]:
                    nxt = p
        s = nxt
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=200_000)
    ap.add_argument("--samples", type=int, default=20_000)
    ap.add_argument("--leaves", default="4,8,32", help="points per leaf")
    ap.add_argument("--offers", default="4,16", help="leaves each block offers per round (T)")
    ap.add_argument("--blocks", type=int, default=132)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true", help="compare with plain sequential FPS (O(N M))")
    args = ap.parse_args(argv)
    xyz = surface_cloud(args.points, args.seed)
    pts = xyz[morton_order(xyz)].astype(np.float64)
    reference = sequential_fps(pts, args.samples) if args.check else None
    print(f"{args.points:,} points -> {args.samples:,} samples, {args.blocks} blocks")
    print("| leaf | T | rounds | samples per round: mean / median / 90th pct | s |")
    print("|---|---|---|---|---|")
    for leaf in (int(v) for v in args.leaves.split(",")):
        for offers in (int(v) for v in args.offers.split(",")):
            t0 = time.perf_counter()
            out, rounds = batched_fps(pts, args.samples, leaf, args.blocks, offers)
            dt = time.perf_counter() - t0
            if reference is not None and not np.array_equal(out, reference):
                first = int(np.argmax(out != reference))
                print(f"leaf {leaf} T {offers}: differs from sequential FPS at sample {first}", file=sys.stderr)
                return 1
            print(f"| {leaf} | {offers} | {len(rounds):,} | {rounds.mean():.2f} / {np.median(rounds):.0f} / "
                  f"{np.percentile(rounds, 90):.0f} | {dt:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
