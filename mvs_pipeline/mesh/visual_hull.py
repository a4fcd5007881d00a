"""The object's visual hull as oriented points that close a Poisson mesh (`mesh.closed`, with the object masks
as silhouettes: fusion.mask_silhouettes and fusion.mask_dir).

Why: the fused cloud covers what the views saw; an object's underside (DTU scan 24 stands on a table) and
what every view missed have no points. Poisson then either leaves those parts open (trimmed) or closes them
with a free surface that balloons past the silhouettes (untrimmed: of DTU scan 24's untrimmed mesh at 400 px
only 56 % of the surface lay inside every mask, CPU, session 27). The visual hull, the space whose every
point projects inside the object's mask in each view that sees it (fusion/silhouettes.py's check), bounds
the object; its surface, where no fused point lies near it, is given to Poisson as extra oriented points,
so the solve closes the mesh along the hull instead of ballooning.

Grid: `cells` cells along the longest side of the cloud's bounding box, `PAD_CELLS` more on every side (the
hull below a table-top object reaches down to that cap). A cell is inside when its centre passes the
silhouette check. Its surface: scikit-image's marching cubes on the occupancy eroded by INSET_CELLS and smoothed
by a Gaussian of one cell (a staircase of cubes gives normals of only six directions), at 0.5; normals point
outwards. Hull points within `keep_away` cells of a fused point are dropped: there the cloud says where the
surface is.
So are hull points that a view saw through (its depth map holds a surface more than FREE_MARGIN_CELLS
behind the point at its pixel): the hull is loose over concavities and, with coarse masks, around the
object, and points there, far from the cloud, would pull the surface off the seen one. What is left is
what no view saw: the underside, the gaps that every view missed.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..gpu.loader import to_host

log = logging.getLogger(__name__)

# 320, measured (DTU scan 24 at 400x300, CPU, with the pull below; share of the closed mesh's surface inside
# every mask): 160 cells (2.66 mm at DTU's full size) 0.9805, 320 (1.33 mm) 0.9884; the hull's points are
# denser, so is Poisson's octree there, and its triangles follow the hull more closely. The stage took 283 s
# on 2 cores against 100 s (the occupancy: 33 M cells x 49 views; CuPy does it on the GPU)
HULL_CELLS = 320      # cells along the cloud's longest side
PAD_CELLS = 3         # empty room around the cloud, so that the hull closes inside the grid
INSET_CELLS = 1       # the hull's points sit this far inside its boundary (the masks' precision)
KEEP_AWAY = 2         # cells: hull points this near a fused point are left out
FREE_MARGIN_CELLS = 2  # a map's depth this far behind a hull point means the view saw through it
# 16 quarter cells, measured (DTU scan 24 at 400x300, CPU, the closed mesh's surface inside every mask): no
# pull 0.953, 8 -> 0.976, 16 -> 0.981, 48 -> 0.962 (far pulls stretch faces across the outline); one more step
# for the corners of faces whose centroid is outside, four rounds after 16: 0.974
PULL_STEPS = 16       # a vertex off a silhouette is moved inwards by up to this many quarter cells
CHUNK_CELLS = 1 << 20  # cell centres checked at once (the check itself batches points x views)


def hull_grid(cloud_xyz: np.ndarray, cells: int = HULL_CELLS) -> tuple[np.ndarray, float, tuple[int, int, int]]:
    """(origin [3] float64 of the grid's first cell corner, cell size, cells along x, y, z) around the cloud."""
    lo = cloud_xyz.min(axis=0).astype(np.float64)
    hi = cloud_xyz.max(axis=0).astype(np.float64)
    cell = float((hi - lo).max()) / cells
    if not cell > 0:
        raise ValueError("the cloud has no extent")
    shape = tuple(int(np.ceil((hi[k] - lo[k]) / cell)) + 1 + 2 * PAD_CELLS for k in range(3))
    return lo - PAD_CELLS * cell, cell, shape


def occupancy(check, origin: np.ndarray, cell: float, shape: tuple[int, int, int]) -> np.ndarray:
    """[X, Y, Z] bool: the cells whose centre passes the silhouette check (check.inside, NumPy or CuPy)."""
    xp = check.xp
    total = shape[0] * shape[1] * shape[2]
    inside = np.empty(total, bool)
    for start in range(0, total, CHUNK_CELLS):
        idx = np.arange(start, min(total, start + CHUNK_CELLS))
        ijk = np.stack(np.unravel_index(idx, shape), axis=1)
        centres = origin + (ijk + 0.5) * cell
        inside[start: start + len(idx)] = np.asarray(to_host(check.inside(xp.asarray(centres))), bool)
    return inside.reshape(shape)


def read_view_maps(scene, stereo_dir) -> list[tuple[object, np.ndarray]]:
    """(view, depth [H, W] float32, 0 = none) of every view with a depth map in stereo_dir/depth_maps (the
    type fusion reads: geometric where every view has one); [] without maps."""
    from ..fusion.inputs import map_path, resolve_map_type  # noqa: PLC0415
    from ..io.colmap_maps import read_depth_map  # noqa: PLC0415

    stereo_dir = Path(stereo_dir)
    if not (stereo_dir / "depth_maps").is_dir():
        return []
    kind = resolve_map_type(scene, stereo_dir, "auto")
    maps = []
    for view in scene.views:
        path = map_path(stereo_dir, "depth_maps", view.name, kind)
        if path.is_file():
            depth = read_depth_map(path)
            if depth.shape == (view.height, view.width):
                maps.append((view, np.where(np.isfinite(depth), depth, 0.0).astype(np.float32)))
    return maps


def seen_through(xyz: np.ndarray, maps, margin: float) -> np.ndarray:
    """[M] bool: some view's depth map has a surface more than `margin` behind the point at the point's
    pixel (the view saw through it: free space). maps: read_view_maps."""
    free = np.zeros(len(xyz), bool)
    X = np.asarray(xyz, np.float64)
    for view, depth in maps:
        uv, z = view.project(X)
        j = np.floor(uv[:, 0])
        i = np.floor(uv[:, 1])
        rows = np.flatnonzero((z > 0) & (j >= 0) & (j < view.width) & (i >= 0) & (i < view.height))
        d = depth[i[rows].astype(np.int64), j[rows].astype(np.int64)]
        free[rows] |= (d > 0) & (d > z[rows] + margin)
    return free


def hull_points(cloud_xyz: np.ndarray, check, cells: int = HULL_CELLS, keep_away: int = KEEP_AWAY,
                maps=()) -> tuple[np.ndarray, np.ndarray, dict]:
    """(xyz [M, 3] float32, outward normals [M, 3] float32, counts) on the visual hull of the masks in `check`
    (fusion.silhouettes.SilhouetteCheck), farther than keep_away cells from every point of cloud_xyz and
    not seen through by any of the depth maps in `maps` (read_view_maps)."""
    from scipy import ndimage  # noqa: PLC0415
    from skimage.measure import marching_cubes  # noqa: PLC0415

    origin, cell, shape = hull_grid(cloud_xyz, cells)
    occ = occupancy(check, origin, cell, shape)
    counts = {"mesh_hull_cell": round(cell, 6), "mesh_hull_grid": list(shape), "mesh_hull_cells_inside": int(occ.sum())}
    if not occ.any():
        return np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32), {**counts, "mesh_hull_points": 0}
    # the 0.5 level of the smoothed occupancy runs along the hull's boundary, half of it outside the
    # silhouettes; one cell of erosion first puts the points just inside
    smooth = ndimage.gaussian_filter(ndimage.binary_erosion(occ, iterations=INSET_CELLS).astype(np.float32), sigma=1.0)
    # the grid's outer layer is empty (PAD_CELLS), so the level set closes inside it
    verts, _, normals, _ = marching_cubes(smooth, level=0.5, spacing=(cell, cell, cell))
    # scikit-image's normals point down the field's gradient (gradient_direction "descent"): out of the object
    xyz = verts + origin + 0.5 * cell   # the field's samples sit at the cells' centres
    near = np.zeros(shape, bool)
    ijk = np.floor((cloud_xyz.astype(np.float64) - origin) / cell).astype(np.int64)
    ok = np.all((ijk >= 0) & (ijk < np.array(shape)), axis=1)
    near[tuple(ijk[ok].T)] = True
    if keep_away > 0:
        near = ndimage.binary_dilation(near, iterations=keep_away)
    vijk = np.clip(np.floor((xyz - origin) / cell).astype(np.int64), 0, np.array(shape) - 1)
    keep = ~near[tuple(vijk.T)]
    free = seen_through(xyz, maps, FREE_MARGIN_CELLS * cell) if len(maps) else np.zeros(len(xyz), bool)
    counts.update(mesh_hull_surface_points=len(xyz), mesh_hull_seen_through=int((keep & free).sum()),
                  mesh_hull_maps=len(maps))
    keep &= ~free
    counts["mesh_hull_points"] = int(keep.sum())
    log.info("mesh: visual hull of %d cells of %.4g m: %d of its %d surface points away from the cloud and unseen "
             "(%d depth maps)", int(occ.sum()), cell, int(keep.sum()), len(xyz), len(maps))
    return xyz[keep].astype(np.float32), normals[keep].astype(np.float32), counts


def boundary_edges(faces: np.ndarray) -> int:
    """Edges that only one face uses: 0 for a closed (watertight) mesh."""
    if len(faces) == 0:
        return 0
    e = np.sort(np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]).astype(np.int64), axis=1)
    key = e[:, 0] * (int(e.max()) + 1) + e[:, 1]
    _, n = np.unique(key, return_counts=True)
    return int((n == 1).sum())


def vertex_normals(verts: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """[V, 3] float64 unit normals: the area-weighted sum of each vertex's faces' normals (their winding)."""
    v = np.asarray(verts, np.float64)
    f = np.asarray(faces, np.int64)
    fn = np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]])   # length = twice the area
    n = np.zeros_like(v)
    for k in range(3):
        np.add.at(n, f[:, k], fn)
    return n / np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-30)


def pull_inside(mesh, check, step: float, max_steps: int = PULL_STEPS):
    """(the mesh with each vertex that falls on background in some view moved inwards along its normal, in
    steps of `step`, to the first place that passes the silhouette check (at most max_steps; else left where
    it was), counts). The faces stay as they are, so a closed mesh stays closed."""
    from ..io.mesh_ply import TriangleMesh  # noqa: PLC0415

    xp = check.xp
    verts = np.array(mesh.vertices, np.float64)
    outside = np.flatnonzero(~np.asarray(to_host(check.inside(xp.asarray(verts))), bool))
    counts = {"mesh_vertices_outside": int(len(outside)), "mesh_vertices_pulled": 0}
    if len(outside) == 0:
        return mesh, counts
    inward = -vertex_normals(verts, mesh.faces)[outside]
    start = verts[outside]
    moved = np.zeros(len(outside), bool)
    for k in range(1, max_steps + 1):
        todo = np.flatnonzero(~moved)
        if len(todo) == 0:
            break
        cand = start[todo] + inward[todo] * (k * step)
        ok = np.asarray(to_host(check.inside(xp.asarray(cand))), bool)
        verts[outside[todo[ok]]] = cand[ok]
        moved[todo[ok]] = True
    counts["mesh_vertices_pulled"] = int(moved.sum())
    log.info("mesh: %d of %d vertices fell on background in some view; %d pulled inside along their normals",
             len(outside), mesh.num_vertices, int(moved.sum()))
    return TriangleMesh(verts.astype(np.float32), mesh.faces, mesh.colors, mesh.normals), counts
