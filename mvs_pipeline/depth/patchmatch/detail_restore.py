"""ACMM's detail restorer, shared by both solvers; NumPy/CuPy only, so the CUDA path never
imports Numba (its import costs 0.2-0.4 s of every run)."""

from __future__ import annotations

import numpy as np

from mvs_pipeline.gpu.loader import import_cupy, on_gpu

# the texture window of depth.detail_texture: 11x11 px at the pass's scale, as fusion.min_texture's
TEXTURE_RADIUS = 5


def restore_details(plane, cost, prior_plane, prior_cost, has_prior, margin: float, only=None) -> None:
    """ACMM's detail restorer, in place: where a prior (upsampled) hypothesis exists, the refined
    one is kept only if its cost beats the prior's by more than `margin` under the same view
    weights; otherwise the prior comes back. `only` ([H, W] bool, None = everywhere): the pixels
    the prior may come back to (restore_mask). Shared by both backends (NumPy or CuPy arrays)."""
    xp = import_cupy() if on_gpu(plane) else np
    revert = has_prior & ~(cost < prior_cost - margin)
    if only is not None:
        revert &= xp.asarray(only)
    # copyto, not mask indexing: on the GPU that would wait for the kernels to count the mask
    xp.copyto(plane, prior_plane, where=revert[..., None])
    xp.copyto(cost, prior_cost, where=revert)


def restore_mask(guide, margin: float | None, texture: float | None):
    """The restorer's `only` for depth.detail_margin / detail_texture on a pass's reference image
    `guide` (NumPy or CuPy): None where there is no restorer or no texture limit."""
    if margin is None or texture is None:
        return None
    return weak_texture(guide, texture)


def weak_texture(image, threshold: float, radius: int = TEXTURE_RADIUS):
    """[H, W] bool: pixels whose (2 radius + 1)^2 window of `image` (grey levels; mirrored at the
    border without repeating the edge, OpenCV's default) has a standard deviation below `threshold`.
    NumPy or CuPy, as the image is: integral images in float64, so both backends give the same
    mask but at a std within rounding of the threshold."""
    xp = import_cupy() if on_gpu(image) else np
    # mirrored, not clipped: at the coarse scales (80x60 px) the border is a sixth of the image, and
    # clipped windows gave the CPU room 2 pp less F1 (BENCHMARKS.md, "The detail restorer")
    g = xp.pad(xp.asarray(image, dtype=xp.float64), radius, mode="reflect")
    k = 2 * radius + 1

    def window_sums(a):
        c = xp.zeros((a.shape[0] + 1, a.shape[1] + 1), xp.float64)
        c[1:, 1:] = a.cumsum(0).cumsum(1)
        return c[k:, k:] - c[:-k, k:] - c[k:, :-k] + c[:-k, :-k]

    mean = window_sums(g) / (k * k)
    var = window_sums(g * g) / (k * k) - mean * mean
    return var < threshold * threshold
