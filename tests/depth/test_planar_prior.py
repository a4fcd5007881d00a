"""The planar prior maps (depth/planar_prior.py) against an analytic plane, and the planar pass
in the depth stage's plan and run."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.cli import main
from mvs_pipeline.depth.params import DepthConfig
from mvs_pipeline.depth.passes import plan_passes
from mvs_pipeline.depth.planar_prior import (PriorSettings, SourceMaps, build_planar_prior, consistent_views,
                                             plane_residual_std)

K = np.array([[200.0, 0, 80.0], [0, 200.0, 60.0], [0, 0, 1]])
H, W = 120, 160
SETTINGS = PriorSettings(max_cost=0.1, grid=5, max_edge=60.0, min_consistent=0, max_reproj_error=2.0)


def _plane_depth(n, dist):
    """z-depth [H, W] of the plane n.X + dist = 0 (n unit, facing the camera)."""
    gy, gx = np.mgrid[0:H, 0:W]
    rays = np.stack([gx + 0.5, gy + 0.5, np.ones((H, W))], -1) @ np.linalg.inv(K).T
    return (dist / -(rays @ n)).astype(np.float32)


N = np.array([0.3, -0.2, -1.0]) / np.linalg.norm([0.3, -0.2, -1.0])
DEPTH = _plane_depth(N, 3.0)


def _sparse_cost(rng, fraction=0.05):
    """Reliable (cost 0.05) at a random `fraction` of the pixels, ambiguous (0.9) elsewhere."""
    return np.where(rng.uniform(size=(H, W)) < fraction, 0.05, 0.9).astype(np.float32)


def test_prior_reproduces_a_plane_from_sparse_reliable_pixels():
    rng = np.random.default_rng(0)
    cost = _sparse_cost(rng)
    # the reliable pixels on the plane, noise elsewhere
    depth = DEPTH * np.where(cost < 0.1, 1.0, rng.uniform(0.5, 2.0, (H, W))).astype(np.float32)
    prior, stats = build_planar_prior(depth, np.zeros((H, W, 3)), cost, K, SETTINGS)
    has = prior[..., 3] > 0
    assert stats["support_points"] > 400 and stats["triangles_kept"] > 0.9 * stats["triangles"]
    assert not has[cost < 0.1].any()                  # reliable pixels keep their own plane
    assert has.mean() > 0.8                           # the convex hull of the support points
    np.testing.assert_allclose(prior[has][:, 3], DEPTH[has], rtol=1e-5)
    np.testing.assert_allclose(prior[has][:, :3], np.broadcast_to(N, (has.sum(), 3)), atol=1e-4)   # float32 vertex depths
    assert stats["prior_pixels"] == has.sum()


def test_plane_residual_std_matches_a_least_squares_fit_per_window():
    """Against numpy's least squares on every window of a random image (borders mirrored as
    OpenCV's BORDER_REFLECT: 'fedcba|abcdef|fedcba')."""
    rng = np.random.default_rng(5)
    image = rng.uniform(0, 255, (14, 17))
    r = 3
    got = plane_residual_std(image, r)
    padded = np.pad(image, r, mode="symmetric")
    dy, dx = np.mgrid[-r:r + 1, -r:r + 1]
    A = np.column_stack([np.ones(dx.size), dx.ravel(), dy.ravel()])
    for y in range(image.shape[0]):
        for x in range(image.shape[1]):
            window = padded[y:y + 2 * r + 1, x:x + 2 * r + 1].ravel()
            residual = window - A @ np.linalg.lstsq(A, window, rcond=None)[0]
            assert got[y, x] == pytest.approx(np.sqrt(np.mean(residual ** 2)), rel=1e-7, abs=1e-6)


def test_plane_residual_std_is_zero_on_a_ramp_and_the_noise_on_a_noisy_one():
    gy, gx = np.mgrid[0:60, 0:80]
    ramp = 40.0 + 1.7 * gx - 0.9 * gy            # smooth shading: NCC matches it at any shift
    assert plane_residual_std(ramp, 5)[5:-5, 5:-5].max() < 1e-4   # (mirrored borders fold the ramp)

    noisy = ramp + np.random.default_rng(6).normal(0, 2.0, ramp.shape)
    assert np.median(plane_residual_std(noisy, 5)) == pytest.approx(2.0 * np.sqrt(118 / 121), rel=0.1)


def test_min_texture_takes_smooth_low_cost_pixels_out_of_the_support():
    """A shaded wall (a ramp in the image) where PatchMatch found low costs at wrong depths: with
    min_texture those pixels are neither support points nor left without a prior, so the plane
    from the textured pixels around them covers them."""
    rng = np.random.default_rng(7)
    gy, gx = np.mgrid[0:H, 0:W]
    image = rng.uniform(0, 255, (H, W))
    wall = (gx > 40) & (gx < 120) & (gy > 30) & (gy < 90)
    image[wall] = 60.0 + 0.5 * gx[wall] + 0.2 * gy[wall]
    inner = wall & (gx > 50) & (gx < 110) & (gy > 40) & (gy < 80)   # windows wholly on the ramp
    cost = _sparse_cost(rng, 0.05)
    cost[wall] = 0.05                                   # low everywhere on the wall
    depth = DEPTH.copy()
    depth[inner] *= rng.uniform(0.5, 2.0, int(inner.sum())).astype(np.float32)   # but wrong where untextured
    plain = build_planar_prior(depth, np.zeros((H, W, 3)), cost, K, SETTINGS)[0]
    textured = build_planar_prior(depth, np.zeros((H, W, 3)), cost, K,
                                  PriorSettings(0.1, 5, 150.0, 0, 2.0, min_texture=2.0, window_radius=5), image=image)[0]
    assert not (plain[..., 3] > 0)[inner].any()          # taken as reliable: no prior
    has = textured[..., 3] > 0
    assert has[inner].all()
    np.testing.assert_allclose(textured[inner][:, 3], DEPTH[inner], rtol=1e-5)


def test_long_triangles_and_too_few_points_give_no_prior():
    rng = np.random.default_rng(1)
    cost = _sparse_cost(rng, 0.002)                   # ~38 points: edges of ~30-60 px
    long_ok = build_planar_prior(DEPTH, np.zeros((H, W, 3)), cost, K, SETTINGS)[0]
    short = build_planar_prior(DEPTH, np.zeros((H, W, 3)), cost, K,
                               PriorSettings(0.1, 5, 10.0, 0, 2.0))[0]
    assert (long_ok[..., 3] > 0).mean() > 0.3 and (short[..., 3] > 0).mean() < 0.02
    two = np.full((H, W), 0.9, np.float32)
    two[10, 10] = two[50, 90] = 0.05
    prior, stats = build_planar_prior(DEPTH, np.zeros((H, W, 3)), two, K, SETTINGS)
    assert stats["support_points"] == 2 and not prior.any()


def test_support_points_need_consistent_sources():
    """A source that saw the same plane confirms the support points; one whose map is 10 % off
    confirms none, and then there is no prior."""
    a = np.radians(8.0)
    R = np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]])
    t = np.array([-0.4, 0.0, 0.05])
    # the source's depth map of the same plane: n_src = R n, dist_src = dist - n_src . t
    n_src = R @ N
    src_depth = _plane_depth(n_src, 3.0 - n_src @ t)
    ys, xs = np.mgrid[20:100:10, 20:140:10]
    xs, ys = xs.ravel(), ys.ravel()
    good = consistent_views(K, xs, ys, DEPTH[ys, xs].astype(np.float64), [SourceMaps(src_depth, K, R, t)], 1.0)
    bad = consistent_views(K, xs, ys, DEPTH[ys, xs].astype(np.float64), [SourceMaps(src_depth * 1.1, K, R, t)], 1.0)
    assert good.mean() > 0.8 and bad.sum() == 0
    rng = np.random.default_rng(2)
    cost = _sparse_cost(rng)
    need = PriorSettings(0.1, 5, 60.0, 1, 1.0)
    with_good = build_planar_prior(DEPTH, np.zeros((H, W, 3)), cost, K, need, [SourceMaps(src_depth, K, R, t)])[0]
    with_bad = build_planar_prior(DEPTH, np.zeros((H, W, 3)), cost, K, need,
                                  [SourceMaps(src_depth * 1.1, K, R, t)])[0]
    assert (with_good[..., 3] > 0).mean() > 0.5 and not with_bad.any()


def test_plan_with_planar_pass(tmp_path):
    passes = plan_passes(DepthConfig(planar_prior=True), tmp_path, 3200)
    assert [p.id for p in passes][:4] == ["s2_photometric", "s2_planar", "s2_geometric1", "s2_geometric2"]
    assert [p.id for p in passes][4:] == [p.id for p in plan_passes(DepthConfig(), tmp_path, 3200)][3:]
    assert passes[1].kind == "photometric" and passes[1].planar and not passes[0].planar
    assert passes[1].root == tmp_path / "passes" / "s2_planar"
    # single scale: the planar pass's maps are the finest photometric ones COLMAP names
    single = plan_passes(DepthConfig(planar_prior=True, multi_scale=False), tmp_path, 640)
    assert [p.id for p in single] == ["s0_photometric", "s0_planar", "s0_geometric1", "s0_geometric2"]
    assert single[0].map_path("depth", "x.png") == tmp_path / "passes" / "s0_photometric" / "depth_maps" / \
        "x.png.photometric.bin"
    assert single[1].map_path("depth", "x.png") == tmp_path / "depth_maps" / "x.png.photometric.bin"
    only = plan_passes(DepthConfig(planar_prior=True, multi_scale=False, geometric_passes=0), tmp_path, 640)
    assert [(p.id, p.final, p.root) for p in only] == [
        ("s0_photometric", False, tmp_path / "passes" / "s0_photometric"), ("s0_planar", True, tmp_path)]


@pytest.mark.slow
def test_depth_stage_runs_the_planar_pass_and_resumes_it(synth_scene_factory, tmp_path):
    """The planar pass runs between the photometric and the geometric pass; resumed after the
    photometric pass (its cost maps then come from their files, not the memory cache), it writes
    the same maps."""
    scene = synth_scene_factory("room", views=5, width=200, height=150)
    out = tmp_path / "out"
    args = ["-q", "run", str(scene), "-o", str(out), "--stages", "load,views,depth", "--set", "backend=cpu",
            "--set", "depth.planar_prior=true", "--set", "depth.geometric_passes=1", "--set", "patchmatch.iterations=1",
            "--set", "depth.multi_scale=false"]
    assert main(args) == 0
    stereo = out / "stereo"
    planar = sorted((stereo / "depth_maps").glob("*.photometric.bin"))
    first = sorted((stereo / "passes" / "s0_photometric" / "depth_maps").glob("*.photometric.bin"))
    assert len(planar) == len(first) == 5
    assert len(sorted((stereo / "depth_maps").glob("*.geometric.bin"))) == 5
    # the planar pass changed the maps it started from
    assert any(p.read_bytes() != q.read_bytes() for p, q in zip(planar, first))
    later = {p: p.read_bytes() for p in sorted(stereo.glob("*_maps/*.bin"))}   # planar + geometric
    for p in later:
        p.unlink()
    assert main(args) == 0
    assert all(p.read_bytes() == b for p, b in later.items())
