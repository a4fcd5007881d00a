"""Voxel pooling (the BEVPool v2 way): sort points by cell key, find interval starts and
lengths, reduce each interval with one thread per (interval, channel) and no atomics.

    pooled = voxel_pool(xyz [N, 3], features [N, C] | None, voxel_size)
        pooled.xyz [V, 3] mean position, pooled.features [V, C] means, pooled.counts [V],
        pooled.coords [V, 3] integer voxel coordinates, pooled.point_voxel [N] voxel of each point
    pool_point_cloud(cloud, voxel_size) -> PointCloud with mean xyz / normal (re-normalised) /
        colour (rounded) / extra channels (`support`: maximum) and a `voxel_count` channel, its
        arrays on the GPU when the pooling ran there (the sampling stage keeps them there)
    voxel_downsample(cloud, voxel_size) -> the same with NumPy arrays

    pool_in_frame(cloud, centre, frame, backend) -> pool_point_cloud's result for a cloud whose
        frame (centre, voxel grid: frame.py) is given: one part of a larger cloud (streamed.py)

Voxel (i, j, k) of a point is floor((p - origin) * (1 / voxel_size)) per axis in float64;
`origin` defaults to the cloud's minimum corner (frame.py). Voxels come out in increasing key order
(key = i + D_i * (j + D_j * k)), and sums run in increasing point index inside a voxel, so the
CUDA and CPU backends agree bit for bit, and so does a pooling by parts of disjoint key ranges
(streamed.py) with a pooling of the whole cloud. The key computation, sort and interval search
are array code that runs on CuPy or NumPy unchanged; only the reduction has a kernel and a twin.
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
from .frame import (  # noqa: F401 (MAX_KEY, voxel_coordinates: re-exported, their home before frame.py)
    MAX_KEY,
    VoxelFrame,
    coordinate_keys,
    voxel_coordinates,
    voxel_frame,
    voxel_keys,
)


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
    coords: object         # [N, 3] int64 voxel coordinates of every point (None unless asked for)


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


def _bounds_frame(pts, voxel_size: float, origin=None) -> VoxelFrame:
    """The frame of checked points pts [N >= 1, 3] from their own bounds."""
    lo, hi = (to_host(b).astype(np.float64) for b in column_bounds(pts))
    return voxel_frame(lo, hi, voxel_size, origin)


def _table(pts, feats):
    """[N, 3 + C] float32 contiguous [pts | feats]: what pool_mean averages, one row per point."""
    return array_module(pts).concatenate([pts, feats], axis=1)


def _pool(table, frame: VoxelFrame, backend: str, keep_coords: bool = False) -> _Pooled:
    """Sort the rows of table [N, 3 + C] float32 ([pts | feats], pts checked and inside `frame`;
    NumPy or CuPy) by voxel and average them per voxel, on the table's own module with `backend`'s
    reduction ("cuda" or "cpu"). The [N, 3] voxel coordinates are only made with `keep_coords`
    (voxel_pool returns them). The caller drops its own pts / feats arrays first where it can:
    the table holds both."""
    pts = table[:, :3]
    coords = voxel_coordinates(pts, frame.voxel_size, frame.origin) if keep_coords else None
    keys = coordinate_keys(coords, frame) if keep_coords else voxel_keys(pts, frame)
    intervals = sort_intervals(keys)
    del keys
    return _Pooled(means=interval_mean(table, intervals, backend), intervals=intervals, coords=coords)


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


def _check_float_columns(table, layout, cloud: PointCloud) -> None:
    """_checked_features' checks of the attribute columns of table [N, 3 + C] (layout from
    attribute_matrix) that came from float attributes, subnormals flushed where they lie. Integer
    and bool attributes (colours, `support`) convert to finite float32 values that are never
    subnormal, so their columns are not scanned."""
    xp = array_module(table)
    col = 3
    for name, width in layout:
        values = {"normals": cloud.normals, "colors": cloud.colors}.get(name, cloud.extra.get(name))
        if np.dtype(values.dtype).kind == "f":
            block = table[:, col:col + width]
            if not bool(xp.isfinite(block).all()):
                raise MVSError("features contain NaN or infinite values")
            flushed = flush_subnormals(block)
            if flushed is not block:
                block[...] = flushed
        col += width


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
    frame = _bounds_frame(pts, voxel_size, origin)
    pooled = _pool(_table(pts, feats), frame, resolved, keep_coords=True)
    iv = pooled.intervals
    means = pooled.means
    return PooledVoxels(xyz=to_host(means[:, :3]).copy(), features=to_host(means[:, 3:]).copy(),
                        counts=to_host(iv.lengths), coords=to_host(pooled.coords[iv.order[iv.starts[:-1]]]),
                        point_voxel=to_host(_point_voxel(iv, n)), origin=tuple(float(v) for v in frame.origin),
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
    centre = frame_centre(cloud.xyz)
    pts = as_points(offsets(cloud.xyz, centre))
    return pool_in_frame(cloud, centre, _bounds_frame(pts, voxel_size), resolved, pts=pts)


def pool_in_frame(cloud: PointCloud, centre: np.ndarray, frame: VoxelFrame, backend: str, pts=None) -> PointCloud:
    """pool_point_cloud of `cloud` (arrays on the module `backend` runs on: CuPy for "cuda") in a
    given frame: its points are offsets from `centre` (local_frame.py; zeros for float32 clouds)
    and lie inside `frame`. A part of a cloud pooled in the whole cloud's frame gives exactly the
    whole pooling's voxels of that part's keys, in the same order. `pts`: the checked offsets,
    when the caller has them."""
    n = len(cloud)
    xp = array_module(cloud.xyz)
    if pts is None:
        pts = as_points(offsets(cloud.xyz, centre))
    # [pts | attributes] built in place: the features are checked and flushed where they lie, so
    # the part's peak is the table, keys and sort (no converted feature copies beside them)
    table, layout = attribute_matrix(cloud, available_attributes(cloud), lead=3)
    table[:, :3] = pts
    del pts
    _check_float_columns(table, layout, cloud)
    pooled = _pool(table, frame, backend)
    iv = pooled.intervals
    means = pooled.means
    col = 3
    for name, width in layout:
        if name in MAX_CHANNELS and width == 1:
            top, _arg = interval_max(xp.ascontiguousarray(table[:, col]), iv, backend)
            means[:, col] = top
        col += width
    del table
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
