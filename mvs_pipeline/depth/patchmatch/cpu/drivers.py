"""Image-wide drivers: rows in parallel, interleaved over the threads; a colour only reads the other colour.

Each driver runs one `prange` iteration per thread ("lane"), and lane t takes rows t, t + T,
t + 2T, ... of the image: every thread gets rows from the whole image, so a region that is
cheap (windows off the sources, rejected early) or expensive does not land on one thread, as it
did with Numba's contiguous split of prange(H). Scratch arrays are allocated once per lane.

Part of the CPU twin of cuda/depth_patchmatch.cu (package docstring: conventions)."""

from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

from ..layout import I_RADIUS, I_STEP, NUM_CANDIDATES
from .cost import ref_window, view_costs
from .propagation import init_pixel, propagate_pixel
from .refinement import refine_pixel
from .view_selection import weighted_cost


@njit(cache=True, inline="always")
def window_len(iparams):
    """Samples in the matching window (the length of the rv / rw scratch arrays)."""
    n = 2 * iparams[I_RADIUS] // iparams[I_STEP] + 1
    return n * n


def _lanes(H: int) -> int:
    """prange iterations of a driver: one per Numba thread (at most one per row). Asked here in
    Python, not inside the jitted driver: there it would make the driver uncacheable."""
    return max(1, min(get_num_threads(), H))


@njit(parallel=True, cache=True)
def _init_all(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, init_depth, init_normal, has_prior,
              plane, cost, selected, T):
    H, W = ref.shape
    S = srcs.shape[0]
    nw = window_len(iparams)
    for t in prange(T):
        rv = np.empty(nw)
        rw = np.empty(nw)
        cvec = np.empty(S)
        Hm = np.empty((3, 3))
        ones = np.ones(S, dtype=np.uint8)
        for y in range(t, H, T):
            for x in range(W):
                init_pixel(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, init_depth, init_normal,
                           has_prior, x, y, plane, cost, selected, rv, rw, cvec, Hm, ones)


def init_all(*args):
    """Run _init_all with one lane per Numba thread (same arguments as _init_all, less T)."""
    _init_all(*args, _lanes(args[0].shape[0]))


@njit(parallel=True, cache=True)
def _propagate_color(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, color, pass_id,
                     plane, cost, selected, weights_map, T):
    H, W = ref.shape
    S = srcs.shape[0]
    nw = window_len(iparams)
    for t in prange(T):
        rv = np.empty(nw)
        rw = np.empty(nw)
        cand = np.empty(NUM_CANDIDATES, dtype=np.int64)
        cdepth = np.empty(NUM_CANDIDATES)
        cmat = np.empty((NUM_CANDIDATES, S))
        flags = np.empty(NUM_CANDIDATES, dtype=np.uint8)
        prior = np.empty(S)
        probs = np.empty(S)
        wts = np.empty(S, dtype=np.uint8)
        cvec = np.empty(S)
        Hm = np.empty((3, 3))
        for y in range(t, H, T):
            for x in range((y + color) & 1, W, 2):
                propagate_pixel(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, pass_id, x, y,
                                plane, cost, selected, weights_map, rv, rw, cand, cdepth, cmat, flags, prior,
                                probs, wts, cvec, Hm)


def propagate_color(*args):
    """Run _propagate_color with one lane per Numba thread (same arguments as _propagate_color, less T)."""
    _propagate_color(*args, _lanes(args[0].shape[0]))


@njit(parallel=True, cache=True)
def _refine_color(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, color, pass_id, plane, cost, weights_map,
                  T):
    H, W = ref.shape
    nw = window_len(iparams)
    for t in prange(T):
        rv = np.empty(nw)
        rw = np.empty(nw)
        Hm = np.empty((3, 3))
        for y in range(t, H, T):
            for x in range((y + color) & 1, W, 2):
                refine_pixel(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, pass_id, x, y,
                             plane, cost, weights_map, rv, rw, Hm)


def refine_color(*args):
    """Run _refine_color with one lane per Numba thread (same arguments as _refine_color, less T)."""
    _refine_color(*args, _lanes(args[0].shape[0]))


@njit(parallel=True, cache=True)
def _score_all(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, plane, weights_map, out, T):
    """out [H, W] = weighted cost of the hypotheses plane [H, W, 4] under view weights [H, W, S].

    The detail restorer compares an upsampled hypothesis with the refined one under the same
    (final) view weights; a pixel with depth <= 0 scores COST_MAX.
    """
    H, W = ref.shape
    S = srcs.shape[0]
    nw = window_len(iparams)
    for t in prange(T):
        rv = np.empty(nw)
        rw = np.empty(nw)
        cvec = np.empty(S)
        Hm = np.empty((3, 3))
        for y in range(t, H, T):
            for x in range(W):
                wts = weights_map[y, x]
                mean_r, var_r = ref_window(ref, x, y, iparams[I_RADIUS], iparams[I_STEP], fparams, rv, rw)
                view_costs(rv, rw, mean_r, var_r, ref[y, x], srcs, sizes, K_inv, M, e, geo, fparams, iparams,
                           x, y, plane[y, x, 0], plane[y, x, 1], plane[y, x, 2], plane[y, x, 3], wts, False, cvec,
                           Hm)
                out[y, x] = weighted_cost(cvec, wts)


def score_all(*args):
    """Run _score_all with one lane per Numba thread (same arguments as _score_all, less T)."""
    _score_all(*args, _lanes(args[0].shape[0]))
