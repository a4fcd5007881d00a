"""A mesh cut down to some of its vertices: the faces whose three vertices are kept, and only the
vertices those faces use (renumbered). The Poisson trim and the silhouette carve both end this way."""

from __future__ import annotations

import numpy as np

from ..io.mesh_ply import TriangleMesh


def keep_vertices(verts: np.ndarray, faces: np.ndarray, colors: np.ndarray | None, keep: np.ndarray) -> TriangleMesh:
    """[V] bool `keep`: the mesh of the faces with every vertex kept, without vertices no face uses
    (float32 vertices, int32 faces, colours following their vertices)."""
    faces = faces[keep[faces].all(axis=1)]
    used = np.unique(faces)
    remap = np.full(len(verts), -1, np.int64)
    remap[used] = np.arange(len(used))
    return TriangleMesh(np.asarray(verts[used], np.float32), remap[faces].astype(np.int32),
                        None if colors is None else colors[used])
