"""The Numba twin of cuda/mesh_tsdf.cu's `tsdf_integrate`: the CPU backend of the TSDF fusion and
the reference the GPU test compares the kernel with (tests/mesh/test_tsdf_gpu.py).

Same arguments, same float32 arithmetic in the same order (no fused multiply-adds: the kernel
uses __fmul_rn / __fadd_rn / __fdiv_rn), so both give the same sums bit for bit.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .layout import BLOCK, BLOCK_VOXELS, CAM_STRIDE


@numba.njit(cache=True, inline="always")
def _dot4(P, r, x, y, z):
    # ((P0 x + P1 y) + P2 z) + P3, each step rounded to float32
    a = np.float32(P[r, 0] * x)
    a = np.float32(a + np.float32(P[r, 1] * y))
    a = np.float32(a + np.float32(P[r, 2] * z))
    return np.float32(a + P[r, 3])


@numba.njit(cache=True, inline="always")
def _split(t):
    # (block row, i, j, k) of batch voxel t (layout.py)
    local = t % BLOCK_VOXELS
    return t // BLOCK_VOXELS, local // (BLOCK * BLOCK), (local // BLOCK) % BLOCK, local % BLOCK


@numba.njit(cache=True, parallel=True)
def _integrate(depth, scale, use_scale, rgb, cams, offsets, sizes, v0, v1, origin, voxel, trunc, blocks,
               sdf_sum, weight, rgb_sum, rgb_weight):
    n = blocks.shape[0] * BLOCK_VOXELS
    for t in numba.prange(n):
        nb, li, lj, lk = _split(t)
        i = blocks[nb, 0] * BLOCK + li
        j = blocks[nb, 1] * BLOCK + lj
        k = blocks[nb, 2] * BLOCK + lk
        x = np.float32(origin[0] + np.float32(np.float32(i) * voxel))
        y = np.float32(origin[1] + np.float32(np.float32(j) * voxel))
        z = np.float32(origin[2] + np.float32(np.float32(k) * voxel))
        s = sdf_sum[t]
        w = weight[t]
        cr = rgb_sum[t, 0]
        cg = rgb_sum[t, 1]
        cb = rgb_sum[t, 2]
        cw = rgb_weight[t]
        for v in range(v0, v1):
            P = cams[v].reshape(3, 4)
            c = _dot4(P, 2, x, y, z)
            if not c > np.float32(0.0):
                continue
            u = np.float32(_dot4(P, 0, x, y, z) / c)
            r = np.float32(_dot4(P, 1, x, y, z) / c)
            width = sizes[v, 0]
            height = sizes[v, 1]
            if not (u >= np.float32(0.0) and r >= np.float32(0.0) and u < np.float32(width)
                    and r < np.float32(height)):
                continue
            col = int(math.floor(u))
            row = int(math.floor(r))
            if col >= width or row >= height:
                continue
            pix = offsets[v] + row * width + col
            d = depth[pix]
            if not d > np.float32(0.0):
                continue
            sdf = np.float32(d - c)
            if sdf < -trunc:
                continue
            f = np.float32(sdf / trunc)
            if f > np.float32(1.0):
                f = np.float32(1.0)
            s = np.float32(s + f)
            w = np.float32(w + np.float32(1.0))
            # a surface view: within the truncation (along the normal with use_scale)
            if (np.float32(sdf * scale[pix]) < trunc) if use_scale else (f < np.float32(1.0)):
                cr = np.float32(cr + np.float32(rgb[pix, 0]))
                cg = np.float32(cg + np.float32(rgb[pix, 1]))
                cb = np.float32(cb + np.float32(rgb[pix, 2]))
                cw = np.float32(cw + np.float32(1.0))
        sdf_sum[t] = s
        weight[t] = w
        rgb_sum[t, 0] = cr
        rgb_sum[t, 1] = cg
        rgb_sum[t, 2] = cb
        rgb_weight[t] = cw


def tsdf_integrate(depth, rgb, cams, offsets, sizes, view_range, origin, voxel, truncation, blocks, acc,
                   scale=None) -> None:
    """Add views view_range = (v0, v1) to the accumulators of the blocks `blocks` (layout.py), in place.

    depth [P] float32: every view's depth map, flattened one after another (<= 0 or masked: no
    depth); rgb [P, 3] uint8 the views' colours; cams [V, 12] float32 (layout.camera_table); offsets
    [V] int64 where view v's pixels start; sizes [V, 2] int32 (width, height); origin (3,) the
    centre of voxel g = (0, 0, 0); voxel and truncation in metres; blocks [B, 3] int32 block
    coordinates; acc: layout.empty_accumulators(B * BLOCK^3); scale [P] float32: each pixel's |n . r|
    (tsdf.DepthViews.view_scale): the view is a surface view of a voxel when (d - z) |n . r| <
    truncation, its distance along the normal (the field itself takes d - z); None: when d - z <
    truncation."""
    if cams.shape[1] != CAM_STRIDE:
        raise ValueError(f"cams: expected [V, {CAM_STRIDE}]")
    blocks = np.ascontiguousarray(blocks, np.int32).reshape(-1, 3)
    if acc["weight"].shape[0] != blocks.shape[0] * BLOCK_VOXELS:
        raise ValueError("acc: expected BLOCK^3 voxels per block")
    depth = np.ascontiguousarray(depth, np.float32)
    use_scale = scale is not None
    scale = np.ascontiguousarray(scale, np.float32) if use_scale else np.ones(1, np.float32)
    if use_scale and scale.shape != depth.shape:
        raise ValueError("scale: expected one value per depth pixel")
    _integrate(depth, scale, use_scale, np.ascontiguousarray(rgb, np.uint8),
               np.ascontiguousarray(cams, np.float32), np.ascontiguousarray(offsets, np.int64),
               np.ascontiguousarray(sizes, np.int32), int(view_range[0]), int(view_range[1]),
               np.asarray(origin, np.float32), np.float32(voxel), np.float32(truncation), blocks,
               acc["sdf_sum"], acc["weight"], acc["rgb_sum"], acc["rgb_weight"])


# ------------------------------------------------------------------------------------------------
# Marching cubes over the blocks: twins of cuda/mesh_cubes.cu's cubes_classify and cubes_emit
# ------------------------------------------------------------------------------------------------

@numba.njit(cache=True, inline="always")
def _voxel(nbr, n, i, j, k):
    # the batch voxel index of voxel (i, j, k) of block n's frame (0 .. 2 BLOCK - 1), -1 when not allocated
    o = (4 if i >= BLOCK else 0) + (2 if j >= BLOCK else 0) + (1 if k >= BLOCK else 0)
    m = nbr[n, o]
    if m < 0:
        return -1
    return m * BLOCK_VOXELS + ((i % BLOCK) * BLOCK + (j % BLOCK)) * BLOCK + (k % BLOCK)


@numba.njit(cache=True, inline="always")
def _corner(field, nbr, n, i, j, k, corners, q):
    at = _voxel(nbr, n, i + corners[q, 0], j + corners[q, 1], k + corners[q, 2])
    return np.float32(np.nan) if at < 0 else field[at]


@numba.njit(cache=True, inline="always")
def _edge_bit(c0, v, a):
    # bit a when both ends are observed and exactly one is below zero
    if c0 == c0 and v == v and ((v < np.float32(0.0)) != (c0 < np.float32(0.0))):
        return 1 << a
    return 0


@numba.njit(cache=True, parallel=True)
def _classify(field, nbr, num_cube_blocks, corners, tri_count, cases, ntri, edges):
    n_all = nbr.shape[0] * BLOCK_VOXELS
    for t in numba.prange(n_all):
        n, i, j, k = _split(t)
        # corners 0 .. 7 (mc_tables.CORNERS), scalars: an array per voxel would be a heap allocation
        c0 = _corner(field, nbr, n, i, j, k, corners, 0)
        c1 = _corner(field, nbr, n, i, j, k, corners, 1)
        c2 = _corner(field, nbr, n, i, j, k, corners, 2)
        c3 = _corner(field, nbr, n, i, j, k, corners, 3)
        c4 = _corner(field, nbr, n, i, j, k, corners, 4)
        c5 = _corner(field, nbr, n, i, j, k, corners, 5)
        c6 = _corner(field, nbr, n, i, j, k, corners, 6)
        c7 = _corner(field, nbr, n, i, j, k, corners, 7)
        edges[t] = _edge_bit(c0, c1, 0) | _edge_bit(c0, c3, 1) | _edge_bit(c0, c4, 2)   # +x, +y, +z
        whole = (n < num_cube_blocks and c0 == c0 and c1 == c1 and c2 == c2 and c3 == c3 and c4 == c4
                 and c5 == c5 and c6 == c6 and c7 == c7)
        cs = 0
        if whole:
            zero = np.float32(0.0)
            cs = ((1 if c0 < zero else 0) | (2 if c1 < zero else 0) | (4 if c2 < zero else 0)
                  | (8 if c3 < zero else 0) | (16 if c4 < zero else 0) | (32 if c5 < zero else 0)
                  | (64 if c6 < zero else 0) | (128 if c7 < zero else 0))
        cases[t] = cs
        ntri[t] = tri_count[cs]


@numba.njit(cache=True, inline="always")
def _vertex(vert_first, edges, v, a):
    # the vertex number of voxel v's +a edge: its first vertex, then one per lower axis with a vertex
    e = edges[v]
    return vert_first[v] + (e & 1 if a >= 1 else 0) + ((e >> 1) & 1 if a >= 2 else 0)


@numba.njit(cache=True, parallel=True)
def _emit(field, nbr, corners, tri_table, edge_owner, cases, edges, tri_first, vert_first, faces, vert_edge, vert_t,
          vert_voxel):
    n_all = nbr.shape[0] * BLOCK_VOXELS
    for t in numba.prange(n_all):
        n, i, j, k = _split(t)
        vi = vert_first[t]
        for a in range(3):
            if not (edges[t] >> a) & 1:
                continue
            q = 1 if a == 0 else (3 if a == 1 else 4)   # the edge's upper end: corner 1, 3 or 4
            other = _voxel(nbr, n, i + corners[q, 0], j + corners[q, 1], k + corners[q, 2])
            v0 = field[t]
            s = np.float32(v0 / np.float32(v0 - field[other]))
            vert_edge[vi] = 3 * t + a
            vert_t[vi] = s
            vert_voxel[vi] = t if s < np.float32(0.5) else other
            vi += 1
        cs = cases[t]
        f = tri_first[t]
        m = 0
        while m < 16 and tri_table[cs, m] >= 0:
            for q in range(3):
                e = tri_table[cs, m + q]
                owner = _voxel(nbr, n, i + edge_owner[e, 0], j + edge_owner[e, 1], k + edge_owner[e, 2])
                faces[f, q] = _vertex(vert_first, edges, owner, edge_owner[e, 3])
            m += 3
            f += 1


def cubes_classify(field, nbr, num_cube_blocks, cases, ntri, edges) -> None:
    """Per voxel of the batch: its cube's case and triangle count (0 unless the voxel's block is one
    of the first num_cube_blocks and all eight corners are observed) and which of its +x, +y, +z
    edges carry a vertex (bits 0, 1, 2). field [B * BLOCK^3] float32 (NaN: unobserved); nbr [B, 8]
    int32 (march.neighbour_table); outputs [B * BLOCK^3] uint8, int32, uint8, written in place."""
    from .mc_tables import CORNERS, TRI_COUNT  # noqa: PLC0415

    _classify(np.ascontiguousarray(field, np.float32), np.ascontiguousarray(nbr, np.int32), int(num_cube_blocks),
              CORNERS, TRI_COUNT, cases, ntri, edges)


def cubes_emit(field, nbr, cases, edges, tri_first, vert_first, faces, vert_edge, vert_t, vert_voxel) -> None:
    """The triangles (faces [T, 3] int64 of vertex numbers, from row tri_first[t] for voxel t's cube)
    and the vertices (from number vert_first[t] for voxel t's edges, in axis order): each one's edge
    (vert_edge [V] int64, 3 * voxel + axis), place on it (vert_t [V] float32, 0 at the lower voxel)
    and nearest voxel (vert_voxel [V] int64). Outputs written in place."""
    from .mc_tables import CORNERS, EDGE_OWNER, TRI_TABLE  # noqa: PLC0415

    _emit(np.ascontiguousarray(field, np.float32), np.ascontiguousarray(nbr, np.int32), CORNERS, TRI_TABLE,
          EDGE_OWNER, cases, edges, np.ascontiguousarray(tri_first, np.int64), np.ascontiguousarray(vert_first, np.int64),
          faces, vert_edge, vert_t, vert_voxel)
