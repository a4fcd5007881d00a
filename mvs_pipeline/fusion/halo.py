"""The halo: depth carried past a surface's outline onto the background (`fusion.halo_radius`).

A matching window that straddles an outline (a roof against the sky) finds the roof's texture
in it, so the sky pixels within a window's reach of the roof get the roof's depth. Every view does
the same, so the views agree, and the free-space test cannot object: nothing was seen behind that
band. Its pixels differ from the roof in one way: their colour is the background's.

So, per view, pixels near the edge of the region that has depth are tested against their
surroundings (a window of 2 radii): the mean colour of the pixels with depth that lie deeper
inside the region than the radius (foreground) and of the pixels without depth, or blocked
(background). A pixel is blocked when its colour is nearer the background's mean than the
foreground's and within a third of the distance between the two means of the background's: where
the two sides have the same colour there is nothing to tell, and a textured foreground's darker
or lighter pixels stay.

Where roof and sky have about the same colour (a sunlit slate roof against a pale sky) the means
cannot tell, but the outline is still an edge in the image. A surface pixel is separated from the
background by its outline; a halo pixel is the background's own and reaches it without crossing
one. So a pixel is also blocked when the straight path from it to its nearest background pixel
(both ends included) crosses no colour gradient of `edge` grey levels per px or more (`edge` = 0:
only the colour test), where that background pixel lies in an open region (at least
OPEN_BACKGROUND_SHARE of the image: sky, not a hole in a smooth surface, which this test cannot
tell from sky). On Chateau de Sceaux's sky the largest gradient on an 8 px path is below 4
in 97-98 % of cases and the sky's outline is above 4 at 90 % of its pixels (BENCHMARKS.md, session 15).
"""

from __future__ import annotations

import cv2
import numpy as np

NEAR_BACKGROUND = 1 / 3   # "background-coloured": within this share of the two means' distance
MIN_SIDE_SHARE = 0.1   # each side needs this share of the window's pixels (in the image) for its mean to count
OPEN_BACKGROUND_SHARE = 0.01   # the edge test's background: regions of at least this share of the image


def halo_pixels(color: np.ndarray, usable: np.ndarray, radius: int, edge: float = 0.0) -> np.ndarray:
    """[H, W] bool: the `usable` pixels within `radius` px of the background whose RGB colour is the
    background's, or (edge > 0) from which the background is reached without crossing a gradient of
    `edge` grey levels per px (see the module's text); `color` [H, W, 3] uint8, `usable` [H, W] bool
    (has depth and is not blocked). The background is the non-usable pixels less the holes that a square of
    side 2 * (radius // 4) + 1 does not fit in (a morphological opening): the few pixels without
    depth inside a surface are not sky, and testing around each of them would cost most of the time."""
    if radius <= 0 or usable.all() or not usable.any():
        return np.zeros(usable.shape, bool)
    side = 2 * (radius // 4) + 1
    background = cv2.morphologyEx((~usable).astype(np.uint8), cv2.MORPH_OPEN, np.ones((side, side), np.uint8))
    if not background.any():
        return np.zeros(usable.shape, bool)
    # exact Euclidean distance of each pixel to the nearest background pixel (px)
    dist = cv2.distanceTransform(1 - background, cv2.DIST_L2, cv2.DIST_MASK_PRECISE)
    band = usable & (dist <= radius)
    ys, xs = np.nonzero(band)   # the means are needed only there (arrays of the whole image are large)
    if len(ys) == 0:
        return np.zeros(usable.shape, bool)
    # the means' window reaches 2 radii: a band pixel next to the background is `radius` px from
    # the nearest core pixel, and the core's mean needs more than its first column
    r2 = 2 * radius
    size = (2 * r2 + 1, 2 * r2 + 1)
    # every window lies in the band's bounding box grown by 2 radii: the sums need no more
    h, w = usable.shape
    y0, y1 = max(0, int(ys.min()) - r2), min(h, int(ys.max()) + r2 + 1)
    x0, x1 = max(0, int(xs.min()) - r2), min(w, int(xs.max()) + r2 + 1)
    crop = (slice(y0, y1), slice(x0, x1))
    cy, cx = ys - y0, xs - x0
    color_crop = np.ascontiguousarray(color[crop])

    def side_mean(side: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # integer window sums (uint8 in, int32 out: exact, and faster than float)
        side = np.ascontiguousarray(side[crop])
        count = cv2.boxFilter(side, cv2.CV_32S, size, normalize=False, borderType=cv2.BORDER_CONSTANT)[cy, cx]
        masked = cv2.bitwise_and(color_crop, color_crop, mask=side)   # the side's colours, 0 elsewhere
        total = cv2.boxFilter(masked, cv2.CV_32S, size, normalize=False, borderType=cv2.BORDER_CONSTANT)[cy, cx]
        return total / np.maximum(count, 1)[:, None].astype(np.float32), count

    fg, fg_count = side_mean((usable & (dist > radius)).astype(np.uint8))
    bg, bg_count = side_mean(background)
    # the window's pixels inside the image, row extent x column extent (the window is clipped there)
    rows = np.minimum(ys + r2, h - 1) - np.maximum(ys - r2, 0) + 1
    cols = np.minimum(xs + r2, w - 1) - np.maximum(xs - r2, 0) + 1
    least = MIN_SIDE_SHARE * rows * cols
    c = color[ys, xs].astype(np.float32)
    to_fg = np.sqrt(((c - fg) ** 2).sum(1))
    to_bg = np.sqrt(((c - bg) ** 2).sum(1))
    contrast = np.sqrt(((fg - bg) ** 2).sum(1))
    halo = (fg_count >= least) & (bg_count >= least) & (to_bg < to_fg) & (to_bg < NEAR_BACKGROUND * contrast)
    if edge > 0:
        halo |= no_edge_to_open_background(color, background, ys, xs, radius, edge, OPEN_BACKGROUND_SHARE * h * w)
    out = np.zeros(usable.shape, bool)
    out[ys[halo], xs[halo]] = True
    return out


def colour_gradient(color: np.ndarray) -> np.ndarray:
    """[H, W] float32: per pixel the largest of the three channels' gradient magnitudes, in grey
    levels per px (3x3 Sobel / 8)."""
    largest = None
    for channel in cv2.split(color):
        gx = cv2.Sobel(channel, cv2.CV_32F, 1, 0, ksize=3, scale=0.125)
        gy = cv2.Sobel(channel, cv2.CV_32F, 0, 1, ksize=3, scale=0.125)
        magnitude = cv2.magnitude(gx, gy)
        largest = magnitude if largest is None else cv2.max(largest, magnitude)
    return largest


def no_edge_to_open_background(color: np.ndarray, background: np.ndarray, ys: np.ndarray, xs: np.ndarray,
                               radius: int, edge: float, min_open_pixels: float) -> np.ndarray:
    """[N] bool: the band pixels (ys, xs), each within `radius` px of `background` ([H, W] uint8),
    whose nearest background pixel lies in an open region (open_regions) and whose straight path
    to it crosses no colour gradient of `edge` or more. Only the open regions' surroundings are
    computed (the labels and gradients of a whole 3200x2130 image cost ~0.15 s a view)."""
    out = np.zeros(len(ys), bool)
    opened = open_regions(background, min_open_pixels)
    if not opened.any():
        return out
    # a pixel whose nearest background is open lies within `radius` of open background (the
    # 5x5-mask distance errs by ~2 %: a looser bound keeps every such pixel)
    near = cv2.distanceTransform(1 - opened.astype(np.uint8), cv2.DIST_L2, 5)[ys, xs] <= 1.1 * radius + 1
    idx = np.nonzero(near)[0]
    if len(idx) == 0:
        return out
    # paths stay within `radius` of their pixel, and the gradient reads one pixel more: in this
    # box every value is the whole image's
    h, w = background.shape
    grow = radius + 3
    y0, y1 = max(0, int(ys[idx].min()) - grow), min(h, int(ys[idx].max()) + grow + 1)
    x0, x1 = max(0, int(xs[idx].min()) - grow), min(w, int(xs[idx].max()) + grow + 1)
    box = (slice(y0, y1), slice(x0, x1))
    cy, cx = ys[idx] - y0, xs[idx] - x0
    ty, tx = nearest_background_pixel(np.ascontiguousarray(background[box]), cy, cx)
    tested = opened[box][ty, tx]
    gradient = colour_gradient(np.ascontiguousarray(color[box]))
    out[idx[tested]] = largest_gradient_on_paths(gradient, cy[tested], cx[tested], ty[tested], tx[tested]) < edge
    return out


def nearest_background_pixel(background: np.ndarray, ys: np.ndarray, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) [N]: for each pixel (ys, xs) its nearest pixel of `background` ([H, W] uint8,
    1 = background, not all 0; OpenCV's 5x5-mask distance: within ~0.15 px of the exact nearest)."""
    # DIST_LABEL_PIXEL numbers the zero pixels of the input in raster order (checked in the tests)
    _, labels = cv2.distanceTransformWithLabels(1 - background, cv2.DIST_L2, 5, labelType=cv2.DIST_LABEL_PIXEL)
    points = cv2.findNonZero(background).reshape(-1, 2)   # (x, y) in raster order, as np.nonzero
    nearest = labels[ys, xs].astype(np.int64) - 1
    return points[nearest, 1].astype(np.intp), points[nearest, 0].astype(np.intp)


def largest_gradient_on_paths(gradient: np.ndarray, ys: np.ndarray, xs: np.ndarray, ty: np.ndarray,
                              tx: np.ndarray) -> np.ndarray:
    """[N] float32: the largest `gradient` [H, W] float32 on each straight path from (ys, xs) to
    (ty, tx), both ends included, sampled at steps of at most 1 px: the pixel nearest to
    float32(start) + k / steps * float32(end - start), k = 0..steps."""
    n = len(ys)
    largest = np.zeros(n, np.float32)
    if n == 0:
        return largest
    y, x = ys.astype(np.float32), xs.astype(np.float32)
    dy, dx = (ty - ys).astype(np.float32), (tx - xs).astype(np.float32)
    steps = np.maximum(np.ceil(np.hypot(dy, dx)), np.float32(1.0))
    # OpenCV's nearest-pixel remap samples the points (rounding as np.rint does) in threads, with
    # the GIL released: fusion loads several views at once. Its maps are at most 32767 rows long.
    lanes = 1024
    shape = (-(-n // lanes), lanes)
    map_y, map_x = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    for k in range(int(steps.max()) + 1):
        t = np.minimum(np.float32(k), steps) / steps   # past its end a path repeats its last pixel
        map_y.reshape(-1)[:n] = y + t * dy
        map_x.reshape(-1)[:n] = x + t * dx
        sampled = cv2.remap(gradient, map_x, map_y, cv2.INTER_NEAREST).reshape(-1)[:n]
        np.maximum(largest, sampled, out=largest)
    return largest


def open_regions(background: np.ndarray, min_pixels: float) -> np.ndarray:
    """[H, W] bool: the `background` pixels ([H, W] uint8) of 8-connected regions of at least
    `min_pixels` pixels."""
    count, labels, stats, _ = cv2.connectedComponentsWithStats(background, connectivity=8)
    large = stats[:, cv2.CC_STAT_AREA] >= min_pixels
    large[0] = False   # label 0: the pixels that are not background
    return large[labels]
