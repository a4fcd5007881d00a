"""What fusion's two backends share (cpu.py, the Numba twin; cuda.py and cuda/fusion.cu): the
camera block layout, the neighbour limit, the meaning of the `blocked` bits and the kernels' form
of the optional checks. NumPy only: the CUDA path imports this, never Numba."""

from __future__ import annotations

import numpy as np

MAX_NEIGHBORS = 32  # bits of the per-point visibility mask (uint32); also the config's upper bound
CAM_STRIDE = 36  # floats per camera block; layout in camera_block()
BLOCKED = 1  # bit 0: consumed or masked out
CLAIMED = 2  # bit 1: claimed during the current reference view


def camera_block(K: np.ndarray, R: np.ndarray, t: np.ndarray) -> np.ndarray:
    """[CAM_STRIDE] float64: world_from_pixel (3x4), pixel_from_world (3x4), R^T (3x3), padding.

    world_from_pixel maps (d*u, d*v, d) to the world point at z-depth d under image point (u, v):
    X = R^T K^-1 (d*u, d*v, d) + C with C = -R^T t. pixel_from_world maps X to K (R X + t).
    """
    K = np.asarray(K, np.float64)
    R = np.asarray(R, np.float64)
    t = np.asarray(t, np.float64).reshape(3)
    world_from_pixel = np.concatenate([R.T @ np.linalg.inv(K), (-R.T @ t)[:, None]], axis=1)  # [3, 4]
    pixel_from_world = K @ np.concatenate([R, t[:, None]], axis=1)  # [3, 4]
    block = np.zeros(CAM_STRIDE, np.float64)
    block[0:12] = world_from_pixel.ravel()
    block[12:24] = pixel_from_world.ravel()
    block[24:33] = R.T.ravel()
    return block


def free_space_limit(max_violations: int | None) -> int:
    """The kernels' violation limit: None (check off) becomes more violations than neighbours exist."""
    return MAX_NEIGHBORS + 1 if max_violations is None else int(max_violations)


def triangulation_limit(min_angle_deg: float) -> float:
    """The kernels' largest allowed ray cosine; 0 degrees (check off) becomes 2, above any cosine, so
    rounding of parallel rays (cosine 1 + eps) never drops a point."""
    return 2.0 if min_angle_deg <= 0 else float(np.cos(np.radians(min_angle_deg)))
