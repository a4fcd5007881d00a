"""TSDF fusion of the run's depth maps, then marching cubes: the mesh stage's `tsdf` method.

Every view's depth map (the geometric maps when every view with maps has them; pixels outside
the object masks of `fusion.mask_dir` set to "no depth") is fused into a truncated signed
distance field on a regular grid of `voxel` metres: a voxel in front of a view's surface gets
min(1, sdf / truncation), one behind it by less than the truncation gets sdf / truncation, one
further behind is left alone (occluded); the field is the mean over the views that saw the voxel.
Voxels near a view's surface (|sdf| < truncation) count that view as a surface view and collect its
image colours. A voxel enters marching cubes when `min_weight` views saw it and `min_surface` views
saw a surface near it: one view's wrong depths (a PatchMatch map has a depth at nearly every pixel,
right or not) then make no surface where no other view agrees, as fusion keeps only pixels that a
neighbour agrees with.

Only voxels near a surface exist: the blocks of BLOCK^3 voxels that some depth pixel reserves
(blocks.py: every pixel, so that nothing a dense grid would mesh is missed) are allocated first, then
only those are integrated and meshed. Bounded memory: the blocks (sorted) are cut into batches whose
device arrays (BATCH_BYTES_PER_VOXEL) stay within `max_block_bytes`, each with its halo (march.py);
a batch is one kernel launch per view group (the views' maps are held in groups of at most
`max_map_bytes`, all at once when they fit), then marching cubes over its blocks on the same device;
each batch's vertices, colours and faces go to the host as they are made, and the join
(march.merge_parts) renumbers the faces on the device once the maps are gone. Vertex colours are the
mean colour of the voxel nearest each vertex.

Device memory (issue #39: 13.38 GiB of CuPy's pool on the 40 x 3200x2130 courtyard, H200, 4924a3e):
CuPy's cached free blocks are released after each phase (allocation, batches, join), so that a
phase's cache does not stack on the next one's arrays; the pool's readings after each phase and the
highest seen (`peak`) are in the counts (mesh_pool_bytes; held only grows between releases, so the
reading taken before each release and after each batch is the phase's true maximum). Expected, not
measured, for that courtyard (min_surface 2, incidence_floor 0.2, 3,049,019 blocks, 120 batches):
  allocation  < ~1 GB (blocks.py's doc: one chunk of a view, one view's blocks and the set)
  upload      maps 40 x 6.82 M px x 11 B (depth 4, colour 3, scale 4) = 3.00 GB (+ one view's scale's
              temporaries; before, the views' scales as a list beside their concatenation: +1.1 GB)
  batches     the maps, resident, 3.00 GB
              + a batch: max_block_bytes 1 GiB of owned blocks, 13.1 M voxels, with its halo
                ~16 M on average (1.91 G voxels / 120 batches) x 82 B = ~1.3 GB
              + blocks and shared flags 3.05 M x 13 B = 0.04 GB, halo search ~0.15 GB
              = ~4.5 GB in use; no part is kept (1.6-1.9 GB were), and the batches' arrays have
              about the same sizes one batch after another, so the cache is about one batch's:
              ~5 GB held; released whenever it passes 2 x max_block_bytes, so at most ~6.5 GB
  join        faces 61.5 M x 12 B = 0.74 GB, renumbered twice (+0.74 GB at a time), the marked
              vertices' keys and rows 16 B each (<= 0.54 GB), 33.6 M x 4 B twice (0.27 GB):
              at most ~2.3 GB, the maps released first
  peak        ~5 GB held (4.5 in use), against 14.37 GB held before; 8 GiB = 8.59 GB.

The kernels (cuda/mesh_tsdf.cu, cuda/mesh_cubes.cu via cuda.py) and the twins (cpu.py) compute the
same outputs; everything else is array code on CuPy or NumPy, so both backends give one mesh.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from ..errors import MVSError
from ..gpu.loader import to_host
from ..io.mesh_ply import TriangleMesh
from .blocks import allocate_blocks
from .layout import BLOCK_VOXELS, camera_table, empty_accumulators, finish, incidence_cos, vertex_colours
from .march import halo_blocks, march_batch, merge_parts, shared_blocks

log = logging.getLogger(__name__)

# a batch's bytes per voxel on the device: accumulators 24, field 4, cube case, edges, triangle and
# vertex counts 7, their prefix sums and first numbers 4 x 8, the output (~0.05 vertex of 36 bytes and
# ~0.09 face of 24 bytes a voxel on the object) ~4, and slack
BATCH_BYTES_PER_VOXEL = 82
FOOTPRINT_GRID = 256
MAP_BYTES_PER_PIXEL = 7   # a view group's depth (float32) and colour (3 x uint8) on the device; + 4 for the scale


@dataclass
class DepthViews:
    """The views' depth maps (masked) and colours, flattened one after another on the host."""
    depth: np.ndarray  # [P] float32
    rgb: np.ndarray  # [P, 3] uint8
    cams: np.ndarray  # [V, 12] float32
    offsets: np.ndarray  # [V] int64
    sizes: np.ndarray  # [V, 2] int32 (width, height)
    K: list  # per view [3, 3] float64
    R: list
    t: list
    cos: np.ndarray | None = None  # [P] float32 |n . r| from the views' normal maps (layout.normal_cos), or None

    def view_scale(self, xp, v: int, depth, floor: float):
        """[H, W] float32 (xp): view v's pixels' |n . r| from the normal maps where there are some, else
        from the depth map's slopes (layout.incidence_cos), at least floor (1 where there is no depth);
        ones at floor 1. depth: the view's map on xp."""
        if floor >= 1.0 or self.cos is None:
            return incidence_cos(xp, depth, self.K[v], floor)
        w, h = (int(s) for s in self.sizes[v])
        cos = xp.asarray(self.cos[self.offsets[v]: self.offsets[v] + w * h].reshape(h, w))
        return xp.where(depth > 0, xp.maximum(cos, xp.float32(floor)), xp.float32(1.0))

    @property
    def num_views(self) -> int:
        return int(self.cams.shape[0])

    def view_depth(self, v: int) -> np.ndarray:
        w, h = (int(s) for s in self.sizes[v])
        return self.depth[self.offsets[v]: self.offsets[v] + w * h].reshape(h, w)


def stack_views(views, depths: list, colours: list, cosines: list | None = None) -> DepthViews:
    """views: scene Views with K, R, t; depths [H, W] float32 (<= 0: none); colours [H, W, 3] uint8 RGB;
    cosines [H, W] float32 (layout.normal_cos of the views' normal maps) or None."""
    sizes = np.array([[d.shape[1], d.shape[0]] for d in depths], np.int32).reshape(-1, 2)
    counts = sizes[:, 0].astype(np.int64) * sizes[:, 1]
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    depth = np.concatenate([np.asarray(d, np.float32).ravel() for d in depths]) if depths else np.zeros(0, np.float32)
    depth[~np.isfinite(depth)] = 0.0
    rgb = (np.concatenate([np.asarray(c, np.uint8).reshape(-1, 3) for c in colours]) if colours
           else np.zeros((0, 3), np.uint8))
    cos = np.concatenate([np.asarray(c, np.float32).ravel() for c in cosines]) if cosines and depths else None
    return DepthViews(depth, rgb, camera_table(views), offsets, sizes, [v.K for v in views], [v.R for v in views],
                      [v.t for v in views], cos)


def pixel_footprint(dv: DepthViews) -> float:
    """Median over the views of (median valid depth / focal length): metres one pixel spans on the
    surface, head on. A view's median is taken over a grid of at least FOOTPRINT_GRID pixels a side
    (all of a 320x240 map, every 8th row and column of a 3200x2130 one: a median of 6.8 M depths is
    0.1-0.6 s on the host, 40 of them seconds; the grid's median is within ~0.2 % of it)."""
    per_view = []
    for v in range(dv.num_views):
        d = dv.view_depth(v)
        step = max(1, min(d.shape) // FOOTPRINT_GRID)
        d = d[::step, ::step]
        valid = d[d > 0]
        if len(valid):
            f = 0.5 * (float(dv.K[v][0, 0]) + float(dv.K[v][1, 1]))
            per_view.append(float(np.median(valid)) / f)
    if not per_view:
        raise MVSError("mesh: the depth maps hold no valid depth")
    return float(np.median(per_view))


def tsdf_mesh(dv: DepthViews, voxel: float, truncation: float, *, min_weight: float = 1.0, min_surface: float = 1.0,
              max_map_bytes: int = 7 << 29, max_block_bytes: int = 1 << 30, incidence_floor: float = 1.0,
              backend: str = "cpu") -> tuple[TriangleMesh, dict]:
    """The mesh of the depth maps' fused TSDF, and counts (blocks, voxels, batches, seconds).
    incidence_floor < 1: a view is a surface view of a voxel (the min_surface count) when (d - z) |n . r|
    < truncation, |n . r| of its pixel at least this (DepthViews.view_scale): the distance along the
    surface's normal; 1: when d - z < truncation, the projective distance. The field takes d - z."""
    if dv.num_views == 0 or not np.any(dv.depth > 0):
        raise MVSError("mesh (tsdf): the depth maps hold no valid depth")
    t0 = time.perf_counter()
    if backend == "cuda":
        from ..gpu.loader import import_cupy  # noqa: PLC0415
        from . import cuda as kernels  # noqa: PLC0415

        xp = import_cupy()
    else:
        kernels = _twin()
        xp = np
    origin, blocks = allocate_blocks(xp, dv, voxel, truncation, int(min_surface), incidence_floor)
    base = int(blocks.max()) + 2   # block codes stay distinct for the +1 neighbours
    per_batch = max(1, max_block_bytes // (BATCH_BYTES_PER_VOXEL * BLOCK_VOXELS))
    shared = shared_blocks(xp, blocks, xp.arange(len(blocks)) // per_batch, base)
    seconds_alloc = time.perf_counter() - t0
    pool = {}
    _read_pool(xp, pool, "after_alloc", keep_cached=0)   # the allocation's temporaries' cache goes
    groups = _view_groups(dv, max_map_bytes, MAP_BYTES_PER_PIXEL + (4 if incidence_floor < 1.0 else 0))
    resident = _upload(xp, dv, *groups[0], incidence_floor) if len(groups) == 1 else None
    if resident is not None:   # the scales' temporaries (per view) go; the maps' size is in the reading
        _read_pool(xp, pool, "after_upload", keep_cached=0)
    o32 = origin.astype(np.float32)
    parts, voxels, batches, seconds_march, releases = [], 0, 0, 0.0, 0
    for start in range(0, len(blocks), per_batch):
        owned = slice(start, min(start + per_batch, len(blocks)))
        halo = halo_blocks(xp, blocks, owned, base)
        batch = xp.concatenate([blocks[owned], blocks[halo]])
        acc = empty_accumulators(xp, len(batch) * BLOCK_VOXELS)
        voxels += len(batch) * BLOCK_VOXELS
        batches += 1
        for v0, v1 in groups:
            arrays = resident if resident is not None else _upload(xp, dv, v0, v1, incidence_floor)
            kernels.tsdf_integrate(arrays["depth"], arrays["rgb"], arrays["cams"], arrays["offsets"], arrays["sizes"],
                                   (0, v1 - v0), o32, voxel, truncation, batch, acc, scale=arrays["scale"])
        tm = time.perf_counter()
        field = finish(xp, acc, min_weight, min_surface)
        part = march_batch(xp, kernels, field, batch, owned.stop - owned.start, base,
                           xp.concatenate([shared[owned], xp.ones(len(halo), bool)]))
        if part is not None:
            # to the host, compact: world float32 places (the copies of a shared vertex are still equal
            # bit for bit), batch-local int32 faces. On the device the parts (1.6-1.9 GB on the courtyard)
            # grew beside the maps and split the cache that every later batch's arrays needed afresh
            pos, nearest, faces, key, merge = part
            world = (xp.asarray(origin) + pos * voxel).astype(xp.float32)
            parts.append(tuple(to_host(a) for a in (world, vertex_colours(xp, acc, nearest), faces.astype(xp.int32),
                                                    key, merge)))
            del pos, nearest, faces, part, world
        del acc, field
        # a batch's arrays find the last batch's cached blocks; more cache than two batches' is fragments
        releases += _read_pool(xp, pool, keep_cached=2 * max_block_bytes)
        seconds_march += time.perf_counter() - tm
    if not parts:
        raise MVSError("mesh (tsdf): the fused field has no surface (no voxel changes sign); check the depth maps "
                       "and mesh.voxel_size")
    tm = time.perf_counter()
    n_blocks = int(len(blocks))
    _read_pool(xp, pool, "after_batches")
    # the maps (3.0 GB at 40 x 3200x2130, 11 bytes a pixel) are not needed for the join: `arrays` held
    # them too (the join's reading at 4924a3e, 4.24 GB in use, is the maps' 3.0 and the mesh's 1.24)
    del resident, arrays, blocks, shared, batch, halo
    _read_pool(xp, pool, keep_cached=0)
    verts, faces, colours = merge_parts(parts, xp)   # empties `parts` as it goes
    faces = to_host(faces.astype(xp.int32, copy=False))
    _read_pool(xp, pool, "after_join", keep_cached=0)
    mesh = TriangleMesh(to_host(verts), faces, to_host(colours))
    seconds_join = time.perf_counter() - tm
    counts = {"mesh_blocks": n_blocks, "mesh_voxels": voxels, "mesh_batches": batches,
              "mesh_view_groups": len(groups), "mesh_alloc_seconds": round(seconds_alloc, 3),
              "mesh_march_seconds": round(seconds_march, 3), "mesh_join_seconds": round(seconds_join, 3),
              "mesh_tsdf_seconds": round(time.perf_counter() - t0, 3)}
    if xp is not np:   # where the device memory went (the 40 x 3200x2130 courtyard's pool: 13.38 GiB, 4924a3e)
        pool["peak"] = pool.pop("peak")   # last, after the phases' readings
        counts.update(mesh_pool_bytes=pool, mesh_pool_batch_releases=releases)
    return mesh, counts


def _read_pool(xp, readings: dict, name: str | None = None, keep_cached: int | None = None) -> int:
    """On CuPy: note the default pool's bytes in use and held (in use + cached) now under `name`, and
    the highest of each read so far under "peak" (held only grows until the cache is released, so
    its reading before each release is that stretch's maximum; used's is the highest reading only);
    then free the pool's cached blocks where they exceed keep_cached bytes (what a phase's temporaries
    left: the next phase's arrays have other sizes and would add to it, not reuse it). Returns 1
    when it released them, else 0 (and on NumPy, where it does nothing)."""
    if xp is np:
        return 0
    pool = xp.get_default_memory_pool()
    now = {"used": int(pool.used_bytes()), "held": int(pool.total_bytes())}
    if name is not None:
        readings[name] = now
    peak = readings.setdefault("peak", {"used": 0, "held": 0})
    for key in now:
        peak[key] = max(peak[key], now[key])
    if keep_cached is None or now["held"] - now["used"] <= keep_cached:
        return 0
    pool.free_all_blocks()
    return 1


def _twin():
    from . import cpu  # noqa: PLC0415 (Numba: the CUDA path never imports it)

    return cpu


def _view_groups(dv: DepthViews, max_map_bytes: int, per_pixel: int = 7) -> list[tuple[int, int]]:
    """Consecutive view ranges whose maps (per_pixel bytes: depth 4, colour 3, with incidence_floor < 1 the
    scale 4) fit in max_map_bytes (one view at least)."""
    groups, start, used = [], 0, 0
    for v in range(dv.num_views):
        b = per_pixel * int(dv.sizes[v, 0]) * int(dv.sizes[v, 1])
        if v > start and used + b > max_map_bytes:
            groups.append((start, v))
            start, used = v, 0
        used += b
    groups.append((start, dv.num_views))
    return groups


def _upload(xp, dv: DepthViews, v0: int, v1: int, incidence_floor: float = 1.0) -> dict:
    """The maps of views v0 .. v1-1 as (xp) arrays, offsets from that group's first pixel, with each
    pixel's scale (DepthViews.view_scale, made on the device) when incidence_floor < 1, else None."""
    p0 = int(dv.offsets[v0])
    p1 = int(dv.offsets[v1 - 1]) + int(dv.sizes[v1 - 1, 0]) * int(dv.sizes[v1 - 1, 1])
    depth = xp.asarray(dv.depth[p0:p1])
    # written in place: a list of the views' scales and their concatenation were twice the scales'
    # bytes (2.2 GB at 40 x 3200x2130), and the list's pieces stayed in the pool's cache
    scale = xp.empty(p1 - p0, xp.float32) if incidence_floor < 1.0 else None
    for v in range(v0, v1) if scale is not None else ():
        w, h = (int(s) for s in dv.sizes[v])
        a = int(dv.offsets[v]) - p0
        scale[a: a + w * h] = dv.view_scale(xp, v, depth[a: a + w * h].reshape(h, w), incidence_floor).ravel()
    return {"depth": depth, "scale": scale,
            "rgb": xp.asarray(np.ascontiguousarray(dv.rgb[p0:p1])),
            "cams": xp.asarray(np.ascontiguousarray(dv.cams[v0:v1])),
            "offsets": xp.asarray(dv.offsets[v0:v1] - p0), "sizes": xp.asarray(np.ascontiguousarray(dv.sizes[v0:v1]))}
