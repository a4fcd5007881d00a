"""Points that a synthetic scene's views see against the background: floaters, known exactly.

A synthetic view's ground-truth depth is 0 where its ray hits nothing (sky, studio backdrop). No
point of a surface can project onto such a pixel of a view that has it in front and inside the
image: that view's ray through the pixel meets nothing at all. So a reconstructed point that
does is a floater, such as the "sky" that PatchMatch gives a depth to and geometric consistency
makes agree across views. The ETH3D scores do not see these points (the scanners observed no
space there), so this share is their only measure (benchmarks/bench_quality.py reports it).
The background is eroded by one pixel, so that points on an outline that fall on its neighbour
by rounding do not count.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from .oracle import gt_depth


def points_against_background(views, gt_depth_dir: Path, xyz: np.ndarray) -> np.ndarray:
    """[N] bool: the world points `xyz` [N, 3] that some view of `views` (scene.View) sees against
    its background (ground-truth depth 0 at the pixel and its 8 neighbours)."""
    hit = np.zeros(len(xyz), bool)
    for view in views:
        nothing = ~(gt_depth(gt_depth_dir, view) > 0)
        nothing = cv2.erode(nothing.astype(np.uint8), np.ones((3, 3), np.uint8), borderValue=0).astype(bool)
        uv, z = view.project(xyz)
        with np.errstate(invalid="ignore"):
            inside = (z > 0) & (uv[:, 0] >= 0) & (uv[:, 0] < view.width) & (uv[:, 1] >= 0) & (uv[:, 1] < view.height)
        cols = np.floor(uv[inside, 0]).astype(np.intp)   # COLMAP's pixel (i, j) spans [i, i + 1)
        rows = np.floor(uv[inside, 1]).astype(np.intp)
        hit[inside] |= nothing[rows, cols]
    return hit
