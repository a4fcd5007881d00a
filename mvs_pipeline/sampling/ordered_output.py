"""fused_fps.ply written from a cloud read in chunks: the FPS samples first, then (keep_unsampled)
every other point in its order, without the whole output in memory at once.

    first = pick_rows(source, samples [M], chunk_rows, xyz_only=not transfer_attributes)
    totals = write_in_fps_order(path, source, first, samples, keep_unsampled, chunk_rows)

`source` is a host cloud_source (the pooled parts, or fused.ply's records read per chunk). The file
is byte for byte the one the whole-cloud path writes (write_ply of the rows
with_unsampled(samples) of the cloud, or of the samples alone): the same record layout
(io/ply_records.cloud_dtype of the same columns) and the same rows in the same order. One pass picks
the samples' rows, a second writes them and the others behind them, block by block: worker threads
pack a block's rows into records straight from the columns and drop the samples' records, while
this thread writes the blocks in order. `totals` are the preview's (io/cloud_preview.py): point
count, bounds and float64 coordinate sums of what was written.

Why blocks on threads: gathering every column of a chunk but its samples, then packing it column by
column into uint8 records, on one thread, took 10.5 s of 48.3 M pooled points on the H200 host
(--gpu-memory 8), 0.22 us a point; the whole-cloud path's write (packed on the GPU) takes 0.024 us.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from functools import partial
from itertools import chain
from pathlib import Path

import numpy as np

from ..arrays import column_bounds
from ..io.ply import PointCloud
from ..io.ply_records import cloud_dtype, pack_records, write_record_chunks
from .points.cloud_source import parts_source
from .points.device_cloud import empty_rows, put_rows, take

# Packing threads of the write; the host packs every written point (the pooled parts live there).
WRITE_THREADS = max(1, min(8, os.cpu_count() or 1))
MAX_BLOCK_ROWS = 1 << 19  # 14 MiB of fusion's records a block: small enough to keep all threads busy


def pick_rows(source, rows: np.ndarray, chunk_rows: int, xyz_only: bool) -> PointCloud:
    """Rows `rows` ([M] distinct int64) of a host source, in the order given."""
    sorter = np.argsort(rows, kind="stable")
    ordered = rows[sorter]
    picked = None
    for start, chunk in source.chunks(chunk_rows, xyz_only=xyz_only):
        a, b = np.searchsorted(ordered, [start, start + len(chunk)])
        if b == a:
            continue
        piece = take(chunk, ordered[a:b] - start)
        if picked is None:
            picked = empty_rows(piece, len(rows))
        put_rows(picked, piece, int(a))
    back = np.empty_like(sorter)
    back[sorter] = np.arange(len(rows))
    return take(picked, back)


class _Totals:
    """Count, bounds and float64 sums of the coordinates written, merged block by block in file order."""

    def __init__(self):
        self.count, self.lo, self.hi, self.sum = 0, np.full(3, np.inf), np.full(3, -np.inf), np.zeros(3)

    def add(self, block) -> None:
        if block is None:
            return
        count, lo, hi, total = block
        self.lo, self.hi = np.minimum(self.lo, lo), np.maximum(self.hi, hi)
        self.sum = self.sum + total
        self.count += count

    def as_tuple(self):
        return self.count, self.lo, self.hi, self.sum


def _coordinate_totals(xyz: np.ndarray):
    """(count, bounds, float64 sums) of host [k, 3] coordinates, None when k = 0. Each column is
    summed alone: NumPy's pairwise sum over one column is ~4x faster than xyz.sum(axis=0), whose
    inner loop is a row of 3 (arrays.py; the preview's centroid may differ in its last bits)."""
    if len(xyz) == 0:
        return None
    lo, hi = column_bounds(xyz)
    sums = np.array([xyz[:, i].sum(dtype=np.float64) for i in range(3)])
    return len(xyz), np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64), sums


def _void_rows(raw: np.ndarray) -> np.ndarray:
    """[N] void view of contiguous [N, R] uint8 records: a row is one element, so a boolean
    selection copies whole records (~3x faster than selecting rows of the 2-D uint8 array)."""
    return raw.view(np.dtype((np.void, raw.shape[1]))).reshape(raw.shape[0])


def _pack_block(chunk: PointCloud, dtype: np.dtype, dropped: np.ndarray, with_totals: bool):
    """([k, R] uint8 records of `chunk`'s rows but the local rows `dropped`, the totals of every
    row's coordinates when with_totals): one write block, packed on a worker thread (NumPy's
    copies and reductions release the GIL)."""
    raw = pack_records(chunk, dtype)
    if len(dropped):
        keep = np.ones(len(raw), dtype=bool)
        keep[dropped] = False
        raw = _void_rows(raw)[keep].view(np.uint8).reshape(-1, dtype.itemsize)
    return raw, _coordinate_totals(chunk.xyz) if with_totals else None


def _blocks(source, rows: int, dtype: np.dtype, dropped: np.ndarray, with_totals: bool, xyz_only: bool):
    """The _pack_block jobs of `source`'s rows in blocks of at most `rows`, without the rows
    `dropped` (sorted int64)."""
    for start, chunk in source.chunks(rows, xyz_only=xyz_only):
        a, b = np.searchsorted(dropped, [start, start + len(chunk)])
        yield partial(_pack_block, chunk, dtype, dropped[a:b] - start, with_totals)


def _in_order(jobs, threads: int):
    """The results of `jobs` (callables) in their order, run on `threads` threads with at most
    threads + 1 submitted and not yet taken: what the write holds is bounded (write_block_rows)."""
    pending: deque = deque()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        try:
            for job in jobs:
                pending.append(pool.submit(job))
                if len(pending) > threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:  # the write failed or stopped: what has not started need not run
            for future in pending:
                future.cancel()


def write_block_rows(chunk_rows: int, threads: int = WRITE_THREADS) -> int:
    """Rows of a write block: the threads + 2 blocks alive at once (threads + 1 in flight, one
    being written) hold at most chunk_rows records, and at most MAX_BLOCK_ROWS each."""
    return max(1, min(MAX_BLOCK_ROWS, int(chunk_rows) // (threads + 2)))


def write_in_fps_order(path: Path, source, first: PointCloud, samples, keep_unsampled: bool, chunk_rows: int,
                       threads: int = WRITE_THREADS):
    """Write `first` (pick_rows of `source`'s rows `samples`, FPS order), then with keep_unsampled
    the other rows of `source` in order, with `first`'s columns. Returns the preview totals
    (count, bbox min, bbox max, xyz sum).

    Blocks of write_block_rows(chunk_rows) rows are packed and stripped of the samples on `threads`
    threads while this one writes them in order: the records are made from the columns once, with no
    gather of the columns (memory_plan.py: what the write holds)."""
    dtype = cloud_dtype(first, str(path))
    xyz_only = first.normals is None and first.colors is None and not first.extra
    count = len(first) + (source.count - len(first) if keep_unsampled else 0)
    rows = write_block_rows(chunk_rows, threads)
    none = np.zeros(0, dtype=np.int64)
    # The totals are those of the points written: with keep_unsampled every row of `source` once
    # (the samples, then the others), so they are summed over the source's blocks whole.
    jobs = _blocks(parts_source([first]), rows, dtype, none, not keep_unsampled, xyz_only)
    if keep_unsampled:
        dropped = np.sort(np.asarray(samples, dtype=np.int64))
        jobs = chain(jobs, _blocks(source, rows, dtype, dropped, True, xyz_only))
    totals = _Totals()

    def pieces():
        for raw, block_totals in _in_order(jobs, threads):
            totals.add(block_totals)
            yield raw

    with closing(pieces()) as chunks:  # a failed write stops the threads' queued blocks at once
        write_record_chunks(path, dtype, count, chunks)
    return totals.as_tuple()
