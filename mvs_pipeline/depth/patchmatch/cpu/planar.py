"""Planar prior term (ACMP, Xu & Tao AAAI 2020): a penalty on hypotheses that leave a pixel's prior plane.

Part of the CPU twin of cuda/depth_patchmatch.cu (twin of cuda/depth_patchmatch_planar.cuh).

ACMP multiplies a hypothesis' photometric likelihood exp(-c^2 / beta) by gamma + the Gaussian
likelihood of its depth and normal deviation from the prior plane. Our passes minimise a cost, so
the same likelihood enters additively and bounded:

    penalty = weight * (1 - exp(-rel^2 * depth_coef - (1 - n . n_prior) * angle_coef))
    rel = (depth - depth_prior) / depth_prior,  depth_coef = 1 / (2 sigma_depth^2),
    angle_coef = 1 / sigma_angle^2   ((1 - cos a) / sigma^2 ~ a^2 / (2 sigma^2) for small a)

It is 0 on the prior plane and at most `weight` far from it, so a pixel whose photometric cost
separates hypotheses by more than `weight` (texture) keeps its own answer, and one where every
hypothesis costs about the same (no texture: all COST_MAX) takes the hypothesis nearest the prior.
Relative depth keeps sigma_depth scale-free; 1 - cos avoids an acos per hypothesis. A prior depth
<= 0 means no prior at that pixel (penalty 0).
"""

from __future__ import annotations

import math

from numba import njit

from ..layout import F_PLANAR_ANGLE_COEF, F_PLANAR_DEPTH_COEF, F_PLANAR_WEIGHT


@njit(cache=True, inline="always")
def planar_penalty(prior, nx, ny, nz, depth, fparams):
    """Penalty of hypothesis (n, depth) against prior [4] (nx, ny, nz, depth; depth <= 0: none)."""
    dp = prior[3]
    if not dp > 0.0:
        return 0.0
    rel = (depth - dp) / dp
    cosang = nx * prior[0] + ny * prior[1] + nz * prior[2]
    return fparams[F_PLANAR_WEIGHT] * (1.0 - math.exp(-rel * rel * fparams[F_PLANAR_DEPTH_COEF]
                                                       - (1.0 - cosang) * fparams[F_PLANAR_ANGLE_COEF]))
