"""The sampling stage on a cloud whose whole-cloud path does not fit the memory budget
(memory_plan.py): the same fused_fps.ply, made in chunks and parts.

    written = sample_streamed(cfg, fused_ply, layout, plan, on_gpu, backend, paths, info)

Steps, each a pass over fused.ply's records (held in memory when plan.resident, else read from the
file chunk by chunk; on the GPU with on_gpu):
    scan       bounds, finiteness, the spacing estimate's subsample (points/cloud_scan.py)
    pooling    a key histogram, then one pass per part of at most plan.part_points points, each
               pooled where the chunks live and sent to host memory (points/voxel_pool/streamed.py)
    fps        on the pooled coordinates (host [V, 3] float32; points/fps/ops.py moves them to the
               GPU if its own check finds room), or on fused.ply's without pooling
    order, write   the samples' rows picked, then the file written in blocks packed on threads (ordered_output.py)
Each gives the whole path's result exactly: the same spacing (same subsample), the same voxels
(the whole cloud's frame, disjoint key ranges), the same FPS input and so the same samples, and the
same rows in the same order. Only the preview's centroid (a float64 sum in another order) may differ
in its last bits (io/cloud_preview.py).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from ..errors import MVSError
from ..io.atomic import atomic_path
from ..io.cloud_preview import write_cloud_preview
from ..io.ply_records import VertexLayout
from .memory_plan import MemoryPlan
from .ordered_output import pick_rows, write_in_fps_order
from .params import SamplingConfig
from .sample_count import pools, resolve_num_samples, with_unsampled
from .points.cloud_scan import scan_cloud
from .points.cloud_source import file_source, parts_source, resident_source

log = logging.getLogger(__name__)


def _source(fused_ply: Path, layout: VertexLayout, plan: MemoryPlan, on_gpu: bool):
    """fused.ply's records as a chunk source: held whole (the GPU's or the host's memory) when the
    plan allows, else read per chunk."""
    if not plan.resident:
        return file_source(fused_ply, layout, on_gpu)
    nbytes = layout.count * layout.dtype.itemsize
    if on_gpu:
        from ..io.device_io import read_to_device  # noqa: PLC0415

        raw = read_to_device(fused_ply, layout.offset, nbytes)
    else:
        from ..io.ply_records import read_record_rows  # noqa: PLC0415

        raw = read_record_rows(fused_ply, layout, 0, layout.count)
    return resident_source(raw.reshape(layout.count, layout.dtype.itemsize), layout.dtype)


def _coordinates(source, chunk_rows: int) -> np.ndarray:
    """[N, 3] host coordinates of a host source (FPS's input)."""
    out = None
    for start, chunk in source.chunks(chunk_rows, xyz_only=True):
        if out is None:
            out = np.empty((source.count, 3), dtype=chunk.xyz.dtype)
        out[start:start + len(chunk)] = chunk.xyz
    return out


def _voxel_and_parts(cfg: SamplingConfig, source, scan, plan: MemoryPlan, info: dict, clock):
    """The pooled parts (host clouds in key order), or None where the spacing is 0 (no pooling)."""
    from .points.spacing import spacing_of_sample  # noqa: PLC0415
    from .points.voxel_pool.frame import voxel_frame  # noqa: PLC0415
    from .points.voxel_pool.streamed import pool_in_parts  # noqa: PLC0415

    voxel = cfg.pre_pool_voxel_size
    if voxel is None:
        info["point_spacing"] = spacing_of_sample(scan.sample, scan.count)
        voxel = cfg.pre_pool_spacing * info["point_spacing"]
        log.info("sampling: point spacing %.4g m; pre-pooling in voxels of %.4g m", info["point_spacing"], voxel)
        clock("spacing")
    parts = None
    if voxel > 0:
        frame = voxel_frame(scan.lo, scan.hi, voxel)
        parts = pool_in_parts(source, frame, scan.centre, plan.part_points, plan.chunk_rows, plan.bin_bits)
    else:
        log.warning("sampling: the fused cloud's median point spacing is 0; FPS without pre-pooling")
    info["pool_voxel_size"] = voxel
    return parts


def sample_streamed(cfg: SamplingConfig, fused_ply: Path, layout: VertexLayout, plan: MemoryPlan, on_gpu: bool,
                    backend: str, paths: dict, info: dict) -> int:
    """Write paths["samples"] (and paths["indices"] without pooling) and the preview; returns the
    points written. `info` gets the counts and step seconds the whole path reports."""
    from .points.fps.ops import farthest_point_sampling  # noqa: PLC0415
    from .points.spacing import sample_rows  # noqa: PLC0415
    from .points.validate import to_host  # noqa: PLC0415

    t = [time.perf_counter()]

    def clock(step: str) -> None:
        now = time.perf_counter()
        info[f"{step}_seconds"] = info.get(f"{step}_seconds", 0.0) + now - t[0]
        t[0] = now

    n = layout.count
    info.update(input_points=n, chunk_rows=plan.chunk_rows, part_points=plan.part_points)
    log.info("sampling: %d points in chunks of %d rows, parts of at most %d points (records %s)", n,
             plan.chunk_rows, plan.part_points, "held in memory" if plan.resident else "read per chunk")
    source = _source(fused_ply, layout, plan, on_gpu)
    wants_sample = pools(cfg) and cfg.pre_pool_voxel_size is None
    rows = sample_rows(n) if wants_sample else None
    if wants_sample and rows is None:
        rows = np.arange(n)
    scan = scan_cloud(source, plan.chunk_rows, rows)
    clock("read")
    parts = None
    if pools(cfg):
        parts = _voxel_and_parts(cfg, source, scan, plan, info, clock)
    del source  # the records held for the passes leave the GPU before FPS
    target = parts_source(parts) if parts is not None else file_source(fused_ply, layout)
    if pools(cfg):
        info["pooled_points"] = target.count
        clock("pooling")
    xyz = _coordinates(target, plan.chunk_rows)
    m = resolve_num_samples(cfg, len(xyz))
    if cfg.start_index >= len(xyz):
        raise MVSError(f"sampling.start_index = {cfg.start_index} is out of range for {len(xyz)} points")
    indices = to_host(farthest_point_sampling(xyz, m, cfg.start_index, backend=backend)).astype(np.int64)
    del xyz
    info["num_samples"] = m
    clock("fps")
    first = pick_rows(target, indices, plan.chunk_rows, xyz_only=not cfg.transfer_attributes)
    clock("order")
    totals = write_in_fps_order(paths["samples"], target, first, indices, cfg.keep_unsampled, plan.chunk_rows)
    del first
    if "indices" in paths and parts is None:
        with atomic_path(paths["indices"]) as tmp:
            np.save(tmp, with_unsampled(indices, target.count) if cfg.keep_unsampled else indices)
    clock("write")
    write_cloud_preview(paths["samples"], totals=totals)
    clock("preview")
    return int(totals[0])
