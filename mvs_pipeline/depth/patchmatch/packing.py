"""Turn (problem, params, iteration, seed) into the flat arrays both backends take.

The order of `fparams` / `iparams` is fixed by the F_* / I_* constants of the CPU twin and
mirrored by `PMParams` in cuda/depth_patchmatch_common.cuh.
"""

from __future__ import annotations

import numpy as np

from . import layout
from .params import PatchMatchParams
from .problem import PatchMatchProblem, back_projection


def pack_params(params: PatchMatchParams, problem: PatchMatchProblem, iteration: int, seed: int
                ) -> tuple[np.ndarray, np.ndarray]:
    f = np.zeros(layout.NUM_FPARAMS, dtype=np.float64)
    f[layout.F_SIGMA_SPATIAL] = params.sigma_spatial
    f[layout.F_SIGMA_COLOR] = params.sigma_color
    f[layout.F_DEPTH_MIN] = problem.depth_min
    f[layout.F_DEPTH_MAX] = problem.depth_max
    f[layout.F_GOOD_TAU] = params.good_threshold_at(iteration)
    f[layout.F_BAD] = params.bad_threshold
    f[layout.F_GOOD_SIGMA] = params.good_cost_sigma
    f[layout.F_FALLBACK_SIGMA] = params.fallback_sigma
    f[layout.F_PRIOR_SEL] = params.prior_selected
    f[layout.F_PRIOR_UNSEL] = params.prior_unselected
    f[layout.F_PERTURB] = params.perturbation_at(iteration)
    f[layout.F_GEOM_WEIGHT] = params.geom_weight
    f[layout.F_GEOM_CAP] = params.geom_cap
    # the planar penalty's exponent coefficients (cpu/planar.py): 1 / (2 sigma_depth^2) and
    # 1 / sigma_angle^2 with the angle in radians, so the kernels divide by nothing
    f[layout.F_PLANAR_WEIGHT] = params.planar_prior_weight
    f[layout.F_PLANAR_DEPTH_COEF] = 1.0 / (2.0 * params.planar_prior_sigma_depth ** 2)
    f[layout.F_PLANAR_ANGLE_COEF] = 1.0 / np.deg2rad(params.planar_prior_sigma_angle) ** 2
    # sigmas by the window's texture: the samples' variance threshold (std squared; -1 = no test, one pair
    # of sigmas everywhere); a key left null gives its side the plain sigma
    weak = params.sigma_color_weak is not None
    textured = params.sigma_spatial_textured is not None
    f[layout.F_SIGMA_COLOR_WEAK] = params.sigma_color_weak if weak else params.sigma_color
    f[layout.F_SIGMA_SPATIAL_TEXTURED] = params.sigma_spatial_textured if textured else params.sigma_spatial
    f[layout.F_WEAK_TEXTURE_VAR] = params.weak_texture ** 2 if weak or textured else -1.0
    i = np.zeros(layout.NUM_IPARAMS, dtype=np.int64)
    i[layout.I_RADIUS] = params.window_radius
    i[layout.I_STEP] = params.window_step
    i[layout.I_TOP_K] = params.init_top_k
    i[layout.I_MIN_GOOD] = params.min_good_count
    i[layout.I_MAX_BAD] = params.max_bad_count
    i[layout.I_SAMPLES] = params.view_samples
    i[layout.I_NUM_REFINE] = params.num_refine
    i[layout.I_INV_DEPTH] = int(params.init_inverse_depth)
    i[layout.I_SEED] = int(seed) & 0xFFFFFFFF
    i[layout.I_ITER] = iteration
    i[layout.I_GEOM] = int(problem.src_depths is not None)
    i[layout.I_PLANAR] = int(problem.planar_prior is not None)
    return f, i


def stored_source(img: np.ndarray) -> np.ndarray:
    """A source image as both backends sample it: grey values rounded to float16 ([H, W] float16).

    The GPU keeps sources in float16 textures (half the bytes per texel: PatchMatch 7-12 % faster
    on an H200 than with float32); integer grey levels 0..255 are exact in float16 and other values
    move by at most 2^-11 relative. The CPU twin samples the same rounded values.
    """
    return np.asarray(img, dtype=np.float32).astype(np.float16)


def padded_sources(problem: PatchMatchProblem) -> tuple[np.ndarray, np.ndarray]:
    """Sources (stored_source) stacked into [S, Hmax, Wmax] float32 (zero padding), sizes [S, 2] (w, h)."""
    S = problem.num_sources
    hmax = max(s.shape[0] for s in problem.src_images)
    wmax = max(s.shape[1] for s in problem.src_images)
    stack = np.zeros((S, hmax, wmax), dtype=np.float32)
    sizes = np.zeros((S, 2), dtype=np.int64)
    for k, img in enumerate(problem.src_images):
        stack[k, :img.shape[0], :img.shape[1]] = stored_source(img)
        sizes[k] = (img.shape[1], img.shape[0])
    return stack, sizes


def geometry_arrays(problem: PatchMatchProblem, M: np.ndarray, e: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What the terms added to the photometric cost need, as the CPU twin takes them (its `geo`):
    (source depth maps stacked into [S, Hmax, Wmax] float32 with zero padding, Minv = M^-1
    [S, 3, 3], f = Minv e [S, 3], planar prior [H, W, 4] float32).

    Without source depth maps (a photometric pass) the depth stack is a [S, 1, 1] zero
    placeholder; Minv and f are computed either way (cheap, and the GPU always takes them).
    Without a planar prior its map is a [1, 1, 4] zero placeholder (iparams I_PLANAR is 0).
    """
    S = problem.num_sources
    Minv, f = back_projection(M, e)
    planar = (np.ascontiguousarray(problem.planar_prior, dtype=np.float32) if problem.planar_prior is not None
              else np.zeros((1, 1, 4), np.float32))
    if problem.src_depths is None:
        return np.zeros((S, 1, 1), np.float32), Minv, f, planar
    hmax = max(d.shape[0] for d in problem.src_depths)
    wmax = max(d.shape[1] for d in problem.src_depths)
    stack = np.zeros((S, hmax, wmax), dtype=np.float32)
    for k, d in enumerate(problem.src_depths):
        stack[k, :d.shape[0], :d.shape[1]] = d
    return stack, Minv, f, planar
