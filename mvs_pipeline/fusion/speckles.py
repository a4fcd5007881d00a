"""Speckles: small depth-map segments, which fusion ignores (`fusion.min_segment`).

PatchMatch on the blank sky (and other surfaces it cannot match) leaves scattered patches of
depths that two views can agree on by chance: seen from elsewhere they float in the sky. A real
surface is a large segment of the depth map, i.e. many 4-connected pixels whose neighbours' depths
differ by little; a speckle is a small one. OpenMVS filters its depth maps the same way
(`RemoveSmallSegments`, 100 px at its working resolution); here the size is a share of the
image's pixels, so that one setting means the same at 320x240 and at 3200x2130.

The segments are found by OpenCV's `filterSpeckles` (4-connected, written for disparity maps) on
the logarithm of the depth quantised to int16: a fixed relative depth step becomes a fixed
difference of levels, whatever the scene's units (millimetres on DTU, metres elsewhere).
"""

from __future__ import annotations

import math

import cv2
import numpy as np

NO_DEPTH = -32768     # int16 level of pixels outside every segment (no depth, or blocked)
LEVELS_PER_STEP = 4   # quantisation levels per `max_step`: neighbours within max_step (+- 1/4 step) join


def small_segments(depth: np.ndarray, usable: np.ndarray, min_pixels: int, max_step: float) -> np.ndarray:
    """[H, W] bool: pixels of segments of fewer than `min_pixels` pixels, where a segment is a
    4-connected set of `usable` pixels with depth > 0 whose neighbouring depths differ by at most
    `max_step` relative (|d1 - d2| / min(d1, d2), approximately: the levels are 1/4 step apart)."""
    valid = usable & (depth > 0)
    if min_pixels <= 1 or not valid.any():
        return np.zeros(depth.shape, bool)
    # float32 arithmetic, OpenCV's log and no boolean indexing: fusion's loader threads run this
    # side by side, and NumPy's float64 log and boolean indexing (which hold the GIL) were half of
    # its time on a 3200x2130 map
    logs = cv2.log(np.where(valid, depth, np.float32(1.0)).astype(np.float32, copy=False))
    logs *= np.float32(1.0 / math.log1p(max_step / LEVELS_PER_STEP))
    np.clip(np.rint(logs, out=logs), -32767, 32767, out=logs)
    q = np.where(valid, logs.astype(np.int16), np.int16(NO_DEPTH))
    # filterSpeckles paints every segment of at most maxSpeckleSize pixels with newVal
    filtered, _ = cv2.filterSpeckles(q, NO_DEPTH, int(min_pixels) - 1, LEVELS_PER_STEP)
    return valid & (filtered == NO_DEPTH)


def min_segment_pixels(share: float, width: int, height: int) -> int:
    """`fusion.min_segment` (a share of the image's pixels) as a pixel count for one image."""
    return int(math.ceil(share * width * height)) if share > 0 else 0
