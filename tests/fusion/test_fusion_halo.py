"""fusion.halo_radius: pixels near the edge of the region with depth whose colour is the background's."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.fusion.halo import MIN_SIDE_SHARE, NEAR_BACKGROUND, halo_pixels


def reference_halo(color, usable, radius):
    """The rule of fusion/halo.py pixel by pixel: brute-force distances and window means."""
    h, w = usable.shape
    rgb = color.astype(np.float64)
    outside = np.argwhere(~usable)
    yy, xx = np.mgrid[0:h, 0:w]
    inside = np.full((h, w), np.inf)
    for y, x in zip(*np.nonzero(usable)):
        inside[y, x] = np.sqrt(((outside - (y, x)) ** 2).sum(1)).min() if len(outside) else np.inf
    out = np.zeros((h, w), bool)
    for y, x in zip(*np.nonzero(usable & (inside <= radius))):
        r = 2 * radius   # the means' window
        win = (slice(max(0, y - r), y + r + 1), slice(max(0, x - r), x + r + 1))
        least = MIN_SIDE_SHARE * usable[win].size   # of the window's pixels inside the image
        core = usable[win] & (inside[win] > radius)
        back = ~usable[win]
        if core.sum() < least or back.sum() < least:
            continue
        fg, bg = rgb[win][core].mean(0), rgb[win][back].mean(0)
        to_fg, to_bg = np.linalg.norm(rgb[y, x] - fg), np.linalg.norm(rgb[y, x] - bg)
        out[y, x] = to_bg < to_fg and to_bg < NEAR_BACKGROUND * np.linalg.norm(fg - bg)
    return out


def roof_and_sky(rng, h=40, w=56, halo=4, roof_texture=25):
    """A textured dark roof in the left part, plain light sky (with JPEG-like noise) on the right;
    the depth map reaches `halo` px into the sky."""
    edge = w // 2 + rng.integers(-3, 4, h)   # a ragged outline
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
    color = rng.integers(0, 256, (23, 31, 3), dtype=np.uint8)
    color[:, 15:] //= 3                        # two sides of different colour
    usable = rng.random((23, 31)) > 0.15
    usable[:, 20:] &= rng.random((23, 11)) > 0.6
    for radius in (2, 4):
        np.testing.assert_array_equal(halo_pixels(color, usable, radius), reference_halo(color, usable, radius))


@pytest.mark.parametrize("seed", range(4))
def test_the_sky_band_with_roof_depth_goes_and_the_roof_stays(seed):
    rng = np.random.default_rng(seed)
    color, usable, band = roof_and_sky(rng)
    got = halo_pixels(color, usable, radius=8)
    assert band.sum() > 100
    assert got[band].all()            # every sky pixel given the roof's depth
    assert not got[~band].any()       # and not one roof pixel
    assert not halo_pixels(color, usable, radius=0).any()


def test_nothing_is_taken_where_both_sides_look_alike():
    rng = np.random.default_rng(8)
    color = rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)   # one texture everywhere
    usable = np.arange(56)[None, :].repeat(40, 0) < 30
    got = halo_pixels(color, usable, radius=8)
    # a pixel is taken only when it is within a third of the (small) contrast of the background's
    # mean: a few of 40 x 9 band pixels at most, against all of them in the roof/sky case
    assert got.sum() <= 0.05 * (usable & (np.arange(56)[None, :] >= 22)).sum()
