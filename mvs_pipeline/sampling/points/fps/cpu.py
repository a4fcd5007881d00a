"""Exact farthest point sampling on the CPU: the twins of `cuda/sampling_fps_*.cu` and a plain reference.

Definition (identical on every backend, so all of them return the same index sequence):
    mind[i] = min over selected samples s of dist2(p_i, p_s), +inf before the first sample,
    dist2 = ((dx*dx + dy*dy) + dz*dz) in float32 with dx = x_i - x_s (no FMA);
    sample 0 = start; sample k = the unselected point with the largest mind, ties -> lower index.
Selected points are excluded, so the indices are distinct even when the cloud has fewer
distinct positions than samples (the remaining duplicates come lowest index first).

    fps_reference  NumPy, O(N*M), written for clarity: the test oracle.
    fps_plain      Numba, O(N*M): fastest for small clouds.
    fps_tree       Numba, exact with spatial pruning (QuickFPS-style): points sorted along a
                   Morton curve, leaves of `leaf_size` points, a binary tree of bounding boxes
                   with the best (distance, index) per subtree. A subtree whose box is at least
                   its best distance away from the new sample cannot change and is skipped, so
                   late samples touch only a few leaves. The CPU fallback for large clouds.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_INDEX_NONE = np.iinfo(np.int64).max


def fps_reference(xyz: np.ndarray, num_samples: int, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Plain greedy FPS. xyz [N, 3] float32 -> (indices [M] int64, d2 at selection [M] float32)."""
    xyz = np.ascontiguousarray(xyz, dtype=np.float32)
    n = xyz.shape[0]
    x, y, z = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    mind = np.full(n, np.inf, dtype=np.float32)
    selected = np.zeros(n, dtype=bool)
    indices = np.empty(num_samples, dtype=np.int64)
    d2_at_selection = np.empty(num_samples, dtype=np.float32)
    indices[0], d2_at_selection[0] = start, np.inf
    for k in range(1, num_samples):
        s = indices[k - 1]
        dx, dy, dz = x - x[s], y - y[s], z - z[s]
        np.minimum(mind, dx * dx + dy * dy + dz * dz, out=mind)
        selected[s] = True
        candidates = np.where(selected, np.float32(-1.0), mind)
        indices[k] = int(np.argmax(candidates))  # first maximum = lowest index on ties
        d2_at_selection[k] = mind[indices[k]]
    return indices, d2_at_selection


@njit(cache=True, nogil=True)
def _fps_plain(xyz, num_samples, start):  # pragma: no cover (compiled)
    n = xyz.shape[0]
    mind = np.full(n, np.inf, dtype=np.float32)
    indices = np.empty(num_samples, dtype=np.int64)
    d2_out = np.empty(num_samples, dtype=np.float32)
    indices[0] = start
    d2_out[0] = np.inf
    s = start
    for k in range(1, num_samples):
        sx, sy, sz = xyz[s, 0], xyz[s, 1], xyz[s, 2]
        best_d = np.float32(-1.0)
        best_i = n
        for i in range(n):
            v = mind[i]
            if i == s:
                v = np.float32(-1.0)
                mind[i] = v
            elif v >= 0:
                dx = xyz[i, 0] - sx
                dy = xyz[i, 1] - sy
                dz = xyz[i, 2] - sz
                d = dx * dx + dy * dy + dz * dz
                if d < v:
                    v = d
                    mind[i] = d
            if v > best_d:  # ascending i: the first maximum wins ties
                best_d = v
                best_i = i
        s = best_i
        indices[k] = s
        d2_out[k] = best_d
    return indices, d2_out


def fps_plain(xyz: np.ndarray, num_samples: int, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """O(N*M) Numba FPS. xyz [N, 3] float32 -> (indices [M] int64, d2 at selection [M] float32)."""
    xyz = np.ascontiguousarray(xyz, dtype=np.float32)
    return _fps_plain(xyz, int(num_samples), int(start))


# ---------------------------------------------------------------------------------------------
# Morton order
# ---------------------------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _spread_bits_21(v):  # pragma: no cover (compiled)
    x = np.uint64(v) & np.uint64(0x1FFFFF)
    x = (x | (x << np.uint64(32))) & np.uint64(0x1F00000000FFFF)
    x = (x | (x << np.uint64(16))) & np.uint64(0x1F0000FF0000FF)
    x = (x | (x << np.uint64(8))) & np.uint64(0x100F00F00F00F00F)
    x = (x | (x << np.uint64(4))) & np.uint64(0x10C30C30C30C30C3)
    x = (x | (x << np.uint64(2))) & np.uint64(0x1249249249249249)
    return x


@njit(cache=True, nogil=True)
def morton_codes(xyz, lo, scale, bits):  # pragma: no cover (compiled)
    """[N] uint64 Morton codes, `bits` (<= 21) per axis, of xyz [N, 3] in the cube lo + [0, 2^bits) / scale."""
    n = xyz.shape[0]
    top = (1 << bits) - 1
    codes = np.empty(n, dtype=np.uint64)
    for i in range(n):
        code = np.uint64(0)
        for a in range(3):
            q = (np.float64(xyz[i, a]) - lo[a]) * scale
            qi = 0
            if q > 0.0:
                qi = top if q >= top else int(q)
            code |= _spread_bits_21(qi) << np.uint64(a)
        codes[i] = code
    return codes


@njit(cache=True, nogil=True)
def _radix_argsort_30(codes):  # pragma: no cover (compiled)
    """Stable argsort of codes < 2^30: two counting-sort passes of 15 bits."""
    n = codes.shape[0]
    order = np.arange(n)
    tmp = np.empty(n, dtype=np.int64)
    for shift in (0, 15):
        counts = np.zeros(32769, dtype=np.int64)
        for i in range(n):
            counts[((codes[order[i]] >> np.uint64(shift)) & np.uint64(32767)) + 1] += 1
        for b in range(32768):
            counts[b + 1] += counts[b]
        for i in range(n):
            b = (codes[order[i]] >> np.uint64(shift)) & np.uint64(32767)
            tmp[counts[b]] = order[i]
            counts[b] += 1
        order, tmp = tmp, order
    return order


def morton_order(xyz: np.ndarray) -> np.ndarray:
    """Permutation [N] int64 sorting xyz [N, 3] along a Morton (Z-order) curve of 2^10 cells per
    axis (finer than the leaves need; any order gives the same samples, only speed differs)."""
    lo = xyz.min(axis=0).astype(np.float64)
    extent = float((xyz.max(axis=0).astype(np.float64) - lo).max())
    scale = 1023.0 / extent if extent > 0 else 0.0
    return _radix_argsort_30(morton_codes(xyz, lo, scale, 10))


# ---------------------------------------------------------------------------------------------
# Pruned tree FPS
# ---------------------------------------------------------------------------------------------

@njit(cache=True, nogil=True, inline="always")
def _gap(s, lo, hi):  # pragma: no cover (compiled)
    # Same as po_gap in sampling_points_common.cuh: a lower bound of |fl(p - s)| for p in [lo, hi].
    if s < lo:
        return lo - s
    if s > hi:
        return s - hi
    return np.float32(0.0)


@njit(cache=True, nogil=True, inline="always")
def _better(d1, i1, d2, i2):  # pragma: no cover (compiled)
    return d1 > d2 or (d1 == d2 and i1 < i2)


@njit(cache=True, nogil=True)
def _fps_tree(xs, ys, zs, orig, pos_of, leaf_size, num_samples, start):  # pragma: no cover (compiled)
    n = xs.shape[0]
    num_leaves = (n + leaf_size - 1) // leaf_size
    first_leaf = 1  # heap layout: node 1 is the root, children 2i and 2i+1, leaves first_leaf + j
    while first_leaf < num_leaves:
        first_leaf *= 2
    num_nodes = 2 * first_leaf
    lo = np.empty((num_nodes, 3), dtype=np.float32)
    hi = np.empty((num_nodes, 3), dtype=np.float32)
    best_d = np.full(num_nodes, np.float32(-1.0), dtype=np.float32)  # -1: nothing selectable
    best_i = np.full(num_nodes, _INDEX_NONE, dtype=np.int64)
    on_path = np.zeros(num_nodes, dtype=np.bool_)
    mind = np.full(n, np.inf, dtype=np.float32)
    inf32 = np.float32(np.inf)

    for j in range(first_leaf):
        node = first_leaf + j
        for a in range(3):
            lo[node, a] = inf32
            hi[node, a] = -inf32
        if j < num_leaves:
            begin = j * leaf_size
            end = min(n, begin + leaf_size)
            for p in range(begin, end):
                lo[node, 0] = min(lo[node, 0], xs[p])
                lo[node, 1] = min(lo[node, 1], ys[p])
                lo[node, 2] = min(lo[node, 2], zs[p])
                hi[node, 0] = max(hi[node, 0], xs[p])
                hi[node, 1] = max(hi[node, 1], ys[p])
                hi[node, 2] = max(hi[node, 2], zs[p])
                if _better(inf32, orig[p], best_d[node], best_i[node]):
                    best_d[node] = inf32
                    best_i[node] = orig[p]
    for node in range(first_leaf - 1, 0, -1):
        l, r = 2 * node, 2 * node + 1
        for a in range(3):
            lo[node, a] = min(lo[l, a], lo[r, a])
            hi[node, a] = max(hi[l, a], hi[r, a])
        if _better(best_d[r], best_i[r], best_d[l], best_i[l]):
            best_d[node], best_i[node] = best_d[r], best_i[r]
        else:
            best_d[node], best_i[node] = best_d[l], best_i[l]

    indices = np.empty(num_samples, dtype=np.int64)
    d2_out = np.empty(num_samples, dtype=np.float32)
    indices[0] = start
    d2_out[0] = inf32
    stack = np.empty(256, dtype=np.int64)  # items node*2 + phase; depth <= 64 needs < 2*64+2
    leaf_updates = 0
    s = start
    for k in range(1, num_samples):
        sp = pos_of[s]
        sx, sy, sz = xs[sp], ys[sp], zs[sp]
        s_node = first_leaf + sp // leaf_size
        a_node = s_node
        while a_node >= 1:  # the sample's leaf and its ancestors are always visited
            on_path[a_node] = True
            a_node //= 2
        top = 0
        stack[0] = 2  # (root, phase 0)
        while top >= 0:
            item = stack[top]
            top -= 1
            node = item >> 1
            if item & 1:  # phase 1: children done, recombine
                l, r = 2 * node, 2 * node + 1
                if _better(best_d[r], best_i[r], best_d[l], best_i[l]):
                    best_d[node], best_i[node] = best_d[r], best_i[r]
                else:
                    best_d[node], best_i[node] = best_d[l], best_i[l]
                continue
            if not on_path[node]:
                bd = best_d[node]
                if bd < 0:
                    continue
                gx = _gap(sx, lo[node, 0], hi[node, 0])
                gy = _gap(sy, lo[node, 1], hi[node, 1])
                gz = _gap(sz, lo[node, 2], hi[node, 2])
                if not (gx * gx + gy * gy + gz * gz < bd):
                    continue  # every point is at least as far from s as its current mind
            if node >= first_leaf:
                leaf_updates += 1
                begin = (node - first_leaf) * leaf_size
                end = min(n, begin + leaf_size)
                bd = np.float32(-1.0)
                bi = _INDEX_NONE
                for p in range(begin, end):
                    v = mind[p]
                    if p == sp:
                        v = np.float32(-1.0)
                        mind[p] = v
                    elif v >= 0:
                        dx = xs[p] - sx
                        dy = ys[p] - sy
                        dz = zs[p] - sz
                        d = dx * dx + dy * dy + dz * dz
                        if d < v:
                            v = d
                            mind[p] = d
                    if _better(v, orig[p], bd, bi):
                        bd = v
                        bi = orig[p]
                best_d[node] = bd
                best_i[node] = bi
                continue
            stack[top + 1] = node * 2 + 1
            stack[top + 2] = (2 * node + 1) * 2
            stack[top + 3] = (2 * node) * 2
            top += 3
        a_node = s_node
        while a_node >= 1:
            on_path[a_node] = False
            a_node //= 2
        s = best_i[1]
        indices[k] = s
        d2_out[k] = best_d[1]
    return indices, d2_out, leaf_updates


@njit(cache=True, nogil=True)
def _gather_sorted(xyz, order):  # pragma: no cover (compiled)
    """Sorted SoA coordinates and the inverse permutation, in one pass over the points."""
    n = order.shape[0]
    xs = np.empty(n, dtype=np.float32)
    ys = np.empty(n, dtype=np.float32)
    zs = np.empty(n, dtype=np.float32)
    pos_of = np.empty(n, dtype=np.int64)
    for p in range(n):
        i = order[p]
        xs[p], ys[p], zs[p] = xyz[i, 0], xyz[i, 1], xyz[i, 2]
        pos_of[i] = p
    return xs, ys, zs, pos_of


def fps_tree(xyz: np.ndarray, num_samples: int, start: int = 0, leaf_size: int = 32,
             return_work: bool = False):
    """Pruned exact FPS (same result as fps_reference). -> (indices [M] int64, d2 [M] float32),
    plus with return_work the share of a plain FPS's distance evaluations it did (leaves updated
    * leaf_size / (N * (M - 1)), an upper bound)."""
    xyz = np.ascontiguousarray(xyz, dtype=np.float32)
    order = morton_order(xyz)  # [N] sorted position -> original index
    xs, ys, zs, pos_of = _gather_sorted(xyz, order)
    indices, d2, leaf_updates = _fps_tree(xs, ys, zs, order, pos_of, int(leaf_size), int(num_samples), int(start))
    if return_work:
        return indices, d2, leaf_updates * leaf_size / max(1, len(xyz) * (num_samples - 1))
    return indices, d2
