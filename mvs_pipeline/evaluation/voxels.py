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
"""

from __future__ import annotations

import numpy as np

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
    c = c - c.min(axis=0)
    span = (c.max(axis=0) + 1).astype(xp.int64)
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
