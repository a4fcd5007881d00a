"""Voxel weighting of the ETH3D scores: every cell of two shifted grids weighs the same.

A point p falls in cell floor(p / voxel_size + shift) of grid 0 (shift 0) and grid 1 (shift
0.5, half a voxel). A score is the mean, over the occupied cells of *both* grids pooled, of
the per-cell ratio (complete GT points / GT points; accurate / (accurate + inaccurate)
reconstruction points). Dense regions therefore do not outvote sparse ones.

Choice, made to agree with the official program bit for bit on cell membership: the cell
coordinate is computed in float32 as float32(p) * float32(1 / voxel_size) + float32(shift),
rounded once per operation, then floored. Points exactly on a cell face go to the upper cell.
Change GRID_SHIFTS or `cell_coords` here; nothing else depends on the details.

Every function takes `xp` (numpy or cupy) so the CPU and GPU paths share this code.

Two implementations of the same scores:
- `cell_ids` + `pooled_cell_mean`: the definition, for any per-point weights (reference.py uses
  it; also the fallback for absurd cell spans). One unique-sort per grid, two bincounts per
  tolerance: ~30 s for 25 M points on 2 cores.
- `tolerance_scores`: the metric's case (per-point *counts* from distance <= tolerance), one
  pass per grid: every point gets a code (first tolerance it meets, and its `front` flag) and
  each cell a histogram of codes; the per-tolerance numerators and denominators are cumulative
  sums of that histogram. The CPU radix-sorts packed (key, code) integers in Numba
  (cpu.cell_code_counts_cpu), the GPU sorts keys and segments them (`sorted_cell_counts`, CuPy). Cells are then taken in
  the order of their packed key, as `cell_ids` ranks them, and every per-cell ratio is the same
  float64 quotient of two integers, so the per-grid sums are the same numbers bit for bit on
  the CPU (tests/evaluation/test_eval_voxels.py keeps the old implementation to check it).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..arrays import column_bounds

GRID_SHIFTS = (0.0, 0.5)  # in voxels, same shift on x, y, z


def cell_coords(xp, xyz, voxel_size: float, shift: float):
    """[N, 3] int64 cell coordinates of float32 points `xyz` [N, 3]."""
    xyz = xp.asarray(xyz, dtype=xp.float32)
    inv = np.float32(1.0 / voxel_size)  # the official program stores 1/voxel_size as a float
    scaled = xyz * inv  # float32 * float32 -> float32 (rounded)
    scaled = scaled + np.float32(shift)  # separate rounding: no fused multiply-add
    return xp.floor(scaled).astype(xp.int64)


def cell_ids(xp, xyz, voxel_size: float, shift: float):
    """[N] int64 dense ids of the cells (0 .. n_cells-1), and n_cells.

    Cells are identified by their integer coordinates; ids are ranks among the occupied cells.
    """
    n = int(xyz.shape[0])
    if n == 0:
        return xp.zeros(0, dtype=xp.int64), 0
    c = cell_coords(xp, xyz, voxel_size, shift)
    c_lo, c_hi = column_bounds(c)
    c = c - c_lo
    span = (c_hi - c_lo + 1).astype(xp.int64)
    sx, sy, sz = (int(v) for v in (span.get() if hasattr(span, "get") else span))
    if sx * sy * sz < 2**62:  # pack into one int64 key: one 1-D sort instead of a row sort
        key = (c[:, 2] * sy + c[:, 1]) * sx + c[:, 0]
        _, inverse = xp.unique(key, return_inverse=True)
    else:  # absurdly spread-out points (e.g. an outlier at 1e12 m): sort rows instead
        _, inverse = np.unique(_to_numpy(c), axis=0, return_inverse=True)
        inverse = xp.asarray(inverse.reshape(-1))
    inverse = inverse.reshape(-1).astype(xp.int64)
    return inverse, int(inverse.max()) + 1


def _to_numpy(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def pooled_cell_mean(xp, cell_id_list, n_cells_list, numerator, denominator):
    """Mean over cells with denominator > 0 (pooled over grids) of sum(numerator)/sum(denominator).

    cell_id_list: per grid, [N] int64 cell ids; numerator/denominator: [T, N] (counted per point)
    or [N] (broadcast over T). Returns [T] float64 numpy (0 where no cell counts).
    """
    numerator = xp.asarray(numerator)
    denominator = xp.asarray(denominator)
    if numerator.ndim == 1:
        numerator = numerator[None]
    t = numerator.shape[0]
    if denominator.ndim == 1:
        denominator = xp.broadcast_to(denominator[None], (t, denominator.shape[0]))
    total = np.zeros(t, dtype=np.float64)
    count = np.zeros(t, dtype=np.int64)
    for ids, n_cells in zip(cell_id_list, n_cells_list):
        if n_cells == 0:
            continue
        for k in range(t):
            # Rows are cast one at a time: [T, N] float64 copies of 4M-point inputs would cost ~200 MB.
            num = xp.bincount(ids, weights=numerator[k].astype(xp.float64), minlength=n_cells)
            den = xp.bincount(ids, weights=denominator[k].astype(xp.float64), minlength=n_cells)
            used = den > 0
            total[k] += float((num[used] / den[used]).sum())
            count[k] += int(used.sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), 0.0)


# ---------------------------------------------------------------------------------------------
# The metric's case, one pass per grid (see module doc)
# ---------------------------------------------------------------------------------------------

MAX_KEY_SPAN = 2**62  # sx * sy * sz must fit an int64 key (as in cell_ids)


def tolerance_levels(xp, dist2, tol2):
    """[N] int32: index of the first (smallest) tolerance with dist2 <= tol2[k]; T when none (NaN, inf)."""
    level = xp.zeros(dist2.shape[0], dtype=xp.int32)
    for t2 in np.asarray(tol2, dtype=np.float64).tolist():
        level += ~(dist2 <= t2)  # tol2 is sorted: the count of tolerances missed is the first one met
    return level


def sorted_cell_counts(xp, keys, codes, n_codes: int):
    """[n_codes, C] int32 histogram of `codes` [N] (0..n_codes-1) per distinct key [N] int64, cells in
    increasing key order: sort, mark segment starts, count (the GPU path; works with numpy too)."""
    order = xp.argsort(keys)
    sk = keys[order]
    new = xp.empty(sk.shape[0], dtype=xp.bool_)
    new[:1] = True
    new[1:] = sk[1:] != sk[:-1]
    del sk
    cell = xp.cumsum(new, dtype=xp.int64) - 1  # [N] cell rank of each sorted point
    n_cells = int(cell[-1]) + 1
    flat = codes[order].astype(xp.int64) * n_cells + cell
    return xp.bincount(flat, minlength=n_cells * n_codes).astype(xp.int32).reshape(n_codes, n_cells)


def _scaled(xp, xyz, voxel_size: float, shift: float):
    """float32 [N, 3] p / voxel + shift with cell_coords' rounding (floor of it is the cell)."""
    xyz = xp.asarray(xyz, dtype=xp.float32)
    scaled = xyz * np.float32(1.0 / voxel_size)
    scaled += np.float32(shift)  # separate rounding, as in cell_coords
    return scaled


def _point_codes(xp, dist2, tol2, front):
    """[N] int64 code of each point: front flag * (T+1) + first tolerance met (all flagged without front)."""
    level = tolerance_levels(xp, xp.asarray(dist2), tol2).astype(xp.int64)
    return level + (len(tol2) + 1) * (1 if front is None else xp.asarray(front).astype(xp.int64))


def _grid_counts(xp, xyz, dist2, tol2, front, voxel_size: float, shift: float):
    """[2, T+1, C] int32 counts per cell (packed-key order) of (front flag, first tolerance met)."""
    t = len(tol2)
    if xp is np:
        from .cpu import cell_code_counts_cpu  # noqa: PLC0415 (Numba: imported when used)

        counts = cell_code_counts_cpu(xyz, voxel_size, shift, dist2, tol2, front)
    else:
        scaled = _scaled(xp, xyz, voxel_size, shift)
        s_lo, s_hi = column_bounds(scaled)
        lo = np.floor(_to_numpy(s_lo).astype(np.float64)).astype(np.int64)
        hi = np.floor(_to_numpy(s_hi).astype(np.float64)).astype(np.int64)
        span = hi - lo + 1
        counts = None
        if float(span[0]) * float(span[1]) * float(span[2]) < MAX_KEY_SPAN:
            c = xp.floor(scaled).astype(xp.int64) - xp.asarray(lo)[None, :]
            del scaled
            keys = (c[:, 2] * int(span[1]) + c[:, 1]) * int(span[0]) + c[:, 0]
            del c
            counts = sorted_cell_counts(xp, keys, _point_codes(xp, dist2, tol2, front), 2 * (t + 1))
    if counts is None:  # keys do not fit: the definition's row sort (far outliers; same cell order)
        counts = _definition_counts(xp, xyz, dist2, tol2, front, voxel_size, shift)
    return counts.reshape(2, t + 1, -1)


def _definition_counts(xp, xyz, dist2, tol2, front, voxel_size: float, shift: float):
    """[2 (T+1), C] counts through cell_ids (any span; cells in cell_ids' row order)."""
    ids, n_cells = cell_ids(xp, xyz, voxel_size, shift)
    flat = _point_codes(xp, dist2, tol2, front) * n_cells + ids
    return xp.bincount(flat, minlength=n_cells * 2 * (len(tol2) + 1)).reshape(-1, n_cells)


def tolerance_scores(xp, xyz, dist2, tolerances, voxel_size: float, front=None) -> np.ndarray:
    """[T] float64: per tolerance tau_k, the mean over occupied cells of both grids of
    #(dist2 <= tau_k^2) / #(dist2 <= tau_k^2 or front)  (front None: / #points); 0 where no cell counts.

    The same numbers as pooled_cell_mean(cell_ids(...), dist2 <= tau^2, ...) (see module doc).
    xyz [N, 3] float32, dist2 [N] float64, front [N] bool or None, all on xp's device.
    """
    tol2 = np.asarray(tolerances, dtype=np.float64) ** 2
    t = len(tol2)
    total = np.zeros(t, dtype=np.float64)
    count = np.zeros(t, dtype=np.int64)
    if int(xyz.shape[0]) == 0:
        return total
    args = (xp, xyz, dist2, tol2, front, voxel_size)
    if xp is np:  # the Numba counting releases the GIL: both grids at once
        with ThreadPoolExecutor(len(GRID_SHIFTS)) as pool:
            grids = list(pool.map(lambda s: _grid_counts(*args, s), GRID_SHIFTS))
    else:  # one grid at a time: at 50 M points each takes a few GiB of GPU memory
        grids = [_grid_counts(*args, s) for s in GRID_SHIFTS]
    for counts in grids:  # [2, T+1, C]: (front flag, first tolerance met) per cell
        num = xp.zeros(counts.shape[2], dtype=xp.int64)  # points within tolerance k
        flagged_beyond = counts[1].sum(axis=0, dtype=xp.int64)  # flagged points beyond tolerance k
        for k in range(t):
            num += counts[0, k]
            num += counts[1, k]
            flagged_beyond -= counts[1, k]
            den = num + flagged_beyond
            # int64 / int64 -> float64, summed over cells in key order: as pooled_cell_mean does
            if front is None:  # every point counts: every occupied cell has den > 0, no mask needed
                total[k] += float((num / den).sum())
                count[k] += int(den.shape[0])
            else:
                used = den > 0
                total[k] += float((num[used] / den[used]).sum())
                count[k] += int(used.sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), 0.0)
