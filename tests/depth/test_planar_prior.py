"""The planar prior maps (depth/planar_prior/) against an analytic plane, their parts against
independent references (the former host implementation's support points, scipy's find_simplex,
the empty-circumcircle property), and the planar pass in the depth stage's plan and run. The GPU
kernels against this twin: test_planar_prior_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial import ConvexHull, Delaunay

from mvs_pipeline.cli import main
from mvs_pipeline.depth.params import DepthConfig
from mvs_pipeline.depth.passes import plan_passes
from mvs_pipeline.depth.planar_prior import PriorSettings, SourceMaps, build_planar_prior, start_maps, support_points
from mvs_pipeline.depth.planar_prior.triangles import triangle_planes, triangulate

from . import planar_prior_reference as reference

K = np.array([[200.0, 0, 80.0], [0, 200.0, 60.0], [0, 0, 1]])
H, W = 120, 160
SETTINGS = PriorSettings(max_cost=0.1, grid=5, max_edge=60.0, min_consistent=0, max_reproj_error=2.0)


def _plane_depth(n, dist, K=K, size=(W, H)):
    """z-depth [h, w] of the plane n.X + dist = 0 (n unit, facing the camera)."""
    gy, gx = np.mgrid[0:size[1], 0:size[0]]
    rays = np.stack([gx + 0.5, gy + 0.5, np.ones(gx.shape)], -1) @ np.linalg.inv(K).T
    return (dist / -(rays @ n)).astype(np.float32)


N = np.array([0.3, -0.2, -1.0]) / np.linalg.norm([0.3, -0.2, -1.0])
DEPTH = _plane_depth(N, 3.0)


def _rotation(degrees, axis):
    a = np.radians(degrees)
    c, s = np.cos(a), np.sin(a)
    return {"y": np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]]), "x": np.array([[1, 0, 0], [0, c, -s], [0, s, c]])}[axis]


def plane_sources(rng, scale=1.0):
    """Three sources of the plane N (sizes differing from the reference's), their depth maps with
    0.2 % noise, 5 % holes (0, NaN, negative) and `scale` times the true depth."""
    sources = []
    for deg, axis, t, size in ((8.0, "y", [-0.4, 0.0, 0.05], (W, H)), (-6.0, "x", [0.0, 0.3, -0.02], (140, 100)),
                               (5.0, "y", [0.35, -0.1, 0.0], (W + 20, H + 10))):
        R, t = _rotation(deg, axis), np.array(t)
        Ks = np.diag([size[0] / W, size[1] / H, 1.0]) @ K
        n_src = R @ N
        d = _plane_depth(n_src, 3.0 - n_src @ t, Ks, size) * scale
        d *= (1 + rng.normal(0, 0.002, d.shape)).astype(np.float32)
        holes = rng.uniform(size=d.shape)
        d[holes < 0.05] = rng.choice([0.0, np.nan, -1.0])
        sources.append(SourceMaps(d, Ks, R, t))
    return sources


def noisy_maps(rng, reliable=0.3):
    """(depth, cost) of a photometric pass over the plane: depth within 0.3 % (a tenth of it off by
    up to 2x, a few pixels NaN / inf / 0), costs on a coarse grid of values (ties within cells),
    `reliable` of them below 0.1."""
    depth = DEPTH * (1 + rng.normal(0, 0.003, DEPTH.shape))
    wrong = rng.uniform(size=DEPTH.shape) < 0.1
    depth[wrong] *= rng.uniform(0.5, 2.0, wrong.sum())
    depth.flat[rng.choice(depth.size, 30)] = rng.choice([np.nan, np.inf, 0.0, -2.0], 30)
    cost = np.where(rng.uniform(size=DEPTH.shape) < reliable, rng.choice([0.02, 0.04, 0.06, 0.08], DEPTH.shape),
                    rng.choice([0.1, 0.5, 2.0, np.nan], DEPTH.shape))
    return depth.astype(np.float32), cost.astype(np.float32)


def _sparse_cost(rng, fraction=0.05):
    """Reliable (cost 0.05) at a random `fraction` of the pixels, ambiguous (0.9) elsewhere."""
    return np.where(rng.uniform(size=(H, W)) < fraction, 0.05, 0.9).astype(np.float32)


def test_prior_reproduces_a_plane_from_sparse_reliable_pixels():
    rng = np.random.default_rng(0)
    cost = _sparse_cost(rng)
    # the reliable pixels on the plane, noise elsewhere
    depth = DEPTH * np.where(cost < 0.1, 1.0, rng.uniform(0.5, 2.0, (H, W))).astype(np.float32)
    prior, stats = build_planar_prior(depth, cost, K, SETTINGS, backend="cpu")
    has = prior[..., 3] > 0
    assert stats["support_points"] > 400 and stats["triangles_kept"] > 0.9 * stats["triangles"]
    assert not has[cost < 0.1].any()                  # reliable pixels keep their own plane
    assert has.mean() > 0.8                           # the convex hull of the support points
    np.testing.assert_allclose(prior[has][:, 3], DEPTH[has], rtol=1e-5)
    np.testing.assert_allclose(prior[has][:, :3], np.broadcast_to(N, (has.sum(), 3)), atol=1e-4)   # float32 vertex depths
    assert stats["prior_pixels"] == has.sum()
    assert not prior[~has].any()


def test_start_maps_take_the_prior_where_there_is_one():
    rng = np.random.default_rng(3)
    depth, cost = DEPTH * 1.5, _sparse_cost(rng)
    normal = np.broadcast_to(np.float32([0, 0, -1]), (H, W, 3))
    prior, _ = build_planar_prior(np.where(cost < 0.1, DEPTH, depth), cost, K, SETTINGS, backend="cpu")
    init_depth, init_normal = start_maps(prior, depth, normal)
    has = prior[..., 3] > 0
    assert has.any() and (~has).any()
    np.testing.assert_array_equal(init_depth[has], prior[has][:, 3])
    np.testing.assert_array_equal(init_depth[~has], depth[~has])
    np.testing.assert_array_equal(init_normal[has], prior[has][:, :3])
    np.testing.assert_array_equal(init_normal[~has], normal[~has])
    assert init_depth.dtype == init_normal.dtype == np.float32


def test_long_triangles_and_too_few_points_give_no_prior():
    rng = np.random.default_rng(1)
    cost = _sparse_cost(rng, 0.002)                   # ~38 points: edges of ~30-60 px
    long_ok = build_planar_prior(DEPTH, cost, K, SETTINGS, backend="cpu")[0]
    short = build_planar_prior(DEPTH, cost, K, PriorSettings(0.1, 5, 10.0, 0, 2.0), backend="cpu")[0]
    assert (long_ok[..., 3] > 0).mean() > 0.3 and (short[..., 3] > 0).mean() < 0.02
    two = np.full((H, W), 0.9, np.float32)
    two[10, 10] = two[50, 90] = 0.05
    prior, stats = build_planar_prior(DEPTH, two, K, SETTINGS, backend="cpu")
    assert stats["support_points"] == 2 and not prior.any()


def test_support_points_need_consistent_sources():
    """Sources that saw the same plane confirm the support points; maps 10 % off confirm none, and
    then there is no prior."""
    rng = np.random.default_rng(2)
    good, bad = plane_sources(rng), plane_sources(rng, scale=1.1)
    ys, xs = np.mgrid[20:100:10, 20:140:10]
    xs, ys = xs.ravel(), ys.ravel()
    assert (reference.consistent_views(K, xs, ys, DEPTH[ys, xs].astype(np.float64), good, 1.0) >= 1).mean() > 0.8
    assert reference.consistent_views(K, xs, ys, DEPTH[ys, xs].astype(np.float64), bad, 1.0).sum() == 0
    cost = _sparse_cost(rng)
    need = PriorSettings(0.1, 5, 60.0, 1, 1.0)
    with_good = build_planar_prior(DEPTH, cost, K, need, good, backend="cpu")[0]
    with_bad = build_planar_prior(DEPTH, cost, K, need, bad, backend="cpu")[0]
    assert (with_good[..., 3] > 0).mean() > 0.5 and not with_bad.any()


@pytest.mark.parametrize("min_consistent, grid", [(0, 5), (1, 5), (2, 7), (3, 1)])
def test_support_points_match_the_former_host_implementation(min_consistent, grid):
    """The per-cell twin (asks the sources only for a pixel that would beat the cell's pick) picks
    what checking every reliable pixel and sorting by cell and cost picked; grid 7 does not divide
    the image."""
    rng = np.random.default_rng(10 + min_consistent)
    depth, cost = noisy_maps(rng)
    sources = plane_sources(rng)
    settings = PriorSettings(0.1, grid, 60.0, min_consistent, 1.5)
    xs, ys, zs = support_points(depth, cost, K, settings, sources, backend="cpu")
    rx, ry = reference.support_points(depth, cost, K, settings, sources)
    assert len(rx) > 100
    np.testing.assert_array_equal(xs, rx)
    np.testing.assert_array_equal(ys, ry)
    np.testing.assert_array_equal(zs, depth[ys, xs])


def _random_pixels(rng, n, width=W, height=H):
    pixel = rng.choice(width * height, n, replace=False)
    return pixel % width, pixel // width


def _in_circle(a, b, c, p):
    """> 0 when p lies strictly inside the circumcircle of the counter-clockwise triangle a b c
    (exact: integer coordinates)."""
    rows = [[int(q[0] - p[0]), int(q[1] - p[1])] for q in (a, b, c)]
    m = [[x, y, x * x + y * y] for x, y in rows]
    return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))


@pytest.mark.parametrize("n, seed", [(3, 0), (40, 1), (300, 2)])
def test_triangulation_is_delaunay_and_covers_the_hull(n, seed):
    rng = np.random.default_rng(seed)
    xs, ys = _random_pixels(rng, n)
    simp = triangulate(xs, ys, W, H)
    pts = np.stack([xs, ys], -1)
    area2 = 0
    for tri in simp:
        a, b, c = pts[tri]
        cross = int((b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]))
        assert cross != 0
        if cross < 0:
            b, c = c, b
        area2 += abs(cross)
        assert all(_in_circle(a, b, c, p) <= 0 for p in pts)    # no point inside: Delaunay
    assert area2 == round(2 * ConvexHull(pts).volume)           # the whole hull, no overlap
    assert len({tuple(sorted(t)) for t in simp.tolist()}) == len(simp)
    assert len(triangulate(xs[:2], ys[:2], W, H)) == 0


def test_owners_match_find_simplex_off_shared_edges():
    """Every pixel inside scipy's triangles belongs to the triangle find_simplex names, except on
    an edge shared with a lower-indexed triangle (there the lowest index wins); outside the hull
    no owner."""
    from mvs_pipeline.depth.planar_prior import cpu
    from mvs_pipeline.depth.planar_prior.layout import NO_OWNER

    rng = np.random.default_rng(4)
    xs, ys = _random_pixels(rng, 120)
    xs[:20], ys[:20] = np.arange(20) * 5 + 10, 30          # collinear points: pixels on shared edges
    tri = Delaunay(np.stack([xs, ys], -1).astype(np.float64))
    simp = tri.simplices
    tri_xy = np.stack([xs[simp[:, 0]], ys[simp[:, 0]], xs[simp[:, 1]], ys[simp[:, 1]], xs[simp[:, 2]],
                       ys[simp[:, 2]]], -1).astype(np.int32)
    owner = cpu.prior_owner(tri_xy, W, H)
    gy, gx = np.mgrid[0:H, 0:W]
    found = tri.find_simplex(np.stack([gx.ravel(), gy.ravel()], -1).astype(np.float64)).reshape(H, W)
    assert ((owner == NO_OWNER) == (found < 0)).all()
    differ = (owner != found) & (found >= 0)
    for y, x in zip(*np.nonzero(differ)):
        t, f = owner[y, x], found[y, x]
        assert t < f
        for k in (t, f):   # the pixel lies on an edge of both: one edge function is zero
            v = tri_xy[k].reshape(3, 2).astype(np.int64)
            e = [(v[(i + 1) % 3, 0] - v[i, 0]) * (y - v[i, 1]) - (v[(i + 1) % 3, 1] - v[i, 1]) * (x - v[i, 0])
                 for i in range(3)]
            assert 0 in e
    assert differ.any()   # integer vertices: edges pass through pixel centres (here 2 % of the pixels)


def test_triangle_planes_fit_the_plane_and_drop_long_grazing_and_flat_triangles():
    rng = np.random.default_rng(5)
    xs, ys = _random_pixels(rng, 200)
    rays = np.stack([xs + 0.5, ys + 0.5, np.ones(len(xs))], -1) @ np.linalg.inv(K).T
    zs = 3.0 / -(rays @ N)                            # exact depths: thin triangles tilt with float32 ones
    simp = triangulate(xs, ys, W, H)
    tri, planes = triangle_planes(K, xs, ys, zs, simp, 1e9)
    assert len(tri) == len(simp)
    np.testing.assert_allclose(planes[:, :3], np.broadcast_to(N, (len(tri), 3)), atol=1e-9)
    np.testing.assert_allclose(planes[:, 3], 3.0, rtol=1e-9)
    np.testing.assert_array_equal(tri[:, :2], np.stack([xs[simp[:, 0]], ys[simp[:, 0]]], -1))
    short, _ = triangle_planes(K, xs, ys, zs, simp, 15.0)
    assert 0 < len(short) < len(tri)
    edges = np.hypot(*(short.reshape(-1, 3, 2) - np.roll(short.reshape(-1, 3, 2), -1, 1)).transpose(2, 0, 1))
    assert edges.max() <= 15.0
    # a triangle whose vertices lie on one ray's plane through the camera centre is seen edge-on
    grazing = np.array([[0, 1, 2]])
    gx, gy = np.array([10, 60, 110]), np.array([60, 60, 60])
    assert len(triangle_planes(K, gx, gy, np.array([1.0, 2.0, 4.0]), grazing, 1e9)[0]) == 0
    flat = np.array([[0, 1, 2]])
    fx, fy = np.array([10, 20, 30]), np.array([10, 20, 30])
    assert len(triangle_planes(K, fx, fy, DEPTH[fy, fx], flat, 1e9)[0]) == 0


def planar_pass_problem(scene_path, to_device, backend: str):
    """The planar pass's PatchMatch problem for view 0 of a synthetic scene, from random maps of the
    photometric pass before it held in a MapCache as `to_device` makes them (np.asarray, or
    cupy.asarray for the GPU stage)."""
    from mvs_pipeline.depth.caches import GreyImageCache, MapCache
    from mvs_pipeline.depth.stage import Profile, _pass_inputs, build_problem, view_size
    from mvs_pipeline.scene.workspace import read_scene
    from mvs_pipeline.views.params import ViewsConfig
    from mvs_pipeline.views.selection import select_views

    scene = read_scene(scene_path / "images", scene_path / "sparse" / "0")
    sel = select_views(scene, ViewsConfig())
    cfg = type("Cfg", (), {"depth": DepthConfig(planar_prior=True, multi_scale=False)})()
    photometric, planar = plan_passes(cfg.depth, scene_path / "stereo", 160)[:2]
    maps = MapCache(to_device=to_device)
    rng = np.random.default_rng(9)
    for v in range(scene.num_views):
        h, w = view_size(scene, v, 0)[::-1]
        name = scene.views[v].name
        maps.put(photometric.map_path("depth", name), to_device(rng.uniform(1, 5, (h, w)).astype(np.float32)))
        maps.put(photometric.map_path("normal", name), to_device(np.tile(np.float32([0, 0, -1]), (h, w, 1))))
        maps.put(photometric.map_path("cost", name), to_device(rng.uniform(0, 0.3, (h, w)).astype(np.float32)))
    images = GreyImageCache(scene)
    try:
        problem = build_problem(scene, sel, 0, images, 0)
        _pass_inputs(cfg, scene, sel, 0, planar, photometric, maps, problem, backend, Profile())
    finally:
        images.close()
    return problem


def test_the_planar_pass_problem_gets_its_prior(synth_scene_factory):
    problem = planar_pass_problem(synth_scene_factory("room", views=4, width=160, height=120), np.asarray, "cpu")
    H, W = problem.shape
    assert problem.planar_prior.shape == (H, W, 4) and problem.init_depth.shape == (H, W)
    has = problem.planar_prior[..., 3] > 0
    np.testing.assert_array_equal(problem.init_depth[has], problem.planar_prior[has][:, 3])
    assert problem.init_normal.shape == (H, W, 3) and problem.src_depths is None   # a photometric pass


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
