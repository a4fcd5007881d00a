"""Three nearest neighbours and inverse-distance interpolation on the CPU: twins of
`cuda/sampling_three_nn.cu` (same grid search, same (dist2, index) order, same float32 arithmetic).

    three_nn(queries [N, 3], known [M, 3], grid) -> dist [N, 3] float32, idx [N, 3] int32
    three_interpolate(features [M, C], idx [N, 3], weight [N, 3]) -> [N, C] float32
    three_interpolate_backward(grad_out [N, C], idx, weight, m) -> grad_features [M, C]
Slots without a neighbour (fewer than 3 known points) hold idx -1 and dist +inf.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..grid import GridSpec

_EMPTY = np.int32(0x7FFFFFFF)


@njit(cache=True, nogil=True, inline="always")
def _cell_coord(v, origin, inv_cell, dim):  # pragma: no cover (compiled)
    c = np.floor((np.float64(v) - origin) * inv_cell)
    if not c > 0.0:
        return 0
    if c >= dim - 1:
        return dim - 1
    return int(c)


@njit(cache=True, nogil=True)
def cell_ids(pts, origin, inv_cell, dims):  # pragma: no cover (compiled)
    """[M] int64 dense cell id (x fastest) of pts [M, 3]; same as nn_cell_ids."""
    m = pts.shape[0]
    out = np.empty(m, dtype=np.int64)
    for i in range(m):
        cx = _cell_coord(pts[i, 0], origin[0], inv_cell, dims[0])
        cy = _cell_coord(pts[i, 1], origin[1], inv_cell, dims[1])
        cz = _cell_coord(pts[i, 2], origin[2], inv_cell, dims[2])
        out[i] = (cz * dims[1] + cy) * dims[0] + cx
    return out


@njit(cache=True, nogil=True, inline="always")
def _less(d, i, bd, bi):  # pragma: no cover (compiled)
    return d < bd or (d == bd and i < bi)


@njit(cache=True, parallel=True)
def _three_nn_grid(queries, kx, ky, kz, kidx, cell_start, origin, cell_size, dims, margin):  # pragma: no cover
    n = queries.shape[0]
    out_d = np.empty((n, 3), dtype=np.float32)
    out_i = np.empty((n, 3), dtype=np.int32)
    inv_cell = 1.0 / cell_size
    dx, dy, dz = dims[0], dims[1], dims[2]
    max_dim = max(dx, max(dy, dz))
    inf32 = np.float32(np.inf)
    for q in prange(n):
        qx, qy, qz = queries[q, 0], queries[q, 1], queries[q, 2]
        cx = _cell_coord(qx, origin[0], inv_cell, dx)
        cy = _cell_coord(qy, origin[1], inv_cell, dy)
        cz = _cell_coord(qz, origin[2], inv_cell, dz)
        bd0 = bd1 = bd2 = inf32
        bi0 = bi1 = bi2 = _EMPTY
        for r in range(max_dim + 1):
            for z in range(max(cz - r, 0), min(cz + r, dz - 1) + 1):
                z_edge = z == cz - r or z == cz + r
                for y in range(max(cy - r, 0), min(cy + r, dy - 1) + 1):
                    edge = z_edge or y == cy - r or y == cy + r
                    step = 1 if (edge or r == 0) else 2 * r
                    for x in range(cx - r, cx + r + 1, step):
                        if x < 0 or x >= dx:
                            continue
                        c = (z * dy + y) * dx + x
                        for p in range(cell_start[c], cell_start[c + 1]):
                            ex = kx[p] - qx
                            ey = ky[p] - qy
                            ez = kz[p] - qz
                            d = ex * ex + ey * ey + ez * ez
                            j = kidx[p]
                            if _less(d, j, bd2, bi2):
                                if _less(d, j, bd1, bi1):
                                    bd2, bi2 = bd1, bi1
                                    if _less(d, j, bd0, bi0):
                                        bd1, bi1 = bd0, bi0
                                        bd0, bi0 = d, j
                                    else:
                                        bd1, bi1 = d, j
                                else:
                                    bd2, bi2 = d, j
            bound = 1e300
            if cx - r > 0:
                bound = min(bound, np.float64(qx) - (origin[0] + (cx - r) * cell_size))
            if cx + r < dx - 1:
                bound = min(bound, (origin[0] + (cx + r + 1) * cell_size) - np.float64(qx))
            if cy - r > 0:
                bound = min(bound, np.float64(qy) - (origin[1] + (cy - r) * cell_size))
            if cy + r < dy - 1:
                bound = min(bound, (origin[1] + (cy + r + 1) * cell_size) - np.float64(qy))
            if cz - r > 0:
                bound = min(bound, np.float64(qz) - (origin[2] + (cz - r) * cell_size))
            if cz + r < dz - 1:
                bound = min(bound, (origin[2] + (cz + r + 1) * cell_size) - np.float64(qz))
            if bound >= 1e300:
                break
            bound -= margin
            if bi2 != _EMPTY and bound > 0.0 and np.float64(bd2) < bound * bound:
                break
        out_d[q, 0], out_i[q, 0] = (np.sqrt(bd0), bi0) if bi0 != _EMPTY else (inf32, np.int32(-1))
        out_d[q, 1], out_i[q, 1] = (np.sqrt(bd1), bi1) if bi1 != _EMPTY else (inf32, np.int32(-1))
        out_d[q, 2], out_i[q, 2] = (np.sqrt(bd2), bi2) if bi2 != _EMPTY else (inf32, np.int32(-1))
    return out_d, out_i


def build_grid(known: np.ndarray, grid: GridSpec):
    """Known points sorted by cell: (kx, ky, kz [M] float32, kidx [M] int32, cell_start [C+1] int32)."""
    origin = np.asarray(grid.origin, dtype=np.float64)
    dims = np.asarray(grid.dims, dtype=np.int64)
    cells = cell_ids(known, origin, 1.0 / grid.cell_size, dims)
    order = np.argsort(cells, kind="stable")
    cell_start = np.searchsorted(cells[order], np.arange(grid.num_cells + 1, dtype=np.int64)).astype(np.int32)
    kx, ky, kz = (np.ascontiguousarray(known[order, a]) for a in range(3))
    return kx, ky, kz, order.astype(np.int32), cell_start


def three_nn(queries: np.ndarray, known: np.ndarray, grid: GridSpec) -> tuple[np.ndarray, np.ndarray]:
    """queries [N, 3], known [M, 3] float32 -> (dist [N, 3] float32, idx [N, 3] int32)."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    known = np.ascontiguousarray(known, dtype=np.float32)
    kx, ky, kz, kidx, cell_start = build_grid(known, grid)
    return _three_nn_grid(queries, kx, ky, kz, kidx, cell_start, np.asarray(grid.origin, dtype=np.float64),
                          float(grid.cell_size), np.asarray(grid.dims, dtype=np.int64), float(grid.margin))


def three_interpolate(features: np.ndarray, idx: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """out[i] = sum_k weight[i, k] * features[idx[i, k]] (idx < 0 skipped), in float32, k = 0, 1, 2."""
    features = np.asarray(features, dtype=np.float32)
    out = np.zeros((idx.shape[0], features.shape[1]), dtype=np.float32)
    for k in range(3):
        j = idx[:, k]
        valid = j >= 0
        term = weight[:, k, None].astype(np.float32) * features[np.where(valid, j, 0)]
        out = out + np.where(valid[:, None], term, np.float32(0.0))
    return out


def three_interpolate_backward(grad_out: np.ndarray, idx: np.ndarray, weight: np.ndarray, m: int) -> np.ndarray:
    """Gradient of three_interpolate w.r.t. features: [M, C] float32."""
    grad_out = np.asarray(grad_out, dtype=np.float32)
    grad = np.zeros((m, grad_out.shape[1]), dtype=np.float32)
    for k in range(3):
        j = idx[:, k]
        valid = j >= 0
        np.add.at(grad, j[valid], weight[valid, k, None].astype(np.float32) * grad_out[valid])
    return grad
