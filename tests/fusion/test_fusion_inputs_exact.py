"""The faster pixel filters of fusion's loader (session 22) give what the earlier formulas gave, bit for bit:
each new function against the formula it replaced (kept here, not in the package), and load_view whole
against itself with those formulas patched back in."""

from __future__ import annotations

import logging

import cv2
import numpy as np
import pytest

from mvs_pipeline.fusion import halo, halo_edge, inputs
from mvs_pipeline.fusion.halo import near_background, window_corners, window_sums
from mvs_pipeline.fusion.halo_edge import near_open_background, open_regions
from mvs_pipeline.fusion.inputs import ViewInputs, load_view, local_grey_std, low_texture, low_textures
from mvs_pipeline.io.colmap_maps import write_depth_map, write_normal_map

# ---- the earlier formulas --------------------------------------------------------------------------------


def old_near_background(background, radius):
    return (cv2.distanceTransform(1 - background, cv2.DIST_L2, cv2.DIST_MASK_PRECISE) <= radius).astype(np.uint8)


def old_near_open_background(opened, limit):
    return (cv2.distanceTransform(1 - opened, cv2.DIST_L2, 5) <= limit).astype(np.uint8)


def old_open_regions(background, min_pixels):
    _, labels, stats, _ = cv2.connectedComponentsWithStats(background, connectivity=8)
    large = stats[:, cv2.CC_STAT_AREA] >= min_pixels
    large[0] = False
    return large[labels]


def old_low_texture(bgr, min_texture, window=inputs.TEXTURE_WINDOW):
    return local_grey_std(bgr, window) < min_texture


def old_window_sums(image, ys, xs, reach):
    size = (2 * reach + 1, 2 * reach + 1)
    return cv2.boxFilter(image, cv2.CV_32S, size, normalize=False, borderType=cv2.BORDER_CONSTANT)[ys, xs]


def brute_window_sums(image, corners):
    """window_sums from the corners it is given, one window at a time (for load_view's reference)."""
    w1 = image.shape[1] + 1
    br, _, _, tl = corners
    out = [image[a // w1:b // w1, a % w1:b % w1].sum((0, 1)) for a, b in zip(tl, br)]
    return np.array(out, np.int32).reshape((len(br),) + image.shape[2:])


def old_block(blocked, pixels):
    blocked[pixels] = 1


def backgrounds(seed, count=40):
    """Random 0/1 uint8 images: scattered pixels, blobs, bands along the borders, all 1, one pixel."""
    rng = np.random.default_rng(seed)
    for k in range(count):
        h, w = (int(v) for v in rng.integers(1, 90, 2))
        bg = (rng.random((h, w)) < rng.choice([0.002, 0.02, 0.2, 0.6, 0.95])).astype(np.uint8)
        if k % 3 == 0:
            bg = cv2.dilate(bg, np.ones((5, 5), np.uint8))
        if k % 5 == 1:
            bg[:, :2] = 1
            bg[-1] = 1
        if not bg.any():
            bg[int(rng.integers(h)), int(rng.integers(w))] = 1
        yield bg
    yield np.ones((17, 23), np.uint8)
    one = np.zeros((31, 29), np.uint8)
    one[0, 28] = 1
    yield one


# ---- the functions one by one ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_near_background_is_the_precise_distance_transform_within_the_radius(seed):
    for bg in backgrounds(seed):
        for radius in (1, 2, 3, 5, 8, 13, 20, 64):
            np.testing.assert_array_equal(near_background(bg, radius), old_near_background(bg, radius))


@pytest.mark.parametrize("seed", range(3))
def test_near_open_background_is_the_5x5_mask_distance_within_the_limit(seed):
    for bg in backgrounds(seed):
        for limit in [1.1 * r + 1 for r in (1, 2, 4, 8, 16, 64)] + [0.5, 1.0, 1.4, 2.1969, 7.3]:
            np.testing.assert_array_equal(near_open_background(bg, limit), old_near_open_background(bg, limit))


@pytest.mark.parametrize("seed", range(3))
def test_open_regions_match_the_default_labelling(seed):
    for bg in backgrounds(seed):
        for min_pixels in (1, 5, 0.01 * bg.size, 40, 1e9):
            np.testing.assert_array_equal(open_regions(bg, min_pixels), old_open_regions(bg, min_pixels))


@pytest.mark.parametrize("channels", [1, 3])
def test_window_sums_match_a_zero_bordered_box_filter(channels):
    rng = np.random.default_rng(channels)
    for _ in range(20):
        h, w = (int(v) for v in rng.integers(1, 70, 2))
        image = rng.integers(0, 256, (h, w, channels) if channels > 1 else (h, w), dtype=np.uint8)
        ys, xs = rng.integers(0, h, 300), rng.integers(0, w, 300)
        ys[:4], xs[:4] = (0, 0, h - 1, h - 1), (0, w - 1, 0, w - 1)   # the corners
        for reach in (1, 2, 7, 16, 40):
            got = window_sums(image, window_corners((h, w), ys, xs, reach))
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got, old_window_sums(image, ys, xs, reach))


def test_window_sums_of_a_large_image_sum_in_float64():
    # past 2^31 / 255 pixels a whole white image's sum leaves int32: the integral is taken in float64
    h, w = 2900, 2910
    image = np.full((h, w), 255, np.uint8)
    ys, xs = np.array([0, h // 2, h - 1]), np.array([w - 1, w // 2, 0])
    got = window_sums(image, window_corners((h, w), ys, xs, 16))
    np.testing.assert_array_equal(got, old_window_sums(image, ys, xs, 16))


def textured_images(seed):
    rng = np.random.default_rng(seed)
    h, w = 60, 80
    y, x = np.mgrid[0:h, 0:w]
    ramp = np.stack([x * 3, y * 4, x + y], -1) % 256
    yield rng.integers(0, 256, (h, w, 3), dtype=np.uint8)                        # noise
    yield (ramp + rng.integers(0, 3, (h, w, 3))).astype(np.uint8)                 # smooth, a little noise
    flat = np.full((h, w, 3), 128, np.uint8)
    flat[20:40, 30:60] = rng.integers(100, 110, (20, 30, 3))                     # a flat field, a faint patch
    flat[:, :3] = 0                                                              # a dark border
    yield flat
    yield np.full((h, w, 3), 255, np.uint8)                                      # one colour


@pytest.mark.parametrize("seed", range(2))
def test_low_texture_is_the_standard_deviation_below_the_threshold(seed):
    for bgr in textured_images(seed):
        for window in (3, 11, 13, 15):   # 15: past int32, the float64 formula itself
            std = local_grey_std(bgr, window)
            ties = [float(v) for v in np.unique(std)[::7][:12]]   # thresholds equal to values that occur
            thresholds = [1.0, 0.5, 3.0, 0.1, 1e-3, 100.0, 127.5, 255.0, 1e-12] + ties
            for t in thresholds:
                np.testing.assert_array_equal(low_texture(bgr, t, window), old_low_texture(bgr, t, window))
            for t, mask in zip(thresholds, low_textures(bgr, thresholds, window), strict=True):   # one pass, many
                np.testing.assert_array_equal(mask, old_low_texture(bgr, t, window))


def test_spread_threshold_is_where_the_standard_deviation_reaches_the_threshold():
    n = inputs.TEXTURE_WINDOW ** 2

    def below(s, t):
        return bool(cv2.sqrt(np.array([[float(s)]])).astype(np.float32)[0, 0] * np.float32(1.0 / n) < t)

    for t in (0.25, 1.0, 4.0, 1 / 3, 10.1):
        k = inputs._spread_threshold(t, n)
        assert below(k - 1, t) and not below(k, t)


# ---- load_view whole ---------------------------------------------------------------------------------------


def write_view(tmp_path, name, depth, bgr, mask=None):
    h, w = depth.shape
    d, n = tmp_path / f"{name}.depth.bin", tmp_path / f"{name}.normal.bin"
    write_depth_map(d, depth, durable=False)
    normal = np.zeros((h, w, 3), np.float32)
    normal[..., 2] = -1
    write_normal_map(n, normal, durable=False)
    image = tmp_path / f"{name}.png"
    cv2.imwrite(str(image), bgr)
    mask_path = None
    if mask is not None:
        mask_path = tmp_path / f"{name}.mask.png"
        cv2.imwrite(str(mask_path), mask.astype(np.uint8) * 255)
    return ViewInputs(0, name, w, h, d, n, image, mask_path)


def street(rng, h, w, kind):
    """A slanted ground with a sky band over a wavy outline, the ground's depth carried 3 px into the sky,
    scattered holes, speckles in the sky; a textured ground, a flat sky; `kind` varies it."""
    y, x = np.mgrid[0:h, 0:w]
    depth = (4 + 0.02 * x + 0.05 * y).astype(np.float32)
    outline = h // 3 + np.rint(4 * np.sin(x / 9)).astype(int)
    depth[y < outline - 3] = 0
    depth[rng.random((h, w)) < 0.04] = 0
    sky = (y < outline - 3) & (rng.random((h, w)) < 0.01)
    depth[sky] = rng.uniform(2, 40, int(sky.sum()))
    bgr = np.empty((h, w, 3), np.uint8)
    bgr[:] = (235, 190, 150)
    ground = y >= outline
    bgr[ground] = rng.integers(40, 120, (int(ground.sum()), 3))
    bgr[(y >= outline) & (x > w * 2 // 3)] = (236, 190, 151)   # ground of the sky's colour: the edge test's case
    if kind == "no depth":
        depth[:] = 0
    elif kind == "all depth":
        depth[depth <= 0] = 7.5
    elif kind == "border holes":
        depth[:, :4] = 0
        depth[-5:, :] = 0
        depth[10:30, -6:] = 0
    elif kind == "nan":
        depth[rng.random((h, w)) < 0.01] = np.nan
    return depth, bgr


def reference_load_view(monkeypatch, inp, **filters):
    with monkeypatch.context() as m:
        m.setattr(halo, "near_background", old_near_background)
        m.setattr(halo, "window_sums", brute_window_sums)
        m.setattr(halo_edge, "near_open_background", old_near_open_background)
        m.setattr(halo_edge, "open_regions", old_open_regions)
        m.setattr(inputs, "low_texture", old_low_texture)
        m.setattr(inputs, "_block", old_block)
        return load_view(inp, **filters)


FILTERS = [dict(min_texture=1.0, min_segment=1e-4, segment_depth_step=0.1, halo_radius=8, halo_edge=4.0),
           dict(min_texture=3.0, min_segment=1e-3, segment_depth_step=0.05, halo_radius=4, halo_edge=2.0),
           dict(halo_radius=5),
           dict(min_texture=0.5, halo_radius=12, halo_edge=8.0)]


@pytest.mark.parametrize("kind", ["street", "no depth", "all depth", "border holes", "nan", "masked"])
def test_load_view_matches_the_earlier_formulas(tmp_path, monkeypatch, kind):
    logging.getLogger("mvs_pipeline.fusion.inputs").setLevel(logging.ERROR)   # the NaN warning
    rng = np.random.default_rng(len(kind))
    h, w = 96, 128
    depth, bgr = street(rng, h, w, kind)
    mask = None
    if kind == "masked":
        mask = np.ones((h, w), bool)
        mask[:, :20] = False
        mask[50:60, 60:90] = False
    inp = write_view(tmp_path, kind.replace(" ", "_"), depth, bgr, mask)
    seen = {"halo_pixels": 0, "speckle_pixels": 0, "textureless_pixels": 0}
    for filters in FILTERS:
        got, want = load_view(inp, **filters), reference_load_view(monkeypatch, inp, **filters)
        seen = {k: v + getattr(want, k) for k, v in seen.items()}
        for field in ("depth", "normal", "color", "blocked"):
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=field)
            assert getattr(got, field).dtype == getattr(want, field).dtype
        for field in ("valid_pixels", "masked_pixels", "textureless_pixels", "speckle_pixels", "halo_pixels"):
            assert getattr(got, field) == getattr(want, field), field
    if kind == "street":   # every filter had pixels to block
        assert all(seen.values()), seen
