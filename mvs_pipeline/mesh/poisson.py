"""Screened Poisson reconstruction of the fused cloud (the mesh stage's `poisson` method), through
Open3D's `create_from_point_cloud_poisson` (Kazhdan's PoissonRecon), then trimming.

Octree depth (`depth` None): the smallest depth whose finest cell (the cloud's bounding cube,
enlarged by Open3D's scale 1.1, over 2^depth) is at most `cell_spacings` times the cloud's
point spacing (median nearest-neighbour distance, sampling/points/spacing.py), within 6..MAX_DEPTH.
A cloud far denser than that cell is first pooled into voxels of half the cell (support-weighted
mean positions, mean normals and colours: sampling/points/voxel_pool), as the octree cannot use
the extra points; that bounds the solver's work on 40 x 3200x2130 clouds.

Confidence: Open3D 0.20 hard-codes PoissonRecon's confidence exponent to 0 (the normals' length
is not read), and pycolmap's poisson_meshing has no confidence either; the fused points' support
(views per point) enters through the pooling's weights.

Trimming (a measured rule on the cloud's own density, not a fixed density threshold): Poisson
closes the surface across holes and around the scene; a vertex farther from every fused point
than `trim_spacings` times max(point spacing, octree cell) lies on such a filled-in sheet and is
removed with its faces. On surface that the cloud covers, vertices are within about a cell of a
point, so the mesh never empties.

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

log = logging.getLogger(__name__)

MIN_DEPTH = 6
MAX_DEPTH = 12
SCALE = 1.1  # Open3D's default: the octree's cube is the bounding cube enlarged by this


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


def pooled_for_octree(cloud: PointCloud, cell: float, backend: str) -> PointCloud:
    """The cloud pooled into voxels of half an octree cell, positions weighted by support."""
    from ..sampling.points.voxel_pool.ops import voxel_pool  # noqa: PLC0415

    xyz = np.asarray(cloud.xyz, np.float64)
    w = np.asarray(cloud.extra.get("support", np.ones(len(cloud))), np.float64).reshape(-1, 1)
    w = np.maximum(w, 1.0)
    feats = [xyz * w, np.asarray(cloud.normals, np.float64) * w, w]
    if cloud.colors is not None:
        feats.append(np.asarray(cloud.colors, np.float64))
    pooled = voxel_pool(cloud.xyz.astype(np.float32), np.concatenate(feats, axis=1).astype(np.float32),
                        voxel_size=0.5 * cell, backend=backend)
    f = np.asarray(pooled.features if not hasattr(pooled.features, "get") else pooled.features.get(), np.float64)
    wsum = np.maximum(f[:, 6:7], 1e-12)
    normals = f[:, 3:6]
    normals /= np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-12)
    colors = np.clip(f[:, 7:10] + 0.5, 0, 255).astype(np.uint8) if cloud.colors is not None else None
    return PointCloud(xyz=(f[:, 0:3] / wsum).astype(np.float32), normals=normals.astype(np.float32), colors=colors)


def poisson_mesh(cloud: PointCloud, *, depth: int | None = None, cell_spacings: float = 1.5,
                 trim_spacings: float = 3.0, spacing: float | None = None, threads: int = -1,
                 backend: str = "cpu") -> tuple[TriangleMesh, dict]:
    """The trimmed screened-Poisson mesh of an oriented cloud, and counts."""
    import open3d as o3d  # noqa: PLC0415
    from scipy.spatial import cKDTree  # noqa: PLC0415

    from ..sampling.points.spacing import estimate_spacing  # noqa: PLC0415

    check_cloud(cloud, "mesh (poisson)")
    t0 = time.perf_counter()
    xyz = np.asarray(cloud.xyz, np.float64)
    lo, hi = xyz.min(axis=0), xyz.max(axis=0)
    extent = float((hi - lo).max())
    spacing = float(spacing) if spacing is not None else estimate_spacing(cloud.xyz)
    spacing = spacing if spacing > 0 else extent / 1000.0
    depth = int(depth) if depth is not None else choose_depth(extent, spacing, cell_spacings)
    cell = SCALE * extent / 2 ** depth
    points = cloud
    if 0.5 * cell > spacing * 1.5:   # clearly denser than the octree resolves: pool first
        points = pooled_for_octree(cloud, cell, backend)
    pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(np.asarray(points.xyz, np.float64)))
    pcd.normals = o3d.utility.Vector3dVector(np.asarray(points.normals, np.float64))
    if points.colors is not None:
        pcd.colors = o3d.utility.Vector3dVector(np.asarray(points.colors, np.float64) / 255.0)
    with o3d.utility.VerbosityContextManager(o3d.utility.VerbosityLevel.Error):
        mesh, _ = o3d.geometry.TriangleMesh.create_from_point_cloud_poisson(pcd, depth=depth, scale=SCALE,
                                                                            n_threads=threads)
    t_solve = time.perf_counter() - t0
    verts = np.asarray(mesh.vertices)
    faces = np.asarray(mesh.triangles, np.int64)
    colors = (np.clip(np.asarray(mesh.vertex_colors) * 255.0 + 0.5, 0, 255).astype(np.uint8)
              if mesh.has_vertex_colors() else None)
    raw_faces = len(faces)
    # trim: vertices farther from the cloud than trim_spacings * max(spacing, cell)
    limit = trim_spacings * max(spacing, cell)
    dist, _ = cKDTree(np.asarray(points.xyz, np.float64)).query(verts, k=1, distance_upper_bound=limit, workers=-1)
    keep_v = np.isfinite(dist)
    faces = faces[keep_v[faces].all(axis=1)]
    used = np.unique(faces)
    remap = np.full(len(verts), -1, np.int64)
    remap[used] = np.arange(len(used))
    out = TriangleMesh(verts[used].astype(np.float32), remap[faces].astype(np.int32),
                       None if colors is None else colors[used])
    if out.num_faces == 0:
        raise MVSError("mesh (poisson): no face lies near the cloud after trimming; check the cloud's normals")
    counts = {"mesh_poisson_depth": depth, "mesh_poisson_cell": round(cell, 6), "mesh_point_spacing": round(spacing, 6),
              "mesh_points_in": len(cloud), "mesh_points_solved": len(points), "mesh_trim_distance": round(limit, 6),
              "mesh_faces_before_trim": int(raw_faces), "mesh_poisson_seconds": round(t_solve, 3),
              "mesh_seconds_total": round(time.perf_counter() - t0, 3)}
    return out, counts
