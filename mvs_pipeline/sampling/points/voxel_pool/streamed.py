"""Voxel pooling of a cloud too large to pool at once: read in chunks (cloud_source.py), pooled in
parts of at most `cap` points, with exactly the result of one pooling of the whole cloud.

    ranges = plan_key_ranges(source, frame, centre, cap, chunk_rows)   # KeyRange list, key order
    parts = pool_in_parts(source, frame, centre, cap, chunk_rows)      # [PointCloud] on the host

Why it is exact: the whole cloud's frame (frame.py: origin, voxel size, key layout) is fixed first,
so every chunk computes each point's key as the whole pooling does. The parts are disjoint key
ranges (partition.py), and a key range holds whole voxels; within a part the points of a voxel keep
their increasing file order, which is the order pool_mean sums them in. So each part's voxels are
the whole pooling's voxels of those keys, bit for bit, and the parts in increasing key order are
the whole pooling's output. No sums are merged across parts (float sums in another order would
differ in their last bits).

Passes over the source: one histogram of the keys (2^20 bins, partition.BIN_BITS), one more per bin
holding over `cap` points (a finer histogram of its range), and one per part to gather its points.
A part of one voxel with over `cap` points (a voxel far larger than the spacing) cannot be split:
it is gathered and pooled on the host (the CPU twin, identical sums) instead of the GPU.
Each pooled part goes to host memory: the pooled cloud is the output's size, not the work's.
"""

from __future__ import annotations

import logging

import numpy as np

from mvs_pipeline.io.ply import PointCloud

from ..device_cloud import empty_rows, put_rows, take, to_host_cloud
from ..local_frame import offsets
from ..validate import array_module, as_points, to_host
from .frame import VoxelFrame, voxel_keys
from .ops import pool_in_frame
from .partition import BIN_BITS, KeyRange, bin_shift, group_bins, num_bins

log = logging.getLogger(__name__)


def chunk_keys(chunk: PointCloud, frame: VoxelFrame, centre: np.ndarray):
    """[k] int64 voxel keys of a chunk's points (checked as the whole pooling checks them)."""
    return voxel_keys(as_points(offsets(chunk.xyz, centre), allow_empty=True), frame)


def key_histogram(source, frame: VoxelFrame, centre: np.ndarray, lo: int, hi: int, shift: int,
                  chunk_rows: int) -> np.ndarray:
    """[B] int64 host: points per bin of 2^shift keys, for the keys in [lo, hi)."""
    bins = num_bins(lo, hi, shift)
    total = None
    for _start, chunk in source.chunks(chunk_rows, xyz_only=True):
        keys = chunk_keys(chunk, frame, centre)
        xp = array_module(keys)
        if lo > 0 or hi < frame.num_keys:
            keys = keys[(keys >= lo) & (keys < hi)]
        counts = xp.bincount((keys - lo) >> shift, minlength=bins)
        total = counts if total is None else total + counts
    return to_host(total).astype(np.int64)


def plan_key_ranges(source, frame: VoxelFrame, centre: np.ndarray, cap: int, chunk_rows: int,
                    bin_bits: int = BIN_BITS, lo: int = 0, hi: int | None = None) -> list[KeyRange]:
    """Disjoint key ranges in increasing order covering every point of `source` in [lo, hi), each
    of at most `cap` points unless it is a single key (one voxel) holding more; histograms of at
    most 2^bin_bits bins."""
    hi = frame.num_keys if hi is None else hi
    shift = bin_shift(hi - lo, bin_bits)
    counts = key_histogram(source, frame, centre, lo, hi, shift, chunk_rows)
    ranges, heavy = group_bins(counts, lo, hi, shift, cap)
    for h in heavy:
        if h.hi - h.lo == 1:
            ranges.append(h)
        else:  # a finer histogram of this bin alone
            ranges += plan_key_ranges(source, frame, centre, cap, chunk_rows, bin_bits, h.lo, h.hi)
    return sorted(ranges, key=lambda r: r.lo)


def gather_range(source, frame: VoxelFrame, centre: np.ndarray, rng: KeyRange, chunk_rows: int,
                 on_host: bool = False) -> PointCloud:
    """The points whose key lies in `rng`, in source order, on the source's array module (or the
    host's with `on_host`)."""
    out, pos = None, 0
    for _start, chunk in source.chunks(chunk_rows):
        keys = chunk_keys(chunk, frame, centre)
        xp = array_module(keys)
        rows = xp.flatnonzero((keys >= rng.lo) & (keys < rng.hi))
        del keys
        if int(rows.size) == 0:
            continue
        piece = take(chunk, rows)
        if on_host:
            piece = to_host_cloud(piece)
        if out is None:
            out = empty_rows(piece, rng.count)
        put_rows(out, piece, pos)
        pos += len(piece)
    if pos != rng.count:
        raise RuntimeError(f"key range {rng}: gathered {pos} points, the histogram counted {rng.count}")
    return out


def _reduction_backend(cloud: PointCloud) -> str:
    return "cpu" if array_module(cloud.xyz) is np else "cuda"


def pool_range(source, frame: VoxelFrame, centre: np.ndarray, rng: KeyRange, cap: int, chunk_rows: int) -> PointCloud:
    """The pooled voxels of key range `rng` as a host cloud: its points gathered in one pass over
    `source` and pooled where the source's chunks live (CuPy: on the GPU), or on the host for a
    single voxel of over `cap` points. One part of pool_in_parts; also one task of the sampling
    stage on `run --cluster` (sampling/cluster_pool.py)."""
    oversize = rng.count > cap
    if oversize:
        log.warning("sampling: one voxel holds %d points, more than a part's %d; pooling it on the host",
                    rng.count, cap)
    part = gather_range(source, frame, centre, rng, chunk_rows, on_host=oversize)
    got = pool_in_frame(part, centre, frame, _reduction_backend(part))
    del part
    return to_host_cloud(got)


def pool_in_parts(source, frame: VoxelFrame, centre: np.ndarray, cap: int, chunk_rows: int,
                  bin_bits: int = BIN_BITS, pool_ranges=None) -> list[PointCloud]:
    """pool_point_cloud of the whole `source` as host pieces in key order (their concatenation is
    the whole pooling's cloud). Parts run where the source's chunks live (CuPy: on the GPU), one
    after the other; or, with `pool_ranges(frame, centre, ranges, cap, chunk_rows)`, wherever it
    pools them (the Dask workers of `run --cluster`), which must return pool_range's clouds in
    the ranges' order. The ranges are planned here either way, so they do not depend on it."""
    ranges = plan_key_ranges(source, frame, centre, cap, chunk_rows, bin_bits)
    log.info("sampling: pooling %d points in %d parts of at most %d points", source.count, len(ranges), cap)
    if pool_ranges is not None:
        return pool_ranges(frame, centre, ranges, cap, chunk_rows)
    return [pool_range(source, frame, centre, rng, cap, chunk_rows) for rng in ranges]
