"""Uniform grid parameters for nearest-neighbour search (shared by the CPU and CUDA backends).

The cell size aims at `points_per_cell` known points per occupied cell. It starts from the
bounding-box volume and is refined from the measured occupancy assuming surface-like data
(occupied cells grow with 1/cell^2), which is what fused MVS clouds are. The dense cell table
is capped at `max_cells` entries. Results of the search never depend on these choices, only
its speed does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mvs_pipeline.arrays import column_bounds

from .validate import array_module, to_host

DEFAULT_POINTS_PER_CELL = 4.0
DEFAULT_MAX_CELLS = 1 << 25


@dataclass(frozen=True)
class GridSpec:
    origin: tuple[float, float, float]  # world position of the corner of cell (0, 0, 0)
    cell_size: float                   # cube edge
    dims: tuple[int, int, int]         # cells along x, y, z (x fastest in the cell id)
    margin: float                      # absorbs rounding of cell assignment in the stop test

    @property
    def num_cells(self) -> int:
        return self.dims[0] * self.dims[1] * self.dims[2]


def _dims(extent: np.ndarray, cell: float) -> np.ndarray:
    return np.floor(extent / cell).astype(np.int64) + 1


def _occupied_cells(known, lo: np.ndarray, cell: float, dims: np.ndarray) -> int:
    xp = array_module(known)
    c = xp.floor((known.astype(xp.float64) - xp.asarray(lo)) / cell).astype(xp.int64)
    c = xp.clip(c, 0, xp.asarray(dims - 1))
    ids = (c[:, 2] * int(dims[1]) + c[:, 1]) * int(dims[0]) + c[:, 0]
    return int(xp.unique(ids).size)


def choose_grid(known, points_per_cell: float = DEFAULT_POINTS_PER_CELL,
                max_cells: int = DEFAULT_MAX_CELLS) -> GridSpec:
    """GridSpec for known [M, 3] float32 (NumPy or CuPy, M >= 1)."""
    lo, hi = (to_host(b).astype(np.float64) for b in column_bounds(known))
    extent = hi - lo
    span = float(extent.max())
    m = int(known.shape[0])
    scale = float(np.abs(np.concatenate([lo, hi])).max()) + span
    margin = max(1e-9 * scale, 1e-30)
    if span <= 0.0 or m <= points_per_cell:
        cell = max(span, 1.0)
        return GridSpec(tuple(lo), cell, tuple(int(d) for d in _dims(extent, cell)), margin)
    flat_floor = span * 1e-3  # a flat axis still gets a thickness so the volume is not zero
    volume = float(np.prod(np.maximum(extent, flat_floor)))
    cell = (volume * points_per_cell / m) ** (1.0 / 3.0)
    for _ in range(4):
        dims = _dims(extent, cell)
        if int(np.prod(dims)) > max_cells:
            cell *= (float(np.prod(dims)) / max_cells) ** (1.0 / 3.0) * 1.01
            continue
        mean_per_cell = m / _occupied_cells(known, lo, cell, dims)
        if 0.5 * points_per_cell <= mean_per_cell <= 2.0 * points_per_cell:
            break
        cell *= float(np.sqrt(points_per_cell / mean_per_cell))
    dims = _dims(extent, cell)
    while int(np.prod(dims)) > max_cells:
        cell *= 1.05
        dims = _dims(extent, cell)
    return GridSpec(tuple(float(v) for v in lo), float(cell), tuple(int(d) for d in dims), margin)
