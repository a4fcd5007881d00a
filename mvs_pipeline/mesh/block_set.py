"""The TSDF blocks reserved so far while blocks.py reads the views: one int64 code a block, sorted,
with how many views reserved each.

A block (a, b, c) is coded in mixed radix within a box of the grid, `least` + (0 .. size - 1) per
axis: ((a - la) * sb + (b - lb)) * sc + (c - lc). The codes sort as the rows (a, b, c) do, so the
sorted codes are the sorted rows. The box is taken from the first blocks coded, grown by their
extent on each side; when later blocks fall outside it, it grows again the same way (a few times
cover any spread of the views) and every code held is coded anew, which keeps their order.

Why (issue #39): the allocation kept every view's distinct blocks as [N, 3] int64 rows (24 bytes a
block), concatenated them and sorted the whole, ~8.6 GB of CuPy's pool on the 40 x 3200x2130
courtyard. Here a block takes 8 bytes (+ 4 for its count), a view's codes are made distinct and
merged into the sorted set one view at a time (searchsorted, no sort of the union), so only one
view's blocks and the set are held. The set and the counts are those of the union of the views'
sets, however the views' blocks arrive.

Array code on NumPy or CuPy alike (`xp`); the box's bounds live on the host.
"""

from __future__ import annotations

import math

import numpy as np

from ..gpu.loader import to_host

# the codes are int64: the box (with its headroom) holds fewer blocks than this
MAX_BOX_BLOCKS = 1 << 62


class BlockSet:
    """Sorted distinct codes (`codes`, xp int64) and, when counted, how many views reserved each
    (`counts`, xp int32); `pending`: the current view's codes (each array distinct) until end_view."""

    def __init__(self, xp, counted: bool):
        self.xp, self.counted = xp, counted
        self.least: list[int] | None = None   # the box: least .. least + size - 1 per axis (Python ints)
        self.size: list[int] | None = None
        self.codes = xp.zeros(0, xp.int64)
        self.counts = xp.zeros(0, xp.int32) if counted else None
        self.pending: list = []

    def cover(self, low, high) -> None:
        """Grow the box to hold blocks low .. high ((3,) ints, inclusive) where it does not yet,
        coding anew what is held."""
        low, high = [int(x) for x in low], [int(x) for x in high]
        if self.least is not None:
            top = [lo + s - 1 for lo, s in zip(self.least, self.size)]
            if all(a >= b for a, b in zip(low, self.least)) and all(a <= b for a, b in zip(high, top)):
                return
            low, high = [min(a, b) for a, b in zip(low, self.least)], [max(a, b) for a, b in zip(high, top)]
        ext = [h - lo + 1 for lo, h in zip(low, high)]
        least, size = [lo - e for lo, e in zip(low, ext)], [3 * e for e in ext]
        if math.prod(size) > MAX_BOX_BLOCKS:   # no headroom then: the exact box
            least, size = low, ext
            if math.prod(size) > MAX_BOX_BLOCKS:
                raise ValueError(f"mesh (tsdf): the reserved blocks span {ext} blocks per axis, too many to code "
                                 "in int64; check mesh.voxel_size against the scene's extent")
        old = (self.least, self.size)
        self.least, self.size = least, size
        if old[0] is not None:
            self.codes = self._recode(self.codes, *old)
            self.pending = [self._recode(c, *old) for c in self.pending]

    def encode(self, a, b, c):
        """xp int64 codes of blocks (a, b, c) (xp int64 arrays) inside the box (cover them first)."""
        la, lb, lc = self.least
        _, sb, sc = self.size
        return ((a - la) * sb + (b - lb)) * sc + (c - lc)

    def decode(self, codes):
        """(a, b, c) xp int64 arrays of codes."""
        la, lb, lc = self.least
        _, sb, sc = self.size
        return codes // (sb * sc) + la, (codes // sc) % sb + lb, codes % sc + lc

    def _recode(self, codes, least, size):
        la, lb, lc = least
        _, sb, sc = size
        return self.encode(codes // (sb * sc) + la, (codes // sc) % sb + lb, codes % sc + lc)

    def end_view(self) -> None:
        """Merge the current view's codes into the set: each block once, its count + 1."""
        xp = self.xp
        if not self.pending:
            return
        new = self.pending[0] if len(self.pending) == 1 else xp.unique(xp.concatenate(self.pending))
        self.pending = []
        if len(self.codes) == 0:
            self.codes = new
            self.counts = xp.ones(len(new), xp.int32) if self.counted else None
            return
        at = xp.searchsorted(self.codes, new)
        found = self.codes[xp.minimum(at, len(self.codes) - 1)] == new
        if self.counted:
            self.counts[at[found]] += 1   # `new` is distinct: no position twice
        fresh = new[~found]
        del at, found, new
        if len(fresh) == 0:
            return
        # a sorted merge of two disjoint sorted lists: each element's place is its own index plus the
        # number of the other list's elements below it
        n = len(self.codes) + len(fresh)
        mine = xp.searchsorted(fresh, self.codes) + xp.arange(len(self.codes))
        theirs = xp.searchsorted(self.codes, fresh) + xp.arange(len(fresh))
        codes = xp.empty(n, xp.int64)
        codes[mine] = self.codes
        codes[theirs] = fresh
        if self.counted:
            counts = xp.ones(n, xp.int32)
            counts[mine] = self.counts
            self.counts = counts
        self.codes = codes

    def rows(self, min_count: int = 1):
        """(least (3,) int64 host: the lowest a, b, c of every block held; [B, 3] int64 xp rows, sorted,
        of the blocks that at least min_count views reserved (every block when not counted))."""
        xp = self.xp
        la, lb, lc = self.least
        _, sb, sc = self.size
        # one axis at a time (a temporary of one int64 a block); the first code has the lowest a
        least = np.array([int(to_host(self.codes[0])) // (sb * sc) + la,
                          int(to_host(((self.codes // sc) % sb).min())) + lb,
                          int(to_host((self.codes % sc).min())) + lc], np.int64)
        keep = self.codes if not self.counted or min_count <= 1 else self.codes[self.counts >= min_count]
        return least, xp.stack(self.decode(keep), axis=1)
