"""Reading the scene's photos as COLMAP does: the pixels as stored, EXIF orientation ignored.

COLMAP reads images without applying their EXIF orientation tag (colmap/colmap#1406, #2104: photos
taken in any orientation share one camera), so its cameras and poses describe the stored pixels.
OpenCV's imread applies the tag: a phone's portrait JPEG would come back rotated, no longer match
its camera (a size error in the depth stage), or, if square, be matched rotated.
"""

from __future__ import annotations

import os

import cv2
import numpy as np

GREY = cv2.IMREAD_GRAYSCALE | cv2.IMREAD_IGNORE_ORIENTATION
COLOUR = cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION


def read_grey(path: str | os.PathLike) -> np.ndarray | None:
    """[H, W] uint8 grey pixels as stored, or None when OpenCV cannot read the file."""
    return cv2.imread(os.fspath(path), GREY)


def read_colour(path: str | os.PathLike) -> np.ndarray | None:
    """[H, W, 3] uint8 BGR pixels as stored, or None when OpenCV cannot read the file."""
    return cv2.imread(os.fspath(path), COLOUR)
