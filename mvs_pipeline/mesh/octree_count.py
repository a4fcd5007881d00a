"""How many points the octree pooling (octree_pool.py) would leave of a cloud at each octree depth,
counted exactly from the points' Morton codes: what poisson.capped_depth lowers the depth by.

    counts = octree_points(xyz [N, 3], depths, backend="cpu", budget=None)   # {depth: voxels holding a point}

One array code for NumPy and CuPy (the CPU path and its twin are the same lines): the codes are
made chunk by chunk into one [N] uint64 array, sorted once, and each depth counted where its codes
(the finest codes without 3 bits per level) change. On the host this was most of the depth cap's
12.7 s at 64.2 M points (40 x 3200x2130 on the H200 machine); on the GPU the codes take 8 B a point,
the sort and the count about as much again (COUNT_BYTES), the chunk's float64 work the rest of the budget.
"""

from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger(__name__)

MAX_DEPTH = 12
SCALE = 1.1          # Open3D's default: the octree's cube is the bounding cube enlarged by this
COUNT_BYTES = 24     # per point on the device: the codes, the sort's buffer (or a depth's shifted codes and mask)
CHUNK_ROW_BYTES = 64  # per chunk row: its coordinates (up to float64), a float64 column, its cell and spread bits, codes
MIN_CHUNK_ROWS = 1 << 16


def spread_bits(v, xp=np):
    """uint64 v < 2^21 with two zero bits after each of its bits (one axis of a Morton code)."""
    v = v & xp.uint64(0x1FFFFF)
    for shift, mask in ((32, 0x1F00000000FFFF), (16, 0x1F0000FF0000FF), (8, 0x100F00F00F00F00F),
                        (4, 0x10C30C30C30C30C3), (2, 0x1249249249249249)):
        v = (v | (v << xp.uint64(shift))) & xp.uint64(mask)
    return v


def morton_codes(xyz, lo: np.ndarray, factor: float, xp=np):
    """[k] uint64 Morton codes of the cells floor((xyz - lo) * factor) (float64, one axis at a time)
    of xyz [k, 3] on xp."""
    codes = None
    for axis in range(3):
        c = xp.floor((xyz[:, axis].astype(xp.float64) - float(lo[axis])) * factor).astype(xp.uint64)
        part = spread_bits(c, xp) << xp.uint64(axis)
        codes = part if codes is None else codes | part
    return codes


def _module(backend: str, n: int, budget: int | None):
    """(array module, chunk rows): CuPy where the backend is cuda and the codes and their sort fit
    `budget` (default the mesh stage's gpu_budget), else NumPy (the same counts)."""
    if backend != "cuda":
        return np, max(MIN_CHUNK_ROWS, n // 8)   # chunks bound the float64 copies on the host too
    from ..sampling.memory_plan import HEADROOM  # noqa: PLC0415
    from .octree_pool import gpu_budget  # noqa: PLC0415

    budget = gpu_budget() if budget is None else budget
    rows = int((HEADROOM * budget - COUNT_BYTES * n) / CHUNK_ROW_BYTES)
    if rows < min(n, MIN_CHUNK_ROWS):
        log.info("mesh: counting the octree of %d points on the host (%.2f GiB of GPU memory is too little)",
                 n, budget / 2**30)
        return np, max(MIN_CHUNK_ROWS, n // 8)
    import cupy  # noqa: PLC0415

    return cupy, rows


def octree_points(xyz, depths, backend: str = "cpu", budget: int | None = None) -> dict[int, int]:
    """{depth: the number of voxels of half that depth's octree cell that hold a point}: what the pooling
    (octree_pool.pooled_for_octree, with the cloud's minimum corner as origin) would leave of xyz [N, 3]
    (host) at each depth (at most MAX_DEPTH). One sort of the points' Morton codes at the finest depth
    asked; a coarser depth's voxels are those codes without their last 3 bits per level, still sorted,
    so each further depth is one pass counting where they change (np.unique per depth: 12.4 s on an
    8.7 M-point cloud on 2 shared CPU cores, this 2.0 s). With backend "cuda" on the GPU within `budget`."""
    depths = sorted({int(d) for d in depths}, reverse=True)
    xyz = np.asarray(xyz)
    n = len(xyz)
    if n == 0:
        return {d: 0 for d in depths}
    lo, hi = (b.astype(np.float64) for b in (xyz.min(axis=0), xyz.max(axis=0)))
    extent = float((hi - lo).max())
    if extent <= 0:
        return {d: 1 for d in depths}
    finest = depths[0]
    factor = 2 ** (finest + 1) / (SCALE * extent)
    xp, rows = _module(backend, n, budget)
    codes = xp.empty(n, dtype=xp.uint64)
    for a in range(0, n, rows):
        codes[a:a + rows] = morton_codes(xp.asarray(xyz[a:a + rows]), lo, factor, xp)
    codes.sort()
    out = {}
    for d in depths:
        k = codes >> xp.uint64(3 * (finest - d))
        out[d] = int(xp.count_nonzero(k[1:] != k[:-1])) + 1
        del k
    if xp is not np:
        # the pooling that follows allocates other sizes: the count's cached blocks would sit beside its peak
        del codes
        xp.get_default_memory_pool().free_all_blocks()
    return out
