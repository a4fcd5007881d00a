"""Direction binning of laser scan points, so the accuracy test visits only nearby rays.

A reconstruction point X (scanner frame, r = |X|) can only be inside the beam of scan ray d if
the angle between d and X is at most asin(b / r) (b = beam radius at X; needs b < r). Binning
the scan points by (inclination, azimuth) turns that into a small window of cells:
- inclination  incl = acos(z / r) in [0, pi]: |incl_d - incl_X| <= angle(d, X) <= asin(b / r);
- azimuth      az = atan2(y, x) in [-pi, pi]: the ray lies in the half-plane at its azimuth, so
  its distance to X is at least r_h |sin(az_d - az_X)| (r_h = horizontal radius of X) and a
  candidate needs |az_d - az_X| <= asin(b / r_h); when b >= r_h every azimuth is searched.
Both bounds are widened by ANGLE_SLACK so rounding can never drop a ray that the exact test
accepts: the window may only *add* rays, never lose them, and the exact test decides.

Cell (i, j): i = min(floor(incl / (pi / n_incl)), n_incl - 1), j = floor((az + pi) / (2 pi / n_az))
mod n_az; cell index i * n_az + j. Points of one scan are sorted by cell; `starts[c]` ..
`starts[c + 1]` are cell c's points, so one inclination row of a window is one contiguous range
(two when the azimuth window wraps around). cuda/evaluation_eth3d.cu uses the same layout.

Scan points at the scanner origin (|S| = 0) have no direction and are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ANGLE_SLACK = 1e-6  # rad, added to both window half-widths (covers the float32 beam test's ~1e-7 rad)
MAX_INCLINATION_CELLS = 1024  # the official program uses 1024 x 2048 cells
MIN_INCLINATION_CELLS = 8


def grid_shape(num_points: int) -> tuple[int, int]:
    """(n_incl, n_az) giving about two points per cell, within [8, 1024] x [16, 2048]."""
    n_incl = int(np.clip(np.ceil(np.sqrt(max(num_points, 1) / 4.0)), MIN_INCLINATION_CELLS, MAX_INCLINATION_CELLS))
    return n_incl, 2 * n_incl


def direction_cells(points: np.ndarray, n_incl: int, n_az: int) -> np.ndarray:
    """[M] int64 cell index of each scan point [M, 3] (scanner frame, non-zero)."""
    p = np.asarray(points, dtype=np.float64)
    r = np.sqrt((p * p).sum(axis=1))
    incl = np.arccos(np.clip(p[:, 2] / r, -1.0, 1.0))
    az = np.arctan2(p[:, 1], p[:, 0])
    i = np.minimum(np.floor(incl / (np.pi / n_incl)).astype(np.int64), n_incl - 1)
    j = np.mod(np.floor((az + np.pi) / (2.0 * np.pi / n_az)).astype(np.int64), n_az)
    return i * n_az + j


@dataclass
class SphereGrids:
    """All scans' points binned by direction, concatenated (arrays ready for Numba/CUDA)."""

    points: np.ndarray  # [M, 3] float32 (as read), scanner frames, sorted by (scan, cell)
    norms: np.ndarray  # [M] float64, |S|
    starts: np.ndarray  # [sum_s (n_cells_s + 1)] int64, global point index where each cell starts
    start_base: np.ndarray  # [S] int64, offset of scan s's cells in `starts`
    n_incl: np.ndarray  # [S] int64
    n_az: np.ndarray  # [S] int64
    scan_from_world_r: np.ndarray  # [S, 3, 3] float64
    scan_from_world_t: np.ndarray  # [S, 3] float64
    source_index: list  # per scan, [M_s] int64 index into the scan's original points (sorted order)


def scan_from_world(scans) -> tuple[np.ndarray, np.ndarray]:
    """Inverse poses of rigid scans: (R [S, 3, 3], t [S, 3]), x_scan = R @ x_world + t, as the
    official accuracy.cc holds them: R = M^T and t = R (-m) in float32 (Eigen's 3-term sums
    nest to the right: a0 + (a1 + a2)); returned as float64 arrays of those float32 values."""
    f = np.float32
    rs, ts = [], []
    for scan in scans:
        r = scan.world_from_scan[:3, :3].astype(f).T
        mt = -scan.world_from_scan[:3, 3].astype(f)
        rs.append(r)
        ts.append([r[i, 0] * mt[0] + (r[i, 1] * mt[1] + r[i, 2] * mt[2]) for i in range(3)])
    return (np.ascontiguousarray(np.asarray(rs, dtype=np.float64).reshape(-1, 3, 3)),
            np.ascontiguousarray(np.asarray(ts, dtype=np.float64).reshape(-1, 3)))


def build_sphere_grids(scans) -> SphereGrids:
    """Bin every scan's points (see module doc); `scans` are mlp.Scan objects. CPU (Numba)."""
    from .sphere_bins import bin_scan_cpu, count_nonzero_points, gather_points  # noqa: PLC0415 (Numba: CPU only)

    clouds = [np.ascontiguousarray(scan.points, dtype=np.float32) for scan in scans]
    counts = [count_nonzero_points(p) if len(p) else 0 for p in clouds]
    total = int(sum(counts))
    points = np.empty((total, 3), np.float32)  # written in place: no per-scan copies to concatenate
    norms = np.empty(total, np.float64)
    starts_all, base, ni, na, src = [], [], [], [], []
    offset_points = 0
    offset_starts = 0
    for p, count in zip(clouds, counts):
        n_incl, n_az = grid_shape(int(count))
        order, starts, nrm = bin_scan_cpu(p, n_incl, n_az)
        gather_points(p, nrm, order, points, norms, offset_points)
        starts_all.append(starts + offset_points)
        base.append(offset_starts)
        ni.append(n_incl)
        na.append(n_az)
        src.append(order)
        offset_points += len(order)
        offset_starts += len(starts)
    rot, trans = scan_from_world(scans)
    return SphereGrids(
        points=points,
        norms=norms,
        starts=np.concatenate(starts_all) if starts_all else np.zeros(0, np.int64),
        start_base=np.asarray(base, dtype=np.int64),
        n_incl=np.asarray(ni, dtype=np.int64),
        n_az=np.asarray(na, dtype=np.int64),
        scan_from_world_r=rot,
        scan_from_world_t=trans,
        source_index=src,
    )
