"""Depth-map files the evaluation reads.

- COLMAP dense arrays (`stereo/depth_maps/NAME.{geometric,photometric}.bin`, normal_maps, ...):
  read and written by `mvs_pipeline.io.colmap_maps` (format documented there).
- ETH3D `ground_truth_depth/<camera>/<image name>`: W*H raw float32 little-endian values, row-major,
  no header; +inf where no ground truth is known; for the *distorted* (original) images, so
  the width and height come from the distorted calibration (e.g. dslr_calibration_jpg).
  ETH3D documents these as depth maps in metres; we treat the value as z-depth, the convention
  of our own maps (a pure 2-D undistortion warp keeps the camera frame, so z carries over).
- Synthetic ground truth: NAME.npy, float32 [H, W] z-depth in metres, 0/inf/NaN where unknown.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import MVSError


def read_eth3d_depth(path: str | os.PathLike, width: int, height: int) -> np.ndarray:
    """[H, W] float32 ETH3D ground-truth depth; +inf (unknown) is kept as is."""
    path = Path(path)
    size = path.stat().st_size
    if size != 4 * width * height:
        raise MVSError(f"{path}: {size} bytes, but a {width}x{height} float32 depth map has {4 * width * height} "
                       f"(is this the right camera's size?)")
    return np.fromfile(path, dtype="<f4").reshape(height, width)


def read_gt_depth(path: str | os.PathLike, width: int | None = None, height: int | None = None) -> np.ndarray:
    """.npy -> as stored (float32); anything else -> ETH3D raw (needs width, height)."""
    path = Path(path)
    if path.suffix == ".npy":
        arr = np.load(path)
        if arr.ndim != 2:
            raise MVSError(f"{path}: expected a [H, W] depth map, got shape {arr.shape}")
        return arr.astype(np.float32, copy=False)
    if width is None or height is None:
        raise MVSError(f"{path}: raw ETH3D depth needs the image size (give the GT cameras)")
    return read_eth3d_depth(path, width, height)
