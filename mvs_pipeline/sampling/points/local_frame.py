"""Offsets from a cloud's centre, so that float64 (georeferenced) coordinates survive the float32
point kernels.

float32 has 24 bits of mantissa: at a UTM northing of 5e6 m its step is 0.5 m. A float64 cloud is
therefore shifted by its bounding-box centre (kept in float64) before the kernels see it, which
leaves ~1e-6 m steps for a cloud 10 m across. Results that are input points (FPS samples,
interpolation targets, the highest point of a DSM cell) are then taken from the float64 input
itself, and new positions (voxel means, the DSM origin) are computed in float64, so nothing is
rounded to float32. float32 clouds (the pipeline's own) pass through unshifted and unchanged.
"""

from __future__ import annotations

import numpy as np

from .validate import array_module, to_host


def is_double(xyz) -> bool:
    return np.dtype(xyz.dtype) == np.float64


def frame_centre(xyz) -> np.ndarray:
    """[3] float64: the bounding-box centre of a float64 cloud's finite points, else zeros."""
    if not is_double(xyz) or xyz.shape[0] == 0:
        return np.zeros(3)
    pts = to_host(xyz)
    finite = pts[np.isfinite(pts).all(axis=1)]
    if len(finite) == 0:
        return np.zeros(3)  # the callers' checks report the non-finite points
    return 0.5 * (finite.min(axis=0) + finite.max(axis=0))


def offsets(xyz, centre: np.ndarray):
    """xyz - centre, in xyz's own dtype (float32 clouds, whose centre is zero, come back as they are)."""
    if not np.any(centre):
        return xyz
    xp = array_module(xyz)
    return xyz - xp.asarray(centre)
