"""One pass over a cloud read in chunks (cloud_source.py): what the sampling stage must know before
it can choose a voxel grid, with the checks the whole-cloud path makes.

    scan = scan_cloud(source, chunk_rows, sample_rows=None)
    scan.centre           [3] float64: local_frame.frame_centre of the cloud (zeros unless float64)
    scan.lo, scan.hi      [3] float64: bounds of the checked float32 offsets from the centre, the
                          bounds voxel pooling takes its frame from (voxel_pool/frame.py)
    scan.sample           [S, 3] float32 host: validate.as_points of the rows `sample_rows`
                          (spacing.sample_rows: the spacing estimate's subsample), None if not asked

Bounds of the offsets without a second pass: a point's checked offset is
flush(float32(p - centre)) (validate.as_points of local_frame.offsets), a non-decreasing function
of p per axis, so the bounds of the offsets are that function of the coordinates' own bounds,
which one pass gives exactly (min and max round nothing). A non-finite coordinate anywhere raises
validate.as_points's error, with the count and first index over the whole cloud.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mvs_pipeline.arrays import column_bounds
from mvs_pipeline.errors import MVSError

from .validate import array_module, as_points, flush_subnormals, to_host


@dataclass
class CloudScan:
    count: int
    centre: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    sample: np.ndarray | None


def checked_offset(values: np.ndarray, centre: np.ndarray, double: bool) -> np.ndarray:
    """[3] float64: the checked float32 offset of coordinates `values` ([3] float64, exact)."""
    shifted = values - centre if double else values
    return flush_subnormals(shifted.astype(np.float32)).astype(np.float64)


def scan_cloud(source, chunk_rows: int, sample_rows: np.ndarray | None = None) -> CloudScan:
    """Bounds, finiteness and the rows `sample_rows` (increasing) of `source`'s coordinates."""
    n = source.count
    if n == 0:
        raise MVSError("xyz: the point cloud is empty")
    lo = np.full(3, np.inf)
    hi = np.full(3, -np.inf)
    bad, first_bad = 0, None
    pieces = []
    for start, chunk in source.chunks(chunk_rows, xyz_only=True):
        xyz = chunk.xyz
        xp = array_module(xyz)
        finite = xp.isfinite(xyz).all(axis=1)
        if not bool(finite.all()):
            rows = xp.flatnonzero(~finite)
            bad += int(rows.size)
            first_bad = start + int(rows[0]) if first_bad is None else first_bad
            continue
        if bad:
            continue  # the error below is all that is left to report
        c_lo, c_hi = (to_host(b).astype(np.float64) for b in column_bounds(xyz))
        lo, hi = np.minimum(lo, c_lo), np.maximum(hi, c_hi)
        if sample_rows is not None:
            a, b = np.searchsorted(sample_rows, [start, start + len(chunk)])
            if b > a:
                pieces.append(to_host(xyz[xp.asarray(sample_rows[a:b] - start)]))
    if bad:
        raise MVSError(f"xyz: {bad} point(s) have NaN or infinite coordinates (first: index {first_bad}); "
                       "remove them first")
    double = bool(source.double)
    centre = 0.5 * (lo + hi) if double else np.zeros(3)
    sample = None
    if sample_rows is not None:
        sample = to_host(as_points(np.concatenate(pieces) if pieces else np.zeros((0, 3), np.float32),
                                   allow_empty=True))
    return CloudScan(count=n, centre=centre, lo=checked_offset(lo, centre, double),
                     hi=checked_offset(hi, centre, double), sample=sample)
