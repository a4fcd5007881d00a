"""PatchMatch (ACMH photometric, ACMM geometric passes): public, array-level API.

    result = run_patchmatch(problem, PatchMatchParams(), backend="auto", seed=0)

`problem` is a PatchMatchProblem (reference + sources + relative poses + depth range); the
result holds depth, normal, cost and the selected-view bitmask per pixel. Both backends run
the same algorithm and the same counter-based random draws (see cpu/ for the
function-by-function description, cuda/depth_patchmatch.cu for the kernels).
"""

from __future__ import annotations

import logging

from mvs_pipeline.gpu.loader import on_gpu

from .params import PatchMatchParams
from .problem import PatchMatchProblem, PatchMatchResult, validate_problem
from .window import MAX_SOURCE_VIEWS, SUPPORTED_WINDOW_RADII, check_window

log = logging.getLogger(__name__)


def run_patchmatch(problem: PatchMatchProblem, params: PatchMatchParams | None = None,
                   backend: str = "auto", seed: int = 0, restore_margin: float | None = None,
                   restore_only=None, timings: dict | None = None, memory: dict | None = None, texture_cache=None,
                   keep_on_device: bool = False) -> PatchMatchResult:
    """Validate `problem` and `params`, then run PatchMatch on the resolved backend.

    A problem with `src_depths` runs a geometric pass (photometric + weighted reprojection
    error); one with `planar_prior` adds the planar prior penalty to every hypothesis.
    `restore_margin` (with a prior in init_depth) turns on ACMM's detail restorer: a pixel keeps
    its refined hypothesis only if it beats the prior's cost by more than the margin; `restore_only`
    ([H, W] bool, NumPy or CuPy; None = everywhere) limits that to its pixels (depth.detail_texture).
    `timings` / `memory` (GPU only) receive the solver's per-phase times (ms) and device memory use;
    `texture_cache` (GPU only, cuda.TextureCache) keeps source textures across calls
    for problems that carry src_keys / src_depth_keys / ref_key; `keep_on_device` (GPU only)
    returns CuPy arrays. The CPU backend accepts CuPy priors and source depth maps (downloaded).
    """
    from mvs_pipeline.gpu.backend import resolve_backend  # noqa: PLC0415 (keeps config loading light)

    params = params or PatchMatchParams()
    params.validate()
    clean = validate_problem(problem)
    which = resolve_backend(backend)
    if which == "cuda":
        from .cuda_solver import solve_cuda  # noqa: PLC0415

        return solve_cuda(clean, params, seed, restore_margin=restore_margin, restore_only=restore_only,
                          timings=timings, memory=memory,
                          texture_cache=texture_cache, keep_on_device=keep_on_device)
    from .cpu_solver import solve_cpu  # noqa: PLC0415

    if on_gpu(clean.init_depth):   # a GPU prior on the CPU backend
        clean.prior_check.raise_if_failed()
        clean.init_depth, clean.init_normal = clean.init_depth.get(), clean.init_normal.get()
    if clean.src_depths is not None:
        clean.src_depths = [d.get() if on_gpu(d) else d for d in clean.src_depths]
    if on_gpu(clean.planar_prior):
        clean.planar_prior = clean.planar_prior.get()

    if on_gpu(restore_only):
        restore_only = restore_only.get()
    return solve_cpu(clean, params, seed, restore_margin=restore_margin, restore_only=restore_only)


__all__ = ["PatchMatchParams", "PatchMatchProblem", "PatchMatchResult", "run_patchmatch", "validate_problem",
           "check_window", "SUPPORTED_WINDOW_RADII", "MAX_SOURCE_VIEWS"]
