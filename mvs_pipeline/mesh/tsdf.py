"""TSDF fusion of the run's depth maps, then marching cubes: the mesh stage's `tsdf` method.

Every view's depth map (the geometric maps when every view with maps has them; pixels outside
the object masks of `fusion.mask_dir` set to "no depth") is fused into a truncated signed
distance field on a regular grid of `voxel` metres: a voxel in front of a view's surface gets
min(1, sdf / truncation), one behind it by less than the truncation gets sdf / truncation, one
further behind is left alone (occluded); the field is the mean over the views that saw the voxel.
Voxels near a view's surface (|sdf| < truncation) collect its image colours.

Bounded memory: the grid is cut into tiles of `tile` voxels a side that share their boundary
plane, and only tiles that some depth sample (every `sample_stride`-th pixel of every view)
comes within the truncation of are visited, one at a time: a tile's accumulators are 24 bytes
per voxel (48 MiB at 128^3), the views' maps are held in groups of at most `max_map_bytes`
(all at once when they fit; the kernel adds a view range to the accumulators). Each tile's field
is finished (layout.finish), brought to the host (4 bytes a voxel) and meshed with scikit-image's
marching cubes over the box of its voxels near the surface (|tsdf| < 1), keeping the vertices whose grid edge joins two observed voxels (an unobserved voxel has no sign:
without that the inner edge of the observed band would become a surface). Vertices on the shared planes are
welded; vertex colours are the mean colour of the voxel nearest to each vertex.

The kernel (cuda/mesh_tsdf.cu via cuda.py) and the twin (cpu.py) add the same sums; everything
else is array code on CuPy or NumPy.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from ..errors import MVSError
from ..io.mesh_ply import TriangleMesh
from .layout import camera_table, empty_accumulators, finish

log = logging.getLogger(__name__)

ACC_BYTES_PER_VOXEL = 24


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

    @property
    def num_views(self) -> int:
        return int(self.cams.shape[0])

    def view_depth(self, v: int) -> np.ndarray:
        w, h = (int(s) for s in self.sizes[v])
        return self.depth[self.offsets[v]: self.offsets[v] + w * h].reshape(h, w)


def stack_views(views, depths: list, colours: list) -> DepthViews:
    """views: scene Views with K, R, t; depths [H, W] float32 (<= 0: none); colours [H, W, 3] uint8 RGB."""
    sizes = np.array([[d.shape[1], d.shape[0]] for d in depths], np.int32).reshape(-1, 2)
    counts = sizes[:, 0].astype(np.int64) * sizes[:, 1]
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    depth = np.concatenate([np.asarray(d, np.float32).ravel() for d in depths]) if depths else np.zeros(0, np.float32)
    depth[~np.isfinite(depth)] = 0.0
    rgb = (np.concatenate([np.asarray(c, np.uint8).reshape(-1, 3) for c in colours]) if colours
           else np.zeros((0, 3), np.uint8))
    return DepthViews(depth, rgb, camera_table(views), offsets, sizes, [v.K for v in views], [v.R for v in views],
                      [v.t for v in views])


def pixel_footprint(dv: DepthViews) -> float:
    """Median over the views of (median valid depth / focal length): metres one pixel spans on the
    surface, head on."""
    per_view = []
    for v in range(dv.num_views):
        d = dv.view_depth(v)
        valid = d[d > 0]
        if len(valid):
            f = 0.5 * (float(dv.K[v][0, 0]) + float(dv.K[v][1, 1]))
            per_view.append(float(np.median(valid)) / f)
    if not per_view:
        raise MVSError("mesh: the depth maps hold no valid depth")
    return float(np.median(per_view))


def depth_samples(dv: DepthViews, stride: int) -> np.ndarray:
    """[M, 3] float64 world points of every `stride`-th pixel (rows and columns) with depth."""
    out = []
    for v in range(dv.num_views):
        d = dv.view_depth(v)[::stride, ::stride]
        rows, cols = np.nonzero(d > 0)
        if len(rows) == 0:
            continue
        z = d[rows, cols].astype(np.float64)
        u = (cols * stride + 0.5) * z
        w = (rows * stride + 0.5) * z
        cam = np.linalg.solve(np.asarray(dv.K[v], np.float64), np.stack([u, w, z]))  # [3, M]
        R, t = np.asarray(dv.R[v], np.float64), np.asarray(dv.t[v], np.float64).reshape(3, 1)
        out.append((R.T @ (cam - t)).T)
    if not out:
        raise MVSError("mesh: the depth maps hold no valid depth")
    return np.concatenate(out)


def _unique_rows(keys: np.ndarray) -> np.ndarray:
    """Unique rows of [N, 3] non-negative int64 keys (sorted), through one int64 code per row."""
    if len(keys) == 0:
        return keys.reshape(0, 3)
    span = keys.max(axis=0) + 1
    code = (keys[:, 0] * span[1] + keys[:, 1]) * span[2] + keys[:, 2]
    u = np.unique(code)
    k = u % span[2]
    j = (u // span[2]) % span[1]
    i = u // (span[1] * span[2])
    return np.stack([i, j, k], axis=1)


def plan_tiles(samples: np.ndarray, voxel: float, reach: float, tile: int) -> tuple[np.ndarray, np.ndarray]:
    """(origin (3,) float64: centre of global voxel (0, 0, 0); [T, 3] int64 tile coordinates, sorted).
    Tile (a, b, c) holds global voxels a * (tile - 1) .. a * (tile - 1) + tile - 1 per axis, so
    neighbouring tiles share one plane; a tile is kept when a sample lies within `reach` (per
    axis) of a voxel of it (the truncation plus the gap between samples). The samples are first
    merged into cells of half the reach or half a tile (40 x 3200x2130 maps give ~17 M samples),
    whose centres then reach one cell further."""
    margin = reach + 2 * voxel
    origin = samples.min(axis=0) - margin
    step = tile - 1
    cell = 0.5 * min(reach, step * voxel)
    cells = _unique_rows(np.floor((samples - origin) / cell).astype(np.int64))
    centres = origin + (cells + 0.5) * cell
    reach = reach + cell
    # the cube of half-side `reach` around a centre: its corners, and points at most a tile apart
    # between them, so that no tile it crosses is skipped
    offsets = np.linspace(-reach, reach, int(np.ceil(2 * reach / (step * voxel))) + 1)
    keys = []
    for dx in offsets:
        for dy in offsets:
            for dz in offsets:
                g = np.floor((centres + (dx, dy, dz) - origin) / voxel).astype(np.int64)
                keys.append(_unique_rows(np.floor_divide(np.maximum(g, 0), step)))
    return origin, _unique_rows(np.concatenate(keys))


def _twin():
    from . import cpu  # noqa: PLC0415 (Numba: the CUDA path never imports it)

    return cpu


def near_surface_box(tsdf: np.ndarray):
    """(lo, hi) voxel bounds (inclusive lo, exclusive hi) of the observed voxels with |tsdf| < 1,
    grown by one voxel (the cubes around them); None when there is none: marching cubes then
    scans only that box."""
    near = np.abs(tsdf) < 1.0   # False for NaN (unobserved)
    if not near.any():
        return None
    lo, hi = [], []
    for axis in range(3):
        other = tuple(i for i in range(3) if i != axis)
        idx = np.flatnonzero(near.any(axis=other))
        lo.append(max(int(idx[0]) - 1, 0))
        hi.append(min(int(idx[-1]) + 2, tsdf.shape[axis]))
    return np.array(lo), np.array(hi)


def march_tile(tsdf: np.ndarray):
    """(vertices [n, 3] float64 in voxel units of the tile, faces [m, 3] int64, voxel [n, 3] int64
    nearest each vertex) of the zero level of one tile's field (NaN = unobserved), over grid edges
    whose two voxels were observed; None when there is none."""
    from skimage.measure import marching_cubes  # noqa: PLC0415

    box = near_surface_box(tsdf)
    if box is None:
        return None
    lo, hi = box
    if np.any(hi - lo < 2):
        return None
    sub = tsdf[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]
    observed = ~np.isnan(sub)
    inside = sub[observed]
    if not (inside.min() < 0.0 < inside.max()):
        return None
    field = np.where(observed, sub, np.float32(1.0))
    try:
        verts, faces, _, _ = marching_cubes(field, level=0.0, mask=observed, allow_degenerate=False,
                                            gradient_direction="descent")
    except (ValueError, RuntimeError):  # no crossing inside the mask
        return None
    # a vertex lies on a grid edge: both of the edge's voxels must be observed (scikit-image's mask,
    # the observed voxels, selects cubes by one corner only, so a cube reaching into unobserved
    # voxels, whose field reads 1, would put a surface on the inner edge of the observed band)
    top = np.array(sub.shape) - 1
    a = np.clip(np.floor(verts).astype(np.int64), 0, top)
    b = np.clip(np.ceil(verts).astype(np.int64), 0, top)
    good = observed[a[:, 0], a[:, 1], a[:, 2]] & observed[b[:, 0], b[:, 1], b[:, 2]]
    faces = faces[good[faces].all(axis=1)]
    if len(faces) == 0:
        return None
    used = np.unique(faces)
    remap = np.full(len(verts), -1, np.int64)
    remap[used] = np.arange(len(used))
    verts = verts[used].astype(np.float64) + lo
    nearest = np.clip(np.rint(verts).astype(np.int64), 0, np.array(tsdf.shape) - 1)
    return verts, remap[faces].astype(np.int64), nearest


def weld(vertices: np.ndarray, faces: np.ndarray, colours: np.ndarray, quantum: float):
    """Merge vertices closer than `quantum` on a grid (the copies on tiles' shared planes); drop
    faces that collapse."""
    if len(vertices) == 0:
        return vertices, faces, colours
    q = np.rint((vertices - vertices.min(axis=0)) / quantum).astype(np.int64)
    _, first, inverse = np.unique(q, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    f = inverse[faces]
    keep = (f[:, 0] != f[:, 1]) & (f[:, 1] != f[:, 2]) & (f[:, 0] != f[:, 2])
    return vertices[first], f[keep], colours[first]


def tsdf_mesh(dv: DepthViews, voxel: float, truncation: float, *, min_weight: float = 1.0, tile: int = 128,
              sample_stride: int = 4, max_map_bytes: int = 2 << 30, backend: str = "cpu") -> tuple[TriangleMesh, dict]:
    """The mesh of the depth maps' fused TSDF, and counts (tiles, voxels, seconds)."""
    if dv.num_views == 0 or not np.any(dv.depth > 0):
        raise MVSError("mesh (tsdf): the depth maps hold no valid depth")
    if tile < 8:
        raise ValueError("tile must be at least 8 voxels")
    t0 = time.perf_counter()
    samples = depth_samples(dv, sample_stride)
    # samples `sample_stride` px apart lie up to ~2 strides of footprint apart on oblique surfaces
    gap = 2.0 * sample_stride * pixel_footprint(dv)
    origin, tiles = plan_tiles(samples, voxel, truncation + gap, tile)
    del samples
    if backend == "cuda":
        from ..gpu.loader import import_cupy  # noqa: PLC0415
        from .cuda import tsdf_integrate  # noqa: PLC0415

        xp = import_cupy()
    else:
        tsdf_integrate = _twin().tsdf_integrate
        xp = np
    groups = _view_groups(dv, max_map_bytes)
    resident = None
    if len(groups) == 1:
        resident = _upload(xp, dv, *groups[0])
    shape = (tile, tile, tile)
    parts, vertex_count, seconds_march = [], 0, 0.0
    for a in tiles:
        tile_origin = origin + a * (tile - 1) * voxel
        acc = empty_accumulators(xp, shape)
        for v0, v1 in groups:
            arrays = resident if resident is not None else _upload(xp, dv, v0, v1)
            tsdf_integrate(arrays["depth"], arrays["rgb"], arrays["cams"], arrays["offsets"], arrays["sizes"],
                           (0, v1 - v0), tile_origin.astype(np.float32), voxel, truncation, shape, acc)
        field, rgb = finish(xp, acc, shape, min_weight)
        del acc
        tm = time.perf_counter()
        part = march_tile(field if xp is np else xp.asnumpy(field))
        seconds_march += time.perf_counter() - tm
        if part is not None:
            verts, faces, nearest = part
            at = xp.asarray(nearest)
            colours = rgb[at[:, 0], at[:, 1], at[:, 2]]   # the mean colour of the voxel nearest each vertex
            colours = np.clip(colours if xp is np else xp.asnumpy(colours), 0, 255)
            parts.append((tile_origin + verts * voxel, faces + vertex_count, (colours + 0.5).astype(np.uint8)))
            vertex_count += len(verts)
    if not parts:
        raise MVSError("mesh (tsdf): the fused field has no surface (no voxel changes sign); check the depth maps "
                       "and mesh.voxel_size")
    verts = np.concatenate([p[0] for p in parts])
    faces = np.concatenate([p[1] for p in parts])
    colours = np.concatenate([p[2] for p in parts])
    verts, faces, colours = weld(verts, faces, colours, voxel * 1e-3)
    mesh = TriangleMesh(verts.astype(np.float32), faces.astype(np.int32), colours)
    counts = {"mesh_tiles": int(len(tiles)), "mesh_voxels": int(len(tiles)) * tile ** 3,
              "mesh_view_groups": len(groups), "mesh_march_seconds": round(seconds_march, 3),
              "mesh_tsdf_seconds": round(time.perf_counter() - t0, 3)}
    return mesh, counts


def _view_groups(dv: DepthViews, max_map_bytes: int) -> list[tuple[int, int]]:
    """Consecutive view ranges whose maps (4 + 3 bytes a pixel) fit in max_map_bytes (one view at least)."""
    groups, start, used = [], 0, 0
    for v in range(dv.num_views):
        b = 7 * int(dv.sizes[v, 0]) * int(dv.sizes[v, 1])
        if v > start and used + b > max_map_bytes:
            groups.append((start, v))
            start, used = v, 0
        used += b
    groups.append((start, dv.num_views))
    return groups


def _upload(xp, dv: DepthViews, v0: int, v1: int) -> dict:
    """The maps of views v0 .. v1-1 as (xp) arrays, offsets from that group's first pixel."""
    p0 = int(dv.offsets[v0])
    p1 = int(dv.offsets[v1 - 1]) + int(dv.sizes[v1 - 1, 0]) * int(dv.sizes[v1 - 1, 1])
    return {"depth": xp.asarray(dv.depth[p0:p1]), "rgb": xp.asarray(np.ascontiguousarray(dv.rgb[p0:p1])),
            "cams": xp.asarray(np.ascontiguousarray(dv.cams[v0:v1])),
            "offsets": xp.asarray(dv.offsets[v0:v1] - p0), "sizes": xp.asarray(np.ascontiguousarray(dv.sizes[v0:v1]))}
