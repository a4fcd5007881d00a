"""Three nearest neighbours and inverse-distance interpolation: the backend-dispatching API.

    dist, idx = three_nn(unknown [N, 3], known [M, 3])   # [N, 3] float32 distances, int64 indices
    weight = inverse_distance_weights(dist, idx)          # [N, 3], rows sum to 1
    out = three_interpolate(features [M, C], idx, weight) # [N, C]
    grad = three_interpolate_backward(grad_out [N, C], idx, weight, M)

Neighbours come sorted by (distance, index); with fewer than 3 known points the missing slots
hold idx -1, dist +inf and weight 0. The search runs on a uniform grid (points/grid.py), not a
brute-force scan. Queries are processed in chunks that fit in free GPU memory; a known cloud
that does not fit runs on the CPU with a warning (`auto`) or raises (`cuda`).

`interpolate_attributes` carries per-point attributes (colour, normal, any float or integer
channel) from one cloud onto other positions, e.g. from an FPS sample back to the full cloud.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from mvs_pipeline.errors import MVSError
from mvs_pipeline.gpu.backend import resolve_backend
from mvs_pipeline.io.ply import PointCloud

from ..attributes import attribute_matrix, available_attributes, restore_attributes
from ..grid import GridSpec, choose_grid
from ..local_frame import frame_centre, is_double, offsets
from ..validate import array_module, as_points, gpu_free_bytes, gpu_memory_fallback, is_cupy_array, to_host

log = logging.getLogger(__name__)

DEFAULT_EPS = 1e-8


def _twin():
    """The Numba twin (cpu.py), imported on first CPU use: a GPU run never pays Numba's import."""
    from . import cpu  # noqa: PLC0415

    return cpu


def _gpu_three_nn(queries, known, grid: GridSpec):
    import cupy  # noqa: PLC0415

    from . import cuda as knn  # noqa: PLC0415

    known_gpu = cupy.asarray(known)
    built = knn.build_grid(known_gpu, grid)
    n = int(queries.shape[0])
    per_query = 12 + 24 + 12  # input, outputs, int64 conversion
    chunk = max(1, min(n, int(0.5 * gpu_free_bytes() // per_query)))
    dists, idxs = [], []
    for lo in range(0, n, chunk):
        q = cupy.ascontiguousarray(cupy.asarray(queries[lo:lo + chunk]))
        d, i = knn.three_nn(q, known_gpu, grid, built=built)
        dists.append(d if is_cupy_array(queries) else d.get())
        idxs.append(i.astype(cupy.int64) if is_cupy_array(queries) else i.get().astype(np.int64))
    xp = array_module(queries)
    if not dists:
        return xp.empty((0, 3), dtype=xp.float32), xp.empty((0, 3), dtype=xp.int64)
    return xp.concatenate(dists), xp.concatenate(idxs)


def three_nn(unknown, known, *, backend: str = "auto", grid: GridSpec | None = None):
    """For each unknown point its 3 nearest known points: (dist [N, 3] float32 Euclidean,
    idx [N, 3] int64). NumPy in, NumPy out; CuPy in, CuPy out."""
    queries = as_points(unknown, "unknown", allow_empty=True)
    known_pts = as_points(known, "known")
    grid = grid or choose_grid(known_pts)
    resolved = resolve_backend(backend)
    if resolved == "cuda":
        m = int(known_pts.shape[0])
        need = m * (12 * 3 + 8) + 4 * (grid.num_cells + 1) + (16 << 20)
        resolved = gpu_memory_fallback(f"three_nn grid of {m} known points", need, backend)
    if resolved == "cuda":
        return _gpu_three_nn(queries, known_pts, grid)
    dist, idx = _twin().three_nn(to_host(queries), to_host(known_pts), grid)
    xp = array_module(unknown)
    return xp.asarray(dist), xp.asarray(idx.astype(np.int64))


def check_eps(eps: float) -> None:
    """eps > 0: with 0 a query on a known point divides by zero, a negative eps flips weights' signs."""
    try:
        value = float(eps)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise MVSError(f"eps must be a positive distance in metres (e.g. {DEFAULT_EPS:g}), got {eps!r}")


def inverse_distance_weights(dist, idx=None, eps: float = DEFAULT_EPS):
    """w_k = (1 / (d_k + eps)) / sum_j (1 / (d_j + eps)); slots with idx < 0 get 0. [N, 3] float32."""
    check_eps(eps)
    xp = array_module(dist)
    d = dist.astype(xp.float64)
    recip = 1.0 / (d + eps)
    if idx is not None:
        recip = xp.where(idx >= 0, recip, 0.0)
    total = recip.sum(axis=1, keepdims=True)
    return xp.where(total > 0, recip / xp.where(total > 0, total, 1.0), 0.0).astype(xp.float32)


def _check_interp(features, idx, weight) -> None:
    if features.ndim != 2:
        raise MVSError(f"features: expected [M, C], got shape {tuple(features.shape)}")
    if idx.ndim != 2 or idx.shape[1] != 3 or tuple(weight.shape) != tuple(idx.shape):
        raise MVSError(f"idx and weight: expected [N, 3] each, got {tuple(idx.shape)} and {tuple(weight.shape)}")
    if idx.size and int(idx.max()) >= features.shape[0]:
        raise MVSError(f"idx: index {int(idx.max())} out of range for {features.shape[0]} known points")


def three_interpolate(features, idx, weight, *, backend: str = "auto"):
    """out[i] = sum_k weight[i, k] * features[idx[i, k]] (idx < 0 skipped). [N, C] float32."""
    _check_interp(features, idx, weight)
    xp = array_module(features)
    if resolve_backend(backend) == "cuda":
        import cupy  # noqa: PLC0415

        from . import cuda as knn  # noqa: PLC0415

        out = knn.three_interpolate(cupy.ascontiguousarray(cupy.asarray(features), dtype=cupy.float32),
                                    cupy.ascontiguousarray(cupy.asarray(idx), dtype=cupy.int32),
                                    cupy.ascontiguousarray(cupy.asarray(weight), dtype=cupy.float32))
        return out if xp is not np else out.get()
    out = _twin().three_interpolate(to_host(features), to_host(idx), to_host(weight))
    return xp.asarray(out)


def three_interpolate_backward(grad_out, idx, weight, num_known: int, *, backend: str = "auto"):
    """Gradient of three_interpolate w.r.t. the features: [M, C] float32."""
    xp = array_module(grad_out)
    if resolve_backend(backend) == "cuda":
        import cupy  # noqa: PLC0415

        from . import cuda as knn  # noqa: PLC0415

        out = knn.three_interpolate_backward(cupy.ascontiguousarray(cupy.asarray(grad_out), dtype=cupy.float32),
                                             cupy.ascontiguousarray(cupy.asarray(idx), dtype=cupy.int32),
                                             cupy.ascontiguousarray(cupy.asarray(weight), dtype=cupy.float32),
                                             int(num_known))
        return out if xp is not np else out.get()
    return xp.asarray(_twin().three_interpolate_backward(to_host(grad_out), to_host(idx), to_host(weight),
                                                         int(num_known)))


# ---------------------------------------------------------------------------------------------
# Attribute transfer between clouds
# ---------------------------------------------------------------------------------------------

def interpolate_attributes(source: PointCloud, target_xyz: np.ndarray, names: list[str] | None = None, *,
                           backend: str = "auto", eps: float = DEFAULT_EPS) -> PointCloud:
    """Cloud at `target_xyz` [N, 3] with `names` (default: all) of `source` interpolated from its
    3 nearest source points (inverse-distance weights). Colours are rounded to uint8, normals
    re-normalised, integer channels rounded back to their dtype."""
    names = available_attributes(source) if names is None else list(names)
    check_eps(eps)
    # float64 clouds are searched on offsets from the source's centre (local_frame.py); the
    # output keeps the target positions as given.
    centre = frame_centre(source.xyz if is_double(source.xyz) else np.asarray(target_xyz))
    queries = to_host(as_points(offsets(np.asarray(target_xyz), centre), "target", allow_empty=True))
    dist, idx = three_nn(queries, offsets(source.xyz, centre), backend=backend)
    weight = inverse_distance_weights(dist, idx, eps)
    matrix, layout = attribute_matrix(source, names)
    values = three_interpolate(matrix, idx, weight, backend=backend) if layout else matrix[:0]
    out = PointCloud(xyz=np.array(target_xyz, dtype=np.float64 if is_double(target_xyz) else np.float32))
    restore_attributes(out, values, layout, source)
    return out
