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
from .image_size import rescaled_size


def mask_path_for(mask_dir: Path, name: str) -> Path | None:
    """The mask file of image `name`: `<name>.png`, or `<name>` itself for a PNG image; None if neither."""
    mask_dir = Path(mask_dir)
    candidate = mask_dir / f"{name}.png"
    if candidate.is_file():
        return candidate
    if name.lower().endswith(".png") and (mask_dir / name).is_file():
        return mask_dir / name
    return None


def is_rescaled_to(mask_width: int, mask_height: int, width: int, height: int) -> bool:
    """Whether `max_image_size` takes an image of the mask's size to width x height (the load
    stage's rule): the mask was made for the input image, which the load stage rescaled."""
    return (mask_width, mask_height) != (width, height) and \
        rescaled_size(mask_width, mask_height, max(width, height)) == (width, height)


def _wrong_size(path: Path, name: str, mask_width: int, mask_height: int, width: int, height: int) -> str:
    """The error for a mask whose size is neither the camera's nor the camera's before rescaling
    (without its closing parenthesis: the early check adds the config key inside it)."""
    return (f"{path}: mask of image '{name}' is {mask_width}x{mask_height} px but the camera is {width}x{height} "
            f"(masks must have the image's size in the prepared workspace, or its size before max_image_size "
            f"rescaled it")


def read_object_mask(path: Path, name: str, width: int, height: int) -> np.ndarray:
    """[H, W] bool, True where the mask of image `name` (width x height px) is non-zero; an
    unreadable or mis-sized file is an error naming it.

    A mask of the input image's size, where `max_image_size` made the prepared image smaller, is
    rescaled to it: a pixel is inside where most of its area is (area averaging, then >= 1/2), so
    masks keep working with the images they were drawn on. Other sizes (an undistorted workspace
    whose masks were drawn on the distorted photos) are refused: the pixels would not correspond."""
    mask = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if mask is None:
        raise MVSError(f"{path}: mask of image '{name}' is not a readable image")
    if mask.ndim == 3:  # COLMAP tests the red channel; OpenCV stores BGR(A)
        mask = mask[:, :, 2] if mask.shape[2] >= 3 else mask[:, :, 0]
    inside = mask != 0
    mask_height, mask_width = inside.shape
    if (mask_height, mask_width) == (height, width):
        return inside
    if is_rescaled_to(mask_width, mask_height, width, height):
        area = cv2.resize(inside.astype(np.float32), (width, height), interpolation=cv2.INTER_AREA)
        return area >= 0.5
    raise MVSError(_wrong_size(path, name, mask_width, mask_height, width, height) + ")")


def _header_size(path: Path) -> tuple[int, int] | None:
    """(width, height) from the file's header alone, None when it is not an image Pillow knows."""
    from PIL import Image, UnidentifiedImageError  # noqa: PLC0415 (only for runs with masks)

    try:
        with Image.open(path) as im:
            return im.size
    except (UnidentifiedImageError, OSError, ValueError):
        return None


def check_mask_files(mask_dir: Path, views, key: str, required: bool) -> None:
    """Before the depth stage: every mask `read_object_mask` would read later is an image of a size
    it accepts (and, with `required`, present), so a wrong mask folder fails in a second instead of
    after the depth stage. `views`: the prepared scene's views (name, width, height); `key` names
    the config key in the errors."""
    mask_dir = Path(mask_dir)
    if not mask_dir.is_dir():
        raise MVSError(f"{key}: {mask_dir} is not a folder")
    for view in views:
        path = mask_path_for(mask_dir, view.name)
        if path is None:
            if required:
                raise MVSError(f"{mask_dir / (view.name + '.png')}: mask of image '{view.name}' not found ({key})")
            continue
        size = _header_size(path)
        if size is None:
            raise MVSError(f"{path}: mask of image '{view.name}' is not a readable image ({key})")
        if size != (view.width, view.height) and not is_rescaled_to(*size, view.width, view.height):
            raise MVSError(_wrong_size(path, view.name, *size, view.width, view.height) + f"; {key})")
