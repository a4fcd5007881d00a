"""Mask metrics: how well a cloud stays on the object, for scenes with object masks but no
ground-truth geometry (as defined in the DTU scan 24 README of this project's data).

Every point is projected into every image where it lies in front of the camera and inside the
frame (COLMAP's cameras, distortion included; pixel (i, j) covers [j, j+1) x [i, i+1)):
  mask precision   share of points that fall inside the object mask in all the views that see
                   them (`precision_all`), and in at least 90 % of them (`precision_90`); points
                   seen by no view are left out of both and counted as `unseen_points`;
  mask coverage    per image, the share of the CELL x CELL pixel cells lying entirely inside the
                   mask that at least one projected point hits (occlusion ignored), averaged over
                   the images that have such cells.
Masks are `MASK_DIR/<image name>.png`, non-zero = object, read as `fusion.mask_dir` reads them
(io/object_masks.py: a colour mask by its red channel, as COLMAP does).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..errors import MVSError
from ..io.object_masks import mask_path_for, read_object_mask

log = logging.getLogger(__name__)

CELL = 4  # px: coverage cells
CHUNK = 1 << 21  # points per projection batch (bounded temporary memory)


def read_mask(mask_dir: Path, image_name: str, width: int, height: int) -> np.ndarray:
    """[H, W] bool object mask of one image, read as fusion reads it (io/object_masks.py); a
    missing, unreadable or mis-sized mask is an error naming it."""
    path = mask_path_for(Path(mask_dir), image_name)
    if path is None:
        raise MVSError(f"{Path(mask_dir) / (image_name + '.png')}: mask of image '{image_name}' not found")
    return read_object_mask(path, image_name, width, height)


def full_cells(mask: np.ndarray, cell: int = CELL) -> np.ndarray:
    """[H // cell, W // cell] bool: cells whose every pixel is inside the mask."""
    h, w = (mask.shape[0] // cell) * cell, (mask.shape[1] // cell) * cell
    return mask[:h, :w].reshape(h // cell, cell, w // cell, cell).all(axis=(1, 3))


def project(points, cam_from_world, img_from_cam, xp=np):
    """(pixel columns, rows) as int64 and a bool `in front` flag (columns/rows are -1 behind the
    camera); NumPy or CuPy arrays alike (`xp`)."""
    pose = xp.asarray(cam_from_world)
    cam = points @ pose[:, :3].T + pose[:, 3]
    front = cam[:, 2] > 0
    uv = xp.full((len(points), 2), -1.0)
    if bool(front.any()):
        uv[front] = xp.asarray(img_from_cam(cam[front]))
    return xp.floor(uv[:, 0]).astype(xp.int64), xp.floor(uv[:, 1]).astype(xp.int64), front


def mask_metrics(xyz: np.ndarray, cameras: list[dict], mask_dir: Path, cell: int = CELL, xp=np) -> dict:
    """Mask precision and coverage of points xyz [N, 3] (float, world frame) over `cameras`:
    dicts with name, width, height, cam_from_world [3, 4] and img_from_cam (camera model, taking
    and returning `xp` arrays). `xp` is numpy, or cupy to compute on the GPU: the same code."""
    xyz = xp.asarray(xyz, dtype=xp.float64)
    n = len(xyz)
    seen = xp.zeros(n, xp.int32)
    inside = xp.zeros(n, xp.int32)
    per_image = {}
    for cam in cameras:
        mask = xp.asarray(read_mask(mask_dir, cam["name"], cam["width"], cam["height"]))
        eligible = full_cells(mask, cell)
        hit = xp.zeros_like(eligible)
        for start in range(0, n, CHUNK):
            cols, rows, front = project(xyz[start:start + CHUNK], cam["cam_from_world"], cam["img_from_cam"], xp)
            ok = front & (cols >= 0) & (cols < cam["width"]) & (rows >= 0) & (rows < cam["height"])
            idx = xp.flatnonzero(ok)
            r, c = rows[idx], cols[idx]
            seen[start + idx] += 1
            inside[start + idx] += mask[r, c]
            in_grid = (r < eligible.shape[0] * cell) & (c < eligible.shape[1] * cell)
            hit[r[in_grid] // cell, c[in_grid] // cell] = True
        cells = int(eligible.sum())
        per_image[cam["name"]] = {"cells": cells, "coverage": float((hit & eligible).sum() / cells) if cells else None}
    visible = seen > 0
    counted = int(visible.sum())
    coverages = [v["coverage"] for v in per_image.values() if v["coverage"] is not None]
    return {"points": n, "unseen_points": n - counted,
            "precision_all": float((inside[visible] == seen[visible]).mean()) if counted else None,
            "precision_90": float((10 * inside[visible] >= 9 * seen[visible]).mean()) if counted else None,
            "coverage": float(np.mean(coverages)) if coverages else None, "cell_px": cell, "images": per_image}


def cameras_from_model(sparse_dir: Path) -> list[dict]:
    """The cameras of a COLMAP model, as `mask_metrics` takes them."""
    from ..scene.workspace import read_reconstruction  # noqa: PLC0415

    rec = read_reconstruction(Path(sparse_dir))
    out = []
    for image in sorted(rec.images.values(), key=lambda im: im.name):
        camera = rec.cameras[image.camera_id]
        out.append({"name": image.name, "width": int(camera.width), "height": int(camera.height),
                    "cam_from_world": np.asarray(image.cam_from_world().matrix(), dtype=np.float64),
                    "img_from_cam": _pinhole(camera) if camera.model.name in PINHOLE_MODELS else _on_host(camera)})
    return out


PINHOLE_MODELS = ("PINHOLE", "SIMPLE_PINHOLE")


def _on_host(camera):
    """pycolmap's projection (any camera model), fed host arrays: CuPy input is copied down first."""
    return lambda cam: camera.img_from_cam(cam.get() if hasattr(cam, "get") else cam)


def _pinhole(camera):
    """Array projection of a distortion-free camera (NumPy or CuPy): the same numbers as pycolmap's
    img_from_cam, whose per-point C++ loop on the host dominates the run time at millions of points."""
    K = np.asarray(camera.calibration_matrix(), dtype=np.float64)
    fx, fy, cx, cy = (float(v) for v in (K[0, 0], K[1, 1], K[0, 2], K[1, 2]))

    def img_from_cam(cam):  # (fx x / z + cx, fy y / z + cy) with in-place scalar ops: any array type
        uv = cam[:, :2].copy()
        uv[:, 0] *= fx
        uv[:, 1] *= fy
        uv /= cam[:, 2:3]
        uv[:, 0] += cx
        uv[:, 1] += cy
        return uv

    return img_from_cam
