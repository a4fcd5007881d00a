"""fusion.halo_radius: pixels near the edge of the region with depth whose colour is the background's."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.fusion.halo import MIN_SIDE_SHARE, NEAR_BACKGROUND, halo_pixels


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
