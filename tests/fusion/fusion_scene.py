"""Analytic scenes for the fusion tests: cameras looking at a plane, with exact depth/normal maps.

Everything is computed in closed form (ray-plane intersection), so fused points can be checked
against the plane exactly. Scenes are built as our `Scene` + `ViewSelection` objects directly
(no COLMAP model needed) and written as a dense workspace: images/, stereo/{depth,normal}_maps/.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from mvs_pipeline.io.colmap_maps import write_colmap_array
from mvs_pipeline.scene.scene import Scene, View
from mvs_pipeline.synth.camera import look_at
from mvs_pipeline.views.selection import ViewSelection


def intrinsics(width: int, height: int, focal: float | None = None) -> np.ndarray:
    f = focal if focal is not None else 0.9 * width
    return np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1]], float)


def plane_maps(K, R, t, width, height, plane_n, plane_c) -> tuple[np.ndarray, np.ndarray]:
    """Exact z-depth [H, W] (0 where the ray misses or hits behind) and camera-frame normals [H, W, 3]
    of the plane {X : n.X = c}, sampled at pixel centres."""
    n = np.asarray(plane_n, float) / np.linalg.norm(plane_n)
    u, v = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
    rays_cam = np.stack([u, v, np.ones_like(u)], -1) @ np.linalg.inv(K).T  # z = 1
    rays_world = rays_cam @ R  # R^T applied to each row
    C = -R.T @ t
    denom = rays_world @ n
    with np.errstate(divide="ignore", invalid="ignore"):
        s = (plane_c - n @ C) / denom
    depth = np.where(np.isfinite(s) & (s > 0), s, 0.0)
    n_cam = R @ n
    if n_cam @ np.array([0, 0, 1.0]) > 0:  # face the camera
        n_cam = -n_cam
    normal = np.broadcast_to(n_cam, (height, width, 3)).copy()
    normal[depth == 0] = 0
    return depth.astype(np.float32), normal.astype(np.float32)


def make_scene(root: Path, poses: list[tuple[np.ndarray, np.ndarray]], width: int, height: int,
               K: np.ndarray | None = None, colors=None, plane_n=(0, 0, 1.0), plane_c=0.0,
               neighbors: list[list[int]] | None = None, map_type: str = "geometric",
               write_images: bool = True) -> tuple[Scene, ViewSelection, dict]:
    """Write images + exact maps for `poses` under root; return (scene, selection, truth).

    colors: per view an RGB triple (constant image) or None for a deterministic texture.
    truth: {"depth": [V][H, W], "normal": [V][H, W, 3]} as written.
    """
    root = Path(root)
    K = intrinsics(width, height) if K is None else K
    views, truth = [], {"depth": [], "normal": []}
    rng = np.random.default_rng(0)
    for k, (R, t) in enumerate(poses):
        name = f"view_{k:03d}.png"
        depth, normal = plane_maps(K, R, t, width, height, plane_n, plane_c)
        truth["depth"].append(depth)
        truth["normal"].append(normal)
        write_colmap_array(root / "stereo" / "depth_maps" / f"{name}.{map_type}.bin", depth)
        write_colmap_array(root / "stereo" / "normal_maps" / f"{name}.{map_type}.bin", normal)
        if write_images:
            if colors is not None:
                rgb = np.broadcast_to(np.asarray(colors[k], np.uint8), (height, width, 3))
            else:
                rgb = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            (root / "images").mkdir(parents=True, exist_ok=True)
            cv2.imwrite(str(root / "images" / name), np.ascontiguousarray(rgb[:, :, ::-1]))
        views.append(View(image_id=k + 1, name=name, image_path=root / "images" / name, camera_model="PINHOLE",
                          width=width, height=height, K=K.copy(), R=np.asarray(R, float), t=np.asarray(t, float)))
    scene = Scene(views=views, points_in_world=np.zeros((0, 3)), point_colors=np.zeros((0, 3), np.uint8),
                  track_offsets=np.zeros(1, np.int64), track_view_idx=np.zeros(0, np.int32),
                  images_dir=root / "images", sparse_dir=root / "sparse")
    n = len(poses)
    if neighbors is None:
        neighbors = [[j for j in range(n) if j != i] for i in range(n)]
    selection = ViewSelection(neighbors=neighbors, scores=[[1.0] * len(nb) for nb in neighbors],
                              depth_ranges=np.tile([0.1, 100.0], (n, 1)))
    return scene, selection, truth


def arc_poses(n: int, radius: float = 3.0, arc_deg: float = 30.0, target=(0.0, 0.0, 0.0)) -> list:
    """n cameras on an arc above the plane z = 0, all looking at `target`."""
    poses = []
    for k in range(n):
        a = np.radians(-arc_deg / 2 + arc_deg * k / max(n - 1, 1))
        center = np.array([radius * np.sin(a), 0.3 * np.sin(3 * a), radius * np.cos(a)])
        poses.append(look_at(center, target, up=(0.0, -1.0, 0.0)))
    return poses
