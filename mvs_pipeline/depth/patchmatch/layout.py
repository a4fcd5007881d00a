"""Constants shared by the PatchMatch CPU twin, the CUDA kernels and the parameter packing.

The cost constants reach the kernels as -D options (cuda.compile_options), so this is the one
place they are defined. The packed parameter arrays' index constants are mirrored by
`load_params` in cuda/depth_patchmatch_common.cuh (the order of the PMParams fields); `pack_params`
(packing.py) fills the arrays by these names.
"""

from __future__ import annotations

COST_MAX = 2.0     # cost of a window that leaves the source or has no variance (ACMM cost_max)
MIN_VAR = 1e-5     # weighted intensity variance below which NCC is undefined (ACMM kMinVar)
NUM_CANDIDATES = 8

# Index constants of the packed parameter arrays (kept in step with depth_patchmatch_common.cuh's
# PMParams by `pack_params`).
F_SIGMA_SPATIAL, F_SIGMA_COLOR, F_DEPTH_MIN, F_DEPTH_MAX, F_GOOD_TAU, F_BAD, F_GOOD_SIGMA, \
    F_FALLBACK_SIGMA, F_PRIOR_SEL, F_PRIOR_UNSEL, F_PERTURB, F_GEOM_WEIGHT, F_GEOM_CAP, \
    F_PLANAR_WEIGHT, F_PLANAR_DEPTH_COEF, F_PLANAR_ANGLE_COEF, F_SIGMA_COLOR_WEAK, F_WEAK_TEXTURE_VAR, \
    F_SIGMA_SPATIAL_TEXTURED = range(19)
I_RADIUS, I_STEP, I_TOP_K, I_MIN_GOOD, I_MAX_BAD, I_SAMPLES, I_NUM_REFINE, I_INV_DEPTH, I_SEED, \
    I_ITER, I_GEOM, I_PLANAR = range(12)
NUM_FPARAMS, NUM_IPARAMS = 19, 12

# RNG pass ids: init is pass 0; iteration k, colour c uses 1 + 4k + 2c (propagate) and
# 2 + 4k + 2c (refine). Draw ids within a pass are fixed per use (see each function).
PASS_INIT = 0


def propagate_pass(iteration: int, color: int) -> int:
    return 1 + 4 * iteration + 2 * color


def refine_pass(iteration: int, color: int) -> int:
    return 2 + 4 * iteration + 2 * color


def layout_compile_options() -> tuple[str, ...]:
    """The cost constants as the kernels' -D options (float literals with the f suffix)."""
    return (f"-DPM_COST_MAX={COST_MAX!r}f", f"-DPM_MIN_VAR={MIN_VAR!r}f", f"-DPM_NUM_CANDIDATES={NUM_CANDIDATES}")
