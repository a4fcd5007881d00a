"""Accuracy against a synthetic scene's mesh: every point judged, none hidden (issue #37 item 2).

ETH3D's accuracy judges a point only where a scanner's beam passes through it: accurate within
tau of the beam's scan point, inaccurate when in front of it, otherwise not counted. With the
synthetic scans (1 cm spacing at the reference distance, beams ~2 mm wide) that is a minority of
a cloud: of the 560,135 points of the 14 x 320x240 room_seen (seed 102, CPU, default config) only
149,782 were judged; of the 410,353 others 107,353 lie more than 2 cm off the true surface, 47,007
of them behind it (a depth too far: behind a scanned surface no beam goes). Judged points were
8.3 % off the surface, unjudged ones 26 % (scripts/floaters_vs_truth.py). So on synthetic scenes
the mesh the views were rendered from is the better judge: a point is accurate when it lies within
tau of the mesh, averaged over the same occupied 1 cm cells as ETH3D's accuracy (two shifted grids,
evaluation/voxels.py), with every point counted. Perfect depth maps score 1 by construction; a
point on a surface the scans miss also counts as accurate, which the scans cannot say.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .voxels import tolerance_scores

POINT_CHUNK = 2_000_000   # points whose distance Open3D computes at once


def mesh_distances(mesh_path: Path, xyz: np.ndarray) -> np.ndarray:
    """[N] float64: distance (m) from each point [N, 3] to the triangle mesh at `mesh_path`."""
    import open3d as o3d  # noqa: PLC0415

    mesh = o3d.io.read_triangle_mesh(str(mesh_path))
    if len(mesh.triangles) == 0:
        raise ValueError(f"{mesh_path}: no triangles")
    rc = o3d.t.geometry.RaycastingScene()
    rc.add_triangles(o3d.t.geometry.TriangleMesh.from_legacy(mesh))
    out = np.empty(len(xyz), np.float64)
    for s in range(0, len(xyz), POINT_CHUNK):
        chunk = o3d.core.Tensor(np.ascontiguousarray(xyz[s:s + POINT_CHUNK], dtype=np.float32))
        out[s:s + POINT_CHUNK] = rc.compute_distance(chunk).numpy()
    return out


def mesh_accuracy(mesh_path: Path, xyz: np.ndarray, tolerances=(0.01, 0.02, 0.05),
                  voxel_size: float = 0.01) -> list[float]:
    """Per tolerance (m), the share of the points [N, 3] within it of the mesh, averaged over
    occupied `voxel_size` cells as ETH3D's accuracy (0 for no points)."""
    xyz32 = np.ascontiguousarray(xyz, dtype=np.float32)
    if len(xyz32) == 0:
        return [0.0] * len(tolerances)
    dist = mesh_distances(mesh_path, xyz32)
    return [float(a) for a in tolerance_scores(np, xyz32, dist ** 2, list(tolerances), voxel_size)]
