"""CuPy launchers of `cuda/sampling_three_nn.cu`: grid three-NN, three_interpolate forward/backward.

Inputs are validated float32/int32 CuPy arrays; results match cpu.py
bit for bit (the backward pass up to float summation order: it uses atomics).
"""

from __future__ import annotations

import numpy as np

from mvs_pipeline.gpu.checks import check_array
from mvs_pipeline.gpu.loader import get_kernel, import_cupy

from ..grid import GridSpec

_CU = "sampling_three_nn.cu"
_OPTIONS = ("--fmad=false",)
THREADS = 256


def _blocks(total: int) -> tuple[int]:
    return (max(1, -(-total // THREADS)),)


def build_grid(known, grid: GridSpec):
    """Known [M, 3] sorted by cell: (kx, ky, kz [M] float32, kidx [M] int32, cell_start [C+1] int32)."""
    cupy = import_cupy()
    check_array(cupy, "known", known, np.float32, (None, 3))
    m = int(known.shape[0])
    if grid.num_cells >= 2**31 - 1:
        raise ValueError(f"grid has {grid.num_cells} cells; at most 2^31 - 2 supported")
    cells = cupy.empty(m, dtype=cupy.int32)
    ox, oy, oz = (np.float64(v) for v in grid.origin)
    dx, dy, dz = (np.int32(d) for d in grid.dims)
    get_kernel(_CU, "nn_cell_ids", _OPTIONS)(
        _blocks(m), (THREADS,), (known, np.int32(m), ox, oy, oz, np.float64(1.0 / grid.cell_size), dx, dy, dz, cells))
    order = cupy.argsort(cells)
    cell_start = cupy.searchsorted(cells[order], cupy.arange(grid.num_cells + 1, dtype=cupy.int32)).astype(cupy.int32)
    kx, ky, kz = (cupy.ascontiguousarray(known[order, a]) for a in range(3))
    return kx, ky, kz, order.astype(cupy.int32), cell_start


def three_nn(queries, known, grid: GridSpec, built=None):
    """queries [N, 3], known [M, 3] float32 -> (dist [N, 3] float32, idx [N, 3] int32).
    `built` reuses build_grid(known, grid) across query chunks."""
    cupy = import_cupy()
    check_array(cupy, "queries", queries, np.float32, (None, 3))
    n = int(queries.shape[0])
    kx, ky, kz, kidx, cell_start = built if built is not None else build_grid(known, grid)
    out_dist = cupy.full((n, 3), np.nan, dtype=cupy.float32)
    out_idx = cupy.full((n, 3), -2, dtype=cupy.int32)
    if n == 0:
        return out_dist, out_idx
    ox, oy, oz = (np.float64(v) for v in grid.origin)
    dx, dy, dz = (np.int32(d) for d in grid.dims)
    get_kernel(_CU, "three_nn_grid", _OPTIONS)(
        _blocks(n), (THREADS,),
        (queries, np.int32(n), kx, ky, kz, kidx, cell_start, ox, oy, oz, np.float64(grid.cell_size),
         dx, dy, dz, np.float64(grid.margin), out_dist, out_idx))
    return out_dist, out_idx


def three_interpolate(features, idx, weight):
    """features [M, C] float32, idx [N, 3] int32, weight [N, 3] float32 -> [N, C] float32."""
    cupy = import_cupy()
    check_array(cupy, "features", features, np.float32, (None, None))
    check_array(cupy, "idx", idx, np.int32, (None, 3))
    check_array(cupy, "weight", weight, np.float32, (idx.shape[0], 3))
    n, c = int(idx.shape[0]), int(features.shape[1])
    out = cupy.full((n, c), np.nan, dtype=cupy.float32)
    if n * c:
        get_kernel(_CU, "three_interpolate_forward", _OPTIONS)(
            _blocks(n * c), (THREADS,), (features, idx, weight, np.int32(n), np.int32(c), out))
    return out


def three_interpolate_backward(grad_out, idx, weight, m: int):
    """grad_out [N, C], idx [N, 3] int32, weight [N, 3] float32 -> grad_features [M, C] float32."""
    cupy = import_cupy()
    check_array(cupy, "grad_out", grad_out, np.float32, (None, None))
    check_array(cupy, "idx", idx, np.int32, (grad_out.shape[0], 3))
    check_array(cupy, "weight", weight, np.float32, (grad_out.shape[0], 3))
    n, c = int(grad_out.shape[0]), int(grad_out.shape[1])
    grad = cupy.zeros((int(m), c), dtype=cupy.float32)
    if n * c:
        get_kernel(_CU, "three_interpolate_backward", _OPTIONS)(
            _blocks(n * c), (THREADS,), (grad_out, idx, weight, np.int32(n), np.int32(c), grad))
    return grad


def kernel_variants() -> list[tuple[str, tuple[str, ...]]]:
    """The (file, options) variants `mvs-pipeline build-kernels` precompiles."""
    return [(_CU, _OPTIONS)]
