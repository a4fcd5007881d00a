"""The size an image gets from `max_image_size`: one rule for the load stage that rescales the
images, `auto` values that count their pixels or read their focal length (beforehand, or in the
prepared scene), and object masks given at the input images' size (read at the prepared images' size)."""

from __future__ import annotations

import numpy as np


def rescaled_size(width: int, height: int, max_image_size: int | None) -> tuple[int, int]:
    """Size after limiting the long side to max_image_size (never upscales)."""
    if max_image_size is None or max(width, height) <= max_image_size:
        return width, height
    scale = max_image_size / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def pixels_in_all(views, max_image_size: int | None = None) -> int:
    """Image pixels summed over `views` (anything with width and height), each image as
    `max_image_size` leaves it (None: as it is, e.g. a prepared scene)."""
    total = 0
    for v in views:
        width, height = rescaled_size(v.width, v.height, max_image_size)
        total += width * height
    return total


def median_focal_px(views, max_image_size: int | None = None) -> float:
    """The median over `views` (anything with width, height and K) of the focal length in px, (fx + fy) / 2, each
    image as `max_image_size` leaves it (None: as it is, e.g. a prepared scene)."""
    focals = [0.5 * (v.K[0, 0] + v.K[1, 1]) * rescaled_size(v.width, v.height, max_image_size)[0] / v.width
              for v in views]
    return float(np.median(focals))
