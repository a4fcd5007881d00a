"""Per-pixel refinement: perturbed and random hypotheses, the best one kept.

Part of the CPU twin of cuda/depth_patchmatch.cu (package docstring: conventions)."""

from __future__ import annotations

from numba import njit

from ..layout import (
    F_DEPTH_MAX,
    F_DEPTH_MIN,
    F_PERTURB,
    I_INV_DEPTH,
    I_NUM_REFINE,
    I_PLANAR,
    I_RADIUS,
    I_SEED,
    I_STEP,
)
from .cost import ref_window, weighted_view_cost
from .geometry import perturb_normal, pixel_ray, random_depth, random_normal
from .planar import planar_penalty
from .rng import rng_uniform


@njit(cache=True)
def refine_pixel(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, pass_id, x, y,
                 plane, cost, weights_map, rv, rw, Hm):
    """Try ACMH's 5 refinement hypotheses (+ extra normal-only ones); keep any that lowers the cost.

    ACMH's 5: (random depth, n), (depth, random normal), (random depth, random normal),
    (depth, perturbed normal), (perturbed depth, n). Extra hypothesis k = 0, 1, ... keeps the
    depth and turns the normal with scale 4, 2, 1, 1/2, ... x perturbation.
    Draws: 0 random depth, 1-2 random normal, 3 perturbed depth, 4-6 perturbed normal angles,
    then 3 angles per extra hypothesis.
    """
    H, W = ref.shape
    radius, step = iparams[I_RADIUS], iparams[I_STEP]
    dmin, dmax = fparams[F_DEPTH_MIN], fparams[F_DEPTH_MAX]
    seed = iparams[I_SEED]
    pixel = y * W + x
    wts = weights_map[y, x]
    r0, r1, r2 = pixel_ray(K_inv, x, y)
    nx, ny, nz, depth = plane[y, x, 0], plane[y, x, 1], plane[y, x, 2], plane[y, x, 3]
    pert = fparams[F_PERTURB]
    d_rand = random_depth(rng_uniform(seed, pixel, pass_id, 0), dmin, dmax, iparams[I_INV_DEPTH])
    rnx, rny, rnz = random_normal(rng_uniform(seed, pixel, pass_id, 1), rng_uniform(seed, pixel, pass_id, 2),
                                  r0, r1, r2)
    d_pert = depth * (1.0 + (2.0 * rng_uniform(seed, pixel, pass_id, 3) - 1.0) * pert)
    pnx, pny, pnz = perturb_normal(nx, ny, nz, rng_uniform(seed, pixel, pass_id, 4),
                                   rng_uniform(seed, pixel, pass_id, 5), rng_uniform(seed, pixel, pass_id, 6),
                                   pert, r0, r1, r2)
    mean_r, var_r = ref_window(ref, x, y, radius, step, fparams, rv, rw)
    centre = ref[y, x]
    best_cost = cost[y, x]
    bnx, bny, bnz, bd = nx, ny, nz, depth
    for h in range(iparams[I_NUM_REFINE]):
        if h == 0:
            hx, hy, hz, hd = nx, ny, nz, d_rand
        elif h == 1:
            hx, hy, hz, hd = rnx, rny, rnz, depth
        elif h == 2:
            hx, hy, hz, hd = rnx, rny, rnz, d_rand
        elif h == 3:
            hx, hy, hz, hd = pnx, pny, pnz, depth
        elif h == 4:
            hx, hy, hz, hd = nx, ny, nz, d_pert
        else:
            # extra: the normal alone, turned at coarse-to-fine scales 4, 2, 1, 1/2, ... x pert
            # (rotating about this pixel's 3D point keeps a converged depth)
            scale = pert * 2.0 ** (7 - h)
            base = 7 + 3 * (h - 5)
            hd = depth
            hx, hy, hz = perturb_normal(nx, ny, nz, rng_uniform(seed, pixel, pass_id, base),
                                        rng_uniform(seed, pixel, pass_id, base + 1),
                                        rng_uniform(seed, pixel, pass_id, base + 2), scale, r0, r1, r2)
        if not (hd >= dmin and hd <= dmax):
            continue
        # planar-prior pass: the hypothesis' penalty is added to its photometric cost, which must
        # then beat bound = best_cost - penalty (without the prior: penalty 0, bound best_cost)
        pen = planar_penalty(geo[3][y, x], hx, hy, hz, hd, fparams) if iparams[I_PLANAR] != 0 else 0.0
        bound = best_cost - pen
        # pruned as soon as it cannot beat the bound; otherwise weighted_cost(view_costs(...)) exactly
        c = weighted_view_cost(rv, rw, mean_r, var_r, centre, srcs, sizes, K_inv, M, e, geo, fparams, iparams,
                               x, y, hx, hy, hz, hd, wts, bound, Hm)
        if c < bound:   # a pruned value is >= bound, so only fully scored hypotheses get here
            best_cost = c + pen
            bnx, bny, bnz, bd = hx, hy, hz, hd
    plane[y, x, 0] = bnx
    plane[y, x, 1] = bny
    plane[y, x, 2] = bnz
    plane[y, x, 3] = bd
    cost[y, x] = best_cost
