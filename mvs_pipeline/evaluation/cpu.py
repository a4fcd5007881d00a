"""The evaluation's CPU twins of cuda/evaluation_eth3d.cu (cuda.py): accuracy and completeness.

Accuracy classification (Numba, parallel over reconstruction points).

For each reconstruction point x and each scan: X = x in the scanner frame, r = |X|, beam radius
b = beam_start + r * tan(divergence). A scan point S (ray direction d = S / |S|) is a candidate
when d.X >= 0 and |d x X|^2 <= b^2 (X within b of the ray). Over all candidates of all scans:
    best_dist2 = min |S - X|^2            (inf when there is none)
    front      = any candidate with d.X < |S|   (X lies before the measured surface)
The tolerance-dependent classes follow from these two numbers (see eth3d.classify_accuracy).
Only candidate *search* is pruned (sphere_grid); the test itself is the definition.

Early exit: once best_dist2 <= stop_dist2 (the smallest tolerance squared) the point is accurate
for every tolerance and the remaining scans are skipped; best_dist2 is then only known to be
<= stop_dist2, which is all the scores need. Pass stop_dist2 = -1 to get exact minima.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from scipy.spatial import cKDTree

from .sphere_grid import ANGLE_SLACK, SphereGrids


@numba.njit(cache=True, inline="always")
def _scan_range(starts, base, n_az, row, j0, j1):
    """Point index range [lo, hi) of cells (row, j0..j1), 0 <= j0 <= j1 < n_az."""
    c0 = base + row * n_az + j0
    c1 = base + row * n_az + j1
    return starts[c0], starts[c1 + 1]


@numba.njit(cache=True, inline="always")
def _test_range(pts, norms, lo, hi, x0, x1, x2, b2, best, front):
    for k in range(lo, hi):
        s0 = pts[k, 0]
        s1 = pts[k, 1]
        s2 = pts[k, 2]
        ns = norms[k]
        d0 = s0 / ns
        d1 = s1 / ns
        d2 = s2 / ns
        t = d0 * x0 + d1 * x1 + d2 * x2
        if t < 0.0:
            continue
        c0 = d1 * x2 - d2 * x1
        c1 = d2 * x0 - d0 * x2
        c2 = d0 * x1 - d1 * x0
        if c0 * c0 + c1 * c1 + c2 * c2 <= b2:
            e0 = s0 - x0
            e1 = s1 - x1
            e2 = s2 - x2
            dist2 = e0 * e0 + e1 * e1 + e2 * e2
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
            x0 = rot[s, 0, 0] * wx + rot[s, 0, 1] * wy + rot[s, 0, 2] * wz + trans[s, 0]
            x1 = rot[s, 1, 0] * wx + rot[s, 1, 1] * wy + rot[s, 1, 2] * wz + trans[s, 1]
            x2 = rot[s, 2, 0] * wx + rot[s, 2, 1] * wy + rot[s, 2, 2] * wz + trans[s, 2]
            r = math.sqrt(x0 * x0 + x1 * x1 + x2 * x2)
            b = beam_start + r * tan_div
            b2 = b * b
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
                    best, front = _test_range(pts, norms, lo, hi, x0, x1, x2, b2, best, front)
                else:  # the window wraps around azimuth +-pi: two ranges
                    a0 = j0 % n_az
                    a1 = j1 % n_az
                    lo, hi = _scan_range(starts, base, n_az, row, a0, n_az - 1)
                    best, front = _test_range(pts, norms, lo, hi, x0, x1, x2, b2, best, front)
                    lo, hi = _scan_range(starts, base, n_az, row, 0, a1)
                    best, front = _test_range(pts, norms, lo, hi, x0, x1, x2, b2, best, front)
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

    Exact for distances <= max_dist; +inf beyond (the scores never look further).
    """
    gt = np.asarray(gt_world, dtype=np.float64)
    if len(gt) == 0 or len(recon_xyz) == 0:
        return np.full(len(gt), np.inf)
    tree = cKDTree(np.asarray(recon_xyz, dtype=np.float64), balanced_tree=False, compact_nodes=False)
    # Slightly larger bound: cKDTree's bound is strict (<), the metric's tolerance test is <=.
    dist, _ = tree.query(gt, k=1, distance_upper_bound=max_dist * (1 + 1e-9) + 1e-12, workers=-1)
    return dist * dist


# Voxel weighting (voxels.tolerance_scores): a histogram of point codes per occupied cell.
_FIB = 11400714819323198485  # 2^64 / golden ratio: multiplicative hashing spreads packed keys


@numba.njit(cache=True, inline="always")
def _slot(key, bits):
    return np.int64((np.uint64(key) * np.uint64(_FIB)) >> np.uint64(64 - bits))


@numba.njit(cache=True, nogil=True)
def _cell_code_counts(scaled, lo, span, dist2, tol2, front, has_front):
    n = scaled.shape[0]
    t = tol2.shape[0]
    n_codes = 2 * (t + 1)
    sx, sy = span[0], span[1]
    bits = 16
    table = np.full(1 << bits, -1, np.int64)  # open addressing: cell rank, -1 = empty
    cap = 4096
    ukeys = np.empty(cap, np.int64)
    counts = np.zeros((cap, n_codes), np.int32)
    m = 0
    last_key = -1
    cell = -1
    for i in range(n):
        cx = np.int64(math.floor(scaled[i, 0])) - lo[0]
        cy = np.int64(math.floor(scaled[i, 1])) - lo[1]
        cz = np.int64(math.floor(scaled[i, 2])) - lo[2]
        key = (cz * sy + cy) * sx + cx
        if key != last_key:  # scans and depth maps list neighbouring points together: skip the lookup
            mask = (1 << bits) - 1
            h = _slot(key, bits)
            while table[h] >= 0 and ukeys[table[h]] != key:
                h = (h + 1) & mask
            if table[h] >= 0:
                cell = table[h]
            else:  # a new cell
                if m == cap:
                    cap *= 2
                    grown = np.empty(cap, np.int64)
                    grown[:m] = ukeys[:m]
                    ukeys = grown
                    grown_counts = np.zeros((cap, n_codes), np.int32)
                    grown_counts[:m] = counts[:m]
                    counts = grown_counts
                ukeys[m] = key
                table[h] = m
                cell = m
                m += 1
                if 2 * m > (1 << bits):  # keep the load under 1/2: rehash into a table twice as big
                    bits += 1
                    mask = (1 << bits) - 1
                    table = np.full(1 << bits, -1, np.int64)
                    for j in range(m):
                        g = _slot(ukeys[j], bits)
                        while table[g] >= 0:
                            g = (g + 1) & mask
                        table[g] = j
            last_key = key
        level = t
        d = dist2[i]
        for k in range(t):
            if d <= tol2[k]:  # tol2 sorted: the first tolerance met (NaN meets none)
                level = k
                break
        flag = 1 if (not has_front or front[i]) else 0
        counts[cell, flag * (t + 1) + level] += 1
    return ukeys[:m].copy(), counts[:m].copy()


def cell_code_counts_cpu(scaled: np.ndarray, lo: np.ndarray, span: np.ndarray, dist2: np.ndarray,
                         tol2: np.ndarray, front: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Occupied cells of float32 points `scaled` [N, 3] (p / voxel + shift; cell = floor) as
    (packed keys [C] int64 in first-seen order, counts [C, 2 (T+1)] int32 of code
    front * (T+1) + first tolerance met). `lo`, `span` [3] int64: smallest cell and cell extent.
    Twin of voxels.sorted_cell_counts (the GPU's sort/segment), up to the order of the rows."""
    has_front = front is not None
    fr = np.ascontiguousarray(front, dtype=np.bool_) if has_front else np.zeros(1, np.bool_)
    return _cell_code_counts(np.ascontiguousarray(scaled, dtype=np.float32), np.asarray(lo, np.int64),
                             np.asarray(span, np.int64), np.ascontiguousarray(dist2, dtype=np.float64),
                             np.ascontiguousarray(tol2, dtype=np.float64), fr, has_front)
