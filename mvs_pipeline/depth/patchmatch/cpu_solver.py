"""The PatchMatch loop on the CPU (Numba): init, then per iteration red/black propagate+refine,
then (multi-scale only) the detail restorer."""

from __future__ import annotations

import numpy as np

from . import cpu
from .detail_restore import restore_details
from .packing import geometry_arrays, pack_params, padded_sources
from .params import PatchMatchParams
from .problem import PatchMatchProblem, PatchMatchResult, source_matrices


def solve_cpu(problem: PatchMatchProblem, params: PatchMatchParams, seed: int = 0,
              restore_margin: float | None = None, restore_only: np.ndarray | None = None) -> PatchMatchResult:
    """Run PatchMatch on a validated problem with the Numba backend (see run_patchmatch)."""
    H, W = problem.shape
    S = problem.num_sources
    srcs, sizes = padded_sources(problem)
    K_inv, M, e = source_matrices(problem)
    geo = geometry_arrays(problem, M, e)
    plane = np.zeros((H, W, 4), dtype=np.float32)      # (nx, ny, nz, depth)
    cost = np.zeros((H, W), dtype=np.float32)
    selected = np.zeros((H, W), dtype=np.uint32)
    weights = np.zeros((H, W, S), dtype=np.uint8)
    has_prior = problem.init_depth is not None
    init_depth = problem.init_depth if has_prior else np.zeros((1, 1), np.float32)
    init_normal = problem.init_normal if has_prior else np.zeros((1, 1, 3), np.float32)

    f, i = pack_params(params, problem, 0, seed)
    cpu.init_all(problem.ref_image, srcs, sizes, K_inv, M, e, geo, f, i, init_depth, init_normal, has_prior,
                 plane, cost, selected)
    prior_plane = plane.copy() if has_prior else None
    for it in range(params.iterations):
        f, i = pack_params(params, problem, it, seed)
        for color in (0, 1):
            cpu.propagate_color(problem.ref_image, srcs, sizes, K_inv, M, e, geo, f, i, color,
                                cpu.propagate_pass(it, color), plane, cost, selected, weights)
            cpu.refine_color(problem.ref_image, srcs, sizes, K_inv, M, e, geo, f, i, color,
                             cpu.refine_pass(it, color), plane, cost, weights)
    if restore_margin is not None and has_prior and params.iterations > 0:
        prior_cost = np.empty((H, W), np.float32)
        cpu.score_all(problem.ref_image, srcs, sizes, K_inv, M, e, geo, f, i, prior_plane, weights, prior_cost)
        restore_details(plane, cost, prior_plane, prior_cost, problem.init_depth > 0, restore_margin, restore_only)
    return PatchMatchResult(depth=np.ascontiguousarray(plane[..., 3]),
                            normal=np.ascontiguousarray(plane[..., :3]),
                            cost=cost, selected_views=selected)
