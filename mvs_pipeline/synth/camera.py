"""Pinhole cameras for the synthetic scenes: intrinsics, look-at poses, per-pixel rays.

Conventions (the project's): x_cam = R @ x_world + t (`cam_from_world`), camera x right,
y down, z forward; pixel (col i, row j) has its centre at image coordinates (i + 0.5, j + 0.5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WORLD_UP = np.array([0.0, 0.0, 1.0])


@dataclass(frozen=True)
class Camera:
    K: np.ndarray  # [3, 3] float64
    R: np.ndarray  # [3, 3] float64, cam_from_world rotation
    t: np.ndarray  # [3] float64, cam_from_world translation (m)
    width: int  # px
    height: int  # px

    @property
    def center(self) -> np.ndarray:
        """[3] camera centre in world coordinates."""
        return -self.R.T @ self.t

    def project(self, points_in_world: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[N, 3] world -> (image coordinates [N, 2], z-depth [N])."""
        cam = points_in_world @ self.R.T + self.t
        z = cam[:, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            uv = (cam @ self.K.T)[:, :2] / z[:, None]
        return uv, z

    def ray_directions(self, uv: np.ndarray) -> np.ndarray:
        """Image coordinates [N, 2] -> world ray directions [N, 3] with camera-frame z = 1.

        Not normalised on purpose: a ray parameter t along such a direction is the z-depth.
        """
        fx, fy, cx, cy = self.K[0, 0], self.K[1, 1], self.K[0, 2], self.K[1, 2]
        d_cam = np.stack([(uv[:, 0] - cx) / fx, (uv[:, 1] - cy) / fy, np.ones(len(uv))], axis=1)
        return d_cam @ self.R  # R^T @ d for every row


def intrinsics(width: int, height: int, focal_ratio: float) -> np.ndarray:
    """PINHOLE K with fx = fy = focal_ratio * width and the principal point at the image centre."""
    f = focal_ratio * width
    return np.array([[f, 0.0, width / 2.0], [0.0, f, height / 2.0], [0.0, 0.0, 1.0]])


def look_at(center: np.ndarray, target: np.ndarray, roll: float = 0.0, up=WORLD_UP) -> tuple[np.ndarray, np.ndarray]:
    """cam_from_world (R, t) for a camera at `center` looking at `target`.

    `up` (world direction, default +z) points to the top of the image; `roll` (radians) then
    turns the camera about its viewing axis. The view direction must not be parallel to `up`.
    """
    center = np.asarray(center, dtype=np.float64)
    forward = np.asarray(target, dtype=np.float64) - center
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, np.asarray(up, dtype=np.float64))
    norm = np.linalg.norm(right)
    if norm < 1e-6:
        raise ValueError("look_at: viewing direction is parallel to 'up', 'right' is undefined")
    right /= norm
    down = np.cross(forward, right)
    c, s = np.cos(roll), np.sin(roll)
    right, down = c * right + s * down, -s * right + c * down
    R = np.stack([right, down, forward])
    return R, -R @ center
