"""Which blocks of the TSDF grid hold voxels: those near some views' depth pixels.

The grid has voxel centres at origin + g * voxel (g integer, >= 0); a block is BLOCK^3 voxels,
block (a, b, c) holding g = BLOCK * (a, b, c) + (0..BLOCK-1) per axis. Only blocks near surfaces
are allocated and integrated (tsdf.py), and the mesh still equals a dense grid's
(tests/mesh/test_tsdf_blocks.py). Why: a cube is meshed only when one of its corners has a negative
mean and all eight have at least `min_surface` surface views (-truncation <= sdf < truncation). A view puts a
voxel at sdf = depth - z in the pixel it projects into, so a voxel with sdf in [-back, front] lies in
that pixel's frustum between depths d - front and d + back: within 0.71 (d + back) / f (half the
pixel's diagonal) of the segment of the pixel's central ray between those depths. Each depth pixel
reserves the blocks meeting the box around its segment grown by that and 2 voxels (the other
corners of a cube lie within sqrt(3) voxels of any one):
  min_surface 1: front 0, back = truncation: the negative corner's view reserves the whole cube
                 (in front of a surface only the 2 voxels are kept);
  min_surface k: front = back = truncation, and a block is kept when k views reserve it: every
                 corner of a meshed cube lies in the boxes of its k surface views. A wrong depth
                 that no other view comes near reserves nothing, and the maps have many
                 (object 10 x 320x240: 20 k blocks with the first rule, 15 k with this one at k = 2).
                 With mesh.incidence_floor < 1 a surface view's sdf |n . r| is below the truncation
                 (layout.py), so the front is truncation / |n . r| of the pixel.

Array code on NumPy or CuPy alike (`xp`), one view at a time (a 3200x2130 view: 6.8 M pixels);
the pixels of one view are first reduced to distinct (lowest block, span) codes, which are few
(pixels lie ~0.7 voxels apart on the surface), and only those are expanded to blocks.
"""

from __future__ import annotations

import numpy as np

from ..gpu.loader import to_host
from .layout import BLOCK


def _view_boxes(xp, dv, v: int, front: float, back: float, voxel: float, floor: float):
    """([M, 3] lowest and highest corners of the boxes view v's pixels with depth reserve (module
    doc), world metres), or None. A pixel's front is along its normal: 1 / |n . r| times that
    along the ray (tsdf.DepthViews.view_scale with `floor`; the surface-view count's band)."""
    depth = xp.asarray(dv.view_depth(v))
    rows, cols = xp.nonzero(depth > 0)
    if len(rows) == 0:
        return None
    z = depth[rows, cols].astype(xp.float64)
    K = np.asarray(dv.K[v], np.float64)
    stretch = 1.0
    if floor < 1.0 and front > 0:
        stretch = 1.0 / dv.view_scale(xp, v, depth, floor)[rows, cols].astype(xp.float64)
    Kinv = xp.asarray(np.linalg.inv(K))
    R = xp.asarray(np.asarray(dv.R[v], np.float64))
    t = xp.asarray(np.asarray(dv.t[v], np.float64).reshape(3))
    ray = xp.stack([cols + 0.5, rows + 0.5, xp.ones_like(z)], axis=1) @ Kinv.T   # z = 1
    near = (ray * (z - front * stretch)[:, None] - t) @ R
    far = (ray * (z + back)[:, None] - t) @ R
    margin = (0.7072 * (z + back) / min(float(K[0, 0]), float(K[1, 1])) + 2.0 * voxel)[:, None]
    return xp.minimum(near, far) - margin, xp.maximum(near, far) + margin


def _view_blocks(xp, low, high, bs: float):
    """[N, 3] int64 distinct blocks (counted from the world's origin) meeting the boxes [low, high]."""
    lo = xp.floor(low / bs).astype(xp.int64)
    span = xp.floor(high / bs).astype(xp.int64) - lo   # 0 .. m-1 per axis
    least = lo.min(axis=0)
    lo -= least[None, :]
    m = int(span.max()) + 1
    base = int(lo.max()) + 1
    code = ((lo[:, 0] * base + lo[:, 1]) * base + lo[:, 2]) * (m ** 3) + (span[:, 0] * m + span[:, 1]) * m + span[:, 2]
    code = xp.unique(code)   # a box per distinct (lowest block, span): few, pixels lie < 1 voxel apart
    s, c = code % (m ** 3), code // (m ** 3)
    lo = xp.stack([c // (base * base), (c // base) % base, c % base], axis=1) + least[None, :]
    ext = xp.stack([s // (m * m), (s // m) % m, s % m], axis=1) + 1   # blocks per axis of each box
    # every box's blocks in one expansion (a loop over the m^3 offsets was ~175 masked selections a view
    # at incidence_floor 0.2, each a device sync on CuPy: 1.75 s of the courtyard 20 x 800x600's TSDF)
    size = ext[:, 0] * ext[:, 1] * ext[:, 2]
    end = xp.cumsum(size)
    at = xp.arange(int(end[-1]), dtype=xp.int64)
    box = xp.searchsorted(end, at, side="right")
    local = at - (end - size)[box]
    ez, ey = ext[box, 2], ext[box, 1]
    off = xp.stack([local // (ey * ez), (local // ez) % ey, local % ez], axis=1)
    return unique_blocks(xp, lo[box] + off)


def allocate_blocks(xp, dv, voxel: float, truncation: float, min_surface: int = 1, incidence_floor: float = 1.0):
    """(origin (3,) float64: the centre of voxel g = (0, 0, 0); [B, 3] int32 block coordinates,
    sorted by (a, b, c), of every block that min_surface views reserve (module doc)), in one pass
    over the views: blocks are counted from the world's origin, then the grid's origin is put one
    block below the lowest of them (an integer shift: the boxes' blocks stay the same)."""
    bs = BLOCK * voxel
    front = 0.0 if min_surface <= 1 else truncation
    per_view = []
    for v in range(dv.num_views):
        boxes = _view_boxes(xp, dv, v, front, truncation, voxel, incidence_floor)
        if boxes is not None:
            per_view.append(_view_blocks(xp, *boxes, bs))
    if not per_view:
        raise ValueError("no depth in any view")
    keys = xp.concatenate(per_view)
    least = to_host(keys.min(axis=0)).astype(np.int64) - 1
    keys = keys - xp.asarray(least)[None, :]
    blocks, count = unique_blocks(xp, keys, counts=True)
    if min_surface > 1:
        blocks = blocks[count >= min_surface]
    return least * bs, blocks.astype(xp.int32)


def unique_blocks(xp, keys, counts: bool = False):
    """Distinct rows of [N, 3] int64 block coordinates, sorted (and with counts: how often each
    occurs), through one int64 code a row."""
    least = keys.min(axis=0)
    keys = keys - least[None, :]
    base = int(keys.max()) + 1
    code, n = xp.unique((keys[:, 0] * base + keys[:, 1]) * base + keys[:, 2], return_counts=True)
    rows = xp.stack([code // (base * base), (code // base) % base, code % base], axis=1) + least[None, :]
    return (rows, n) if counts else rows
