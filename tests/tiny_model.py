"""A tiny COLMAP project built directly with pycolmap (no rendering): for loader/CLI tests.

Cameras sit on a circle looking at the origin; sparse points are random points near the origin,
observed exactly (no noise) in every view that sees them; images are random noise of the right
size. Exact geometry, so depth ranges and projections can be checked by hand.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pycolmap

from mvs_pipeline.synth.camera import look_at


def build_tiny_reconstruction(num_views: int = 5, width: int = 64, height: int = 48, num_points: int = 200,
                              radius: float = 3.0, model: str = "PINHOLE", seed: int = 0) -> pycolmap.Reconstruction:
    rng = np.random.default_rng(seed)
    f = 0.9 * width
    params = {"PINHOLE": [f, f, width / 2, height / 2], "SIMPLE_PINHOLE": [f, width / 2, height / 2],
              "SIMPLE_RADIAL": [f, width / 2, height / 2, 0.05], "OPENCV": [f, f, width / 2, height / 2, 0.05, -0.01, 0.0, 0.0]}[model]
    rec = pycolmap.Reconstruction()
    cam = pycolmap.Camera(camera_id=1, model=model, width=width, height=height, params=params)
    rec.add_camera_with_trivial_rig(cam)
    points = rng.uniform(-0.5, 0.5, size=(num_points, 3))
    poses = []
    for k in range(num_views):
        ang = 2 * np.pi * k / (num_views * 4)  # a 90-degree arc: all views overlap
        center = np.array([radius * np.sin(ang), 0.2 * k / num_views, -radius * np.cos(ang)])
        poses.append(look_at(center, np.zeros(3), up=(0.0, 1.0, 0.0)))
    obs = []  # per view: (point index, xy)
    for R, t in poses:
        cam_pts = points @ R.T + t
        xy = np.array([cam.img_from_cam(p) for p in cam_pts])
        inside = (xy[:, 0] >= 0) & (xy[:, 0] < width) & (xy[:, 1] >= 0) & (xy[:, 1] < height) & (cam_pts[:, 2] > 0)
        obs.append((np.flatnonzero(inside), xy[inside]))
    for k, (R, t) in enumerate(poses):
        img = pycolmap.Image(name=f"img_{k:02d}.png", keypoints=obs[k][1], camera_id=1, image_id=k + 1)
        rec.add_image_with_trivial_frame(img, pycolmap.Rigid3d(pycolmap.Rotation3d(R), t))
    for p in range(num_points):
        track = pycolmap.Track()
        for k in range(num_views):
            hit = np.flatnonzero(obs[k][0] == p)
            if len(hit):
                track.add_element(k + 1, int(hit[0]))
        if track.length() >= 2:
            rec.add_point3D(points[p], track, np.array([128, 128, 128], np.uint8))
    return rec


def write_images(rec: pycolmap.Reconstruction, images_dir: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    images_dir.mkdir(parents=True, exist_ok=True)
    for im in rec.images.values():
        cam = rec.cameras[im.camera_id]
        path = images_dir / im.name
        path.parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(path), rng.integers(0, 255, size=(cam.height, cam.width, 3), dtype=np.uint8))


def write_colmap_project(root: Path, text: bool = False, nested: bool = True, **kwargs) -> pycolmap.Reconstruction:
    """root/images + root/sparse/0 (or root/sparse) holding a tiny model."""
    rec = build_tiny_reconstruction(**kwargs)
    write_images(rec, root / "images")
    sparse = root / "sparse" / "0" if nested else root / "sparse"
    sparse.mkdir(parents=True, exist_ok=True)
    (rec.write_text if text else rec.write_binary)(str(sparse))
    return rec
