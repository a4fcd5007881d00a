"""Image-wide drivers: rows in parallel; a colour only reads the other colour.

Part of the CPU twin of cuda/depth_patchmatch.cu (package docstring: conventions)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..layout import F_SIGMA_COLOR, F_SIGMA_SPATIAL, I_RADIUS, I_STEP, NUM_CANDIDATES
from .cost import ref_window, view_costs
from .propagation import init_pixel, propagate_pixel
from .refinement import refine_pixel
from .view_selection import weighted_cost


@njit(cache=True, inline="always")
def window_len(iparams):
    """Samples in the matching window (the length of the rv / rw scratch arrays)."""
    n = 2 * iparams[I_RADIUS] // iparams[I_STEP] + 1
    return n * n


@njit(parallel=True, cache=True)
def init_all(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, init_depth, init_normal, has_prior,
             plane, cost, selected):
    H, W = ref.shape
    S = srcs.shape[0]
    nw = window_len(iparams)
    for y in prange(H):
        rv = np.empty(nw)
        rw = np.empty(nw)
        cvec = np.empty(S)
        Hm = np.empty((3, 3))
        ones = np.ones(S, dtype=np.uint8)
        for x in range(W):
            init_pixel(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, init_depth, init_normal, has_prior,
                       x, y, plane, cost, selected, rv, rw, cvec, Hm, ones)


@njit(parallel=True, cache=True)
def propagate_color(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, color, pass_id,
                    plane, cost, selected, weights_map):
    H, W = ref.shape
    S = srcs.shape[0]
    nw = window_len(iparams)
    for y in prange(H):
        rv = np.empty(nw)
        rw = np.empty(nw)
        cand = np.empty(NUM_CANDIDATES, dtype=np.int64)
        cmat = np.empty((NUM_CANDIDATES, S))
        flags = np.empty(NUM_CANDIDATES, dtype=np.uint8)
        prior = np.empty(S)
        probs = np.empty(S)
        wts = np.empty(S, dtype=np.uint8)
        cvec = np.empty(S)
        Hm = np.empty((3, 3))
        for x in range((y + color) & 1, W, 2):
            propagate_pixel(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, pass_id, x, y,
                            plane, cost, selected, weights_map, rv, rw, cand, cmat, flags, prior, probs,
                            wts, cvec, Hm)


@njit(parallel=True, cache=True)
def refine_color(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, color, pass_id, plane, cost, weights_map):
    H, W = ref.shape
    S = srcs.shape[0]
    nw = window_len(iparams)
    for y in prange(H):
        rv = np.empty(nw)
        rw = np.empty(nw)
        cvec = np.empty(S)
        Hm = np.empty((3, 3))
        for x in range((y + color) & 1, W, 2):
            refine_pixel(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, pass_id, x, y,
                         plane, cost, weights_map, rv, rw, cvec, Hm)


@njit(parallel=True, cache=True)
def score_all(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, plane, weights_map, out):
    """out [H, W] = weighted cost of the hypotheses plane [H, W, 4] under view weights [H, W, S].

    The detail restorer compares an upsampled hypothesis with the refined one under the same
    (final) view weights; a pixel with depth <= 0 scores COST_MAX.
    """
    H, W = ref.shape
    S = srcs.shape[0]
    nw = window_len(iparams)
    for y in prange(H):
        rv = np.empty(nw)
        rw = np.empty(nw)
        cvec = np.empty(S)
        Hm = np.empty((3, 3))
        for x in range(W):
            wts = weights_map[y, x]
            mean_r, var_r = ref_window(ref, x, y, iparams[I_RADIUS], iparams[I_STEP], fparams[F_SIGMA_SPATIAL],
                                       fparams[F_SIGMA_COLOR], rv, rw)
            view_costs(rv, rw, mean_r, var_r, ref[y, x], srcs, sizes, K_inv, M, e, geo, fparams, iparams, x, y,
                       plane[y, x, 0], plane[y, x, 1], plane[y, x, 2], plane[y, x, 3], wts, False, cvec, Hm)
            out[y, x] = weighted_cost(cvec, wts)
