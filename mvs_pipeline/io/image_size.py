"""The size an image gets from `max_image_size`: one rule for the load stage that rescales the
images, `auto` values that count their pixels beforehand, and object masks given at the input
images' size (read at the prepared images' size)."""

from __future__ import annotations


def rescaled_size(width: int, height: int, max_image_size: int | None) -> tuple[int, int]:
    """Size after limiting the long side to max_image_size (never upscales)."""
    if max_image_size is None or max(width, height) <= max_image_size:
        return width, height
    scale = max_image_size / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))
