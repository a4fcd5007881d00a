"""CuPy launchers of `cuda/depth_scale_ops.cu`: joint bilateral upsampling and the depth post-filter.

CPU twin: cpu.py (same float32 arithmetic). Every launcher checks dtype,
shape, contiguity and device of its arrays and casts scalars; outputs are allocated poisoned
(NaN) so a pixel the kernel missed cannot pass for a result. Scalars are passed as the public
module prepares them (ops.py), which also owns the definitions.
"""

from __future__ import annotations

import numpy as np

from mvs_pipeline.gpu.checks import check_array
from mvs_pipeline.gpu.loader import get_kernel, import_cupy

CU = "depth_scale_ops.cu"
OPTIONS = ("--fmad=false",)   # no fused multiply-adds: keeps the arithmetic of the CPU twin
BLOCK = (16, 16)              # one thread per output pixel


def _grid(width: int, height: int) -> tuple[int, int]:
    return ((width + BLOCK[0] - 1) // BLOCK[0], (height + BLOCK[1] - 1) // BLOCK[1])


def jbu_upsample(coarse_depth, coarse_normal, guide, radius: int, a_s: float, a_r: float):
    """coarse_depth [h, w], coarse_normal [h, w, 3], guide [H, W] float32 ->
    (depth [H, W], normal [H, W, 3]) float32 cupy arrays.

    radius: window half-size in coarse px; a_s = 1 / (2 sigma_spatial^2) [1 / coarse px^2],
    a_r = 1 / (2 sigma_range^2) [1 / grey level^2].
    """
    cp = import_cupy()
    check_array(cp, "coarse_depth", coarse_depth, np.float32, (None, None))
    h, w = coarse_depth.shape
    check_array(cp, "coarse_normal", coarse_normal, np.float32, (h, w, 3))
    check_array(cp, "guide", guide, np.float32, (None, None))
    H, W = guide.shape
    if radius < 0:
        raise ValueError(f"radius: {radius}, expected >= 0")
    depth = cp.full((H, W), cp.nan, dtype=cp.float32)       # poisoned
    normal = cp.full((H, W, 3), cp.nan, dtype=cp.float32)
    if H * W and h * w:
        get_kernel(CU, "jbu_upsample", OPTIONS)(_grid(W, H), BLOCK, (
            coarse_depth, coarse_normal, np.int32(w), np.int32(h), guide, np.int32(W), np.int32(H),
            np.int32(radius), np.float32(a_s), np.float32(a_r), depth, normal))
    return depth, normal


def postfilter_depth(depth, cost, max_cost: float, median: bool):
    """depth, cost [H, W] float32 -> filtered depth [H, W] float32 cupy array.

    max_cost: pixels with cost above it are dropped; compared in float32, so pass the largest
    float32 not above the intended threshold (the public module does).
    """
    cp = import_cupy()
    check_array(cp, "depth", depth, np.float32, (None, None))
    H, W = depth.shape
    check_array(cp, "cost", cost, np.float32, (H, W))
    out = cp.full((H, W), cp.nan, dtype=cp.float32)          # poisoned
    if H * W:
        get_kernel(CU, "postfilter_depth", OPTIONS)(_grid(W, H), BLOCK, (
            depth, cost, np.int32(W), np.int32(H), np.float32(max_cost), np.int32(bool(median)), out))
    return out


def kernel_variants() -> list[tuple[str, tuple[str, ...]]]:
    """The (file, options) variants `mvs-pipeline build-kernels` precompiles."""
    return [(CU, OPTIONS)]
