"""fusion.halo_radius: pixels near the edge of the region with depth whose colour is the background's,
and (fusion.halo_edge) those that reach the background without crossing an image edge."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.fusion.halo import MIN_SIDE_SHARE, NEAR_BACKGROUND, halo_pixels
from mvs_pipeline.fusion.halo_edge import (colour_gradient, largest_gradient_on_paths, nearest_background_pixel,
                                           open_regions)


def reference_opening(holes, side):
    """Morphological opening by a side x side square, pixel by pixel: erosion (outside the image
    counts as set, as OpenCV's default), then dilation (outside counts as unset)."""
    h, w = holes.shape
    k = side // 2
    padded = np.pad(holes, k, constant_values=True)
    eroded = np.array([[padded[y:y + side, x:x + side].all() for x in range(w)] for y in range(h)])
    padded = np.pad(eroded, k, constant_values=False)
    return np.array([[padded[y:y + side, x:x + side].any() for x in range(w)] for y in range(h)])


def reference_halo(color, usable, radius):
    """The rule of fusion/halo.py pixel by pixel: brute-force opening, distances and window means."""
    h, w = usable.shape
    rgb = color.astype(np.float64)
    background = reference_opening(~usable, 2 * (radius // 4) + 1)
    outside = np.argwhere(background)
    dist = np.full((h, w), np.inf)
    if len(outside):
        for y in range(h):
            for x in range(w):
                dist[y, x] = np.sqrt(((outside - (y, x)) ** 2).sum(1)).min()
    out = np.zeros((h, w), bool)
    for y, x in zip(*np.nonzero(usable & (dist <= radius))):
        r = 2 * radius   # the means' window
        win = (slice(max(0, y - r), y + r + 1), slice(max(0, x - r), x + r + 1))
        least = MIN_SIDE_SHARE * usable[win].size   # of the window's pixels inside the image
        core = usable[win] & (dist[win] > radius)
        back = background[win]
        if core.sum() < least or back.sum() < least:
            continue
        fg, bg = rgb[win][core].mean(0), rgb[win][back].mean(0)
        to_fg, to_bg = np.linalg.norm(rgb[y, x] - fg), np.linalg.norm(rgb[y, x] - bg)
        out[y, x] = to_bg < to_fg and to_bg < NEAR_BACKGROUND * np.linalg.norm(fg - bg)
    return out


def roof_and_sky(rng, h=40, w=56, halo=4, roof_texture=25):
    """A textured dark roof in the left part, plain light sky (with JPEG-like noise) on the right;
    the depth map reaches `halo` px into the sky."""
    edge = w // 2 + np.rint(3 * np.sin(np.arange(h) / 4 + rng.uniform(0, 6))).astype(int)   # a wavy outline
    x = np.arange(w)[None, :]
    roof = x < edge[:, None]
    color = np.empty((h, w, 3), np.float64)
    color[roof] = (60, 60, 70) + rng.normal(0, roof_texture, (roof.sum(), 1))
    color[~roof] = (150, 190, 235) + rng.normal(0, 3, ((~roof).sum(), 3))
    color = np.clip(color, 0, 255).astype(np.uint8)
    usable = x < edge[:, None] + halo
    return color, usable, usable & ~roof


@pytest.mark.parametrize("seed", range(3))
def test_halo_matches_the_rule_computed_pixel_by_pixel(seed):
    rng = np.random.default_rng(seed)
    color, usable, _ = roof_and_sky(rng, h=22, w=30, halo=3)
    mixed = rng.random(usable.shape) < 0.2     # sky-coloured pixels on the roof and the reverse
    color[mixed] = color[rng.permutation(np.argwhere(mixed))[:, 0], rng.permutation(np.argwhere(mixed))[:, 1]]
    usable &= rng.random(usable.shape) > 0.1   # scattered holes: gone in the opening from radius 4
    usable[3:9, 2:8] = False                   # a hole large enough to be background
    for radius in (2, 4, 5):
        expected = reference_halo(color, usable, radius)
        assert expected.any()
        np.testing.assert_array_equal(halo_pixels(color, usable, radius), expected)


@pytest.mark.parametrize("seed", range(4))
def test_the_sky_band_with_roof_depth_goes_and_the_roof_stays(seed):
    rng = np.random.default_rng(seed)
    color, usable, band = roof_and_sky(rng)
    got = halo_pixels(color, usable, radius=8)
    assert band.sum() > 100
    assert got[band].all()            # every sky pixel given the roof's depth
    assert not got[~band].any()       # and not one roof pixel
    assert not halo_pixels(color, usable, radius=0).any()
    holes = usable & (rng.random(usable.shape) < 0.02)   # single pixels without depth on the roof
    assert (halo_pixels(color, usable & ~holes, radius=8) == got & ~holes).all()   # are not background


def test_nothing_is_taken_where_both_sides_look_alike():
    rng = np.random.default_rng(8)
    color = rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)   # one texture everywhere
    usable = np.arange(56)[None, :].repeat(40, 0) < 30
    got = halo_pixels(color, usable, radius=8)
    # a pixel is taken only when it is within a third of the (small) contrast of the background's
    # mean: a few of 40 x 9 band pixels at most, against all of them in the roof/sky case
    assert got.sum() <= 0.05 * (usable & (np.arange(56)[None, :] >= 22)).sum()


def reference_gradient(color):
    """colour_gradient by hand: 3x3 Sobel with OpenCV's default border (reflect, edge not repeated)."""
    out = np.zeros(color.shape[:2])
    for c in range(3):
        p = np.pad(color[..., c].astype(np.float64), 1, mode="reflect")
        d = np.array([-1.0, 0.0, 1.0])
        smooth = np.array([1.0, 2.0, 1.0])
        h, w = color.shape[:2]
        gx = sum(smooth[i] * d[j] * p[i:i + h, j:j + w] for i in range(3) for j in range(3)) / 8
        gy = sum(d[i] * smooth[j] * p[i:i + h, j:j + w] for i in range(3) for j in range(3)) / 8
        out = np.maximum(out, np.hypot(gx, gy))
    return out


def reference_path_max(gradient, y, x, ty, tx):
    """The largest value on the path, pixel by pixel, in the function's float32 arithmetic."""
    f = np.float32
    steps = max(int(np.ceil(np.hypot(ty - y, tx - x))), 1)
    return max(gradient[int(np.rint(f(y) + f(k) / f(steps) * f(ty - y))),
                        int(np.rint(f(x) + f(k) / f(steps) * f(tx - x)))] for k in range(steps + 1))


@pytest.mark.parametrize("seed", range(3))
def test_largest_gradient_on_the_way_to_the_nearest_background_pixel(seed):
    rng = np.random.default_rng(seed)
    color = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    background = (rng.random((30, 40)) < 0.02).astype(np.uint8)
    background[20:26, 5:12] = 1
    np.testing.assert_allclose(colour_gradient(color), reference_gradient(color), rtol=1e-5, atol=1e-4)
    ys, xs = np.nonzero(background == 0)
    got = largest_gradient_on_paths(colour_gradient(color), ys, xs, *nearest_background_pixel(background, ys, xs))
    gradient = reference_gradient(color)
    by, bx = np.nonzero(background)
    for y, x, value in zip(ys, xs, got):
        d = np.hypot(by - y, bx - x)
        # OpenCV's nearest pixel comes from a 5x5-mask transform: within 0.2 px of the exact nearest
        near = np.nonzero(d <= d.min() + 0.2)[0]
        assert any(np.isclose(value, reference_path_max(gradient, y, x, by[i], bx[i]), rtol=1e-4) for i in near)


def test_same_coloured_roof_and_sky_the_band_goes_by_the_edge_test():
    """A roof whose mean colour is the sky's (textured around it): the colour test cannot tell the
    sides apart, the path test can: the sky pixels 2 px or more past the outline go, and of the
    roof only an outline pixel or so whose 3x3 neighbourhood happens to be sky-coloured."""
    rng = np.random.default_rng(5)
    h, w, halo = 40, 56, 5
    x = np.arange(w)[None, :].repeat(h, 0)
    roof = x < 28
    sky = np.array([150.0, 190.0, 235.0])
    color = np.empty((h, w, 3))
    color[roof] = sky + rng.normal(0, 25, (roof.sum(), 1))
    color[~roof] = sky + rng.normal(0, 1, ((~roof).sum(), 3))
    color = np.clip(color, 0, 255).astype(np.uint8)
    usable = x < 28 + halo
    colour_only = halo_pixels(color, usable, radius=8)
    both = halo_pixels(color, usable, radius=8, edge=4.0)
    band = usable & ~roof
    assert colour_only[band].mean() < 0.5         # the colour test misses most of the band
    assert both[band & (x >= 29)].all()          # the path test takes it (the first column sees the roof)
    assert (both & roof & ~colour_only).sum() <= 0.01 * roof.sum()
    assert (both | colour_only == both).all()    # the edge test only adds


def test_open_regions_keep_the_large_background_regions_only():
    background = np.zeros((20, 30), np.uint8)
    background[0:5, :] = 1          # 150 px: a strip of sky along the top
    background[10:13, 10:13] = 1    # 9 px: a hole
    background[15, 2] = 1           # 1 px
    background[16, 3] = 1           # its diagonal neighbour: one 8-connected region of 2 px
    got = open_regions(background, 9)
    assert got[0:5, :].all() and got[10:13, 10:13].all()
    assert not got[15, 2] and not got[16, 3] and got.sum() == 159
    assert open_regions(background, 2)[15, 2]


def test_a_hole_in_a_smooth_surface_keeps_its_rim():
    """A plain surface with a textureless hole in it (no depth there): the path test would take the
    rim around the hole, as it takes the sky's band; the hole is not open background, so it does not."""
    rng = np.random.default_rng(2)
    h, w = 120, 160
    color = np.clip(np.array([120.0, 110.0, 100.0]) + rng.normal(0, 1, (h, w, 3)), 0, 255).astype(np.uint8)
    usable = np.ones((h, w), bool)
    usable[50:60, 70:82] = False    # 120 px of 19,200: below OPEN_BACKGROUND_SHARE (1 %)
    assert not halo_pixels(color, usable, radius=8, edge=4.0).any()
    usable[:, 140:] = False         # a sky-sized region without depth (12.5 %) along the right
    band = halo_pixels(color, usable, radius=8, edge=4.0)
    assert band[:, 133:140].all()                   # its rim goes (nothing tells it from a halo)
    assert not band[40:70, 60:92].any()             # the hole's rim stays
