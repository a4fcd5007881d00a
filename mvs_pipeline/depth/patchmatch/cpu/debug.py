"""Stage functions for tests (the GPU has debug kernels with the same contracts).

Part of the CPU twin of cuda/depth_patchmatch.cu (package docstring: conventions)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..layout import I_RADIUS, I_SEED, I_STEP, NUM_CANDIDATES
from .cost import ref_window, view_costs
from .drivers import window_len
from .view_selection import find_candidates, select_views


@njit(parallel=True, cache=True)
def debug_view_costs(ref, srcs, sizes, K_inv, M, e, geo, fparams, iparams, pixels, planes, out):
    """out [N, S] = per-source costs of planes [N, 4] (nx, ny, nz, depth) at pixels [N, 2] (x, y)."""
    N = pixels.shape[0]
    S = srcs.shape[0]
    nw = window_len(iparams)
    for j in prange(N):
        rv = np.empty(nw)
        rw = np.empty(nw)
        Hm = np.empty((3, 3))
        ones = np.ones(S, dtype=np.uint8)
        x, y = pixels[j, 0], pixels[j, 1]
        mean_r, var_r = ref_window(ref, x, y, iparams[I_RADIUS], iparams[I_STEP], fparams, rv, rw)
        view_costs(rv, rw, mean_r, var_r, ref[y, x], srcs, sizes, K_inv, M, e, geo, fparams, iparams, x, y,
                   planes[j, 0], planes[j, 1], planes[j, 2], planes[j, 3], ones, True, out[j], Hm)


@njit(cache=True)
def debug_candidates(cost, color, out):
    """out [H, W, 8] int64: find_candidates for every pixel of `color`, -2 for the other colour."""
    H, W = cost.shape
    for y in range(H):
        for x in range(W):
            if ((x + y) & 1) != color:
                for i in range(NUM_CANDIDATES):
                    out[y, x, i] = -2
            else:
                find_candidates(cost, x, y, out[y, x])


@njit(cache=True)
def debug_select_views(cost_matrices, flags, priors, fparams, iparams, pixels, pass_id, weights, masks):
    """weights [N, S] uint8 and masks [N] uint32 from select_views on N independent inputs."""
    N, _, S = cost_matrices.shape
    probs = np.empty(S)
    for j in range(N):
        masks[j] = np.uint32(select_views(cost_matrices[j], flags[j], priors[j], fparams, iparams,
                                          iparams[I_SEED], pixels[j], pass_id, probs, weights[j]))
