"""Triangle areas in one parallel pass (Numba), for io/mesh_ply.triangle_areas.

A module of its own so that Numba is imported only when a mesh's areas are needed: the CUDA path
imports no Numba otherwise (tests/test_layout.py).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, parallel=True)
def triangle_areas_into(v, f, out):
    """out[k] = area of triangle f[k] of vertices v (float32 or float64), computed in float64."""
    for k in numba.prange(f.shape[0]):
        a, b, c = f[k, 0], f[k, 1], f[k, 2]
        ax, ay, az = np.float64(v[a, 0]), np.float64(v[a, 1]), np.float64(v[a, 2])
        bx, by, bz = np.float64(v[b, 0]) - ax, np.float64(v[b, 1]) - ay, np.float64(v[b, 2]) - az
        cx, cy, cz = np.float64(v[c, 0]) - ax, np.float64(v[c, 1]) - ay, np.float64(v[c, 2]) - az
        nx = by * cz - bz * cy
        ny = bz * cx - bx * cz
        nz = bx * cy - by * cx
        out[k] = 0.5 * np.sqrt(nx * nx + ny * ny + nz * nz)
