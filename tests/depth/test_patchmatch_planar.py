"""The planar prior term (ACMP) of the PatchMatch cost, CPU twin: the penalty's values, and what it
does to a solve (a textureless patch pulled onto the prior plane; textured pixels keep their own
answer against a wrong prior). The kernel against the twin: test_patchmatch_gpu.py."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from mvs_pipeline.depth.patchmatch import PatchMatchParams, cpu, run_patchmatch
from mvs_pipeline.depth.patchmatch.layout import F_PLANAR_ANGLE_COEF, F_PLANAR_DEPTH_COEF
from mvs_pipeline.depth.patchmatch.packing import pack_params
from mvs_pipeline.depth.patchmatch.toy_scene import make_toy_scene


@pytest.fixture(scope="module")
def toy():
    return make_toy_scene(96, 72, num_sources=4, seed=3)


def _penalty(params, problem, prior, hyp):
    f, _ = pack_params(params, problem, 0, 0)
    return cpu.planar_penalty(np.asarray(prior, np.float64), *hyp, f)


def test_penalty_values(toy):
    params = PatchMatchParams(planar_prior_weight=0.4, planar_prior_sigma_depth=0.05, planar_prior_sigma_angle=10.0)
    f, _ = pack_params(params, toy.problem, 0, 0)
    assert f[F_PLANAR_DEPTH_COEF] == pytest.approx(1 / (2 * 0.05 ** 2))
    assert f[F_PLANAR_ANGLE_COEF] == pytest.approx(1 / math.radians(10.0) ** 2)
    prior = (0.0, 0.0, -1.0, 2.0)
    assert _penalty(params, toy.problem, prior, (0.0, 0.0, -1.0, 2.0)) == 0.0
    # one sigma of relative depth: weight * (1 - e^-1/2)
    assert _penalty(params, toy.problem, prior, (0.0, 0.0, -1.0, 2.1)) == pytest.approx(0.4 * (1 - math.exp(-0.5)))
    # one sigma of angle: (1 - cos s) / s^2 = 0.49958 for s = 10 degrees (~ the Gaussian's 1/2)
    a = math.radians(10.0)
    got = _penalty(params, toy.problem, prior, (math.sin(a), 0.0, -math.cos(a), 2.0))
    assert got == pytest.approx(0.4 * (1 - math.exp(-(1 - math.cos(a)) / a ** 2)))
    assert got == pytest.approx(0.4 * (1 - math.exp(-0.5)), rel=2e-3)
    # far from the prior: the full weight; no prior (depth <= 0): nothing
    assert _penalty(params, toy.problem, prior, (1.0, 0.0, 0.0, 4.0)) == pytest.approx(0.4, abs=1e-9)
    assert _penalty(params, toy.problem, (0.0, 0.0, -1.0, 0.0), (1.0, 0.0, 0.0, 4.0)) == 0.0


def _textureless(toy, box):
    """The toy problem with a constant grey square box = (y0, y1, x0, x1) in the reference: there
    every window has no variance, so every hypothesis costs COST_MAX photometrically."""
    ref = toy.problem.ref_image.copy()
    y0, y1, x0, x1 = box
    ref[y0:y1, x0:x1] = 128.0
    return dataclasses.replace(toy.problem, ref_image=ref)


def _gt_prior(toy, scale=1.0, mask=None):
    prior = np.concatenate([toy.gt_normal, (toy.gt_depth * scale)[..., None]], -1).astype(np.float32)
    if mask is not None:
        prior[~mask] = 0.0
    return prior


def test_prior_pulls_a_textureless_patch_onto_the_prior_plane(toy):
    box = (24, 48, 36, 60)
    y0, y1, x0, x1 = box
    inner = np.zeros(toy.gt_depth.shape, bool)
    inner[y0 + 6:y1 - 6, x0 + 6:x1 - 6] = True     # windows (radius 5) entirely in the flat square
    problem = _textureless(toy, box)
    params = PatchMatchParams(iterations=3)
    off = run_patchmatch(problem, params, backend="cpu", seed=5)
    on = run_patchmatch(dataclasses.replace(problem, planar_prior=_gt_prior(toy)), params, backend="cpu", seed=5)
    gt = toy.gt_depth[inner]
    err_off = np.abs(off.depth[inner] - gt) / gt
    err_on = np.abs(on.depth[inner] - gt) / gt
    # without texture nothing beats the random start there (every hypothesis costs COST_MAX)
    assert np.median(err_off) > 0.1, np.median(err_off)
    assert np.median(err_on) < 0.01, np.median(err_on)
    assert np.mean(err_on < 0.02) > 0.9, np.mean(err_on < 0.02)
    cos = (on.normal[inner] * toy.gt_normal[inner]).sum(-1)
    assert np.median(np.degrees(np.arccos(np.clip(cos, -1, 1)))) < 5.0


def test_textured_pixels_keep_their_depth_against_a_wrong_prior(toy):
    """A prior 10 % too far costs a hypothesis at most planar_prior_weight: where texture separates
    the hypotheses by more than that, the photometric answer stays. On this smooth toy texture the
    best views' cost is ~0.02 at the true depth and ~0.25 at 10 % off (median), so weight 0.1 keeps
    the photometric answer; a weight above that margin would not (the test of the weight's meaning)."""
    params = PatchMatchParams(iterations=3, planar_prior_weight=0.1)
    off = run_patchmatch(toy.problem, params, backend="cpu", seed=5)
    on = run_patchmatch(dataclasses.replace(toy.problem, planar_prior=_gt_prior(toy, 1.1)), params, backend="cpu",
                        seed=5)
    valid = toy.gt_depth > 0
    good = valid & (off.cost < 0.3) & (np.abs(off.depth - toy.gt_depth) < 0.01 * toy.gt_depth)
    assert good.mean() > 0.5
    err_on = np.abs(on.depth[good] - toy.gt_depth[good]) / toy.gt_depth[good]
    assert np.mean(err_on < 0.02) > 0.9, np.mean(err_on < 0.02)
    # and the cost map of a planar pass holds the penalty: never below the photometric pass's by much
    assert np.median(on.cost[good]) > np.median(off.cost[good])


def test_planar_prior_is_checked(toy):
    from mvs_pipeline.errors import MVSError  # noqa: PLC0415

    bad = np.zeros((5, 5, 4), np.float32)
    with pytest.raises(MVSError, match=r"planar_prior has shape \(5, 5, 4\)"):
        run_patchmatch(dataclasses.replace(toy.problem, planar_prior=bad), PatchMatchParams(iterations=0),
                       backend="cpu")
    nan = _gt_prior(toy)
    nan[3, 3, 0] = np.nan
    with pytest.raises(MVSError, match="planar_prior contains NaN"):
        run_patchmatch(dataclasses.replace(toy.problem, planar_prior=nan), PatchMatchParams(iterations=0),
                       backend="cpu")
