"""CuPy launchers of `cuda/voxel_pool.cu`: per-interval mean and max over key-sorted points."""

from __future__ import annotations

import numpy as np

from .loader import get_kernel, import_cupy

_CU = "voxel_pool.cu"
THREADS = 256


def _check(name: str, arr, cupy, dtype, ndim: int) -> None:
    if not isinstance(arr, cupy.ndarray):
        raise TypeError(f"{name}: expected a cupy.ndarray, got {type(arr).__name__}")
    if arr.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {np.dtype(dtype).name}, got {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {arr.shape}")
    if not arr.flags.c_contiguous:
        raise ValueError(f"{name}: must be C-contiguous")


def _check_intervals(cupy, order, starts, n: int) -> int:
    _check("order", order, cupy, np.int64, 1)
    _check("starts", starts, cupy, np.int64, 1)
    if order.shape[0] != n:
        raise ValueError(f"order: expected {n} entries, got {order.shape[0]}")
    if starts.shape[0] < 1:
        raise ValueError("starts: needs at least the end entry")
    return int(starts.shape[0]) - 1


def pool_mean(features, order, starts):
    """features [N, C] float32, order [N] int64, starts [V+1] int64 -> means [V, C] float32."""
    cupy = import_cupy()
    _check("features", features, cupy, np.float32, 2)
    n, c = int(features.shape[0]), int(features.shape[1])
    v = _check_intervals(cupy, order, starts, n)
    out = cupy.full((v, c), np.nan, dtype=cupy.float32)
    if v * c:
        get_kernel(_CU, "pool_mean")((-(-v * c // THREADS),), (THREADS,),
                                     (features, order, starts, np.int32(v), np.int32(c), out))
    return out


def pool_max(values, order, starts):
    """values [N] float32 -> (max [V] float32, index of the first maximum [V] int64)."""
    cupy = import_cupy()
    _check("values", values, cupy, np.float32, 1)
    v = _check_intervals(cupy, order, starts, int(values.shape[0]))
    out = cupy.full(v, np.nan, dtype=cupy.float32)
    arg = cupy.full(v, -1, dtype=cupy.int64)
    if v:
        get_kernel(_CU, "pool_max")((-(-v // THREADS),), (THREADS,), (values, order, starts, np.int32(v), out, arg))
    return out, arg
