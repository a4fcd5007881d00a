"""Voxel pooling (the BEVPool v2 way): sort points by cell key, find interval starts and
lengths, reduce each interval with one thread per (interval, channel) and no atomics.

    pooled = voxel_pool(xyz [N, 3], features [N, C] | None, voxel_size)
        pooled.xyz [V, 3] mean position, pooled.features [V, C] means, pooled.counts [V],
        pooled.coords [V, 3] integer voxel coordinates, pooled.point_voxel [N] voxel of each point
    pool_point_cloud(cloud, voxel_size) -> PointCloud with mean xyz / normal (re-normalised) /
        colour (rounded) / extra channels (`support`: maximum) and a `voxel_count` channel, its
        arrays on the GPU when the pooling ran there (the sampling stage keeps them there)
    voxel_downsample(cloud, voxel_size) -> the same with NumPy arrays

Voxel (i, j, k) of a point is floor((p - origin) * (1 / voxel_size)) per axis in float64;
`origin` defaults to the cloud's minimum corner. Voxels come out in increasing key order
(key = i + D_i * (j + D_j * k)), and sums run in increasing point index inside a voxel, so the
CUDA and CPU backends agree bit for bit. The key computation, sort and interval search are
array code that runs on CuPy or NumPy unchanged; only the reduction has a kernel and a twin.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mvs_pipeline.arrays import column_bounds
from mvs_pipeline.errors import MVSError
from mvs_pipeline.gpu.backend import resolve_backend
from mvs_pipeline.io.ply import PointCloud

from ..attributes import attribute_matrix, available_attributes, restore_attributes
from ..local_frame import frame_centre, is_double, offsets
from ..validate import array_module, as_points, flush_subnormals, gpu_memory_fallback, to_host
from ..device_cloud import to_device, to_host_cloud

MAX_KEY = 2**62


def _twin():
    """The Numba twin (cpu.py), imported on first CPU use: a GPU run never pays Numba's import."""
    from . import cpu  # noqa: PLC0415

    return cpu


@dataclass
class Intervals:
    order: object   # [N] int64: sorted position -> point index (stable)
    starts: object  # [V + 1] int64: interval v is order[starts[v]:starts[v + 1]]
    keys: object    # [V] int64: key of each interval, increasing

    @property
    def lengths(self):
        return self.starts[1:] - self.starts[:-1]


def sort_intervals(keys) -> Intervals:
    """Stable sort of [N] int64 keys (NumPy or CuPy) into intervals of equal keys."""
    xp = array_module(keys)
    n = int(keys.shape[0])
    order = xp.argsort(keys, kind="stable") if xp is np else xp.argsort(keys)
    order = order.astype(xp.int64)
    sorted_keys = keys[order]
    boundary = xp.ones(n, dtype=bool)
    if n > 1:
        boundary[1:] = sorted_keys[1:] != sorted_keys[:-1]
    starts = xp.concatenate([xp.flatnonzero(boundary), xp.asarray([n])]).astype(xp.int64)
    return Intervals(order=order, starts=starts, keys=sorted_keys[starts[:-1]])


def interval_mean(features, intervals: Intervals, backend: str):
    """[V, C] float32 means of features [N, C] over the intervals (backend "cuda" or "cpu")."""
    if backend == "cuda":
        from . import cuda as kvp  # noqa: PLC0415

        return kvp.pool_mean(features, intervals.order, intervals.starts)
    return _twin().pool_mean(features, intervals.order, intervals.starts)


def interval_max(values, intervals: Intervals, backend: str):
    """([V] float32 max of values [N], [V] int64 index of the first maximum)."""
    if backend == "cuda":
        from . import cuda as kvp  # noqa: PLC0415

        return kvp.pool_max(values, intervals.order, intervals.starts)
    return _twin().pool_max(values, intervals.order, intervals.starts)


def voxel_coordinates(xyz, voxel_size: float, origin):
    """[N, 3] int64 voxel coordinates floor((p - origin) * (1 / voxel_size))."""
    xp = array_module(xyz)
    rel = (xyz.astype(xp.float64) - xp.asarray(origin, dtype=xp.float64)) * (1.0 / voxel_size)
    return xp.floor(rel).astype(xp.int64)


@dataclass
class PooledVoxels:
    xyz: np.ndarray          # [V, 3] float32 mean position
    features: np.ndarray     # [V, C] float32 mean features
    counts: np.ndarray       # [V] int64 points per voxel
    coords: np.ndarray       # [V, 3] int64 voxel coordinates
    point_voxel: np.ndarray  # [N] int64 voxel of each input point
    origin: tuple[float, float, float]
    voxel_size: float


@dataclass
class _Pooled:
    """What `_pool` leaves on the array module it ran on (CuPy on the GPU: nothing is downloaded)."""
    means: object          # [V, 3 + C] float32: mean position, then mean features
    intervals: Intervals
    coords: object         # [N, 3] int64 voxel coordinates of every point
    origin: np.ndarray     # [3] float64


def _backend_for(pts, feats_width: int, backend: str, what: str) -> str:
    """"cuda" or "cpu": an explicit "cpu" wins; otherwise arrays already on the GPU stay there and
    host arrays go to the GPU if it has room."""
    if backend == "cpu":
        return "cpu"
    if array_module(pts) is not np:
        return "cuda"
    resolved = resolve_backend(backend)
    if resolved == "cuda":
        n = int(pts.shape[0])
        # input table, its float64 coordinates and keys, the sort's keys and indices, the means
        resolved = gpu_memory_fallback(what, n * (8 * (3 + feats_width) + 120), backend)
    return resolved


def _pool(pts, feats, voxel_size: float, origin, backend: str) -> _Pooled:
    """Sort pts [N, 3] float32 (checked, NumPy or CuPy) by voxel and average [pts | feats [N, C]]
    per voxel, on the arrays' own module with `backend`'s reduction ("cuda" or "cpu")."""
    xp = array_module(pts)
    lo, hi = (to_host(b).astype(np.float64) for b in column_bounds(pts))
    origin = lo if origin is None else np.asarray(origin, dtype=np.float64)
    if origin.shape != (3,) or np.any(origin > lo):
        raise MVSError(f"origin must be 3 numbers at or below the cloud's minimum corner {lo.tolist()}")
    dims_f = np.floor((hi - origin) * (1.0 / voxel_size)) + 2
    if float(np.prod(dims_f)) >= MAX_KEY:
        raise MVSError(f"voxel_size {voxel_size} is too small for this cloud ({dims_f.tolist()} voxels per axis)")
    dims = dims_f.astype(np.int64)
    coords = voxel_coordinates(pts, voxel_size, origin)
    keys = coords[:, 0] + int(dims[0]) * (coords[:, 1] + int(dims[1]) * coords[:, 2])
    intervals = sort_intervals(keys)
    del keys
    table = xp.ascontiguousarray(xp.concatenate([pts, feats], axis=1))
    return _Pooled(means=interval_mean(table, intervals, backend), intervals=intervals, coords=coords, origin=origin)


def _point_voxel(intervals: Intervals, n: int):
    """[N] int64 voxel index of each point (same array module as the intervals)."""
    xp = array_module(intervals.order)
    step = xp.zeros(n, dtype=xp.int64)
    step[intervals.starts[1:-1]] = 1
    point_voxel = xp.empty(n, dtype=xp.int64)
    point_voxel[intervals.order] = xp.cumsum(step)  # voxel id of each sorted position
    return point_voxel


def _checked_features(features, n: int, xp):
    feats = xp.zeros((n, 0), dtype=xp.float32) if features is None else xp.asarray(features)
    if feats.ndim == 1:
        feats = feats[:, None]
    if feats.ndim != 2 or feats.shape[0] != n:
        raise MVSError(f"features: expected [{n}, C], got shape {tuple(feats.shape)}")
    feats = xp.ascontiguousarray(feats, dtype=xp.float32)
    if not bool(xp.isfinite(feats).all()):
        raise MVSError("features contain NaN or infinite values")
    return flush_subnormals(feats)


def voxel_pool(xyz, features=None, voxel_size: float = 0.01, origin=None, *, backend: str = "auto") -> PooledVoxels:
    """Mean position and features per occupied voxel (NumPy outputs)."""
    if not voxel_size > 0 or not np.isfinite(voxel_size):
        raise MVSError(f"voxel_size must be a positive number, got {voxel_size}")
    pts = to_host(as_points(xyz))
    n = pts.shape[0]
    feats = _checked_features(to_host(features) if features is not None else None, n, np)
    resolved = _backend_for(pts, feats.shape[1], backend, f"voxel pooling of {n} points")
    if resolved == "cuda":
        import cupy  # noqa: PLC0415

        pts, feats = cupy.asarray(pts), cupy.asarray(feats)
    pooled = _pool(pts, feats, voxel_size, origin, resolved)
    iv = pooled.intervals
    means = pooled.means
    return PooledVoxels(xyz=to_host(means[:, :3]).copy(), features=to_host(means[:, 3:]).copy(),
                        counts=to_host(iv.lengths), coords=to_host(pooled.coords[iv.order[iv.starts[:-1]]]),
                        point_voxel=to_host(_point_voxel(iv, n)), origin=tuple(float(v) for v in pooled.origin),
                        voxel_size=float(voxel_size))


# Extra channels reduced by their maximum instead of their mean. `support` (fusion: the number of
# views fused into a point): the views of a pooled point are the union of its members' views, at
# least as many as its best-supported member has; a mean would call two 5-view points a 5-view point
# and a 5-view point next to a 2-view one a 4-view point, and a filter on support would drop voxels
# whose best point passes it.
MAX_CHANNELS = ("support",)


def pool_point_cloud(cloud: PointCloud, voxel_size: float, *, backend: str = "auto") -> PointCloud:
    """One point per occupied voxel: mean position, normal (re-normalised), colour (rounded), extra
    channels (mean, rounded back to integer dtypes; MAX_CHANNELS by their maximum) and a
    `voxel_count` int32 channel; voxels in increasing key order.

    The cloud's arrays may be NumPy or CuPy; the result's arrays live where the pooling ran (CuPy on
    the GPU: nothing goes through host memory). A float64 cloud is pooled on offsets from its centre
    and its mean positions are summed in float64 on the host (in increasing point index, so a voxel
    of one point returns that point exactly)."""
    if not voxel_size > 0 or not np.isfinite(voxel_size):
        raise MVSError(f"voxel_size must be a positive number, got {voxel_size}")
    n = len(cloud)
    names = available_attributes(cloud)
    resolved = _backend_for(cloud.xyz, 3 * len(names), backend, f"voxel pooling of {n} points")
    if resolved == "cuda" and array_module(cloud.xyz) is np:
        cloud = to_device(cloud)
    elif resolved == "cpu" and array_module(cloud.xyz) is not np:
        cloud = to_host_cloud(cloud)
    xp = array_module(cloud.xyz)
    centre = frame_centre(cloud.xyz)
    pts = as_points(offsets(cloud.xyz, centre))
    matrix, layout = attribute_matrix(cloud, names)
    feats = _checked_features(matrix, n, xp)
    pooled = _pool(pts, feats, voxel_size, None, resolved)
    iv = pooled.intervals
    means = pooled.means
    col = 3
    for name, width in layout:
        if name in MAX_CHANNELS and width == 1:
            top, _arg = interval_max(xp.ascontiguousarray(feats[:, col - 3]), iv, resolved)
            means[:, col] = top
        col += width
    xyz = means[:, :3]
    if is_double(cloud.xyz):
        points = to_host(cloud.xyz)
        point_voxel = to_host(_point_voxel(iv, n))
        counts = to_host(iv.lengths)
        xyz = xp.asarray(np.stack([np.bincount(point_voxel, weights=points[:, i], minlength=len(counts))
                                   for i in range(3)], axis=1) / counts[:, None])
    out = PointCloud(xyz=xp.ascontiguousarray(xyz))
    restore_attributes(out, means[:, 3:], layout, cloud, bool_as_fraction=True)
    out.extra["voxel_count"] = iv.lengths.astype(xp.int32)
    return out


def voxel_downsample(cloud: PointCloud, voxel_size: float, *, backend: str = "auto") -> PointCloud:
    """pool_point_cloud with NumPy outputs (the `voxelize` command, tests)."""
    return to_host_cloud(pool_point_cloud(cloud, voxel_size, backend=backend))
