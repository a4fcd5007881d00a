"""Voxel pooling (the BEVPool v2 way): sort points by cell key, find interval starts and
lengths, reduce each interval with one thread per (interval, channel) and no atomics.

    pooled = voxel_pool(xyz [N, 3], features [N, C] | None, voxel_size)
        pooled.xyz [V, 3] mean position, pooled.features [V, C] means, pooled.counts [V],
        pooled.coords [V, 3] integer voxel coordinates, pooled.point_voxel [N] voxel of each point
    voxel_downsample(cloud, voxel_size) -> PointCloud with mean xyz / normal (re-normalised) /
        colour (rounded) / extra channels and a `voxel_count` channel

Voxel (i, j, k) of a point is floor((p - origin) * (1 / voxel_size)) per axis in float64;
`origin` defaults to the cloud's minimum corner. Voxels come out in increasing key order
(key = i + D_i * (j + D_j * k)), and sums run in increasing point index inside a voxel, so the
CUDA and CPU backends agree bit for bit. The key computation, sort and interval search are
array code that runs on CuPy or NumPy unchanged; only the reduction has a kernel and a twin.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mvs_pipeline.errors import MVSError
from mvs_pipeline.gpu.backend import resolve_backend
from mvs_pipeline.io.ply import PointCloud

from ..attributes import attribute_matrix, available_attributes, restore_attributes
from ..local_frame import frame_centre, is_double, offsets
from ..validate import array_module, as_points, flush_subnormals, gpu_memory_fallback, to_host

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


def voxel_pool(xyz, features=None, voxel_size: float = 0.01, origin=None, *, backend: str = "auto") -> PooledVoxels:
    """Mean position and features per occupied voxel (NumPy outputs)."""
    if not voxel_size > 0 or not np.isfinite(voxel_size):
        raise MVSError(f"voxel_size must be a positive number, got {voxel_size}")
    pts = to_host(as_points(xyz))
    n = pts.shape[0]
    feats = np.zeros((n, 0), dtype=np.float32) if features is None else np.asarray(to_host(features))
    if feats.ndim == 1:
        feats = feats[:, None]
    if feats.ndim != 2 or feats.shape[0] != n:
        raise MVSError(f"features: expected [{n}, C], got shape {feats.shape}")
    if not np.isfinite(feats).all():
        raise MVSError("features contain NaN or infinite values")
    feats = flush_subnormals(np.ascontiguousarray(feats, dtype=np.float32))
    lo = pts.min(axis=0).astype(np.float64)
    origin = lo if origin is None else np.asarray(origin, dtype=np.float64)
    if origin.shape != (3,) or np.any(origin > lo):
        raise MVSError(f"origin must be 3 numbers at or below the cloud's minimum corner {lo.tolist()}")
    dims_f = np.floor((pts.max(axis=0).astype(np.float64) - origin) * (1.0 / voxel_size)) + 2
    if float(np.prod(dims_f)) >= MAX_KEY:
        raise MVSError(f"voxel_size {voxel_size} is too small for this cloud ({dims_f.tolist()} voxels per axis)")
    dims = dims_f.astype(np.int64)
    resolved = resolve_backend(backend)
    if resolved == "cuda":
        resolved = gpu_memory_fallback(f"voxel pooling of {n} points", n * (12 + 4 * feats.shape[1] + 64), backend)
    if resolved == "cuda":
        import cupy  # noqa: PLC0415

        xp, pts_x, feats_x = cupy, cupy.asarray(pts), cupy.asarray(feats)
    else:
        xp, pts_x, feats_x = np, pts, feats
    coords = voxel_coordinates(pts_x, voxel_size, origin)
    keys = coords[:, 0] + int(dims[0]) * (coords[:, 1] + int(dims[1]) * coords[:, 2])
    intervals = sort_intervals(keys)
    table = xp.ascontiguousarray(xp.concatenate([pts_x, feats_x], axis=1))
    means = interval_mean(table, intervals, resolved)
    lengths = intervals.lengths
    step = xp.zeros(n, dtype=xp.int64)
    step[intervals.starts[1:-1]] = 1
    point_voxel = xp.empty(n, dtype=xp.int64)
    point_voxel[intervals.order] = xp.cumsum(step)  # voxel id of each sorted position
    first_points = intervals.order[intervals.starts[:-1]]
    return PooledVoxels(xyz=to_host(means[:, :3]).copy(), features=to_host(means[:, 3:]).copy(),
                        counts=to_host(lengths), coords=to_host(coords[first_points]),
                        point_voxel=to_host(point_voxel), origin=tuple(float(v) for v in origin),
                        voxel_size=float(voxel_size))


def voxel_downsample(cloud: PointCloud, voxel_size: float, *, backend: str = "auto") -> PointCloud:
    """One point per occupied voxel with mean attributes and a `voxel_count` int32 channel.

    A float64 cloud is pooled on offsets from its centre and its mean positions are summed in
    float64 (in increasing point index, so a voxel of one point returns that point exactly)."""
    matrix, layout = attribute_matrix(cloud, available_attributes(cloud))
    centre = frame_centre(cloud.xyz)
    pooled = voxel_pool(offsets(cloud.xyz, centre), matrix if layout else None, voxel_size, backend=backend)
    xyz = pooled.xyz
    if is_double(cloud.xyz):
        points = to_host(cloud.xyz)
        xyz = np.stack([np.bincount(pooled.point_voxel, weights=points[:, i], minlength=len(pooled.counts))
                        for i in range(3)], axis=1) / pooled.counts[:, None]
    out = PointCloud(xyz=xyz)
    restore_attributes(out, pooled.features, layout, cloud, bool_as_fraction=True)
    out.extra["voxel_count"] = pooled.counts.astype(np.int32)
    return out
