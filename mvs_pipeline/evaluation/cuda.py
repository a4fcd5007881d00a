"""Launchers for cuda/evaluation_eth3d.cu: the ETH3D metric's per-point work on the GPU.

CPU twins: evaluation/sphere_grid.py + cpu.py (accuracy and completeness).
Every launcher checks dtype, shape, contiguity and device of its arrays, naming the argument.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..arrays import column_bounds
from ..gpu.checks import check_array
from ..gpu.loader import get_kernel, import_cupy
from .sphere_grid import ANGLE_SLACK, grid_shape, scan_from_world

CU = "evaluation_eth3d.cu"
BLOCK = 256
# Completeness search: grid levels of cell size h0 * LEVEL_GROWTH**l, RINGS_PER_LEVEL rings each;
# points not certified at one level go on to the next, coarser one (see nearest_dist2_cuda).
RINGS_PER_LEVEL = 2
LEVEL_GROWTH = 4.0
MAX_KEY_SPAN = 2**62  # nx * ny * nz must fit an int64 key


def _grid(n: int) -> tuple[int]:
    return (max(1, (n + BLOCK - 1) // BLOCK),)


def sphere_cells(points, n_incl: int, n_az: int):
    """[M] int64 direction cell of scan points [M, 3] float32 (sentinel n_incl*n_az at the origin)."""
    cp = import_cupy()
    check_array(cp, "points", points, np.float32, (None, 3))
    m = points.shape[0]
    cells = cp.empty(m, dtype=cp.int64)
    if m:
        get_kernel(CU, "eth3d_sphere_cells")(_grid(m), (BLOCK,), (points, np.int32(m), np.int32(n_incl),
                                                                   np.int32(n_az), cells))
    return cells


def build_sphere_grids_cuda(scans) -> dict:
    """Device arrays of all scans binned by direction (layout of sphere_grid.SphereGrids)."""
    cp = import_cupy()
    pts, starts, base, ni, na = [], [], [], [], []
    offset_points = offset_starts = 0
    for scan in scans:
        p = cp.asarray(np.ascontiguousarray(scan.points, dtype=np.float32))
        n_incl, n_az = grid_shape(len(p))
        n_cells = n_incl * n_az
        cells = sphere_cells(p, n_incl, n_az)
        order = cp.argsort(cells)
        sorted_cells = cells[order]
        st = cp.searchsorted(sorted_cells, cp.arange(n_cells + 1, dtype=cp.int64)) + offset_points
        pts.append(p[order])
        starts.append(st.astype(cp.int64))
        base.append(offset_starts)
        ni.append(n_incl)
        na.append(n_az)
        offset_points += len(p)  # origin points (sentinel cell) stay after starts[n_cells]: never read
        offset_starts += n_cells + 1
    rot, trans = scan_from_world(scans)
    return {
        "points": cp.ascontiguousarray(cp.concatenate(pts)),
        "starts": cp.ascontiguousarray(cp.concatenate(starts)),
        "start_base": cp.asarray(np.asarray(base, np.int64)),
        "n_incl": cp.asarray(np.asarray(ni, np.int32)),
        "n_az": cp.asarray(np.asarray(na, np.int32)),
        "rot": cp.asarray(rot),
        "trans": cp.asarray(trans),
    }


def classify_points_cuda(xyz, grids: dict, beam_start: float, tan_divergence: float, stop_dist2: float = -1.0,
                         out_best=None, out_front=None):
    """(best_dist2 [N] float64, front [N] bool) on the GPU; twin of cpu.classify_points_cpu.

    out_best [N] float64 / out_front [N] uint8 may be given (tests poison them: the kernel writes all).
    """
    cp = import_cupy()
    check_array(cp, "xyz", xyz, np.float32, (None, 3))
    s = grids["rot"].shape[0]
    check_array(cp, "grids.points", grids["points"], np.float32, (None, 3))
    check_array(cp, "grids.starts", grids["starts"], np.int64, (None,))
    check_array(cp, "grids.start_base", grids["start_base"], np.int64, (s,))
    check_array(cp, "grids.n_incl", grids["n_incl"], np.int32, (s,))
    check_array(cp, "grids.n_az", grids["n_az"], np.int32, (s,))
    check_array(cp, "grids.rot", grids["rot"], np.float64, (s, 3, 3))
    check_array(cp, "grids.trans", grids["trans"], np.float64, (s, 3))
    n = xyz.shape[0]
    best = cp.full(n, cp.inf, dtype=cp.float64) if out_best is None else out_best
    front = cp.zeros(n, dtype=cp.uint8) if out_front is None else out_front
    check_array(cp, "out_best", best, np.float64, (n,))
    check_array(cp, "out_front", front, np.uint8, (n,))
    if n and s:
        get_kernel(CU, "eth3d_accuracy_classify")(
            _grid(n), (BLOCK,),
            (xyz, np.int32(n), grids["rot"], grids["trans"], grids["points"], grids["starts"], grids["start_base"],
             grids["n_incl"], grids["n_az"], np.int32(s), np.float64(beam_start), np.float64(tan_divergence),
             np.float64(ANGLE_SLACK), np.float64(stop_dist2), best, front))
    return best, front.astype(cp.bool_)


def _sorted_grid(xp, points, lo: np.ndarray, hi: np.ndarray, h: float, grid_keys):
    """Points sorted by cell key, their keys, the cell size used and the grid dims."""
    while True:
        dims = np.maximum(np.floor((hi - lo) / h).astype(np.int64) + 1, 1)
        if float(dims[0]) * float(dims[1]) * float(dims[2]) < MAX_KEY_SPAN:
            break
        h *= 2.0  # absurd extents (far outliers): coarser cells keep keys in int64; still exact
    keys = grid_keys(points, lo, h, dims)
    order = xp.argsort(keys)
    return xp.ascontiguousarray(points[order]), xp.ascontiguousarray(keys[order]), h, dims


def nearest_dist2_levels(xp, queries, points, max_dist: float, h0: float | None, grid_keys, grid_nearest):
    """The level loop of nearest_dist2_cuda, written for any array module `xp` and kernel callables
    (so a host emulation of the kernels can run it in tests):
      grid_keys(points, lo, h, dims) -> keys [N] int64
      grid_nearest(queries, pending, sorted_points, sorted_keys, lo, h, dims, rings, out) fills out[pending]
    Level l uses cells h0 * LEVEL_GROWTH**l and RINGS_PER_LEVEL rings; a query whose nearest point is
    certified (within rings * h) is done, the others go on; the last level reaches max_dist."""
    q, n = queries.shape[0], points.shape[0]
    out = xp.full(q, xp.inf, dtype=xp.float64)
    if q == 0 or n == 0:
        return out
    p_lo, p_hi = column_bounds(points)
    lo = np.asarray(p_lo.tolist(), dtype=np.float64)
    hi = np.asarray(p_hi.tolist(), dtype=np.float64)
    h = float(h0) if h0 else max(max_dist / 16.0, 1e-6)
    pending = xp.arange(q, dtype=xp.int64)
    work = xp.full(q, -1.0, dtype=xp.float64)
    while pending.size:
        spts, skeys, h, dims = _sorted_grid(xp, points, lo, hi, h, grid_keys)
        last = RINGS_PER_LEVEL * h >= max_dist
        rings = int(math.ceil(max_dist / h)) if last else RINGS_PER_LEVEL
        grid_nearest(queries, pending, spts, skeys, lo, h, dims, rings, work)
        got = work[pending] >= 0
        done = pending[got]
        out[done] = work[done]
        pending = pending[~got]
        if last:
            break  # the rest have no point within rings * h >= max_dist: +inf
        h *= LEVEL_GROWTH
    out[out > max_dist * max_dist * (1 + 1e-12)] = xp.inf  # beyond max_dist: as the CPU twin
    return out


def nearest_dist2_cuda(queries, points, max_dist: float, h0: float | None = None):
    """[Q] float64 squared distance of each query [Q, 3] float64 to the nearest point [N, 3] float32;
    exact up to max_dist, +inf beyond. Twin of cpu.nearest_dist2_cpu."""
    cp = import_cupy()
    check_array(cp, "queries", queries, np.float64, (None, 3))
    check_array(cp, "points", points, np.float32, (None, 3))
    keys_kernel = get_kernel(CU, "eth3d_grid_keys")
    nearest_kernel = get_kernel(CU, "eth3d_grid_nearest")

    def grid_keys(pts, lo, h, dims):
        keys = cp.empty(pts.shape[0], dtype=cp.int64)
        keys_kernel(_grid(pts.shape[0]), (BLOCK,),
                    (pts, np.int32(pts.shape[0]), np.float64(lo[0]), np.float64(lo[1]), np.float64(lo[2]),
                     np.float64(1.0 / h), np.int64(dims[0]), np.int64(dims[1]), np.int64(dims[2]), keys))
        return keys

    def grid_nearest(qs, pending, spts, skeys, lo, h, dims, rings, out):
        check_array(cp, "pending", pending, np.int64, (None,))
        check_array(cp, "out", out, np.float64, (qs.shape[0],))
        nearest_kernel(_grid(pending.size), (BLOCK,),
                       (qs, pending, np.int32(pending.size), spts, skeys, np.int64(spts.shape[0]),
                        np.float64(lo[0]), np.float64(lo[1]), np.float64(lo[2]), np.float64(h), np.int64(dims[0]),
                        np.int64(dims[1]), np.int64(dims[2]), np.int32(rings), out))

    return nearest_dist2_levels(cp, queries, points, max_dist, h0, grid_keys, grid_nearest)


def evaluate_point_results_cuda(recon32: np.ndarray, gt_world: np.ndarray, scans, max_tol: float,
                                beam_start: float, tan_div: float, stop_dist2: float):
    """(cupy, gt_dist2, best_dist2, front, seconds) with the arrays on the GPU; the inputs may be
    NumPy or CuPy arrays."""
    cp = import_cupy()
    seconds = {}
    t0 = time.perf_counter()
    recon_d = cp.ascontiguousarray(cp.asarray(recon32, dtype=cp.float32))
    gt_d = cp.ascontiguousarray(cp.asarray(gt_world, dtype=cp.float64))
    cp.cuda.Device().synchronize()
    seconds["upload"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    gt_dist2 = nearest_dist2_cuda(gt_d, recon_d, max_tol)
    cp.cuda.Device().synchronize()
    seconds["completeness"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    grids = build_sphere_grids_cuda(scans)
    best, front = classify_points_cuda(recon_d, grids, beam_start, tan_div, stop_dist2)
    cp.cuda.Device().synchronize()
    seconds["accuracy"] = time.perf_counter() - t0
    return cp, gt_dist2, best, front, seconds


def kernel_variants() -> list[tuple[str, tuple[str, ...]]]:
    """The (file, options) variants `mvs-pipeline build-kernels` precompiles."""
    return [(CU, ())]
