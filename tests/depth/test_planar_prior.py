"""The planar prior maps (depth/planar_prior.py) against an analytic plane, and the planar pass
in the depth stage's plan and run."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.cli import main
from mvs_pipeline.depth.params import DepthConfig
from mvs_pipeline.depth.passes import plan_passes
from mvs_pipeline.depth.planar_prior import PriorSettings, SourceMaps, build_planar_prior, consistent_views

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
            "--set", "depth.multi_scale=false", "--set", "depth.keep_pass_maps=true"]   # every pass's maps stay
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
