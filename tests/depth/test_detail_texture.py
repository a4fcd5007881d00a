"""depth.detail_texture: the detail restorer limited to weakly textured pixels. The texture mask
against a direct per-pixel std, NumPy against CuPy, and the restorer's effect with the mask."""

from __future__ import annotations

import dataclasses

import cv2
import numpy as np
import pytest

from mvs_pipeline.cli import main
from mvs_pipeline.depth.patchmatch import PatchMatchParams, run_patchmatch
from mvs_pipeline.depth.patchmatch.detail_restore import weak_texture
from mvs_pipeline.depth.patchmatch.toy_scene import make_toy_scene


def _direct_std(image: np.ndarray, radius: int) -> np.ndarray:
    """Each pixel's window std, one window at a time (the reference), the image mirrored at its
    border by index arithmetic (OpenCV's BORDER_REFLECT_101: ... 2 1 | 0 1 2 ... | W-2 W-3 ...)."""
    H, W = image.shape

    def mirror(i, n):
        return -i if i < 0 else (2 * (n - 1) - i if i >= n else i)

    out = np.empty((H, W))
    for y in range(H):
        for x in range(W):
            win = [float(image[mirror(yy, H), mirror(xx, W)]) for yy in range(y - radius, y + radius + 1)
                   for xx in range(x - radius, x + radius + 1)]
            out[y, x] = np.std(win)
    return out


@pytest.mark.parametrize("radius", [1, 5])
def test_weak_texture_is_the_window_std_below_the_threshold(radius):
    rng = np.random.default_rng(radius)
    # a flat half (std 0 + noise) and a textured half, float grey levels as the pyramid gives
    image = np.concatenate([100 + rng.normal(0, 1.0, (23, 17)), rng.uniform(0, 255, (23, 18))], 1).astype(np.float32)
    std = _direct_std(image, radius)
    for threshold in (2.0, 4.0, 30.0):
        got = weak_texture(image, threshold, radius)
        clear = np.abs(std - threshold) > 1e-6   # pixels at the threshold itself may go either way
        np.testing.assert_array_equal(got[clear], (std < threshold)[clear])
    assert weak_texture(image, 4.0, radius)[:, :10].all()          # the flat side, away from the seam
    assert not weak_texture(image, 4.0, radius)[:, -10:].any()     # the textured side
    # OpenCV's box filter, an independent implementation of the same mirrored window
    g = image.astype(np.float64)
    k = (2 * radius + 1, 2 * radius + 1)
    var = cv2.blur(g * g, k) - cv2.blur(g, k) ** 2
    clear = np.abs(np.sqrt(np.maximum(var, 0)) - 4.0) > 1e-6
    np.testing.assert_array_equal(weak_texture(image, 4.0, radius)[clear], (var < 16.0)[clear])


def test_restorer_limited_to_weak_texture_leaves_textured_pixels_free():
    """The GT as prior and a margin no refinement can beat: with restore_only every pixel outside
    it may leave the prior (some do), and every pixel inside it keeps the prior exactly."""
    toy = make_toy_scene(96, 72, num_sources=4, seed=5)
    params = PatchMatchParams(iterations=1)
    prior = dataclasses.replace(toy.problem, init_depth=toy.gt_depth, init_normal=toy.gt_normal)
    only = np.zeros(toy.gt_depth.shape, bool)
    only[:, : only.shape[1] // 2] = True
    res = run_patchmatch(prior, params, backend="cpu", seed=3, restore_margin=2.0, restore_only=only)
    m = toy.gt_depth > 0
    np.testing.assert_allclose(res.depth[m & only], toy.gt_depth[m & only], rtol=1e-6)
    free = m & ~only
    assert (np.abs(res.depth[free] - toy.gt_depth[free]) > 1e-6 * toy.gt_depth[free]).any()
    # without the mask the same margin keeps the prior everywhere
    kept = run_patchmatch(prior, params, backend="cpu", seed=3, restore_margin=2.0)
    np.testing.assert_allclose(kept.depth[m], toy.gt_depth[m], rtol=1e-6)


def _final_depths(out) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "stereo" / "depth_maps").glob("*.geometric.bin"))}


@pytest.mark.slow
def test_the_stage_restores_everywhere_at_255_and_nowhere_at_0(synth_scene_factory, tmp_path):
    """Through the depth stage (two scales): every pixel's std is below 255 grey levels, so 255
    gives the restorer everywhere's maps (null, ACMM) byte for byte; no std is below 0, so 0 gives
    detail_margin null's; and those two differ (the restorer does something here)."""
    scene = synth_scene_factory("object", views=5, width=200, height=150)
    fast = ["--set", "backend=cpu", "--set", "depth.coarsest_max_size=100", "--set", "depth.geometric_passes=1",
            "--set", "patchmatch.iterations=1"]
    maps = {}
    for label, extra in (("everywhere", ["--set", "depth.detail_texture=null"]),
                         ("all", ["--set", "depth.detail_texture=255"]),
                         ("none", ["--set", "depth.detail_texture=0"]),
                         ("null", ["--set", "depth.detail_margin=null"])):
        out = tmp_path / label
        assert main(["-q", "run", str(scene), "-o", str(out), "--stages", "load,views,depth", *fast, *extra]) == 0
        maps[label] = _final_depths(out)
    assert len(maps["everywhere"]) == 5
    assert maps["all"] == maps["everywhere"]
    assert maps["none"] == maps["null"]
    assert maps["none"] != maps["everywhere"]


@pytest.mark.gpu
def test_weak_texture_on_the_gpu_matches_numpy(cupy):
    rng = np.random.default_rng(7)
    for shape in ((48, 64), (301, 517)):
        image = (rng.uniform(0, 1, shape) ** 3 * 255).astype(np.float32)   # mostly dark, some texture
        image[: shape[0] // 2] = 80 + rng.normal(0, 2, (shape[0] // 2, shape[1]))
        for threshold in (1.0, 4.0, 8.0):
            want = weak_texture(image, threshold)
            got = cupy.asnumpy(weak_texture(cupy.asarray(image), threshold))
            assert (got != want).mean() < 1e-4   # only pixels within rounding of the threshold


@pytest.mark.gpu
def test_restorer_mask_on_the_gpu_as_on_the_cpu(cupy):
    """The same prior, margin and mask on both backends: the masked half keeps the prior exactly."""
    toy = make_toy_scene(96, 72, num_sources=4, seed=5)
    params = PatchMatchParams(iterations=1)
    prior = dataclasses.replace(toy.problem, init_depth=toy.gt_depth, init_normal=toy.gt_normal)
    only = np.zeros(toy.gt_depth.shape, bool)
    only[:, : only.shape[1] // 2] = True
    m = toy.gt_depth > 0
    for mask in (only, cupy.asarray(only)):
        res = run_patchmatch(prior, params, backend="cuda", seed=3, restore_margin=2.0, restore_only=mask)
        depth = cupy.asnumpy(res.depth) if isinstance(res.depth, cupy.ndarray) else res.depth
        np.testing.assert_allclose(depth[m & only], toy.gt_depth[m & only], rtol=1e-6)
        assert (np.abs(depth[m & ~only] - toy.gt_depth[m & ~only]) > 1e-6 * toy.gt_depth[m & ~only]).any()
