"""Analytic depth maps of a sphere seen by cameras around it (the TSDF tests' ground truth)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CENTRE = np.array([0.1, -0.2, 3.0])
RADIUS = 0.5


@dataclass
class View:
    name: str
    K: np.ndarray
    R: np.ndarray
    t: np.ndarray
    width: int
    height: int


def look_at(eye: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z = target - eye
    z /= np.linalg.norm(z)
    up = np.array([0.0, 1.0, 0.0]) if abs(z[1]) < 0.9 else np.array([1.0, 0.0, 0.0])
    x = np.cross(up, z)
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    R = np.stack([x, y, z])
    return R, -R @ eye


def sphere_views(num_views: int = 8, width: int = 96, height: int = 72, distance: float = 2.0,
                 centre=CENTRE, radius=RADIUS):
    """(views, depth maps [H, W] float32 z-depth, colours [H, W, 3] uint8 coloured by world x)."""
    f = 0.9 * width
    K = np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1.0]])
    views, depths, colours = [], [], []
    for i in range(num_views):
        a = 2 * np.pi * i / num_views
        eye = centre + distance * np.array([np.cos(a), 0.35 * np.sin(2 * a), np.sin(a)])
        R, t = look_at(eye, centre)
        cols, rows = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
        rays_cam = np.stack([(cols - K[0, 2]) / f, (rows - K[1, 2]) / f, np.ones_like(cols)], axis=-1)
        rays = rays_cam @ R  # world directions (R^T d)
        oc = eye - centre
        b = rays @ oc
        a2 = (rays ** 2).sum(-1)
        disc = b * b - a2 * (oc @ oc - radius ** 2)
        s = (-b - np.sqrt(np.maximum(disc, 0))) / a2  # ray parameter: z-depth since rays_cam[2] = 1
        depth = np.where(disc > 0, s, 0.0).astype(np.float32)
        point = eye + rays * s[..., None]
        grey = np.clip(128 + 200 * (point[..., 0] - centre[0]), 0, 255)
        colour = np.where(disc[..., None] > 0, np.stack([grey, 255 - grey, np.full_like(grey, 60)], -1), 0)
        views.append(View(f"v{i}.png", K, R, t, width, height))
        depths.append(depth)
        colours.append(colour.astype(np.uint8))
    return views, depths, colours
