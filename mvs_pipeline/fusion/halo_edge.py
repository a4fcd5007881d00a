"""The halo's edge test (`fusion.halo_edge`, used by halo.py): no outline between a pixel and the sky.

Where roof and sky have about the same colour (a sunlit slate roof against a pale sky), halo.py's
colour means cannot tell, but the outline is still an edge in the image. A surface pixel is separated from the
background by its outline; a halo pixel is the background's own and reaches it without crossing
one. So a pixel is also blocked when the straight path from it to its nearest background pixel
(both ends included) crosses no colour gradient of `edge` grey levels per px or more (`edge` = 0:
only the colour test), where that background pixel lies in an open region (at least
OPEN_BACKGROUND_SHARE of the image: sky, not a hole in a smooth surface, which this test cannot
tell from sky). On Chateau de Sceaux's sky the largest gradient on an 8 px path is below 4
in 97-98 % of cases and the sky's outline is above 4 at 90 % of its pixels (session 15;
docs/decisions.md, "The halo along roofs").
"""

from __future__ import annotations

import functools

import cv2
import numpy as np

OPEN_BACKGROUND_SHARE = 0.01   # the edge test's background: regions of at least this share of the image


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
                               radius: int, edge: float) -> np.ndarray:
    """[N] bool: the band pixels (ys, xs), each within `radius` px of `background` ([H, W] uint8,
    the whole image), whose nearest background pixel lies in an open region (open_regions of
    OPEN_BACKGROUND_SHARE of the image) and whose straight path to it crosses no colour gradient
    of `edge` or more. Only the open regions' surroundings are computed (the labels and gradients
    of a whole 3200x2130 image cost ~0.15 s a view)."""
    out = np.zeros(len(ys), bool)
    opened = open_regions(background, OPEN_BACKGROUND_SHARE * background.size)
    if not opened.any():
        return out
    # a pixel whose nearest background is open lies within `radius` of open background (the
    # 5x5-mask distance errs by ~2 %: a looser bound keeps every such pixel)
    near = near_open_background(opened.view(np.uint8), 1.1 * radius + 1)[ys, xs]
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
    ty, tx = nearest_background_pixel(background[box], cy, cx)   # views: OpenCV reads rows at any stride
    tested = opened[box][ty, tx]
    gradient = colour_gradient(color[box])
    out[idx[tested]] = largest_gradient_on_paths(gradient, cy[tested], cx[tested], ty[tested], tx[tested]) < edge
    return out


def near_open_background(opened: np.ndarray, limit: float) -> np.ndarray:
    """[H, W] uint8, 1 where `cv2.distanceTransform(1 - opened, DIST_L2, 5) <= limit` (`opened`
    [H, W] uint8 0/1, not all 0), else 0, by a dilation with the set of offsets whose 5x5-mask
    distance from one pixel is within `limit`: that transform is the least chamfer path length to
    any zero pixel (integer weights, exact sums), so the two agree (the test compares them), and
    the dilation takes ~2.6 ms on a 1024x768 view against ~4.6 ms."""
    return cv2.dilate(opened, _chamfer_ball(limit))


@functools.lru_cache(maxsize=8)
def _chamfer_ball(limit: float) -> np.ndarray:
    # the 5x5 mask's distance is at least 0.98 times the Euclidean one: (2 reach + 1)^2 holds the ball
    reach = int(np.ceil(limit / 0.95)) + 1
    one = np.ones((2 * reach + 1, 2 * reach + 1), np.uint8)
    one[reach, reach] = 0
    ball = cv2.distanceTransform(one, cv2.DIST_L2, 5) <= limit
    rows, cols = np.nonzero(ball)
    assert 0 < rows.min() and rows.max() < 2 * reach and 0 < cols.min() and cols.max() < 2 * reach
    return ball[rows.min():rows.max() + 1, cols.min():cols.max() + 1].astype(np.uint8)


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
    # BBDT: 1.3-2.1 ms on the halo's backgrounds of a 1024x768 street against 4.1 for the default
    # (Spaghetti) with one OpenCV thread (the loader threads are the parallelism); the regions, so
    # the result, do not depend on the algorithm, only the labels' numbers might
    _, labels, stats, _ = cv2.connectedComponentsWithStatsWithAlgorithm(background, 8, cv2.CV_32S, cv2.CCL_BBDT)
    large = stats[:, cv2.CC_STAT_AREA] >= min_pixels
    large[0] = False   # label 0: the pixels that are not background
    return large.take(labels)   # half the time of large[labels]
