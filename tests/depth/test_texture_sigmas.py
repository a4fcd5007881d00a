"""Sigmas by texture: patchmatch.sigma_color_weak, a second bilateral colour sigma for windows whose
own samples are nearly flat (their std below patchmatch.weak_texture), and sigma_spatial_textured, a
second spatial sigma for the others. The CPU twin's window weights against a NumPy reference written
from the definition, and the solver's limits (every window weak or textured = that sigma everywhere,
none = the plain sigmas). The CUDA kernels against the twin with both kinds of window in play:
tests/depth/test_patchmatch_gpu.py::test_view_costs_match_cpu."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.depth.patchmatch import PatchMatchParams, PatchMatchProblem, cpu, run_patchmatch
from mvs_pipeline.depth.patchmatch.packing import pack_params
from mvs_pipeline.depth.patchmatch.toy_scene import make_toy_scene
from mvs_pipeline.depth.patchmatch.window import window_offsets

from .bilateral_reference import bilateral_weights


def _half_flat_image(rng, h=30, w=40):
    """Left half: a wall (100 grey levels + noise of std 1); right half: texture (std ~74)."""
    image = rng.uniform(0, 255, (h, w))
    image[:, : w // 2] = 100 + rng.normal(0, 1.0, (h, w // 2))
    return image.astype(np.float32)


def _weights_ref(ref, x, y, params):
    """The bilateral weights of the window at (x, y), from the definition (NumPy, float64)."""
    offs = np.array(window_offsets(params.window_radius, params.window_step))
    dx, dy = np.meshgrid(offs, offs)
    H, W = ref.shape
    vals = ref[np.clip(y + dy, 0, H - 1), np.clip(x + dx, 0, W - 1)].astype(np.float64)
    return bilateral_weights(vals, dx, dy, ref[y, x], params).ravel(), vals.std()


@pytest.mark.parametrize("weak,textured", [(None, None), (1.0, None), (None, 1.2), (1.0, 2.0)])
def test_twin_window_weights_follow_the_definition(weak, textured):
    rng = np.random.default_rng(11)
    ref = _half_flat_image(rng)
    params = PatchMatchParams(sigma_color_weak=weak, sigma_spatial_textured=textured, weak_texture=4.0)
    f, _ = pack_params(params, _problem(ref), 0, 0)
    n = len(window_offsets(5, 2)) ** 2
    rv, rw = np.zeros(n), np.zeros(n)
    stds = []
    for y in range(0, 30, 3):
        for x in range(0, 40, 3):
            cpu.ref_window(ref, x, y, 5, 2, f, rv, rw)
            want, std = _weights_ref(ref, x, y, params)
            np.testing.assert_allclose(rw, want, rtol=1e-5, atol=1e-9)
            stds.append(std)
    stds = np.array(stds)
    assert (stds < 4).sum() > 20 and (stds > 4).sum() > 20   # both kinds of window were checked


def test_window_variance_is_the_samples_variance():
    rng = np.random.default_rng(12)
    ref = _half_flat_image(rng)
    offs = np.array(window_offsets(5, 2))
    dx, dy = np.meshgrid(offs, offs)
    for x, y in ((0, 0), (5, 7), (19, 12), (20, 12), (39, 29)):
        vals = ref[np.clip(y + dy, 0, 29), np.clip(x + dx, 0, 39)].astype(np.float64)
        assert cpu.window_variance(ref, x, y, 5, 2) == pytest.approx(vals.var(), rel=1e-4, abs=1e-3)


def _problem(ref):
    K = np.array([[50.0, 0, 20], [0, 50.0, 15], [0, 0, 1]])
    return PatchMatchProblem(ref_image=ref, src_images=[ref], K_ref=K, K_src=K[None], R_src_from_ref=np.eye(3)[None],
                             t_src_from_ref=np.array([[0.1, 0, 0]]), depth_min=1.0, depth_max=10.0)


@pytest.fixture(scope="module")
def toy():
    return make_toy_scene(96, 72, num_sources=4, seed=3)


def _solve(problem, **kw):
    res = run_patchmatch(problem, PatchMatchParams(iterations=1, **kw), backend="cpu", seed=5)
    return res.depth, res.normal, res.cost


def test_solver_limits(toy):
    """A window's std never reaches 255 grey levels, so weak_texture 255 gives sigma_color_weak
    everywhere, which is sigma_color set to it (no second sigma); no std is below 0, so 0 is
    sigma_color's maps alone."""
    acmm = {"sigma_spatial_textured": None}   # one spatial sigma: the colour sigmas alone in play
    everywhere = _solve(toy.problem, sigma_color_weak=1.5, weak_texture=255.0, **acmm)
    plain = _solve(toy.problem, sigma_color=1.5, sigma_color_weak=None, **acmm)
    nowhere = _solve(toy.problem, sigma_color_weak=1.5, weak_texture=0.0, **acmm)
    default = _solve(toy.problem, sigma_color_weak=None, **acmm)
    for a, b in zip(everywhere, plain):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(nowhere, default):
        np.testing.assert_array_equal(a, b)
    assert (everywhere[0] != default[0]).mean() > 0.1   # the second sigma changes the maps


def test_solver_limits_of_the_textured_sigma(toy):
    """weak_texture 0: every window is textured, so sigma_spatial_textured is sigma_spatial set to it;
    255: none is, so the maps are sigma_spatial's alone."""
    everywhere = _solve(toy.problem, sigma_spatial_textured=1.2, weak_texture=0.0)
    plain = _solve(toy.problem, sigma_spatial=1.2, sigma_spatial_textured=None)
    nowhere = _solve(toy.problem, sigma_spatial_textured=1.2, weak_texture=255.0)
    default = _solve(toy.problem, sigma_spatial_textured=None)
    for a, b in zip(everywhere, plain):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(nowhere, default):
        np.testing.assert_array_equal(a, b)
    assert (everywhere[0] != default[0]).mean() > 0.1   # the second sigma changes the maps
