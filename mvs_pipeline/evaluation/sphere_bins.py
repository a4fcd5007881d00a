"""Binning of laser scan points by direction for sphere_grid.build_sphere_grids, in Numba.

Kept out of sphere_grid.py (which the CUDA path imports: no Numba there) and out of cpu.py
(which imports sphere_grid: no import cycle).
"""

from __future__ import annotations

import math

import numba
import numpy as np


# Binning of scan points by direction (sphere_grid.build_sphere_grids): cell of every point in
# parallel, then a stable counting sort by cell, instead of NumPy's arccos/arctan2 on float64
# copies and an argsort (~7 s at 25 M points on 2 cores). The cell formula is
# sphere_grid.direction_cells'; a point on a cell boundary may land on the other side by a
# rounding step of acos/atan2, which the search window's ANGLE_SLACK covers (as for the GPU's).
@numba.njit(parallel=True, cache=True)
def _direction_cells(p, n_incl, n_az, cells, norms):
    for i in numba.prange(p.shape[0]):
        x = np.float64(p[i, 0])
        y = np.float64(p[i, 1])
        z = np.float64(p[i, 2])
        r = math.sqrt(x * x + y * y + z * z)
        norms[i] = r
        if r > 0:
            incl = math.acos(min(1.0, max(-1.0, z / r)))
            az = math.atan2(y, x)
            ci = min(int(math.floor(incl / (math.pi / n_incl))), n_incl - 1)
            cj = int(math.floor((az + math.pi) / (2.0 * math.pi / n_az))) % n_az
            cells[i] = ci * n_az + cj
        else:
            cells[i] = n_incl * n_az  # the scanner origin: no direction, dropped


@numba.njit(cache=True, nogil=True)
def _counting_sort(cells, n_cells):
    """(order [M'] int64 of the points with cell < n_cells, stable by cell; starts [n_cells + 1])."""
    starts = np.zeros(n_cells + 2, np.int64)
    for c in cells:
        starts[c + 1] += 1
    for c in range(n_cells + 1):
        starts[c + 1] += starts[c]
    pos = starts[:-1].copy()
    order = np.empty(starts[n_cells], np.int64)
    for i in range(cells.shape[0]):
        c = cells[i]
        if c < n_cells:
            order[pos[c]] = i
            pos[c] += 1
    return order, starts[:n_cells + 1]


@numba.njit(parallel=True, cache=True)
def _gather(p, norms, order, out_p, out_n, offset):
    for k in numba.prange(order.shape[0]):
        i = order[k]
        out_p[offset + k, 0] = p[i, 0]
        out_p[offset + k, 1] = p[i, 1]
        out_p[offset + k, 2] = p[i, 2]
        out_n[offset + k] = norms[i]


@numba.njit(parallel=True, cache=True)
def count_nonzero_points(p):
    """Number of points [M, 3] other than the origin (|S| > 0)."""
    n = 0
    for i in numba.prange(p.shape[0]):
        if p[i, 0] != 0 or p[i, 1] != 0 or p[i, 2] != 0:
            n += 1
    return n


def gather_points(p, norms, order, out_p, out_n, offset: int) -> None:
    """out_p[offset + k] = p[order[k]], out_n likewise (into the concatenated grid arrays)."""
    _gather(p, norms, order, out_p, out_n, offset)


def bin_scan_cpu(points: np.ndarray, n_incl: int, n_az: int):
    """(order, starts, norms) of one scan's points [M, 3] float32: order [M'] indexes the points
    with |S| > 0 sorted (stably) by direction cell, starts [n_incl * n_az + 1] are cell c's range
    in that order, norms [M] float64 |S|."""
    p = np.ascontiguousarray(points, dtype=np.float32)
    cells = np.empty(len(p), np.int64)
    norms = np.empty(len(p), np.float64)
    _direction_cells(p, n_incl, n_az, cells, norms)
    order, starts = _counting_sort(cells, n_incl * n_az)
    return order, starts, norms
