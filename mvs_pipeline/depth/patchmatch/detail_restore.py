"""ACMM's detail restorer, shared by both solvers; NumPy/CuPy only, so the CUDA path never
imports Numba (its import costs 0.2-0.4 s of every run)."""

from __future__ import annotations

import numpy as np

from mvs_pipeline.gpu.loader import import_cupy, on_gpu


def restore_details(plane, cost, prior_plane, prior_cost, has_prior, margin: float) -> None:
    """ACMM's detail restorer, in place: where a prior (upsampled) hypothesis exists, the refined
    one is kept only if its cost beats the prior's by more than `margin` under the same view
    weights; otherwise the prior comes back. Shared by both backends (NumPy or CuPy arrays)."""
    xp = import_cupy() if on_gpu(plane) else np
    revert = has_prior & ~(cost < prior_cost - margin)
    # copyto, not mask indexing: on the GPU that would wait for the kernels to count the mask
    xp.copyto(plane, prior_plane, where=revert[..., None])
    xp.copyto(cost, prior_cost, where=revert)
