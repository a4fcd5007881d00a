"""CPU twin of `cuda/depth_patchmatch.cu`: the fallback backend and the reference the GPU tests use.

The functions mirror the CUDA device functions one to one (same names, same order of random
draws, same counter-based hash), so a GPU result can be checked stage by stage:

    pcg_hash / rng_uniform      counter-based RNG: hash(seed, pixel, pass, draw) -> [0, 1)
    ref_window                  reference window values + normalised bilateral weights
    window_cost                 1 - bilateral NCC of one hypothesis against one source
    planar_penalty              the planar-prior pass's per-hypothesis penalty (ACMP)
    view_costs                  the per-source cost vector of one plane hypothesis
    find_candidates             adaptive checkerboard sampling: 8 regions -> 8 neighbour pixels
    select_views                ACMH multi-hypothesis joint view selection -> view weights
    init_pixel / propagate_pixel / refine_pixel, and their image-wide drivers

Conventions: a hypothesis is (unit normal n in the reference camera frame, z-depth of the plane
at this pixel's centre); pixel (x, y) has its centre at image coordinates (x + 0.5, y + 0.5).
The plane through X = depth * K^-1 (x+0.5, y+0.5, 1) is n.X + d = 0 with d = -n.X > 0, and its
homography to a source is H = K_src (R - t n^T / d) K_ref^-1 = M - e (K_ref^-T n / d)^T.
Maps: plane [H, W, 4] float32 (nx, ny, nz, depth), cost [H, W] float32, selected [H, W] uint32,
weights [H, W, S] uint8 (Monte-Carlo view counts of the last propagation).

The CPU computes in float64 and samples sources with exact bilinear weights; the GPU uses
float32 and the texture unit's 8-bit fixed-point weights, so the two agree to a tolerance, not
bit for bit.

The twin is split by step: rng, geometry, cost, view_selection, propagation, refinement, drivers
(image-wide, what the solver calls) and debug (the test-only stage functions); constants shared
with the kernels are in ../layout.py. Everything is re-exported here, so `cpu.X` names them all.
"""

from __future__ import annotations

from ..layout import (
    COST_MAX,
    F_BAD,
    F_DEPTH_MAX,
    F_DEPTH_MIN,
    F_FALLBACK_SIGMA,
    F_GEOM_CAP,
    F_GEOM_WEIGHT,
    F_GOOD_SIGMA,
    F_GOOD_TAU,
    F_PERTURB,
    F_PLANAR_ANGLE_COEF,
    F_PLANAR_DEPTH_COEF,
    F_PLANAR_WEIGHT,
    F_PRIOR_SEL,
    F_PRIOR_UNSEL,
    F_SIGMA_COLOR,
    F_SIGMA_COLOR_WEAK,
    F_SIGMA_SPATIAL,
    F_SIGMA_SPATIAL_TEXTURED,
    F_WEAK_TEXTURE_VAR,
    I_GEOM,
    I_INV_DEPTH,
    I_ITER,
    I_MAX_BAD,
    I_MIN_GOOD,
    I_NUM_REFINE,
    I_PLANAR,
    I_RADIUS,
    I_SAMPLES,
    I_SEED,
    I_STEP,
    I_TOP_K,
    MIN_VAR,
    NUM_CANDIDATES,
    NUM_FPARAMS,
    NUM_IPARAMS,
)
from .cost import (
    geom_cost,
    plane_vector,
    ref_window,
    row_coefficients,
    sample_bilinear,
    source_cost,
    view_costs,
    weighted_view_cost,
    window_cost,
    window_variance,
)
from .debug import debug_candidates, debug_select_views, debug_view_costs
from .drivers import init_all, propagate_color, refine_color, score_all, window_len
from .geometry import perturb_normal, pixel_ray, random_depth, random_normal, transfer_depth
from .planar import planar_penalty
from .propagation import init_pixel, propagate_pixel, top_k_cost
from .refinement import refine_pixel
from .rng import PASS_INIT, pcg_hash, propagate_pass, refine_pass, rng_u32, rng_uniform
from .view_selection import find_candidates, select_views, weighted_cost

__all__ = [
    "COST_MAX", "F_BAD", "F_DEPTH_MAX", "F_DEPTH_MIN", "F_FALLBACK_SIGMA", "F_GEOM_CAP", "F_GEOM_WEIGHT",
    "F_GOOD_SIGMA", "F_GOOD_TAU", "F_PERTURB", "F_PLANAR_ANGLE_COEF", "F_PLANAR_DEPTH_COEF", "F_PLANAR_WEIGHT",
    "F_PRIOR_SEL", "F_PRIOR_UNSEL", "F_SIGMA_COLOR", "F_SIGMA_COLOR_WEAK", "F_SIGMA_SPATIAL", "F_SIGMA_SPATIAL_TEXTURED",
    "F_WEAK_TEXTURE_VAR",
    "I_GEOM", "I_INV_DEPTH", "I_ITER", "I_MAX_BAD", "I_MIN_GOOD", "I_NUM_REFINE", "I_PLANAR", "I_RADIUS",
    "I_SAMPLES", "I_SEED", "I_STEP", "I_TOP_K",
    "MIN_VAR", "NUM_CANDIDATES", "NUM_FPARAMS", "NUM_IPARAMS", "PASS_INIT", "debug_candidates",
    "debug_select_views", "debug_view_costs", "find_candidates", "geom_cost", "init_all", "init_pixel", "pcg_hash",
    "perturb_normal", "pixel_ray", "planar_penalty", "plane_vector", "propagate_color", "propagate_pass",
    "propagate_pixel", "random_depth", "random_normal", "ref_window", "refine_color", "refine_pass", "refine_pixel",
    "rng_u32", "rng_uniform", "row_coefficients", "sample_bilinear", "score_all", "select_views", "source_cost",
    "top_k_cost", "transfer_depth", "view_costs", "weighted_cost", "weighted_view_cost", "window_cost",
    "window_variance", "window_len"
]
