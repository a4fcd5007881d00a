"""Which blocks of the TSDF grid hold voxels: those near some view's depth pixels.

The grid has voxel centres at origin + g * voxel (g integer, >= 0); a block is BLOCK^3 voxels,
block (a, b, c) holding g = BLOCK * (a, b, c) + (0..BLOCK-1) per axis. Only blocks near some
view's surface are allocated and integrated (tsdf.py). Why that loses nothing of the mesh: a
voxel's mean is negative only where some view put it behind its surface, at z-depth d .. d +
truncation in a pixel of depth d (sdf = depth - z in the kernel), i.e. inside that pixel's
frustum: within 0.71 (d + truncation) / f (half the pixel's diagonal) of the segment of the
pixel's central ray between depths d and d + truncation. A cube meshes only when a corner is
negative, and its other corners lie within sqrt(3) voxels of that one. So every depth pixel
reserves the blocks meeting the box around that segment grown by 0.71 (d + truncation) / f + 2
voxels: then every cube a dense grid would mesh has all eight corners allocated, and the mesh equals
the dense grid's (tests/mesh/test_tsdf_blocks.py). In front of a surface only those 2 voxels are
kept: the band is truncation + 4 voxels deep rather than twice the truncation.

Array code on NumPy or CuPy alike (`xp`), one view at a time (a 3200x2130 view: 6.8 M pixels);
the pixels of one view are first reduced to distinct (lowest block, span) codes, which are few
(pixels lie ~0.7 voxels apart on the surface), and only those are expanded to blocks.
"""

from __future__ import annotations

import numpy as np

from ..gpu.loader import to_host
from .layout import BLOCK


def _view_segments(xp, dv, v: int, truncation: float, voxel: float):
    """(ends [M, 2, 3] float64: the world points of view v's pixel centres with depth d at depths d and
    d + truncation; margin [M]: half the pixel diagonal at d + truncation plus 2 voxels), or None."""
    depth = xp.asarray(dv.view_depth(v))
    rows, cols = xp.nonzero(depth > 0)
    if len(rows) == 0:
        return None
    z = depth[rows, cols].astype(xp.float64)
    K = np.asarray(dv.K[v], np.float64)
    Kinv = xp.asarray(np.linalg.inv(K))
    R = xp.asarray(np.asarray(dv.R[v], np.float64))
    t = xp.asarray(np.asarray(dv.t[v], np.float64).reshape(3))
    ray = xp.stack([cols + 0.5, rows + 0.5, xp.ones_like(z)], axis=1) @ Kinv.T   # z = 1
    near = (ray * z[:, None] - t) @ R
    far = (ray * (z + truncation)[:, None] - t) @ R
    f = min(float(K[0, 0]), float(K[1, 1]))
    return xp.stack([near, far], axis=1), 0.7072 * (z + truncation) / f + 2.0 * voxel


def allocate_blocks(xp, dv, voxel: float, truncation: float):
    """(origin (3,) float64: the centre of voxel g = (0, 0, 0); [B, 3] int32 block coordinates,
    sorted by (a, b, c), of every block some pixel reserves (module doc)), in one pass over the views:
    blocks are first counted from the world's origin, then the grid's origin is put one block below
    the lowest of them (an integer shift: the boxes' blocks stay the same)."""
    bs = BLOCK * voxel
    found = []
    for v in range(dv.num_views):
        seg = _view_segments(xp, dv, v, truncation, voxel)
        if seg is None:
            continue
        ends, margin = seg
        lo = xp.floor((ends.min(axis=1) - margin[:, None]) / bs).astype(xp.int64)
        span = xp.floor((ends.max(axis=1) + margin[:, None]) / bs).astype(xp.int64) - lo   # 0 .. m-1 per axis
        del ends, margin
        least = lo.min(axis=0)
        lo -= least[None, :]
        m = int(span.max()) + 1
        base = int(lo.max()) + 1
        code = ((lo[:, 0] * base + lo[:, 1]) * base + lo[:, 2]) * (m ** 3) + (span[:, 0] * m + span[:, 1]) * m + span[:, 2]
        code = xp.unique(code)   # a box per distinct (lowest block, span): few, pixels lie < 1 voxel apart
        s, c = code % (m ** 3), code // (m ** 3)
        lo = xp.stack([c // (base * base), (c // base) % base, c % base], axis=1) + least[None, :]
        span = xp.stack([s // (m * m), (s // m) % m, s % m], axis=1)
        for dx in range(m):
            for dy in range(m):
                for dz in range(m):
                    off = xp.asarray(np.array([dx, dy, dz], np.int64))[None, :]
                    found.append(lo[xp.all(off <= span, axis=1)] + off)
    if not found:
        raise ValueError("no depth in any view")
    keys = xp.concatenate(found)
    least = to_host(keys.min(axis=0)).astype(np.int64) - 1
    origin = least * bs
    return origin, unique_blocks(xp, keys - xp.asarray(least)[None, :]).astype(xp.int32)


def unique_blocks(xp, keys):
    """Distinct rows of [N, 3] non-negative int64 block coordinates, sorted, through one int64 code a row."""
    if len(keys) == 0:
        return keys.reshape(0, 3)
    base = int(keys.max()) + 1
    code = xp.unique((keys[:, 0] * base + keys[:, 1]) * base + keys[:, 2])
    return xp.stack([code // (base * base), (code // base) % base, code % base], axis=1)
