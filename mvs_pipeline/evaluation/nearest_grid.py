"""Completeness's nearest-neighbour search on the CPU: multi-level uniform grids in Numba.

For every query (GT point) the squared distance to the nearest reconstruction point, exact up to
`max_dist` and +inf beyond: the same numbers, bit for bit, as the scipy cKDTree query it replaces
(tests/evaluation/test_nearest_grid.py), which took ~20 CPU-s (+ 2 s to build) for 25 M queries
against 5 M points (issue #21 item 2); this takes ~8 + 3, and needs no float64 copy of the GT.

How (the idea of cuda.nearest_dist2_levels, arranged for a CPU):
- level l sorts the points into cubic cells of size h_l = h_0 * LEVEL_GROWTH**l by row (z, y);
  `row_start` [nz * ny + 1] gives each row's range, in which the points are in increasing x;
- a query scans the 3 x 3 rows around its cell, each from its own x outward, and stops a side
  once dx^2 exceeds the best d2 so far (d2 >= dx^2 also after rounding); rows farther than the
  best are skipped. The best starts at the distance to the previous query's nearest point
  (consecutive GT points are neighbouring rays of a scan), an actual point, so it stays exact;
- certified when the best is nearer than the faces of the 3 x 3 x 3 block; if no point was
  found the query goes to the next, coarser level; otherwise (found, not certified) one scan
  of every cell within the best distance, on a level with cells of about half that, finishes it.
Cell sizes from max_dist / 16 (as the GPU's) up to max_dist / 2; levels are built in threads.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

LEVEL_GROWTH = 2.0
MAX_ROWS = 1 << 25  # row table entries per level (256 MiB of int64); coarser cells beyond
CERTIFY_MARGIN = 1e-6  # cells: a point or query on a cell face may have been rounded into the next cell


def upper_bound(max_dist: float) -> float:
    """The bound the cKDTree query was given: strict (<), a hair above max_dist so <= max_dist holds."""
    return max_dist * (1 + 1e-9) + 1e-12


@numba.njit(parallel=True, cache=True)
def _bbox(p):
    """(lo [3], hi [3]) float64 of points [N > 0, 3]: NumPy's min(axis=0) on [N, 3] walks it strided."""
    n_chunks = min(p.shape[0], 64)
    los = np.empty((n_chunks, 3))
    his = np.empty((n_chunks, 3))
    for c in numba.prange(n_chunks):
        a = c * p.shape[0] // n_chunks
        b = (c + 1) * p.shape[0] // n_chunks
        for k in range(3):
            lo_k = np.float64(p[a, k])
            hi_k = lo_k
            for i in range(a + 1, b):
                v = np.float64(p[i, k])
                lo_k = min(lo_k, v)
                hi_k = max(hi_k, v)
            los[c, k] = lo_k
            his[c, k] = hi_k
    lo = np.empty(3)
    hi = np.empty(3)
    for k in range(3):
        lo[k] = los[:, k].min()
        hi[k] = his[:, k].max()
    return lo, hi


@numba.njit(parallel=True, cache=True)
def _inside(p, lo, hi):
    keep = np.empty(p.shape[0], np.bool_)
    for i in numba.prange(p.shape[0]):
        keep[i] = (lo[0] <= p[i, 0] <= hi[0]) and (lo[1] <= p[i, 1] <= hi[1]) and (lo[2] <= p[i, 2] <= hi[2])
    return keep


@numba.njit(cache=True, nogil=True)
def _cells(pts, lo, inv_h, nx, ny, nz):
    """[N] int64 row (z * ny + y) and [N] int32 x cell of points inside the grid's box."""
    n = pts.shape[0]
    rows = np.empty(n, np.int64)
    xs = np.empty(n, np.int32)
    for i in range(n):
        cx = min(max(int(math.floor((np.float64(pts[i, 0]) - lo[0]) * inv_h)), 0), nx - 1)
        cy = min(max(int(math.floor((np.float64(pts[i, 1]) - lo[1]) * inv_h)), 0), ny - 1)
        cz = min(max(int(math.floor((np.float64(pts[i, 2]) - lo[2]) * inv_h)), 0), nz - 1)
        rows[i] = cz * ny + cy
        xs[i] = cx
    return rows, xs


@numba.njit(cache=True, nogil=True)
def _bucket(pts, rows, xs, n_rows):
    """Points (given sorted by x) grouped by row with a stable counting sort: each row then holds
    its points in increasing x (and x cell). Returns the points [N, 3] float32, their x cells
    [N] int32 and row_start [n_rows + 1] int64."""
    n = pts.shape[0]
    row_start = np.zeros(n_rows + 1, np.int64)
    for i in range(n):
        row_start[rows[i] + 1] += 1
    for r in range(n_rows):
        row_start[r + 1] += row_start[r]
    pos = row_start[:-1].copy()
    out_pts = np.empty((n, 3), np.float32)
    out_x = np.empty(n, np.int32)
    for i in range(n):
        j = pos[rows[i]]
        pos[rows[i]] += 1
        out_pts[j, 0] = pts[i, 0]
        out_pts[j, 1] = pts[i, 1]
        out_pts[j, 2] = pts[i, 2]
        out_x[j] = xs[i]
    return out_pts, out_x, row_start


@numba.njit(cache=True)
def _d2(spts, j, qx, qy, qz):
    """cKDTree's squared distance: float64 differences, ((dx^2 + dy^2) + dz^2)."""
    dx = np.float64(spts[j, 0]) - qx
    dy = np.float64(spts[j, 1]) - qy
    dz = np.float64(spts[j, 2]) - qz
    d2 = dx * dx + dy * dy
    return d2 + dz * dz


@numba.njit(cache=True)
def _walk_row(spts, sx, a, b, x0, x1, qx, qy, qz, best, cap2, bp):
    """Scan row points [a, b) with x cell in [x0, x1] outward from the query's x; stop a side once
    dx^2 > min(best, cap2): a float64 d2 is never below its rounded dx^2 (rounding is monotone),
    so no point beyond can come nearer. Returns the new best; bp [3] gets its point."""
    lo = a
    hi = b
    while lo < hi:  # first point with x >= qx
        m = (lo + hi) >> 1
        if np.float64(spts[m, 0]) < qx:
            lo = m + 1
        else:
            hi = m
    j = lo
    while j < b and sx[j] <= x1:
        dx = np.float64(spts[j, 0]) - qx
        if dx * dx > min(best, cap2):
            break
        d2 = _d2(spts, j, qx, qy, qz)
        if d2 < best:
            best = d2
            bp[0], bp[1], bp[2] = spts[j, 0], spts[j, 1], spts[j, 2]
        j += 1
    j = lo - 1
    while j >= a and sx[j] >= x0:
        dx = np.float64(spts[j, 0]) - qx
        if dx * dx > min(best, cap2):
            break
        d2 = _d2(spts, j, qx, qy, qz)
        if d2 < best:
            best = d2
            bp[0], bp[1], bp[2] = spts[j, 0], spts[j, 1], spts[j, 2]
        j -= 1
    return best


@numba.njit(cache=True)
def _gap(u, c):
    """Distance in cells from coordinate u (in cells) to cell c's slab [c, c + 1], less the margin."""
    g = max(c - u, u - (c + 1))
    return max(0.0, g - CERTIFY_MARGIN)


@numba.njit(cache=True)
def _scan_rows(spts, sx, rs, p0, r0, nx, ny, nz, h, ux, uy, uz, k, qx, qy, qz, best, cap2, bp):
    """Rows within k cells of the query's (nearest first, those farther than the current radius
    skipped), each walked over x cells within k of the query's; returns the new best."""
    cx = int(math.floor(ux))
    cy = int(math.floor(uy))
    cz = int(math.floor(uz))
    for az in range(2 * k + 1):
        z = cz + ((az + 1) // 2 if az % 2 else -(az // 2))  # cz, cz + 1, cz - 1, cz + 2, ...
        if z < 0 or z >= nz:
            continue
        gz = _gap(uz, z) * h
        for ay in range(2 * k + 1):
            y = cy + ((ay + 1) // 2 if ay % 2 else -(ay // 2))
            if y < 0 or y >= ny:
                continue
            gy = _gap(uy, y) * h
            if gz * gz + gy * gy > min(best, cap2):
                continue
            row = r0 + z * ny + y
            a = p0 + rs[row]
            b = p0 + rs[row + 1]
            if a < b:
                best = _walk_row(spts, sx, a, b, cx - k, cx + k, qx, qy, qz, best, cap2, bp)
    return best


@numba.njit(parallel=True, cache=True)
def _nearest(queries, lvl_pts, lvl_x, lvl_rows, lvl_off, lvl_row_off, lo, lvl_h, lvl_dims, ub2, out):
    """out[i] = sqrt(min d2)^2 if min d2 < ub2 else inf, for every query ([Q, 3] float32 or float64).

    Per query: on levels fine to coarse, scan the 3 x 3 x 3 cells around it until a point turns
    up (done if certified: nearer than the block's faces); otherwise one scan of every cell within
    sqrt(min(best, ub2)), on the finest level whose cells are at least half that radius."""
    n_levels = lvl_h.shape[0]
    lim = 4.0e12  # query cells clamped far outside the grid: integer arithmetic cannot overflow
    n_q = queries.shape[0]
    n_chunks = min(n_q, 1024)
    for ch in numba.prange(n_chunks):
        bp = np.empty(3, np.float32)  # the previous query's nearest point (a scan's rays are in order)
        have_prev = False
        for i in range(ch * n_q // n_chunks, (ch + 1) * n_q // n_chunks):
            have_prev = _query(queries, i, lvl_pts, lvl_x, lvl_rows, lvl_off, lvl_row_off, lo, lvl_h, lvl_dims,
                               ub2, out, n_levels, lim, bp, have_prev)


@numba.njit(cache=True)
def _query(queries, i, lvl_pts, lvl_x, lvl_rows, lvl_off, lvl_row_off, lo, lvl_h, lvl_dims, ub2, out, n_levels,
           lim, bp, have_prev):
    """One query of _nearest; returns whether bp holds a point for the next query's start."""
    qx = np.float64(queries[i, 0])
    qy = np.float64(queries[i, 1])
    qz = np.float64(queries[i, 2])
    # Start from the distance to the previous query's nearest point, an actual point: every
    # cut-off below then prunes from the first row on, and the minimum stays exact.
    best = np.inf
    if have_prev:
        ex = np.float64(bp[0]) - qx
        ey = np.float64(bp[1]) - qy
        ez = np.float64(bp[2]) - qz
        best = ex * ex + ey * ey
        best = best + ez * ez  # as _d2
    exact = False
    for lv in range(n_levels):
        h = lvl_h[lv]
        ux = min(lim, max(-lim, (qx - lo[0]) / h))
        uy = min(lim, max(-lim, (qy - lo[1]) / h))
        uz = min(lim, max(-lim, (qz - lo[2]) / h))
        best = _scan_rows(lvl_pts, lvl_x, lvl_rows, lvl_off[lv], lvl_row_off[lv], lvl_dims[lv, 0], lvl_dims[lv, 1], lvl_dims[lv, 2], h, ux, uy, uz, 1,
                          qx, qy, qz, best, np.inf, bp)
        # every point not examined lies outside the block, or has d2 > best: at least this far
        fx = min(ux - math.floor(ux), math.floor(ux) + 1 - ux)
        fy = min(uy - math.floor(uy), math.floor(uy) + 1 - uy)
        fz = min(uz - math.floor(uz), math.floor(uz) + 1 - uz)
        cert = max(0.0, 1.0 + min(fx, min(fy, fz)) - CERTIFY_MARGIN) * h
        if best <= cert * cert or cert * cert >= ub2:
            exact = True
            break
        if best < np.inf:
            break
    if not exact:
        r2 = min(best, ub2)
        r = math.sqrt(r2)
        lv = 0
        while lv + 1 < n_levels and lvl_h[lv] < 0.5 * r:
            lv += 1
        h = lvl_h[lv]
        k = int(math.ceil(r / h + CERTIFY_MARGIN)) + 1
        best = _scan_rows(lvl_pts, lvl_x, lvl_rows, lvl_off[lv], lvl_row_off[lv], lvl_dims[lv, 0], lvl_dims[lv, 1], lvl_dims[lv, 2], h,
                          min(lim, max(-lim, (qx - lo[0]) / h)), min(lim, max(-lim, (qy - lo[1]) / h)),
                          min(lim, max(-lim, (qz - lo[2]) / h)), k, qx, qy, qz, best, ub2, bp)
    if best < ub2:
        d = math.sqrt(best)
        out[i] = d * d
        return True
    out[i] = np.inf
    return False


def _level_grid(pts: np.ndarray, lo: np.ndarray, hi: np.ndarray, h: float):
    """(sorted points, x cells, row_start, h, dims) of one level; h grows until the rows fit."""
    while True:
        dims = np.maximum(np.floor((hi - lo) / h).astype(np.int64) + 1, 1)
        if int(dims[1]) * int(dims[2]) <= MAX_ROWS and int(dims[0]) < 2**31:
            break
        h *= 2.0  # far-spread points: coarser cells keep the row table small; still exact
    rows, xs = _cells(pts, lo, 1.0 / h, int(dims[0]), int(dims[1]), int(dims[2]))
    spts, sx, row_start = _bucket(pts, rows, xs, int(dims[1]) * int(dims[2]))
    return spts, sx, row_start, h, dims


def nearest_dist2_grid(queries: np.ndarray, points: np.ndarray, max_dist: float, h0: float | None = None) -> np.ndarray:
    """[Q] float64 squared distance of each query [Q, 3] (float32 or float64 holding float32 values)
    to the nearest point [N, 3] float32; exact up to max_dist, +inf beyond (see module doc)."""
    q = np.ascontiguousarray(queries)
    if q.dtype != np.float32 and q.dtype != np.float64:
        q = q.astype(np.float64)
    out = np.full(q.shape[0], np.inf)
    pts = np.ascontiguousarray(points, dtype=np.float32)
    if q.shape[0] == 0 or pts.shape[0] == 0:
        return out
    ub = upper_bound(max_dist)
    # Points farther than ub from the queries' box along one axis can be nobody's neighbour: drop
    # them (a far outlier would otherwise stretch the grid).
    slack = ub * 1.001 + 1e-9
    qlo, qhi = _bbox(q)
    keep = _inside(pts, qlo - slack, qhi + slack)
    if not keep.all():
        pts = np.ascontiguousarray(pts[keep])
    if pts.shape[0] == 0:
        return out
    pts = pts[np.argsort(pts[:, 0], kind="stable")]  # every level's rows then hold x in order
    lo, hi = _bbox(pts)
    h = float(h0) if h0 else max(max_dist / 16.0, 1e-6)
    sizes = [h]
    while 2.0 * sizes[-1] < ub:  # fine to coarse; the ball scan covers the rest (radius ub, last level)
        sizes.append(sizes[-1] * LEVEL_GROWTH)
    # the levels are independent and their Numba builds release the GIL: build them side by side
    with ThreadPoolExecutor(min(len(sizes), os.cpu_count() or 1)) as pool:
        levels = list(pool.map(lambda size: _level_grid(pts, lo, hi, size), sizes))
    _nearest(q, np.concatenate([lv[0] for lv in levels]), np.concatenate([lv[1] for lv in levels]),
             np.concatenate([lv[2] for lv in levels]),
             np.cumsum([0] + [len(lv[0]) for lv in levels]).astype(np.int64),
             np.cumsum([0] + [len(lv[2]) for lv in levels]).astype(np.int64),
             lo, np.array([lv[3] for lv in levels], np.float64),
             np.array([lv[4] for lv in levels], np.int64), ub * ub, out)
    # (levels are concatenated so the kernel takes a fixed number of arrays)
    return out
