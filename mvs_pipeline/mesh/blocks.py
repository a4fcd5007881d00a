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

Array code on NumPy or CuPy alike (`xp`), one view at a time and within it CHUNK_PIXELS pixels (whole
rows) at a time; a chunk's pixels are first reduced to distinct (lowest block, span) boxes, which are
few (pixels lie ~0.7 voxels apart on the surface), and only those are expanded to blocks, at most
~EXPAND_BLOCKS at a time, straight into one int64 code a block (block_set.py), which a view's codes
then join. Why the bounds (issue #39): a whole 3200x2130 view's float64 rays, ends and boxes were
~1+ GB, and every view's [N, 3] int64 blocks were kept, concatenated and sorted at once: 8.6 GB of
CuPy's pool on the 40 x 3200x2130 courtyard. Neither bound changes a block or a count: each pixel's
box is elementwise arithmetic, the same on NumPy and CuPy (the 3 x 3 products spelt out: a BLAS
matrix product rounds as its library's kernel does, with FMA here, which may depend on where a row
falls and differs between libraries; on every test input the blocks are those the product gave,
a last-bit change in a box seldom moves a block boundary), and the views' blocks are unions of
their chunks' and runs' blocks.

Expected peak of the allocation, 3200x2130 views (6.8 M pixels): a view's depth (27 MB) and its
|n . r| (27 MB; made from the slopes instead of the normal maps: ~15 float32 temporaries of the
view, ~0.4 GB, once a view); a chunk of 2.1 M pixels at ~190 bytes a pixel at most (rows, columns,
depth, stretch, the ray's 3, the ends' 6 and a margin as float64 or int64, an axis's two ends and
their temporaries, the boxes' 6 int64) ~0.4 GB; an expansion run of ~4.2 M blocks at ~100 bytes a
block (indices, the blocks' axes, their codes, unique's sort) ~0.42 GB, after the chunk's pixel
arrays are gone; a view's codes (8 bytes a block) and the set, 12 bytes a block, merged at ~40
(~0.4 GB at 10 M reserved blocks). Under ~1 GB, against the 8.6 GB held before.
"""

from __future__ import annotations

import numpy as np

from ..gpu.loader import to_host
from .block_set import BlockSet
from .layout import BLOCK

CHUNK_PIXELS = 1 << 21   # a 3200x2130 view in 4 chunks of 655 rows
EXPAND_BLOCKS = 1 << 22


def allocate_blocks(xp, dv, voxel: float, truncation: float, min_surface: int = 1, incidence_floor: float = 1.0):
    """(origin (3,) float64: the centre of voxel g = (0, 0, 0); [B, 3] int32 block coordinates,
    sorted by (a, b, c), of every block that min_surface views reserve (module doc)): blocks are
    counted from the world's origin, then the grid's origin is put one block below the lowest block
    any view reserved (an integer shift: the boxes' blocks stay the same)."""
    least, rows, _ = reserved_blocks(xp, dv, voxel, truncation, min_surface, incidence_floor)
    least = least - 1
    return least * (BLOCK * voxel), (rows - xp.asarray(least)[None, :]).astype(xp.int32)


def reserved_blocks(xp, dv, voxel: float, truncation: float, min_surface: int = 1, incidence_floor: float = 1.0,
                    chunk_pixels: int = CHUNK_PIXELS, expand_blocks: int = EXPAND_BLOCKS):
    """(least (3,) int64: the lowest block coordinates any view reserved; [B, 3] int64 blocks
    (from the world's origin) that min_surface views reserve, sorted by (a, b, c); [B] int32 how many
    views reserve each, or None when min_surface <= 1, where they are not counted)."""
    bs = BLOCK * voxel
    front = 0.0 if min_surface <= 1 else truncation
    found = BlockSet(xp, counted=min_surface > 1)
    for v in range(dv.num_views):
        K, R = np.asarray(dv.K[v], np.float64), np.asarray(dv.R[v], np.float64)
        t = np.asarray(dv.t[v], np.float64).reshape(3)
        depth = xp.asarray(dv.view_depth(v))
        # a pixel's front is along its normal: 1 / |n . r| times that along the ray (the surface-view
        # count's band); made for the whole view at once (its slopes read the neighbouring rows)
        scale = dv.view_scale(xp, v, depth, incidence_floor) if incidence_floor < 1.0 and front > 0 else None
        step = max(1, chunk_pixels // max(1, depth.shape[1]))
        for r0 in range(0, depth.shape[0], step):
            boxes = _slab_boxes(xp, depth, scale, r0, r0 + step, K, R, t, front, truncation, voxel, bs)
            if boxes is None:
                continue
            lo, ext = boxes
            found.cover(to_host(lo.min(axis=0)), to_host((lo + ext - 1).max(axis=0)))
            for a, b, c in _box_blocks(xp, lo, ext, expand_blocks):
                found.pending.append(xp.unique(found.encode(a, b, c)))
            del boxes, lo, ext
        found.end_view()
    if len(found.codes) == 0:
        raise ValueError("no depth in any view")
    least, rows = found.rows(min_surface)
    counts = found.counts[found.counts >= min_surface] if found.counted else None
    return least, rows, counts


def _slab_boxes(xp, depth, scale, r0: int, r1: int, K, R, t, front: float, back: float, voxel: float, bs: float):
    """The distinct boxes (_distinct_boxes) of the depth pixels of rows r0 .. r1-1 of a view's map
    (depth, and scale: |n . r| or None, xp [H, W] float32), or None where none has a depth. The
    pixels' arrays end here: only the few boxes outlive the call."""
    part = depth[r0:r1]
    rows, cols = xp.nonzero(part > 0)
    if len(rows) == 0:
        return None
    z = part[rows, cols].astype(xp.float64)
    stretch = 1.0 if scale is None else 1.0 / scale[r0:r1][rows, cols].astype(xp.float64)
    lo, span = _pixel_boxes(xp, rows + r0, cols, z, stretch, K, R, t, front, back, voxel, bs)
    del rows, cols, z, stretch
    return _distinct_boxes(xp, lo, span)


def _pixel_boxes(xp, rows, cols, z, stretch, K, R, t, front: float, back: float, voxel: float, bs: float):
    """([n, 3] int64 lowest block, [n, 3] int64 span: blocks per axis less 1) of the boxes these pixels
    reserve (module doc): the segment of the pixel's central ray between depths z - front * stretch
    and z + back, grown by the margin. Elementwise: a pixel's box does not depend on its chunk."""
    Kinv = np.linalg.inv(K)
    u, w = cols + 0.5, rows + 0.5
    ray = [(u * Kinv[j, 0] + w * Kinv[j, 1]) + Kinv[j, 2] for j in range(3)]   # z = 1 (K^-1 (u, w, 1))
    del u, w
    # the segment's ends in the camera's frame, then world = R^T (camera - t): axis k sums
    # (camera_j - t_j) R[j, k] over j in order
    near_z, far_z = z - front * stretch, z + back
    near = [ray[j] * near_z - t[j] for j in range(3)]
    far = [ray[j] * far_z - t[j] for j in range(3)]
    del ray, near_z, far_z
    margin = 0.7072 * (z + back) / min(float(K[0, 0]), float(K[1, 1])) + 2.0 * voxel
    lo, span = xp.empty((len(z), 3), xp.int64), xp.empty((len(z), 3), xp.int64)
    for k in range(3):
        a = (near[0] * R[0, k] + near[1] * R[1, k]) + near[2] * R[2, k]
        b = (far[0] * R[0, k] + far[1] * R[1, k]) + far[2] * R[2, k]
        lo[:, k] = xp.floor((xp.minimum(a, b) - margin) / bs).astype(xp.int64)
        span[:, k] = xp.floor((xp.maximum(a, b) + margin) / bs).astype(xp.int64) - lo[:, k]
    return lo, span


def _distinct_boxes(xp, lo, span):
    """([M, 3] int64 lowest block, [M, 3] int64 blocks per axis) of the distinct (lowest block, span)
    pairs: few, pixels lie < 1 voxel apart."""
    least = lo.min(axis=0)
    lo = lo - least[None, :]
    m = int(span.max()) + 1
    base = int(lo.max()) + 1
    code = ((lo[:, 0] * base + lo[:, 1]) * base + lo[:, 2]) * (m ** 3) + (span[:, 0] * m + span[:, 1]) * m + span[:, 2]
    del lo, span
    code = xp.unique(code)
    s, c = code % (m ** 3), code // (m ** 3)
    lo = xp.stack([c // (base * base), (c // base) % base, c % base], axis=1) + least[None, :]
    return lo, xp.stack([s // (m * m), (s // m) % m, s % m], axis=1) + 1


def _box_blocks(xp, lo, ext, limit: int):
    """(a, b, c) int64 arrays of every block of the boxes (lowest block lo, ext blocks per axis), the
    boxes cut into runs of at most ~limit blocks (plus one box). Every box's blocks in one expansion
    a run (a loop over the offsets was ~175 masked selections a view at incidence_floor 0.2, each a
    device sync on CuPy: 1.75 s of the courtyard 20 x 800x600's TSDF)."""
    size = ext[:, 0] * ext[:, 1] * ext[:, 2]
    end = xp.cumsum(size)
    total = int(end[-1])
    first = end - size
    cuts = to_host(xp.searchsorted(end, xp.arange(limit, total, limit, dtype=xp.int64), side="right"))
    cuts = np.unique(np.concatenate([[0], cuts, [len(size)]]).astype(np.int64))   # runs of boxes b0 .. b1-1
    stops = to_host(end[xp.asarray(cuts[1:] - 1)])
    for start, stop in zip(np.concatenate([[0], stops[:-1]]), stops):
        at = xp.arange(int(start), int(stop), dtype=xp.int64)
        box = xp.searchsorted(end, at, side="right")
        local = at - first[box]
        del at
        ez, ey = ext[box, 2], ext[box, 1]
        yield lo[box, 0] + local // (ey * ez), lo[box, 1] + (local // ez) % ey, lo[box, 2] + local % ez
