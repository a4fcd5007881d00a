"""Adaptive checkerboard sampling and ACMH's multi-hypothesis joint view selection.

Part of the CPU twin of cuda/depth_patchmatch.cu (package docstring: conventions)."""

from __future__ import annotations

import math

from numba import njit

from ..layout import (
    COST_MAX,
    F_BAD,
    F_FALLBACK_SIGMA,
    F_GOOD_SIGMA,
    F_GOOD_TAU,
    I_MAX_BAD,
    I_MIN_GOOD,
    I_SAMPLES,
    NUM_CANDIDATES,
)
from .rng import rng_uniform


@njit(cache=True)
def find_candidates(cost, x, y, out):
    """Lowest-cost pixel of each of ACMH's 8 regions around (x, y), flat index or -1.

    Order: 0 up-near, 1 up-far, 2 down-near, 3 down-far, 4 left-near, 5 left-far,
    6 right-near, 7 right-far. Near regions are V shapes of 7 pixels opening away from the
    pixel (the 4-neighbour plus 3 diagonal pairs); far regions are strips of 11 pixels at
    distances 3, 5, ..., 23. Every member has the other checkerboard colour. Ties keep the
    nearer pixel.
    """
    H, W = cost.shape
    # direction (dx, dy) per region pair; the V opens along +-perpendicular (px, py)
    for r in range(4):
        if r == 0:
            ddx, ddy = 0, -1
        elif r == 1:
            ddx, ddy = 0, 1
        elif r == 2:
            ddx, ddy = -1, 0
        else:
            ddx, ddy = 1, 0
        pdx, pdy = ddy, ddx  # perpendicular direction (swap components)
        # near V
        bx, by = x + ddx, y + ddy
        best = -1
        if 0 <= bx < W and 0 <= by < H:
            best = by * W + bx
            bc = cost[by, bx]
            for i in range(1, 4):
                for sgn in (-1, 1):
                    qx = bx + ddx * i + sgn * pdx * i
                    qy = by + ddy * i + sgn * pdy * i
                    if 0 <= qx < W and 0 <= qy < H and cost[qy, qx] < bc:
                        bc = cost[qy, qx]
                        best = qy * W + qx
        out[2 * r] = best
        # far strip
        best = -1
        bc = 0.0
        for i in range(11):
            dist = 3 + 2 * i
            qx = x + ddx * dist
            qy = y + ddy * dist
            if not (0 <= qx < W and 0 <= qy < H):
                break
            if best < 0 or cost[qy, qx] < bc:
                bc = cost[qy, qx]
                best = qy * W + qx
        out[2 * r + 1] = best


@njit(cache=True)
def select_views(cost_matrix, flags, prior, fparams, iparams, seed, pixel, pass_id, probs, weights):
    """ACMH multi-hypothesis joint view selection for one pixel.

    cost_matrix [8, S] per-candidate per-source costs; flags [8] candidate exists; prior [S]
    from the neighbours' selected views. Fills weights [S] (uint8 Monte-Carlo counts) and
    returns the selected-view bitmask. When no view has any probability, every view gets
    weight 1 (the pixel is hopeless, but the aggregated cost stays defined).
    """
    S = cost_matrix.shape[1]
    tau = fparams[F_GOOD_TAU]
    bad = fparams[F_BAD]
    inv_good = 1.0 / (2.0 * fparams[F_GOOD_SIGMA] * fparams[F_GOOD_SIGMA])
    fallback = math.exp(-tau * tau / (2.0 * fparams[F_FALLBACK_SIGMA] * fparams[F_FALLBACK_SIGMA]))
    min_good = iparams[I_MIN_GOOD]
    max_bad = iparams[I_MAX_BAD]
    total = 0.0
    for s in range(S):
        n_good = 0
        n_bad = 0
        acc = 0.0
        for i in range(NUM_CANDIDATES):
            if flags[i] == 0:
                continue
            c = cost_matrix[i, s]
            if c < tau:
                acc += math.exp(-c * c * inv_good)
                n_good += 1
            if c > bad:
                n_bad += 1
        p = 0.0
        if n_good > min_good and n_bad < max_bad:
            p = acc / n_good
        elif n_bad < max_bad:
            p = fallback
        p *= prior[s]
        total += p
        probs[s] = total  # cumulative
    mask = 0
    for s in range(S):
        weights[s] = 0
    if not total > 0.0:
        for s in range(S):
            weights[s] = 1
            mask |= 1 << s
        return mask
    for k in range(iparams[I_SAMPLES]):
        u = rng_uniform(seed, pixel, pass_id, k) * total
        pick = -1
        for s in range(S):
            if probs[s] > u:
                pick = s
                break
        if pick < 0:  # rounding at the top end: the last view with non-zero probability
            for s in range(S - 1, -1, -1):
                if probs[s] > (probs[s - 1] if s > 0 else 0.0):
                    pick = s
                    break
        weights[pick] += 1
    for s in range(S):
        if weights[s] > 0:
            mask |= 1 << s
    return mask


@njit(cache=True, inline="always")
def weighted_cost(costs, weights):
    num = 0.0
    den = 0.0
    for s in range(costs.shape[0]):
        if weights[s] > 0:
            num += weights[s] * costs[s]
            den += weights[s]
    return num / den if den > 0 else COST_MAX
