"""The halo: depth carried past a surface's outline onto the background (`fusion.halo_radius`).

A matching window that straddles an outline (a roof against the sky) finds the roof's texture
in it, so the sky pixels within a window's reach of the roof get the roof's depth. Every view does
the same, so the views agree, and the free-space test cannot object: nothing was seen behind that
band. Its pixels differ from the roof in one way: their colour is the background's.

So, per view, pixels near the edge of the region that has depth are tested against their
surroundings (a window of 2 radii): the mean colour of the pixels with depth that lie deeper
inside the region than the radius (foreground) and of the pixels without depth, or blocked
(background). A pixel is
blocked when its colour is nearer the background's mean than the foreground's and within a third
of the distance between the two means of the background's: where the two sides have the same
colour there is nothing to tell, and a textured foreground's darker or lighter pixels stay.
"""

from __future__ import annotations

import cv2
import numpy as np

NEAR_BACKGROUND = 1 / 3   # "background-coloured": within this share of the two means' distance
MIN_SIDE_SHARE = 0.1   # each side needs this share of the window's pixels (in the image) for its mean to count


def halo_pixels(color: np.ndarray, usable: np.ndarray, radius: int) -> np.ndarray:
    """[H, W] bool: the `usable` pixels within `radius` px of a non-usable one whose RGB colour is
    the background's (see the module's text); `color` [H, W, 3] uint8, `usable` [H, W] bool
    (has depth and is not blocked)."""
    if radius <= 0 or usable.all() or not usable.any():
        return np.zeros(usable.shape, bool)
    # exact Euclidean distance of each usable pixel to the nearest non-usable one (px)
    inside = cv2.distanceTransform(usable.astype(np.uint8), cv2.DIST_L2, cv2.DIST_MASK_PRECISE)
    band = usable & (inside <= radius)
    core = (inside > radius).astype(np.float32)
    background = (~usable).astype(np.float32)
    # the means' window reaches 2 radii: a band pixel next to the background is `radius` px from
    # the nearest core pixel, and the core's mean needs more than its first column
    size = (4 * radius + 1, 4 * radius + 1)
    rgb = color.astype(np.float32)
    ys, xs = np.nonzero(band)   # the means are needed only there (arrays of the whole image are large)

    def side_mean(weight):
        count = cv2.boxFilter(weight, -1, size, normalize=False, borderType=cv2.BORDER_CONSTANT)[ys, xs]
        total = cv2.boxFilter(rgb * weight[..., None], -1, size, normalize=False,
                              borderType=cv2.BORDER_CONSTANT)[ys, xs]
        return total / np.maximum(count, 1.0)[:, None], count

    fg, fg_count = side_mean(core)
    bg, bg_count = side_mean(background)
    ones = np.ones(usable.shape, np.float32)
    least = MIN_SIDE_SHARE * cv2.boxFilter(ones, -1, size, normalize=False, borderType=cv2.BORDER_CONSTANT)[ys, xs]
    c = rgb[ys, xs]
    to_fg, to_bg = np.linalg.norm(c - fg, axis=1), np.linalg.norm(c - bg, axis=1)
    contrast = np.linalg.norm(fg - bg, axis=1)
    halo = (fg_count >= least) & (bg_count >= least) & (to_bg < to_fg) & (to_bg < NEAR_BACKGROUND * contrast)
    out = np.zeros(usable.shape, bool)
    out[ys[halo], xs[halo]] = True
    return out
