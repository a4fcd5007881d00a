"""Screened Poisson reconstruction of the fused cloud (the mesh stage's `poisson` method), through
Open3D's `create_from_point_cloud_poisson` (Kazhdan's PoissonRecon), then trimming.

Octree depth (`depth` None): the smallest depth whose finest cell (the cloud's bounding cube,
enlarged by Open3D's scale 1.1, over 2^depth) is at most `cell_spacings` times the cloud's
point spacing (median nearest-neighbour distance, sampling/points/spacing.py), within 6..MAX_DEPTH.
A cloud far denser than that cell is first pooled into voxels of half the cell (support-weighted
mean positions, mean normals and colours: octree_pool.py, in parts within the GPU's budget), as the
octree cannot use the extra points. The depth is then lowered until that pooled cloud has at most `max_points` points
(mesh.poisson_max_points, counted exactly: octree_count.py, on the GPU with backend cuda): the solve's time grows with them, and the
spacing rule alone let a 20 x 800x600 courtyard (8.7 M points, 2.9 mm apart over 31 m) reach depth 12
with nothing pooled, which did not finish in 150 s on the H200 machine's 16 cores. On 2 CPU cores its
solve took 20 s at depth 10 (1.6 M pooled points) and 73 s at 11 (3.4 M), with accuracy / F1 at 2 cm
0.969 / 0.966 and 0.981 / 0.969 (the cloud 0.995 / 0.959).

Solver: Open3D. pycolmap.poisson_meshing (COLMAP's PoissonRecon, `solver="colmap"`, kept for
benchmarks/bench_poisson.py) gave the same scores 3.3x slower at depth 10 on that cloud (68 s against 20 s)
and 3.9x at 11 (284 s against 73 s).

Confidence: Open3D 0.20 hard-codes PoissonRecon's confidence exponent to 0 (the normals' length
is not read), and pycolmap's poisson_meshing has no confidence either; the fused points' support
(views per point) enters through the pooling's weights.

Trimming (a measured rule on the cloud's own density, not a fixed density threshold): Poisson
closes the surface across holes and around the scene; a vertex farther from every (pooled) fused
point than max(`trim_cells` octree cells, `trim_spacings` point spacings) lies on such a filled-in
sheet and is removed with its faces. On surface that the cloud covers, vertices are within about a
cell of a point where the cell is the coarser, and within a few spacings where the points are (gaps
between randomly placed points reach several median spacings), so the mesh never empties.

Vertex colours: Open3D interpolates the cloud's colours.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np

from ..errors import MVSError
from ..io.mesh_ply import TriangleMesh
from ..io.point_cloud import PointCloud
from .octree_count import MAX_DEPTH, SCALE, octree_points
from .octree_pool import pooled_for_octree
from .subset import keep_vertices

log = logging.getLogger(__name__)

MIN_DEPTH = 6
SOLVERS = ("open3d", "colmap")


def check_cloud(cloud: PointCloud, what: str) -> None:
    if len(cloud) == 0:
        raise MVSError(f"{what}: the cloud is empty; nothing to mesh")
    if cloud.normals is None:
        raise MVSError(f"{what}: the cloud has no normals (nx, ny, nz); Poisson needs oriented points "
                       f"(use mesh.method: tsdf, or a cloud from the fusion stage)")
    if len(cloud) < 16:
        raise MVSError(f"{what}: the cloud has {len(cloud)} points; Poisson needs at least 16")


def choose_depth(extent: float, spacing: float, cell_spacings: float) -> int:
    """Octree depth whose finest cell is at most cell_spacings * spacing (clamped)."""
    if spacing <= 0 or extent <= 0:
        return MIN_DEPTH
    d = math.ceil(math.log2(SCALE * extent / (cell_spacings * spacing)))
    return int(min(MAX_DEPTH, max(MIN_DEPTH, d)))


def capped_depth(xyz: np.ndarray, depth: int, max_points: int | None, backend: str = "cpu",
                 budget: int | None = None) -> tuple[int, dict[int, int]]:
    """The largest depth <= `depth` (not below MIN_DEPTH) at which the cloud pooled to half a cell has at
    most max_points points (octree_points, on the GPU with backend "cuda" within `budget`), and the counts
    looked at; a cloud of at most max_points points keeps `depth` without counting (None: no cap)."""
    if max_points is None or len(xyz) <= max_points or depth <= MIN_DEPTH:
        return depth, {}
    counts = octree_points(xyz, range(MIN_DEPTH, depth + 1), backend, budget)
    for d in range(depth, MIN_DEPTH - 1, -1):
        if counts[d] <= max_points:
            return d, counts
    return MIN_DEPTH, counts


def rule_depth(cloud: PointCloud, cell_spacings: float, max_points: int | None = None,
               spacing: float | None = None, backend: str = "cpu", budget: int | None = None) -> dict:
    """The stage's depth for a cloud (poisson_depth null): its extent, its spacing (as given, else
    estimated; extent / 1000 where it comes out 0), the spacing rule's depth, the depth after the
    max_points cap (capped_depth: its count on the GPU with backend "cuda", within `budget`), the counts
    the cap looked at and the seconds it took."""
    from ..sampling.points.spacing import estimate_spacing  # noqa: PLC0415

    # bounds in the coordinates' own dtype, then float64: no float64 copy of the cloud
    extent = float((cloud.xyz.max(axis=0).astype(np.float64) - cloud.xyz.min(axis=0).astype(np.float64)).max())
    spacing = float(spacing) if spacing is not None else estimate_spacing(cloud.xyz)
    spacing = spacing if spacing > 0 else extent / 1000.0
    depth = choose_depth(extent, spacing, cell_spacings)
    t0 = time.perf_counter()
    capped, counts = capped_depth(cloud.xyz, depth, max_points, backend, budget)
    return {"extent": extent, "spacing": spacing, "points": len(cloud), "spacing_depth": depth, "depth": capped,
            "octree_points": counts, "count_seconds": time.perf_counter() - t0}


def poisson_mesh(cloud: PointCloud, *, depth: int | None = None, cell_spacings: float = 1.5,
                 trim_cells: float = 1.0, trim_spacings: float = 3.0, spacing: float | None = None,
                 threads: int = -1, backend: str = "cpu", solver: str = "open3d",
                 max_points: int | None = None, memory_budget: int | None = None,
                 closing=None) -> tuple[TriangleMesh, dict]:
    """The trimmed screened-Poisson mesh of an oriented cloud, and counts; solver: open3d or colmap
    (pycolmap.poisson_meshing, COLMAP's PoissonRecon, through PLY files). `memory_budget`: bytes the
    depth count and the pooling may hold where they run (default: with backend cuda the mesh stage's
    share of the GPU, octree_pool.gpu_budget; on the CPU no limit); the mesh does not depend on it.
    closing: a function of the cloud's xyz giving (xyz, outward normals, counts) of extra points that
    close the surface (visual_hull.hull_points); they join the solve and the mesh is not trimmed."""
    if solver not in SOLVERS:
        raise MVSError(f"mesh (poisson): unknown solver {solver!r} ({', '.join(SOLVERS)})")
    check_cloud(cloud, "mesh (poisson)")
    t0 = time.perf_counter()
    # an explicit depth is never capped (max_points None: nothing counted)
    if backend == "cuda" and memory_budget is None:
        from .octree_pool import gpu_budget  # noqa: PLC0415

        memory_budget = gpu_budget()
    rule = rule_depth(cloud, cell_spacings, max_points if depth is None else None, spacing, backend, memory_budget)
    extent, spacing, octree, t_count = rule["extent"], rule["spacing"], rule["octree_points"], rule["count_seconds"]
    spacing_depth = rule["spacing_depth"] if depth is None else None
    depth = rule["depth"] if depth is None else int(depth)
    cell = SCALE * extent / 2 ** depth
    points = cloud
    t_rule = time.perf_counter()
    # clearly denser than the octree resolves, or the depth lowered to keep max_points: pool first
    if 0.5 * cell > spacing * 1.5 or (spacing_depth is not None and depth < spacing_depth):
        points = pooled_for_octree(cloud, cell, backend, memory_budget)
    closing_counts = {}
    if closing is not None:
        points, closing_counts = _with_closing(points, closing)
    t_pool = time.perf_counter()
    verts, faces, colors = (_solve_colmap if solver == "colmap" else _solve_open3d)(points, depth, threads)
    t_solve = time.perf_counter() - t0
    t_solver_only = time.perf_counter() - t_pool
    raw_faces = len(faces)
    # trim: vertices farther from the cloud than max(trim_cells * cell, trim_spacings * spacing)
    limit = max(trim_cells * cell, trim_spacings * spacing)
    if closing is None:
        out = trim_to_cloud(verts, faces, colors, points.xyz, limit)
    else:   # a closed surface: trimming would open it where the hull's sparse points carry it
        out = keep_vertices(verts, faces, colors, np.ones(len(verts), bool))
    if out.num_faces == 0:
        raise MVSError("mesh (poisson): no face lies near the cloud after trimming; check the cloud's normals")
    counts = {"mesh_poisson_depth": depth, "mesh_poisson_spacing_depth": spacing_depth,
              "mesh_octree_points": octree.get(depth), "mesh_depth_count_seconds": round(t_count, 3),
              "mesh_pool_seconds": round(t_pool - t_rule, 3),
              "mesh_poisson_cell": round(cell, 6), "mesh_point_spacing": round(spacing, 6),
              "mesh_points_in": len(cloud), "mesh_points_solved": len(points), "mesh_trim_distance": round(limit, 6),
              "mesh_poisson_solver": solver, "mesh_faces_before_trim": int(raw_faces),
              "mesh_poisson_seconds": round(t_solve, 3), "mesh_poisson_solver_seconds": round(t_solver_only, 3),
              "mesh_seconds_total": round(time.perf_counter() - t0, 3), **closing_counts}
    return out, counts


def _with_closing(points: PointCloud, closing) -> tuple[PointCloud, dict]:
    """The solve's points with the closing points appended (the cloud's mean colour: Open3D colours every
    point or none, and the hull's colour is unknown), and the closing's counts."""
    xyz, normals, counts = closing(np.asarray(points.xyz))
    if len(xyz) == 0:
        return points, counts
    colors = None
    if points.colors is not None:
        mean = np.asarray(points.colors, np.float64).mean(axis=0).round().astype(np.uint8)
        colors = np.concatenate([points.colors, np.broadcast_to(mean, (len(xyz), 3))])
    return PointCloud(xyz=np.concatenate([np.asarray(points.xyz, np.float32), xyz]),
                      normals=np.concatenate([np.asarray(points.normals, np.float32), normals]), colors=colors), counts


def trim_to_cloud(verts: np.ndarray, faces: np.ndarray, colors: np.ndarray | None, points_xyz,
                  limit: float) -> TriangleMesh:
    """The mesh without its vertices farther than `limit` from every point of points_xyz [N, 3] and
    their faces; vertices no face keeps are dropped (float32 vertices, int32 faces)."""
    from scipy.spatial import cKDTree  # noqa: PLC0415

    dist, _ = cKDTree(np.asarray(points_xyz, np.float64)).query(verts, k=1, distance_upper_bound=limit, workers=-1)
    return keep_vertices(verts, faces, colors, np.isfinite(dist))


def _solve_open3d(points: PointCloud, depth: int, threads: int):
    """(vertices [V, 3] float64, faces [F, 3] int64, colours [V, 3] uint8 or None) of Open3D's solve."""
    import open3d as o3d  # noqa: PLC0415

    pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(np.asarray(points.xyz, np.float64)))
    pcd.normals = o3d.utility.Vector3dVector(np.asarray(points.normals, np.float64))
    if points.colors is not None:
        pcd.colors = o3d.utility.Vector3dVector(np.asarray(points.colors, np.float64) / 255.0)
    with o3d.utility.VerbosityContextManager(o3d.utility.VerbosityLevel.Error):
        mesh, _ = o3d.geometry.TriangleMesh.create_from_point_cloud_poisson(pcd, depth=depth, scale=SCALE,
                                                                            n_threads=threads)
    colors = (np.clip(np.asarray(mesh.vertex_colors) * 255.0 + 0.5, 0, 255).astype(np.uint8)
              if mesh.has_vertex_colors() else None)
    return np.asarray(mesh.vertices), np.asarray(mesh.triangles, np.int64), colors


def _solve_colmap(points: PointCloud, depth: int, threads: int):
    """The same from pycolmap.poisson_meshing (COLMAP's PoissonRecon; its own density trimming off:
    trim 0), through PLY files in a temporary folder."""
    import tempfile  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    import plyfile  # noqa: PLC0415
    import pycolmap  # noqa: PLC0415

    from ..io.mesh_ply import read_mesh_ply  # noqa: PLC0415

    n = len(points)
    fields = [(a, "<f4") for a in ("x", "y", "z", "nx", "ny", "nz")]
    if points.colors is not None:
        fields += [(c, "u1") for c in ("red", "green", "blue")]
    v = np.empty(n, dtype=fields)
    for k, a in enumerate("xyz"):
        v[a] = points.xyz[:, k]
        v["n" + a] = points.normals[:, k]
    if points.colors is not None:
        for k, c in enumerate(("red", "green", "blue")):
            v[c] = points.colors[:, k]
    opts = pycolmap.PoissonMeshingOptions()
    opts.depth = int(depth)
    opts.trim = 0.0
    opts.color = points.colors is not None
    opts.num_threads = int(threads)
    with tempfile.TemporaryDirectory(prefix="mvs_poisson_") as tmp:
        src, dst = Path(tmp) / "points.ply", Path(tmp) / "mesh.ply"
        plyfile.PlyData([plyfile.PlyElement.describe(v, "vertex")], text=False).write(str(src))
        pycolmap.poisson_meshing(str(src), str(dst), opts)
        if not dst.is_file():
            raise MVSError("mesh (poisson): pycolmap.poisson_meshing wrote no mesh")
        mesh = read_mesh_ply(dst)
    return mesh.vertices.astype(np.float64), mesh.faces.astype(np.int64), mesh.colors
