"""The mesh inside the object's silhouettes (`fusion.mask_silhouettes` with `fusion.mask_dir`): faces with
a vertex that projects onto background in some view are removed, the rule fusion applies to its points
(fusion/silhouettes.py: a point of the object lies inside its mask in every view that sees it).

Why: the fused cloud then lies inside every silhouette, but a surface made from it does not. Poisson
smooths at its octree cell (DTU scan 24: 0.9 mm, ~4 px in the images) and extends the surface up to the
trim distance past the cloud's last points, so at the object's outline and where it stands on the table
the mesh crosses the silhouette: 2.7 % of the Poisson mesh's vertices of DTU scan 24 projected onto
background in some view (the cloud's points: none; H200, session 27). Faces are judged by their vertices,
so the carved mesh's vertices all pass; its surface can still cross a silhouette inside a face, which the
evaluation's mask metrics (points sampled on the surface) measure. Only the surface is cut: a mesh closed
across the masked-out table becomes open there.
"""

from __future__ import annotations

import logging

import numpy as np

from ..fusion.silhouettes import SilhouetteCheck
from ..gpu.loader import to_host
from ..io.mesh_ply import TriangleMesh
from .subset import keep_vertices

log = logging.getLogger(__name__)


def carve_to_silhouettes(mesh: TriangleMesh, scene, mask_dir, xp=np) -> tuple[TriangleMesh, dict]:
    """(the mesh without the faces that leave a silhouette, counts) for the scene's views' object masks in
    mask_dir (views without a mask constrain nothing); `xp` projects (NumPy or CuPy)."""
    check = SilhouetteCheck(scene, mask_dir, xp)
    if check.num_views == 0 or mesh.num_faces == 0:
        return mesh, {"mesh_silhouette_views": check.num_views, "mesh_silhouette_dropped_faces": 0}
    inside = np.asarray(to_host(check.inside(xp.asarray(mesh.vertices))), bool)
    carved = keep_vertices(mesh.vertices, mesh.faces, mesh.colors, inside)
    dropped = mesh.num_faces - carved.num_faces
    log.info("mesh: %d of %d faces left an object silhouette (%d masked views) and were removed", dropped,
             mesh.num_faces, check.num_views)
    return carved, {"mesh_silhouette_views": check.num_views, "mesh_silhouette_dropped_faces": int(dropped)}
