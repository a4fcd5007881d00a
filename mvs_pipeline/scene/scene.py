"""The in-memory scene: views (cameras + poses + image files) and sparse points with tracks.

`view_idx` is the position in `Scene.views` (sorted by image name, so it is stable across
binary/text models and reruns); `image_id` is COLMAP's id and is only used to talk to COLMAP.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import MVSError

PINHOLE_MODELS = ("PINHOLE", "SIMPLE_PINHOLE")


@dataclass(frozen=True)
class View:
    image_id: int  # COLMAP's id
    name: str  # path relative to the images folder, as in the COLMAP model
    image_path: Path
    camera_model: str
    width: int  # px
    height: int  # px
    K: np.ndarray  # [3, 3] float64 (pinhole part; other models still need undistortion)
    R: np.ndarray  # [3, 3] float64, cam_from_world rotation
    t: np.ndarray  # [3] float64, cam_from_world translation (metres)

    @property
    def center(self) -> np.ndarray:
        """Camera centre in world coordinates, [3]."""
        return -self.R.T @ self.t

    def world_to_cam(self, points_in_world: np.ndarray) -> np.ndarray:
        """[N, 3] world -> [N, 3] camera frame."""
        return points_in_world @ self.R.T + self.t

    def project(self, points_in_world: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """-> (pixel coordinates [N, 2] in COLMAP's convention, z-depth [N])."""
        cam = self.world_to_cam(points_in_world)
        z = cam[:, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            uv = (cam @ self.K.T)[:, :2] / z[:, None]
        return uv, z


@dataclass
class Scene:
    views: list[View]
    points_in_world: np.ndarray  # [P, 3] float64
    point_colors: np.ndarray  # [P, 3] uint8
    track_offsets: np.ndarray  # [P + 1] int64: point p is seen by track_view_idx[off[p]:off[p+1]]
    track_view_idx: np.ndarray  # [T] int32, view_idx of every observation
    images_dir: Path
    sparse_dir: Path

    @property
    def num_views(self) -> int:
        return len(self.views)

    @property
    def track_lengths(self) -> np.ndarray:
        return np.diff(self.track_offsets)

    def views_per_observation(self) -> float:
        """Median, over observations, of the number of views seeing the observed sparse point: how
        many views see the surface behind a typical observed pixel (sparse tracks undercount it)."""
        lengths = self.track_lengths
        return float(np.median(np.repeat(lengths, lengths))) if len(lengths) else 0.0

    def without_points(self) -> "Scene":
        """The scene without its sparse points: what cluster tasks get (they read only the views)."""
        return dataclasses.replace(self, points_in_world=np.zeros((0, 3)), point_colors=np.zeros((0, 3), np.uint8),
                                   track_offsets=np.zeros(1, np.int64), track_view_idx=np.zeros(0, np.int32))

    def view_idx_by_name(self) -> dict[str, int]:
        return {v.name: i for i, v in enumerate(self.views)}

    def points_seen_by(self, view_idx: int) -> np.ndarray:
        """Indices of the sparse points observed in `view_idx`, [k] int64."""
        obs_point = np.repeat(np.arange(len(self.points_in_world)), self.track_lengths)
        return np.unique(obs_point[self.track_view_idx == view_idx])


def check_intrinsics(K: np.ndarray, what: str) -> None:
    """Reject intrinsics our kernels cannot represent (skew, non-positive focal length)."""
    if abs(K[0, 1]) > 1e-9 * max(abs(K[0, 0]), 1.0):
        raise MVSError(f"{what}: camera has skew K[0,1]={K[0, 1]:g}; only zero-skew pinhole cameras are supported")
    if K[0, 0] <= 0 or K[1, 1] <= 0:
        raise MVSError(f"{what}: camera has non-positive focal length fx={K[0, 0]:g} fy={K[1, 1]:g}")
