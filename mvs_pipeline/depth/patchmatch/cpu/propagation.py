"""Per-pixel initialisation and propagation (the red/black checkerboard step).

Part of the CPU twin of cuda/depth_patchmatch.cu (package docstring: conventions)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..layout import (
    COST_MAX,
    F_DEPTH_MAX,
    F_DEPTH_MIN,
    F_PRIOR_SEL,
    F_PRIOR_UNSEL,
    I_INV_DEPTH,
    I_PLANAR,
    I_RADIUS,
    I_SEED,
    I_STEP,
    I_TOP_K,
    NUM_CANDIDATES,
)
from .cost import ref_window, view_costs
from .geometry import pixel_ray, random_depth, random_normal, transfer_depth
from .planar import planar_penalty
from .rng import PASS_INIT, rng_uniform
from .view_selection import find_candidates, select_views, weighted_cost


@njit(cache=True)
def init_pixel(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, init_depth, init_normal, has_prior,
               x, y, plane, cost, selected, rv, rw, cvec, Hm, ones):
    H, W = ref.shape
    radius, step = iparams[I_RADIUS], iparams[I_STEP]
    seed = iparams[I_SEED]
    pixel = y * W + x
    r0, r1, r2 = pixel_ray(K_inv, x, y)
    if has_prior and init_depth[y, x] > 0:
        depth = init_depth[y, x]
        nx, ny, nz = init_normal[y, x, 0], init_normal[y, x, 1], init_normal[y, x, 2]
        nn = math.sqrt(nx * nx + ny * ny + nz * nz)
        if nn > 0:
            nx, ny, nz = nx / nn, ny / nn, nz / nn
        else:
            nx, ny, nz = -r0, -r1, -r2
            nn = math.sqrt(nx * nx + ny * ny + nz * nz)
            nx, ny, nz = nx / nn, ny / nn, nz / nn
        if nx * r0 + ny * r1 + nz * r2 > 0:
            nx, ny, nz = -nx, -ny, -nz
    else:
        depth = random_depth(rng_uniform(seed, pixel, PASS_INIT, 0), fparams[F_DEPTH_MIN],
                             fparams[F_DEPTH_MAX], iparams[I_INV_DEPTH])
        nx, ny, nz = random_normal(rng_uniform(seed, pixel, PASS_INIT, 1),
                                   rng_uniform(seed, pixel, PASS_INIT, 2), r0, r1, r2)
    plane[y, x, 0] = nx
    plane[y, x, 1] = ny
    plane[y, x, 2] = nz
    plane[y, x, 3] = depth
    mean_r, var_r = ref_window(ref, x, y, radius, step, fparams, rv, rw)
    view_costs(rv, rw, mean_r, var_r, ref[y, x], srcs, sizes, K_inv, M, e, geo, fparams, iparams, x, y,
               nx, ny, nz, depth, ones, True, cvec, Hm)
    cost[y, x], selected[y, x] = top_k_cost(cvec, iparams[I_TOP_K])


@njit(cache=True)
def top_k_cost(cvec, top_k):
    """Mean of the k best costs below COST_MAX, and the mask of views at or below the k-th."""
    S = cvec.shape[0]
    srt = np.sort(cvec)
    n_valid = 0
    for s in range(S):
        if cvec[s] < COST_MAX:
            n_valid += 1
    k = min(n_valid, top_k)
    if k == 0:
        return COST_MAX, np.uint32(0)
    total = 0.0
    for i in range(k):
        total += srt[i]
    mask = 0
    for s in range(S):
        if cvec[s] <= srt[k - 1]:
            mask |= 1 << s
    return total / k, np.uint32(mask)


@njit(cache=True)
def propagate_pixel(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, pass_id, x, y,
                    plane, cost, selected, weights_map, rv, rw, cand, cdepth, cmat, flags, prior, probs, wts, cvec,
                    Hm):
    H, W = ref.shape
    S = srcs.shape[0]
    radius, step = iparams[I_RADIUS], iparams[I_STEP]
    dmin, dmax = fparams[F_DEPTH_MIN], fparams[F_DEPTH_MAX]
    mean_r, var_r = ref_window(ref, x, y, radius, step, fparams, rv, rw)
    centre = ref[y, x]
    find_candidates(cost, x, y, cand)
    for i in range(NUM_CANDIDATES):
        q = cand[i]
        flags[i] = 1 if q >= 0 else 0
        cdepth[i] = -1.0
        if q < 0:
            for s in range(S):
                cmat[i, s] = COST_MAX
            continue
        qy, qx = q // W, q % W
        nx, ny, nz, dq = plane[qy, qx, 0], plane[qy, qx, 1], plane[qy, qx, 2], plane[qy, qx, 3]
        dp = transfer_depth(K_inv, nx, ny, nz, dq, qx, qy, x, y)
        cdepth[i] = dp
        view_costs(rv, rw, mean_r, var_r, centre, srcs, sizes, K_inv, M, e, geo, fparams, iparams, x, y,
               nx, ny, nz, dp, wts, True, cmat[i], Hm)
    # view-selection prior from the 4-neighbours' selected views (ACMM: 0.9 / 0.1 per neighbour)
    for s in range(S):
        prior[s] = 0.0
    for r in range(4):
        if flags[2 * r] == 0:
            continue
        if r == 0:
            m = selected[y - 1, x]
        elif r == 1:
            m = selected[y + 1, x]
        elif r == 2:
            m = selected[y, x - 1]
        else:
            m = selected[y, x + 1]
        for s in range(S):
            prior[s] += fparams[F_PRIOR_SEL] if (m >> s) & 1 else fparams[F_PRIOR_UNSEL]
    mask = select_views(cmat, flags, prior, fparams, iparams, iparams[I_SEED], y * W + x, pass_id, probs, wts)
    # current hypothesis, re-scored with the new weights
    nx, ny, nz, depth = plane[y, x, 0], plane[y, x, 1], plane[y, x, 2], plane[y, x, 3]
    view_costs(rv, rw, mean_r, var_r, centre, srcs, sizes, K_inv, M, e, geo, fparams, iparams, x, y,
               nx, ny, nz, depth, wts, False, cvec, Hm)
    best_cost = weighted_cost(cvec, wts)
    planar = iparams[I_PLANAR] != 0   # planar-prior pass: every hypothesis pays its penalty
    if planar:
        best_cost += planar_penalty(geo[3][y, x], nx, ny, nz, depth, fparams)
    best = -1
    for i in range(NUM_CANDIDATES):
        if flags[i] == 0 or not (cdepth[i] >= dmin and cdepth[i] <= dmax):
            continue
        c = weighted_cost(cmat[i], wts)
        if planar:
            q = cand[i]
            qy, qx = q // W, q % W
            c += planar_penalty(geo[3][y, x], plane[qy, qx, 0], plane[qy, qx, 1], plane[qy, qx, 2], cdepth[i],
                                fparams)
        if c < best_cost:
            best_cost = c
            best = i
    if best >= 0:
        q = cand[best]
        qy, qx = q // W, q % W
        plane[y, x, 0] = plane[qy, qx, 0]
        plane[y, x, 1] = plane[qy, qx, 1]
        plane[y, x, 2] = plane[qy, qx, 2]
        plane[y, x, 3] = cdepth[best]
    cost[y, x] = best_cost
    selected[y, x] = np.uint32(mask)
    for s in range(S):
        weights_map[y, x, s] = wts[s]
