"""Two meshes equal up to the order of their vertices and faces (batches number them differently)."""

from __future__ import annotations

import numpy as np


def canonical(vertices: np.ndarray, faces: np.ndarray, colours: np.ndarray | None = None):
    """(vertices sorted by position, faces renumbered to that order, each rotated to start at its
    lowest corner (orientation kept) and sorted, colours in vertex order)."""
    order = np.lexsort(vertices.T[::-1])
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    f = rank[faces]
    shift = np.argmin(f, axis=1)
    f = np.stack([f[np.arange(len(f)), (shift + k) % 3] for k in range(3)], axis=1)
    f = f[np.lexsort(f.T[::-1])]
    return vertices[order], f, None if colours is None else colours[order]


def assert_same_mesh(a, b) -> None:
    """a, b: (vertices, faces[, colours]) or TriangleMesh; exact equality up to numbering."""
    a = (a.vertices, a.faces, a.colors) if hasattr(a, "faces") else a
    b = (b.vertices, b.faces, b.colors) if hasattr(b, "faces") else b
    for x, y, what in zip(canonical(*a), canonical(*b), ("vertices", "faces", "colours")):
        if x is not None and y is not None:
            np.testing.assert_array_equal(x, y, err_msg=what)
