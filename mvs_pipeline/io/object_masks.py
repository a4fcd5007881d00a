"""Object masks: `<mask dir>/<image name>.png`, non-zero = object (kept), zero = ignore.

COLMAP's convention (its `stereo_fusion --mask_path`): a colour mask is read by its red channel,
a grey one as it is. Fusion (`fusion.mask_dir`, silhouettes) and the mask metrics of the
evaluation read masks here, so that one file means the same pixels to both.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from ..errors import MVSError


def mask_path_for(mask_dir: Path, name: str) -> Path | None:
    """The mask file of image `name`: `<name>.png`, or `<name>` itself for a PNG image; None if neither."""
    mask_dir = Path(mask_dir)
    candidate = mask_dir / f"{name}.png"
    if candidate.is_file():
        return candidate
    if name.lower().endswith(".png") and (mask_dir / name).is_file():
        return mask_dir / name
    return None


def read_object_mask(path: Path, name: str, width: int, height: int) -> np.ndarray:
    """[H, W] bool, True where the mask of image `name` (width x height px) is non-zero; an
    unreadable or mis-sized file is an error naming it."""
    mask = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if mask is None:
        raise MVSError(f"{path}: mask of image '{name}' is not a readable image")
    if mask.shape[:2] != (height, width):
        raise MVSError(f"{path}: mask of image '{name}' is {mask.shape[1]}x{mask.shape[0]} px but the camera is "
                       f"{width}x{height}")
    if mask.ndim == 3:  # COLMAP tests the red channel; OpenCV stores BGR(A)
        mask = mask[:, :, 2] if mask.shape[2] >= 3 else mask[:, :, 0]
    return mask != 0
