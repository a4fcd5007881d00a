"""Voxel pooling on the CPU: twins of `cuda/sampling_voxel_pool.cu` and a NumPy `np.unique` reference.

Cell keys, the stable sort and the interval starts are computed by array code shared with the
GPU path (ops.py); these functions only reduce the intervals.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def pool_mean(features, order, starts):  # pragma: no cover (compiled)
    """[V, C] float32 interval means of features [N, C] (double sums in sorted order)."""
    v_count = starts.shape[0] - 1
    c = features.shape[1]
    out = np.empty((v_count, c), dtype=np.float32)
    for v in range(v_count):
        begin, end = starts[v], starts[v + 1]
        for ch in range(c):
            s = 0.0
            for p in range(begin, end):
                s += np.float64(features[order[p], ch])
            out[v, ch] = np.float32(s / (end - begin))
    return out


@njit(cache=True, nogil=True)
def pool_max(values, order, starts):  # pragma: no cover (compiled)
    """([V] float32 interval maxima of values [N], [V] int64 index of the first maximum)."""
    v_count = starts.shape[0] - 1
    out = np.empty(v_count, dtype=np.float32)
    arg = np.empty(v_count, dtype=np.int64)
    for v in range(v_count):
        a = order[starts[v]]
        best = values[a]
        for p in range(starts[v] + 1, starts[v + 1]):
            i = order[p]
            if values[i] > best:
                best = values[i]
                a = i
        out[v] = best
        arg[v] = a
    return out, arg


def pool_reference(keys: np.ndarray, features: np.ndarray):
    """np.unique-based reference: (unique keys [V], means [V, C] float32, counts [V])."""
    uniq, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    features = np.asarray(features, dtype=np.float32)
    sums = np.stack([np.bincount(inverse, weights=features[:, c].astype(np.float64), minlength=uniq.size)
                     for c in range(features.shape[1])], axis=1) if features.shape[1] else \
        np.zeros((uniq.size, 0))
    return uniq, (sums / counts[:, None]).astype(np.float32), counts
