"""CuPy launchers of `cuda/depth_planar_prior.cu`: support points per grid cell, triangle owners,
prior planes per pixel. Twin: cpu.py, with the same arguments (host matrices here are uploaded).
Every launcher checks its device arrays; outputs the kernel writes in full are allocated poisoned
(-2 / NaN) so that a missed element cannot pass for a result."""

from __future__ import annotations

import numpy as np

from mvs_pipeline.gpu.checks import check_array
from mvs_pipeline.gpu.loader import get_kernel, import_cupy

from .layout import NO_OWNER

CU = "depth_planar_prior.cu"
OPTIONS = ("--fmad=false",)   # no fused multiply-adds: the twin's double arithmetic
BLOCK = (16, 16)              # one thread per cell (support) or pixel (fill)
OWNER_THREADS = 128           # 4 warps, one triangle each


def _grid(nx: int, ny: int) -> tuple[int, int]:
    return (-(-nx // BLOCK[0]), -(-ny // BLOCK[1]))


def _matrix(cp, a, shape):
    return cp.asarray(np.ascontiguousarray(np.asarray(a, np.float64).reshape(shape)))


def support_cells(depth, cost, grid: int, max_cost: np.float32, K, K_inv, min_consistent: int, max_err: float,
                  src_depth, src_offset, src_size, src_K, src_K_inv, src_R, src_t):
    """depth, cost [H, W] float32 and src_depth [N] float32 cupy; the rest host arrays as the twin
    takes them (layout.SourceArrays) -> best [cells_y, cells_x] int32 cupy (y * W + x, or -1)."""
    cp = import_cupy()
    check_array(cp, "depth", depth, np.float32, (None, None))
    H, W = depth.shape
    check_array(cp, "cost", cost, np.float32, (H, W))
    check_array(cp, "src_depth", src_depth, np.float32, (None,))
    if H * W >= 2 ** 31:
        raise ValueError(f"planar prior: {W}x{H} px, pixel indices must fit an int32")
    S = len(src_offset)
    if not np.shape(src_size) == (S, 2) or any(np.shape(a) != (S, n) for a, n in
                                               ((src_K, 9), (src_K_inv, 9), (src_R, 9), (src_t, 3))):
        raise ValueError(f"planar prior: source arrays do not describe {S} sources")
    cells_x, cells_y = -(-W // grid), -(-H // grid)
    best = cp.full((cells_y, cells_x), -2, dtype=cp.int32)
    if S:
        offset = cp.asarray(np.asarray(src_offset, np.int64))
        size = cp.asarray(np.ascontiguousarray(src_size, np.int32))
        sK, sK_inv, sR, st = (_matrix(cp, a, -1) for a in (src_K, src_K_inv, src_R, src_t))
    else:   # never read (num_sources 0), but every pointer must be valid
        offset, size = cp.zeros(1, cp.int64), cp.zeros(2, cp.int32)
        sK = sK_inv = sR = st = cp.zeros(9, cp.float64)
    get_kernel(CU, "prior_support_cells", OPTIONS)(_grid(cells_x, cells_y), BLOCK, (
        depth, cost, np.int32(W), np.int32(H), np.int32(grid), np.float32(max_cost),
        _matrix(cp, K, 9), _matrix(cp, K_inv, 9), np.int32(S), np.int32(min_consistent), np.float64(max_err),
        src_depth, offset, size, sK, sK_inv, sR, st, best))
    return best


def prior_owner(tri, W: int, H: int):
    """tri [T, 6] int32 cupy -> owner [H, W] int32 cupy (lowest covering triangle, NO_OWNER where none)."""
    cp = import_cupy()
    check_array(cp, "tri", tri, np.int32, (None, 6))
    owner = cp.full((H, W), NO_OWNER, dtype=cp.int32)
    T = tri.shape[0]
    if T:
        get_kernel(CU, "prior_owner", OPTIONS)((-(-T * 32 // OWNER_THREADS),), (OWNER_THREADS,), (
            tri, np.int32(T), np.int32(W), np.int32(H), owner))
    return owner


def prior_fill(depth, cost, owner, planes, max_cost: np.float32, K_inv):
    """depth, cost [H, W] float32, owner [H, W] int32, planes [T, 4] float64 (cupy); K_inv [9]
    host -> prior [H, W, 4] float32 cupy."""
    cp = import_cupy()
    check_array(cp, "depth", depth, np.float32, (None, None))
    H, W = depth.shape
    check_array(cp, "cost", cost, np.float32, (H, W))
    check_array(cp, "owner", owner, np.int32, (H, W))
    check_array(cp, "planes", planes, np.float64, (None, 4))
    prior = cp.full((H, W, 4), cp.nan, dtype=cp.float32)
    get_kernel(CU, "prior_fill", OPTIONS)(_grid(W, H), BLOCK, (
        depth, cost, owner, np.int32(planes.shape[0]), planes, np.int32(W), np.int32(H), np.float32(max_cost),
        _matrix(cp, K_inv, 9), prior))
    return prior


def kernel_variants() -> list[tuple[str, tuple[str, ...]]]:
    """The (file, options) variants `mvs-pipeline build-kernels` precompiles."""
    return [(CU, OPTIONS)]
