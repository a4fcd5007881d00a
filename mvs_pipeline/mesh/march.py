"""The zero level of the fused field over the allocated blocks: marching cubes on the blocks
themselves (kernel cuda/mesh_cubes.cu or its twin in cpu.py), no dense grid.

A batch lists its owned blocks first, then its halo: the allocated blocks just above them (offsets
0/1 per axis), whose voxels close the owned blocks' upper cubes. The kernel classifies every cube
(meshed when all eight corners are observed), numbers the edges with a vertex and the triangles by
prefix sums of their counts per voxel (array code here), then writes the faces and the vertices' edges
and places. A grid edge belongs to its
lower voxel; the copies two batches make of the vertices on their shared halo are merged
(`merge_parts`), exactly.

Everything but the two kernels is array code on NumPy or CuPy alike (`xp`).
"""

from __future__ import annotations

import numpy as np

from ..gpu.loader import on_gpu, to_host
from .layout import BLOCK, BLOCK_VOXELS

_OFFSETS = np.array([((o >> 2) & 1, (o >> 1) & 1, o & 1) for o in range(8)], np.int64)
_BITS = np.array([bin(e).count("1") for e in range(8)], np.int8)   # set bits of a voxel's 3 edge flags


def block_codes(xp, blocks, base: int):
    b = blocks.astype(xp.int64)
    return (b[:, 0] * base + b[:, 1]) * base + b[:, 2]


def halo_blocks(xp, all_blocks, owned_rows, base: int):
    """Rows of `all_blocks` (sorted by code, [A, 3]) at offsets (0|1, 0|1, 0|1) from the owned rows
    (a contiguous range of rows, all_blocks[owned_rows]) that are not owned themselves."""
    codes = block_codes(xp, all_blocks, base)
    owned = all_blocks[owned_rows].astype(xp.int64)
    found = []
    for off in _OFFSETS[1:]:
        want = block_codes(xp, owned + xp.asarray(off)[None, :], base)
        at = xp.minimum(xp.searchsorted(codes, want), len(codes) - 1)
        found.append(at[codes[at] == want])
    rows = xp.unique(xp.concatenate(found))
    return rows[(rows < owned_rows.start) | (rows >= owned_rows.stop)]


def neighbour_table(xp, blocks, base: int):
    """[B, 8] int32: the row of blocks[n] + offset o (o = 4 dx + 2 dy + dz) in `blocks`, -1 if absent."""
    codes = block_codes(xp, blocks, base)
    order = xp.argsort(codes)
    sorted_codes = codes[order]
    out = xp.empty((len(blocks), 8), xp.int32)
    for o, off in enumerate(_OFFSETS):
        want = block_codes(xp, blocks.astype(xp.int64) + xp.asarray(off)[None, :], base)
        at = xp.minimum(xp.searchsorted(sorted_codes, want), len(codes) - 1)
        out[:, o] = xp.where(sorted_codes[at] == want, order[at], -1).astype(xp.int32)
    return out


def shared_blocks(xp, blocks, batch_of, base: int):
    """[B] bool: the blocks (sorted rows) whose edges a cube of another batch also uses, i.e. with a
    block of another batch at an offset (0|1, 0|1, 0|1) below them (it has them in its halo)."""
    codes = block_codes(xp, blocks, base)
    out = xp.zeros(len(blocks), bool)
    for off in _OFFSETS[1:]:
        want = block_codes(xp, blocks.astype(xp.int64) - xp.asarray(off)[None, :], base)
        at = xp.minimum(xp.searchsorted(codes, want), len(codes) - 1)
        out |= (codes[at] == want) & (batch_of[at] != batch_of)
    return out


def march_batch(xp, kernels, field, blocks, num_owned: int, base: int, shared):
    """Marching cubes of one batch: field [B * BLOCK^3] float32 (NaN unobserved), blocks [B, 3] (the
    owned rows first), shared [B] bool (shared_blocks; the halo rows True); kernels: the backend's
    module (cuda.py or cpu.py). Returns xp arrays, or None: (vertices in voxel units of the grid
    [V, 3] float64, nearest batch voxel [V] int64 (its colour), faces [T, 3] int64 of batch vertex
    numbers, key [V] int64 and merge [V] bool for merge_parts). A vertex's key is its grid edge's
    (3 x global voxel code + axis), or, when it lies exactly on a voxel (a field value of exactly 0:
    all crossing edges of that voxel end there), minus one minus that voxel's code; merge marks the
    vertices that another copy may share: those of shared blocks and those on a voxel."""
    n = len(blocks) * BLOCK_VOXELS
    nbr = neighbour_table(xp, blocks, base)
    cases = xp.empty(n, xp.uint8)
    ntri = xp.empty(n, xp.int32)
    edges = xp.empty(n, xp.uint8)
    kernels.cubes_classify(field, nbr, num_owned, cases, ntri, edges)
    tri_end = xp.cumsum(ntri.astype(xp.int64))   # (NumPy's cumsum casting as it goes is 4x slower)
    num_tris = int(tri_end[-1]) if n else 0
    if num_tris == 0:
        return None
    nvert = xp.asarray(_BITS)[edges.astype(xp.int32)]   # vertices on the voxel's edges: its edge bits set
    vert_end = xp.cumsum(nvert.astype(xp.int64))
    num_verts = int(vert_end[-1])
    faces = xp.empty((num_tris, 3), xp.int64)
    vert_edge = xp.empty(num_verts, xp.int64)
    vert_t = xp.empty(num_verts, xp.float32)
    vert_voxel = xp.empty(num_verts, xp.int64)
    kernels.cubes_emit(field, nbr, cases, edges, tri_end - ntri, vert_end - nvert, faces, vert_edge, vert_t, vert_voxel)
    del cases, ntri, edges, tri_end, nvert, vert_end
    voxel, axis = vert_edge // 3, vert_edge % 3
    row, local = voxel // BLOCK_VOXELS, voxel % BLOCK_VOXELS
    g = blocks[row].astype(xp.int64) * BLOCK + xp.stack(
        [local // (BLOCK * BLOCK), (local // BLOCK) % BLOCK, local % BLOCK], axis=1)
    step = xp.arange(3)[None, :] == axis[:, None]             # [V, 3] the edge's direction
    pos = g.astype(xp.float64) + step * vert_t.astype(xp.float64)[:, None]
    span = base * BLOCK                                       # voxels per axis, with the +1 neighbours
    code = lambda q: (q[:, 0] * span + q[:, 1]) * span + q[:, 2]   # noqa: E731
    key = xp.where(vert_t == 0, -1 - code(g), xp.where(vert_t == 1, -1 - code(g + step), 3 * code(g) + axis))
    merge = shared[row] | (vert_t == 0) | (vert_t == 1)
    # the table winds its triangles facing the corners below zero; the mesh faces the free space
    return pos, vert_voxel, xp.ascontiguousarray(faces[:, ::-1]), key, merge


def merge_parts(parts: list[tuple], xp=np):
    """One mesh from the batches' (position, colour, faces, key, merge): the vertices marked `merge`
    that share a key become one (the copies two batches make of a vertex on their shared blocks come
    from the same voxels through the same arithmetic, so they are equal bit for bit), the others are
    distinct by construction (one grid edge, one vertex, one batch); faces with a repeated corner
    dropped, vertices no face uses dropped. Linear but for a sort of the marked keys; array code on
    NumPy or CuPy alike (the first copy of a key is kept on both: their unique's return_index is the
    first occurrence). Returns (positions, faces, colours): positions and colours where the parts
    lie, faces on xp, int32 while the vertices fit (int64 beyond).

    The parts may lie on the host (tsdf.py moves each batch's there as it is made) or on xp. The
    index work (faces, the marked vertices and their keys) is done on xp, positions and colours are
    only joined and selected where they lie: on the 40 x 3200x2130 courtyard (33.6 M vertices, 61.5 M
    faces) the device then holds the int32 faces (0.74 GB) and their renumbered copies, not every
    part beside its joined copy (session 29). Empties `parts` once their arrays are joined; int32
    indices: the int64 copies of the faces were gigabytes of the TSDF's device peak (session 26)."""
    pm = xp if on_gpu(parts[0][0]) else np   # where the parts lie
    n_verts = sum(len(p[0]) for p in parts)
    itype = xp.int32 if n_verts < 2 ** 31 else xp.int64
    faces = xp.empty((sum(len(p[2]) for p in parts), 3), itype)
    marked, keys = [], []
    at, first_vertex = 0, 0
    for p in parts:
        k = len(p[2])
        faces[at:at + k] = xp.asarray(p[2]).astype(itype, copy=False)
        faces[at:at + k] += first_vertex
        rows = pm.flatnonzero(p[4])
        keys.append(xp.asarray(p[3][rows]))
        marked.append(xp.asarray(rows) + first_vertex)
        at, first_vertex = at + k, first_vertex + len(p[0])
    pos = pm.concatenate([p[0] for p in parts])
    col = pm.concatenate([p[1] for p in parts])
    parts.clear()   # the batches' own arrays go: only the joined ones are needed now
    keys, marked = xp.concatenate(keys), xp.concatenate(marked)
    same = xp.arange(n_verts, dtype=itype)
    if len(marked):
        _, first, inverse = xp.unique(keys, return_index=True, return_inverse=True)
        same[marked] = marked[first][inverse.reshape(-1)].astype(itype)
        del first, inverse
    del keys, marked
    faces = same[faces]
    del same
    faces = faces[(faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (faces[:, 0] != faces[:, 2])]
    used = xp.zeros(n_verts, bool)
    used[faces] = True
    remap = xp.cumsum(used, dtype=itype) - 1
    faces = remap[faces]
    del remap
    used = used if pm is xp else to_host(used)
    return pos[used], faces, col[used]
