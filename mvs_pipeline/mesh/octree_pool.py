"""The cloud pooled into voxels of half an octree cell before the Poisson solve (poisson.py), on the GPU
within a memory budget.

    pooled = pooled_for_octree(cloud, cell, backend, budget=None)   # host PointCloud: xyz, normals, colours
    budget = gpu_budget()           # bytes the mesh stage's GPU work may hold (min(usable_bytes(), MESH_GPU_BYTES))

Each point carries the feature row [xyz*w | normal*w | w | rgb] (w: its support, at least 1; made in
float64 and stored as float32); a voxel's pooled point is the mean row: the support-weighted position
and (re-normalised) normal, the plain mean colour.

Why in parts: one pooling of the 64.2 M points of 40 x 3200x2130 (voxel_pool on the whole cloud) held
12.07 GB of CuPy's pool on the H200, about 188 B a point: the points and features uploaded (52 B),
their table (52 B), the [N, 3] int64 voxel coordinates voxel_pool returns (24 B), keys, CuPy's argsort
(copy, indices, thrust's double buffers) and the order (~48 B). Issue #39's goal for the stage is
8 GiB. So the pooling is the sampling stage's pooling by disjoint voxel-key ranges
(sampling/points/voxel_pool/streamed.py, planned by sampling/memory_plan.streamed_plan with this
module's per-point costs): each part's voxels, sums in the same order, are exactly the whole pooling's
voxels of those keys, so the pooled cloud does not depend on the budget or the backend (the CUDA
reduction and its Numba twin agree bit for bit).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ..arrays import column_bounds
from ..io.point_cloud import PointCloud

log = logging.getLogger(__name__)

# The mesh stage's GPU ceiling without a tighter --gpu-memory: the Poisson solve and the trimming run
# on the host, so holding more buys little (a few passes fewer) while issue #39 asks for <= 8 GiB,
# and the CUDA context (0.52 GiB on the H200) and the pool's fragmentation sit beside it.
MESH_GPU_BYTES = 6 << 30
FEATURES = "octree_features"   # the feature row's channel in the clouds pooled (never `support`: its max is kept)
F64_ROW_BYTES = 56             # float64 temporaries while a row's features are made: xyz, one product, w


def gpu_budget() -> int:
    """Bytes the mesh stage's GPU work may hold: what the run's budget leaves (gpu/memory_budget.py:
    `--gpu-memory`, the pool's limit the pipeline set at the stage's start), at most MESH_GPU_BYTES."""
    from ..gpu.memory_budget import usable_bytes  # noqa: PLC0415

    return min(usable_bytes(), MESH_GPU_BYTES)


def feature_columns(with_colors: bool) -> int:
    return 10 if with_colors else 7


def part_bytes(columns: int) -> int:
    """Peak bytes per point of pooling one part of `columns` feature columns (streamed.pool_range),
    at most one voxel per point: the gathered part (xyz and features) and pool_in_frame's table
    [xyz | features] (float32 each), then either the sort (int64 keys; CuPy's argsort adds a copy of
    them, the indices and thrust's double buffers of both: 32 B) or after it the order, the interval
    starts and keys (24 B) and the means (as wide as the table)."""
    row = 4 * (3 + columns)
    return max(2 * row + 8 + 32, 3 * row + 24)


def chunk_bytes(columns: int) -> int:
    """Peak bytes per row of a pass beyond its raw columns: the chunk's feature rows, and either the
    float64 temporaries that make them or, while gathering a part, the keys (a float64 column, an int64
    coordinate, the key: 24 B), the rows' mask and indices (9 B) and the gathered copy."""
    row = 4 * (3 + columns)
    return row + max(F64_ROW_BYTES, 24 + 9 + row)


def raw_columns(cloud: PointCloud) -> PointCloud:
    """The columns the features are made from: xyz, normals, colours and `support` where present."""
    support = cloud.extra.get("support")
    return PointCloud(xyz=cloud.xyz, normals=cloud.normals, colors=cloud.colors,
                      extra={} if support is None else {"support": support})


def row_bytes(cloud: PointCloud) -> int:
    """Bytes a point of raw_columns(cloud) takes."""
    return sum(a.itemsize * int(np.prod(a.shape[1:])) for a in
               (cloud.xyz, cloud.normals, cloud.colors, *cloud.extra.values()) if a is not None)


def octree_features(raw: PointCloud) -> PointCloud:
    """PointCloud(xyz float32, extra {FEATURES: [k, 7 or 10] float32 [xyz*w | normal*w | w | rgb]}) of
    raw_columns' rows, on their array module; products in float64, then rounded to float32."""
    from ..sampling.points.validate import array_module  # noqa: PLC0415

    xp = array_module(raw.xyz)
    n = len(raw)
    support = raw.extra.get("support")
    w = xp.ones((n, 1)) if support is None else xp.maximum(support.astype(xp.float64).reshape(-1, 1), 1.0)
    feats = xp.empty((n, feature_columns(raw.colors is not None)), dtype=xp.float32)
    feats[:, 0:3] = raw.xyz.astype(xp.float64) * w
    feats[:, 3:6] = raw.normals.astype(xp.float64) * w
    feats[:, 6:7] = w
    if raw.colors is not None:
        feats[:, 7:10] = raw.colors
    return PointCloud(xyz=raw.xyz.astype(xp.float32), extra={FEATURES: feats})


@dataclass
class FeatureSource:
    """raw_columns' rows chunk by chunk as octree_features clouds (a cloud source of
    sampling/points/cloud_source.py's kind); host rows are uploaded one chunk at a time with `on_gpu`."""
    raw: PointCloud
    on_gpu: bool

    @property
    def count(self) -> int:
        return len(self.raw)

    def chunks(self, rows: int, xyz_only: bool = False):
        from ..sampling.points.cloud_source import parts_source  # noqa: PLC0415
        from ..sampling.points.device_cloud import to_device  # noqa: PLC0415
        from ..sampling.points.validate import array_module  # noqa: PLC0415

        for start, chunk in parts_source([self.raw]).chunks(rows, xyz_only=xyz_only):
            if self.on_gpu and array_module(chunk.xyz) is np:
                chunk = to_device(chunk)
            yield start, chunk if xyz_only else octree_features(chunk)


def _plan(raw: PointCloud, columns: int, on_gpu: bool, budget: int | None):
    """(on_gpu, MemoryPlan): the whole cloud at once where it fits `budget` (or there is none), else
    the streamed plan; a budget too small even for that pools on the host (the same cloud), whole."""
    from ..sampling.memory_plan import HEADROOM, MemoryPlan, streamed_plan  # noqa: PLC0415

    n, record = len(raw), row_bytes(raw)
    whole = n * (record + max(4 * (3 + columns) + F64_ROW_BYTES, part_bytes(columns)))
    if budget is None or whole <= HEADROOM * budget:
        return on_gpu, MemoryPlan(whole=True)
    plan = streamed_plan(n, record, budget, part_bytes(columns), chunk_bytes(columns))
    if plan is None:
        log.warning("mesh: pooling %d points does not fit %.2f GiB even in parts; pooling them on the host",
                    n, budget / 2**30)
        return False, MemoryPlan(whole=True)
    return on_gpu, plan


def pool_features(raw: PointCloud, voxel: float, on_gpu: bool, budget: int | None) -> PointCloud:
    """The octree_features of raw_columns' rows pooled into voxels of `voxel` (frame: the float32
    points' minimum corner, as voxel_pool's), one host cloud in key order: at once or in parts."""
    from ..sampling.points.device_cloud import to_device, to_host_cloud  # noqa: PLC0415
    from ..sampling.points.voxel_pool.frame import voxel_frame  # noqa: PLC0415
    from ..sampling.points.voxel_pool.ops import pool_in_frame  # noqa: PLC0415
    from ..sampling.points.voxel_pool.streamed import pool_in_parts  # noqa: PLC0415

    columns = feature_columns(raw.colors is not None)
    on_gpu, plan = _plan(raw, columns, on_gpu, budget)
    # float32 bounds: min/max commute with the monotone rounding to float32
    lo, hi = (np.asarray(b).astype(np.float32).astype(np.float64) for b in column_bounds(raw.xyz))
    frame, centre = voxel_frame(lo, hi, voxel), np.zeros(3)   # float32 points: no offsets (local_frame.py)
    if plan.whole:
        feats = octree_features(to_device(raw) if on_gpu else raw)
        return to_host_cloud(pool_in_frame(feats, centre, frame, "cuda" if on_gpu else "cpu"))
    source = FeatureSource(to_device(raw) if on_gpu and plan.resident else raw, on_gpu)
    log.info("mesh: pooling %d points for the octree in parts of at most %d (chunks of %d rows%s)", len(raw),
             plan.part_points, plan.chunk_rows, ", the columns held on the GPU" if on_gpu and plan.resident else "")
    parts = pool_in_parts(source, frame, centre, plan.part_points, plan.chunk_rows, plan.bin_bits)
    return PointCloud(xyz=np.concatenate([p.xyz for p in parts]),
                      extra={FEATURES: np.concatenate([p.extra[FEATURES] for p in parts])})


def pooled_for_octree(cloud: PointCloud, cell: float, backend: str, budget: int | None = None) -> PointCloud:
    """The cloud pooled into voxels of half an octree cell (`cell`), positions and normals weighted by
    support, on the GPU with backend "cuda" within `budget` bytes (default gpu_budget()); on the CPU
    within `budget` where one is given (tests), else at once."""
    on_gpu = backend == "cuda"
    if on_gpu and budget is None:
        budget = gpu_budget()
    f = np.asarray(pool_features(raw_columns(cloud), 0.5 * cell, on_gpu, budget).extra[FEATURES], np.float64)
    wsum = np.maximum(f[:, 6:7], 1e-12)
    normals = f[:, 3:6]
    normals /= np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-12)
    colors = np.clip(f[:, 7:10] + 0.5, 0, 255).astype(np.uint8) if cloud.colors is not None else None
    return PointCloud(xyz=(f[:, 0:3] / wsum).astype(np.float32), normals=normals.astype(np.float32), colors=colors)
