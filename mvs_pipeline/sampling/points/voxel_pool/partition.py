"""Disjoint key ranges of at most `cap` points each, from a histogram of voxel keys: the parts a
pooling by parts (streamed.py) pools one at a time.

    shift = bin_shift(hi - lo)                       # bins of 2^shift keys, at most 2^BIN_BITS of them
    parts, heavy = group_bins(counts [B], lo, hi, shift, cap)

A voxel's points all share its key, so a key range holds whole voxels: pooled one range at a time in
increasing key order, the voxels come out exactly as one pooling of the whole cloud gives them. The
grouping is greedy over consecutive bins (each range as long as `cap` allows). A bin holding more
than `cap` points on its own comes back in `heavy`, for the caller to histogram again at a finer
shift (or, a bin of a single key, one voxel, to pool as it is). Pure host arithmetic: no arrays of
points here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BIN_BITS = 20  # 2^20 bins: an 8 MB int64 histogram on the device, a fine enough grain in practice


@dataclass(frozen=True)
class KeyRange:
    lo: int      # first key
    hi: int      # one past the last key
    count: int   # points whose key lies in [lo, hi)


def bin_shift(span: int, bits: int = BIN_BITS) -> int:
    """The smallest shift s such that `span` keys make at most 2^bits bins of 2^s keys."""
    return max(0, (max(int(span), 1) - 1).bit_length() - bits)


def num_bins(lo: int, hi: int, shift: int) -> int:
    return ((hi - lo - 1) >> shift) + 1


def group_bins(counts: np.ndarray, lo: int, hi: int, shift: int, cap: int) -> tuple[list[KeyRange], list[KeyRange]]:
    """(ranges of at most `cap` points covering every non-empty bin of at most `cap` points, in key
    order; the bins of more than `cap` points). counts[b] = points with (key - lo) >> shift == b for
    keys in [lo, hi); the two lists are disjoint and together cover every point."""
    if cap < 1:
        raise ValueError(f"cap must be at least 1, got {cap}")
    counts = np.asarray(counts, dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(counts)])
    parts: list[KeyRange] = []
    heavy: list[KeyRange] = []
    filled = np.flatnonzero(counts)  # one step per range or heavy bin, not per (mostly empty) bin
    i = 0
    while i < len(filled):
        b = int(filled[i])
        start = lo + (b << shift)  # bin b holds keys start .. start + 2^shift - 1 (and below hi)
        if counts[b] > cap:
            heavy.append(KeyRange(start, min(hi, start + (1 << shift)), int(counts[b])))
            i += 1
            continue
        # bins b .. e - 1 with e the last bin such that cum[e] - cum[b] <= cap; the range ends
        # after the last of them that holds points
        e = int(np.searchsorted(cum, cum[b] + cap, side="right")) - 1
        j = int(np.searchsorted(filled, max(e, b + 1)))
        end = int(filled[j - 1]) + 1
        parts.append(KeyRange(start, min(hi, lo + (end << shift)), int(cum[end] - cum[b])))
        i = j
    return parts, heavy
