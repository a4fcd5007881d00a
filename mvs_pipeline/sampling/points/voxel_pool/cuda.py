"""CuPy launchers of `cuda/sampling_voxel_pool.cu`: per-interval mean and max over key-sorted points."""

from __future__ import annotations

import numpy as np

from mvs_pipeline.gpu.checks import check_array
from mvs_pipeline.gpu.loader import get_kernel, import_cupy

_CU = "sampling_voxel_pool.cu"
THREADS = 256


def _check_intervals(cupy, order, starts, n: int) -> int:
    check_array(cupy, "order", order, np.int64, (None,))
    check_array(cupy, "starts", starts, np.int64, (None,))
    if order.shape[0] != n:
        raise ValueError(f"order: expected {n} entries, got {order.shape[0]}")
    if starts.shape[0] < 1:
        raise ValueError("starts: needs at least the end entry")
    return int(starts.shape[0]) - 1


def pool_mean(features, order, starts):
    """features [N, C] float32, order [N] int64, starts [V+1] int64 -> means [V, C] float32."""
    cupy = import_cupy()
    check_array(cupy, "features", features, np.float32, (None, None))
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
    check_array(cupy, "values", values, np.float32, (None,))
    v = _check_intervals(cupy, order, starts, int(values.shape[0]))
    out = cupy.full(v, np.nan, dtype=cupy.float32)
    arg = cupy.full(v, -1, dtype=cupy.int64)
    if v:
        get_kernel(_CU, "pool_max")((-(-v // THREADS),), (THREADS,), (values, order, starts, np.int32(v), out, arg))
    return out, arg


def kernel_variants() -> list[tuple[str, tuple[str, ...]]]:
    """The (file, options) variants `mvs-pipeline build-kernels` precompiles."""
    return [(_CU, ())]
