"""The evaluation's CPU twins of cuda/evaluation_eth3d.cu (cuda.py): accuracy and completeness.

Accuracy classification (Numba, parallel over reconstruction points).

For each reconstruction point x and each scan: X = x in the scanner frame, r = |X|, beam radius
b = beam_start + r * tan(divergence). A scan point S (ray direction d = S / |S|) is a candidate
when t = d.X >= 0 and |X - t d|^2 <= b^2 (X within b of the ray). Over all candidates of all scans:
    best_dist2 = min |S - X|^2            (inf when there is none)
    front      = any candidate with d.X < |S|   (X lies before the measured surface)
The tolerance-dependent classes follow from these two numbers (see eth3d.classify_accuracy).
Only candidate *search* is pruned (sphere_grid); the test itself is the definition.
The test runs in float32 exactly as the official accuracy.cc (every operation rounded, Eigen's
order, see _f and _sum3): in float64 a point on the beam's edge (|X - t d|^2 = b^2 to float32
precision) could fall the other way and move a small cloud's accuracy by 3e-4 (issue #19 item 6).

Early exit: once best_dist2 <= stop_dist2 (the smallest tolerance squared) the point is accurate
for every tolerance and the remaining scans are skipped; best_dist2 is then only known to be
<= stop_dist2, which is all the scores need. Pass stop_dist2 = -1 to get exact minima.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .sphere_grid import ANGLE_SLACK, SphereGrids


@numba.njit(cache=True)
def _scan_range(starts, base, n_az, row, j0, j1):
    """Point index range [lo, hi) of cells (row, j0..j1), 0 <= j0 <= j1 < n_az."""
    c0 = base + row * n_az + j0
    c1 = base + row * n_az + j1
    return starts[c0], starts[c1 + 1]


@numba.njit(cache=True)
def _f(x):
    """x rounded to float32 (held in a float64): one float32 operation when x is the float64 result
    of +, -, *, / or sqrt on float32 values (53 >= 2 * 24 + 2 bits, so no double rounding)."""
    return np.float64(np.float32(x))


@numba.njit(cache=True)
def _sum3(a0, a1, a2):
    """Eigen's float32 3-term sum (redux unrolled in halves): a0 + (a1 + a2)."""
    return _f(a0 + _f(a1 + a2))


@numba.njit(cache=True)
def _test_range(pts, lo, hi, x0, x1, x2, b2, best, front):
    # the official ClassifyPoint in float32, operation for operation: d = S / |S|, t = d.X,
    # |X - t d|^2 <= b^2; distances float32 too (a beam tie then falls the way it falls there)
    for k in range(lo, hi):
        s0 = np.float64(pts[k, 0])  # float32 scan points: every operation below rounds as before
        s1 = np.float64(pts[k, 1])
        s2 = np.float64(pts[k, 2])
        ns = _f(math.sqrt(_sum3(_f(s0 * s0), _f(s1 * s1), _f(s2 * s2))))
        d0 = _f(s0 / ns)
        d1 = _f(s1 / ns)
        d2 = _f(s2 / ns)
        t = _sum3(_f(d0 * x0), _f(d1 * x1), _f(d2 * x2))
        if t < 0.0:
            continue
        c0 = _f(x0 - _f(t * d0))
        c1 = _f(x1 - _f(t * d1))
        c2 = _f(x2 - _f(t * d2))
        if _sum3(_f(c0 * c0), _f(c1 * c1), _f(c2 * c2)) <= b2:
            e0 = _f(s0 - x0)
            e1 = _f(s1 - x1)
            e2 = _f(s2 - x2)
            dist2 = _sum3(_f(e0 * e0), _f(e1 * e1), _f(e2 * e2))
            if dist2 < best:
                best = dist2
            if t < ns:
                front = True
    return best, front


@numba.njit(parallel=True, cache=True)
def _classify(xyz, rot, trans, pts, norms, starts, start_base, n_incl_arr, n_az_arr,
              beam_start, tan_div, slack, stop_dist2, out_best, out_front):
    n = xyz.shape[0]
    n_scans = rot.shape[0]
    for i in numba.prange(n):
        best = np.inf
        front = False
        for s in range(n_scans):
            wx = xyz[i, 0]
            wy = xyz[i, 1]
            wz = xyz[i, 2]
            # X = R x + t in float32 as accuracy.cc (Eigen: (r0 x + (r1 y + r2 z)) + t)
            x0 = _f(_sum3(_f(rot[s, 0, 0] * wx), _f(rot[s, 0, 1] * wy), _f(rot[s, 0, 2] * wz)) + trans[s, 0])
            x1 = _f(_sum3(_f(rot[s, 1, 0] * wx), _f(rot[s, 1, 1] * wy), _f(rot[s, 1, 2] * wz)) + trans[s, 1])
            x2 = _f(_sum3(_f(rot[s, 2, 0] * wx), _f(rot[s, 2, 1] * wy), _f(rot[s, 2, 2] * wz)) + trans[s, 2])
            r = _f(math.sqrt(_sum3(_f(x0 * x0), _f(x1 * x1), _f(x2 * x2))))
            b = _f(beam_start + _f(r * tan_div))
            b2 = _f(b * b)
            n_incl = n_incl_arr[s]
            n_az = n_az_arr[s]
            base = start_base[s]
            ext_i = math.pi / n_incl
            ext_a = 2.0 * math.pi / n_az
            all_az = False
            if b >= r:  # inside the beam's start disc: every direction may be a candidate
                i0 = 0
                i1 = n_incl - 1
                all_az = True
                az = 0.0
                half_a = 0.0
            else:
                incl = math.acos(min(1.0, max(-1.0, x2 / r)))
                half_v = math.asin(b / r) + slack
                i0 = max(0, int(math.floor((incl - half_v) / ext_i)))
                i1 = min(n_incl - 1, int(math.floor((incl + half_v) / ext_i)))
                rh = math.sqrt(x0 * x0 + x1 * x1)
                az = math.atan2(x1, x0)
                if b >= rh:
                    all_az = True
                    half_a = 0.0
                else:
                    half_a = math.asin(b / rh) + slack
            if all_az:
                j0 = 0
                j1 = n_az - 1
            else:
                j0 = int(math.floor((az - half_a + math.pi) / ext_a))
                j1 = int(math.floor((az + half_a + math.pi) / ext_a))
                if j1 - j0 + 1 >= n_az:
                    j0 = 0
                    j1 = n_az - 1
            for row in range(i0, i1 + 1):
                if j0 >= 0 and j1 < n_az:
                    lo, hi = _scan_range(starts, base, n_az, row, j0, j1)
                    best, front = _test_range(pts, lo, hi, x0, x1, x2, b2, best, front)
                else:  # the window wraps around azimuth +-pi: two ranges
                    a0 = j0 % n_az
                    a1 = j1 % n_az
                    lo, hi = _scan_range(starts, base, n_az, row, a0, n_az - 1)
                    best, front = _test_range(pts, lo, hi, x0, x1, x2, b2, best, front)
                    lo, hi = _scan_range(starts, base, n_az, row, 0, a1)
                    best, front = _test_range(pts, lo, hi, x0, x1, x2, b2, best, front)
            if best <= stop_dist2:
                break
        out_best[i] = best
        out_front[i] = front


def classify_points_cpu(recon_xyz: np.ndarray, grids: SphereGrids, beam_start: float,
                        tan_divergence: float, stop_dist2: float = -1.0) -> tuple[np.ndarray, np.ndarray]:
    """(best_dist2 [N] float64, front [N] bool) for world points `recon_xyz` [N, 3]."""
    xyz = np.ascontiguousarray(recon_xyz, dtype=np.float64)
    n = xyz.shape[0]
    best = np.full(n, np.inf, dtype=np.float64)
    front = np.zeros(n, dtype=np.bool_)
    if n == 0 or grids.scan_from_world_r.shape[0] == 0:
        return best, front
    _classify(xyz, grids.scan_from_world_r, grids.scan_from_world_t, grids.points, grids.norms,
              grids.starts, grids.start_base, grids.n_incl, grids.n_az, float(beam_start),
              float(tan_divergence), float(ANGLE_SLACK), float(stop_dist2), best, front)
    return best, front


# Completeness: distance from every GT point to its nearest reconstruction point.
def nearest_dist2_cpu(gt_world: np.ndarray, recon_xyz: np.ndarray, max_dist: float) -> np.ndarray:
    """[M] float64 squared distance of each GT point [M, 3] to the nearest reconstruction point.

    Exact for distances <= max_dist; +inf beyond (the scores never look further). GT points may
    be float32 (no float64 copy is made); the numbers equal the cKDTree query this replaced
    (nearest_grid.py)."""
    from .nearest_grid import nearest_dist2_grid  # noqa: PLC0415

    return nearest_dist2_grid(gt_world, recon_xyz, max_dist)


# Voxel weighting (voxels.tolerance_scores): a histogram of point codes per occupied cell.
# Each point becomes one integer, packed cell key << CODE_BITS | code, and an LSD radix sort
# orders them (cells then in the packed key order cell_ids ranks them by); runs of equal keys
# are the cells. Radix passes read sequentially and write to 2^RADIX_BITS streams: at 25 M points
# much faster than np.argsort or a hash table, whose random accesses miss the cache.
CODE_BITS = 5  # codes 0 .. 2 (T+1) - 1: up to 15 tolerances
RADIX_BITS = 11


@numba.njit(cache=True)
def _cell(x, inv, shift):
    """voxels.cell_coords of one float32 coordinate: float32 product, then float32 sum (no FMA:
    Numba contracts nothing without fastmath), then floor."""
    s = x * inv
    s = s + shift
    return np.int64(math.floor(s))


@numba.njit(cache=True, nogil=True)
def _cell_bounds(xyz, inv, shift):
    lo = np.full(3, np.iinfo(np.int64).max, np.int64)
    hi = np.full(3, np.iinfo(np.int64).min, np.int64)
    for i in range(xyz.shape[0]):
        for a in range(3):
            c = _cell(xyz[i, a], inv, shift)
            lo[a] = min(lo[a], c)
            hi[a] = max(hi[a], c)
    return lo, hi


@numba.njit(cache=True, nogil=True)
def _packed_codes(xyz, inv, shift, lo, span, dist2, tol2, front, has_front):
    n = xyz.shape[0]
    t = tol2.shape[0]
    sx, sy = span[0], span[1]
    out = np.empty(n, np.uint64)
    for i in range(n):
        cx = _cell(xyz[i, 0], inv, shift) - lo[0]
        cy = _cell(xyz[i, 1], inv, shift) - lo[1]
        cz = _cell(xyz[i, 2], inv, shift) - lo[2]
        key = (cz * sy + cy) * sx + cx
        level = t
        d = dist2[i]
        for k in range(t):
            if d <= tol2[k]:  # tol2 sorted: the first tolerance met (NaN meets none)
                level = k
                break
        flag = 1 if (not has_front or front[i]) else 0
        out[i] = (np.uint64(key) << np.uint64(CODE_BITS)) | np.uint64(flag * (t + 1) + level)
    return out


@numba.njit(cache=True, nogil=True)
def _radix_sort(v, n_bits):
    """Sort uint64 values < 2^n_bits (LSD, RADIX_BITS per pass; a pass whose digit is constant is skipped)."""
    n = v.shape[0]
    buf = np.empty_like(v)
    radix = 1 << RADIX_BITS
    mask = np.uint64(radix - 1)
    shift = 0
    while shift < n_bits:
        sh = np.uint64(shift)
        hist = np.zeros(radix, np.int64)
        for i in range(n):
            hist[(v[i] >> sh) & mask] += 1
        if hist.max() < n:
            pos = np.zeros(radix, np.int64)
            for b in range(1, radix):
                pos[b] = pos[b - 1] + hist[b - 1]
            for i in range(n):
                b = (v[i] >> sh) & mask
                buf[pos[b]] = v[i]
                pos[b] += 1
            v, buf = buf, v
        shift += RADIX_BITS
    return v


@numba.njit(cache=True, nogil=True)
def _run_counts(v, n_codes):
    """[n_codes, C] int32 code counts of each run of equal keys in sorted packed values."""
    n = v.shape[0]
    n_cells = 0
    prev = np.uint64(0)
    for i in range(n):
        key = v[i] >> np.uint64(CODE_BITS)
        if i == 0 or key != prev:
            n_cells += 1
            prev = key
    counts = np.zeros((n_codes, n_cells), np.int32)
    cell = -1
    code_mask = np.uint64((1 << CODE_BITS) - 1)
    for i in range(n):
        key = v[i] >> np.uint64(CODE_BITS)
        if i == 0 or key != prev:
            cell += 1
            prev = key
        counts[np.int64(v[i] & code_mask), cell] += 1
    return counts


def cell_code_counts_cpu(xyz: np.ndarray, voxel_size: float, shift: float, dist2: np.ndarray,
                         tol2: np.ndarray, front: np.ndarray | None) -> np.ndarray | None:
    """[2 (T+1), C] int32: per occupied cell of the grid (voxel_size, shift) (voxels.cell_coords),
    columns in packed-key order as cell_ids ranks them, the number of points of each code
    front * (T+1) + (first tolerance met, T for none), for float32 points `xyz` [N, 3] (N > 0).
    None when packed key and code do not fit 64 bits (the caller falls back to the definition).
    Twin of voxels.sorted_cell_counts (the GPU's sort/segment)."""
    n_codes = 2 * (len(tol2) + 1)
    xyz = np.ascontiguousarray(xyz, dtype=np.float32)
    inv, sh = np.float32(1.0 / voxel_size), np.float32(shift)  # as cell_coords rounds them
    lo, hi = _cell_bounds(xyz, inv, sh)
    span = hi - lo + 1
    key_bits = (int(span[0]) * int(span[1]) * int(span[2]) - 1).bit_length()  # keys 0 .. prod - 1
    if n_codes > 1 << CODE_BITS or key_bits + CODE_BITS > 64:
        return None
    has_front = front is not None
    fr = np.ascontiguousarray(front, dtype=np.bool_) if has_front else np.zeros(1, np.bool_)
    packed = _packed_codes(xyz, inv, sh, lo, span, np.ascontiguousarray(dist2, dtype=np.float64),
                           np.ascontiguousarray(tol2, dtype=np.float64), fr, has_front)
    return _run_counts(_radix_sort(packed, key_bits + CODE_BITS), n_codes)
