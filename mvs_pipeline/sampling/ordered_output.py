"""fused_fps.ply written from a cloud read in chunks: the FPS samples first, then (keep_unsampled)
every other point in its order, without the whole output in memory at once.

    first = pick_rows(source, samples [M], chunk_rows, xyz_only=not transfer_attributes)
    totals = write_in_fps_order(path, source, first, samples, keep_unsampled, chunk_rows)

`source` is a host cloud_source (the pooled parts, or fused.ply's records read per chunk). The file
is byte for byte the one the whole-cloud path writes (write_ply of the rows
with_unsampled(samples) of the cloud, or of the samples alone): the same record layout
(io/ply_records.cloud_dtype of the same columns) and the same rows in the same order. One pass picks
the samples' rows, a second writes the others chunk by chunk behind them. `totals` are the
preview's (io/cloud_preview.py): point count, bounds and float64 coordinate sums of what was written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..arrays import column_bounds, column_sums
from ..io.ply import PointCloud
from ..io.ply_records import cloud_dtype, pack_records, write_record_chunks
from .points.device_cloud import empty_rows, put_rows, take


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
    """Count, bounds and float64 sums of the coordinates written, chunk by chunk."""

    def __init__(self):
        self.count, self.lo, self.hi, self.sum = 0, np.full(3, np.inf), np.full(3, -np.inf), np.zeros(3)

    def add(self, xyz: np.ndarray) -> None:
        if len(xyz) == 0:
            return
        lo, hi = column_bounds(xyz)
        self.lo = np.minimum(self.lo, np.asarray(lo, dtype=np.float64))
        self.hi = np.maximum(self.hi, np.asarray(hi, dtype=np.float64))
        self.sum = self.sum + np.asarray(column_sums(xyz, np.float64), dtype=np.float64)
        self.count += len(xyz)

    def as_tuple(self):
        return self.count, self.lo, self.hi, self.sum


def write_in_fps_order(path: Path, source, first: PointCloud, samples, keep_unsampled: bool, chunk_rows: int):
    """Write `first` (pick_rows of `source`'s rows `samples`, FPS order), then with keep_unsampled
    the other rows of `source` in order, with `first`'s columns. Returns the preview totals
    (count, bbox min, bbox max, xyz sum)."""
    samples = np.asarray(samples, dtype=np.int64)
    xyz_only = first.normals is None and first.colors is None and not first.extra
    dtype = cloud_dtype(first, str(path))
    count = len(samples) + (source.count - len(samples) if keep_unsampled else 0)
    ordered = np.sort(samples)
    totals = _Totals()

    def pieces():
        totals.add(first.xyz)
        yield pack_records(first, dtype)
        if not keep_unsampled:
            return
        for start, chunk in source.chunks(chunk_rows, xyz_only=xyz_only):
            a, b = np.searchsorted(ordered, [start, start + len(chunk)])
            if b > a:
                keep = np.ones(len(chunk), dtype=bool)
                keep[ordered[a:b] - start] = False
                chunk = take(chunk, np.flatnonzero(keep))
            totals.add(chunk.xyz)
            yield pack_records(chunk, dtype)

    write_record_chunks(path, dtype, count, pieces())
    return totals.as_tuple()
