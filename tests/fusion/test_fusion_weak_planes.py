"""fusion.weak_planes: weakly textured regions' depths put onto their planes before fusing (fusion/weak_planes.py)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from mvs_pipeline.fusion.inputs import local_grey_std
from mvs_pipeline.fusion.params import FusionConfig
from mvs_pipeline.fusion.stage import fuse_chunks
from mvs_pipeline.fusion.weak_planes import WeakPlanes, fit_plane, plane_depth, plane_normal, snap_weak_planes
from mvs_pipeline.io.colmap_maps import read_depth_map, write_colmap_array
from tests.fusion.fusion_scene import arc_poses, intrinsics, make_scene, plane_maps

W, H = 96, 72
PARAMS = WeakPlanes(texture=4.0, tolerance=0.03, min_share=0.4, min_area=0.0025)
ALL_WEAK = np.ones((H, W), bool)   # every pixel's grey-level spread below the texture threshold


def _tilted_wall():
    """(K, exact depth, exact normals) of a camera looking at a tilted plane 3-4 m away."""
    K = intrinsics(W, H)
    R, t = np.eye(3), np.zeros(3)
    depth, normal = plane_maps(K, R, t, W, H, plane_n=(0.2, -0.1, -1.0), plane_c=-3.5)
    assert (depth > 0).all()
    return K, depth, normal


def _corrupt(depth, normal, rng, gross_share=0.2):
    """Depths with 1 % noise (inside the tolerance) and gross errors (+-10-40 %) on gross_share of the pixels;
    normals tilted at random. Returns (depth, normal, gross mask)."""
    d = depth * (1 + rng.uniform(-0.01, 0.01, depth.shape))
    gross = rng.random(depth.shape) < gross_share
    d[gross] *= 1 + rng.choice([-1, 1], gross.sum()) * rng.uniform(0.1, 0.4, gross.sum())
    n = normal + rng.normal(0, 0.2, normal.shape)
    n /= np.linalg.norm(n, axis=2, keepdims=True)
    return d.astype(np.float32), n.astype(np.float32), gross


def test_plane_depth_and_normal_in_closed_form():
    K, depth, normal = _tilted_wall()
    v, u = np.mgrid[0:H, 0:W] + 0.5
    design = np.stack([u.ravel(), v.ravel(), np.ones(u.size)], 1)
    coef, *_ = np.linalg.lstsq(design, 1.0 / depth.ravel().astype(np.float64), rcond=None)
    np.testing.assert_allclose(plane_depth(coef, u, v), depth, rtol=1e-5)   # 1/z is affine in the pixel
    np.testing.assert_allclose(plane_normal(coef, K), normal[0, 0], atol=1e-5)
    assert plane_normal(coef, K)[2] < 0   # facing the camera


def test_ransac_finds_the_plane_under_gross_errors():
    K, depth, _ = _tilted_wall()
    rng = np.random.default_rng(1)
    d, _, gross = _corrupt(depth, np.zeros((H, W, 3)), rng, gross_share=0.45)
    v, u = np.mgrid[0:H, 0:W]
    coef, inl = fit_plane(u.ravel().astype(float), v.ravel().astype(float), d.ravel().astype(float), 0.03, rng)
    assert inl.sum() >= 0.5 * d.size and not (inl & gross.ravel()).sum() > 0.02 * d.size
    np.testing.assert_allclose(plane_depth(coef, u, v), depth, rtol=0.003)   # the 1 % noise averages out


def test_a_weak_wall_is_put_on_its_plane_and_its_gross_errors_left():
    K, depth, normal = _tilted_wall()
    rng = np.random.default_rng(2)
    d, n, gross = _corrupt(depth, normal, rng)
    d0 = d.copy()
    snapped = snap_weak_planes(d, n, ALL_WEAK, K, PARAMS, seed=0)
    assert snapped == int((~gross).sum())   # every depth within 3 % of the plane, none of the others
    np.testing.assert_allclose(d[~gross], depth[~gross], rtol=0.003)
    np.testing.assert_allclose(n[~gross], normal[~gross], atol=0.005)
    np.testing.assert_array_equal(d[gross], d0[gross])   # gross errors keep their depths (fusion's rules judge them)
    d2, n2 = d0.copy(), _corrupt(depth, normal, np.random.default_rng(2))[1]
    snap_weak_planes(d2, n2, ALL_WEAK, K, PARAMS, seed=0)
    np.testing.assert_array_equal(d2, d)   # the seed decides the draws: the CPU and CUDA fusions see one map


@pytest.mark.parametrize("case", ["textured", "small", "no_plane"])
def test_what_is_left_alone(case):
    K, depth, normal = _tilted_wall()
    rng = np.random.default_rng(3)
    d, n, _ = _corrupt(depth, normal, rng)
    std = np.zeros((H, W), np.float32)
    params = PARAMS
    if case == "textured":
        std[:] = 4.0   # not below the threshold
    elif case == "small":
        std[:] = 10.0
        std[:5, :5] = 0.0   # a weak region of 25 depths, under the 26 the area asks for
        params = WeakPlanes(4.0, 0.03, 0.4, 26 / (W * H))
    else:
        d = (depth * np.exp(rng.uniform(-1, 1, depth.shape))).astype(np.float32)   # no plane holds 40 %
    before = d.copy(), n.copy()
    assert snap_weak_planes(d, n, std < params.texture, K, params, seed=0) == 0
    np.testing.assert_array_equal(d, before[0])
    np.testing.assert_array_equal(n, before[1])


def _weak_images(root, views):
    """Overwrite the scene's images with a smooth grey gradient plus 2 grey levels of noise: above
    min_texture (1), below weak_plane_texture (4)."""
    rng = np.random.default_rng(5)
    for k in range(views):
        ramp = np.linspace(90, 140, W)[None, :, None] + np.zeros((H, W, 3))
        img = np.clip(ramp + rng.normal(0, 2.0, (H, W, 1)), 0, 255).astype(np.uint8)
        cv2.imwrite(str(root / "images" / f"view_{k:03d}.png"), img)


def _fuse(scene, sel, root, **cfg):
    stats = {}
    chunks = list(fuse_chunks(FusionConfig(**cfg), scene, sel, root / "stereo", "cpu", progress=False, stats=stats))
    return np.concatenate([c.xyz for c in chunks]), stats


def test_fusion_of_noisy_weak_walls_lands_on_the_plane(tmp_path):
    """Four views of the plane z = 0 with weak texture and maps carrying 1 % noise and 20 % gross errors: with
    weak_planes the fused points lie on the plane (the snapped depths), without it they keep the noise."""
    scene, sel, truth = make_scene(tmp_path, arc_poses(4), W, H)
    _weak_images(tmp_path, 4)
    bgr = cv2.imread(str(tmp_path / "images" / "view_000.png"))
    assert (local_grey_std(bgr) >= 1.0).all() and np.median(local_grey_std(bgr)) < 4.0
    rng = np.random.default_rng(6)
    for k in range(4):
        d, n, _ = _corrupt(truth["depth"][k], truth["normal"][k], rng)
        write_colmap_array(tmp_path / "stereo" / "depth_maps" / f"view_{k:03d}.png.geometric.bin", d)
        write_colmap_array(tmp_path / "stereo" / "normal_maps" / f"view_{k:03d}.png.geometric.bin", n)
    maps = [read_depth_map(tmp_path / "stereo" / "depth_maps" / f"view_{k:03d}.png.geometric.bin") for k in range(4)]
    plain, plain_stats = _fuse(scene, sel, tmp_path, weak_planes=False)
    snapped, stats = _fuse(scene, sel, tmp_path, weak_planes=True)
    assert plain_stats["planar_pixels"] == 0 and stats["planar_pixels"] > 0.7 * 4 * W * H
    off_plain, off_snapped = np.abs(plain[:, 2]), np.abs(snapped[:, 2])
    assert np.median(off_snapped) < 0.1 * np.median(off_plain)
    assert np.median(off_snapped) < 1e-3 and len(snapped) > len(plain)   # the snapped normals agree (30 deg)
    for k in range(4):   # the maps on disk are not changed
        np.testing.assert_array_equal(
            read_depth_map(tmp_path / "stereo" / "depth_maps" / f"view_{k:03d}.png.geometric.bin"), maps[k])


def test_textured_images_fuse_the_same_with_weak_planes(tmp_path):
    scene, sel, truth = make_scene(tmp_path, arc_poses(4), W, H)   # random texture: no weak region
    rng = np.random.default_rng(7)
    for k in range(4):
        d, n, _ = _corrupt(truth["depth"][k], truth["normal"][k], rng)
        write_colmap_array(tmp_path / "stereo" / "depth_maps" / f"view_{k:03d}.png.geometric.bin", d)
        write_colmap_array(tmp_path / "stereo" / "normal_maps" / f"view_{k:03d}.png.geometric.bin", n)
    plain, _ = _fuse(scene, sel, tmp_path, weak_planes=False)
    snapped, stats = _fuse(scene, sel, tmp_path, weak_planes=True)
    assert stats["planar_pixels"] == 0
    np.testing.assert_array_equal(plain, snapped)


@pytest.mark.gpu
def test_the_cuda_fusion_fuses_the_same_snapped_maps(tmp_path):
    """The planes are fitted on the host for both backends (seeded by the view): the same planar pixels, and the
    same points as the CPU fusion within the float32 tolerance of test_fusion_gpu."""
    scene, sel, truth = make_scene(tmp_path, arc_poses(4), W, H)
    _weak_images(tmp_path, 4)
    rng = np.random.default_rng(8)
    for k in range(4):
        d, n, _ = _corrupt(truth["depth"][k], truth["normal"][k], rng)
        write_colmap_array(tmp_path / "stereo" / "depth_maps" / f"view_{k:03d}.png.geometric.bin", d)
        write_colmap_array(tmp_path / "stereo" / "normal_maps" / f"view_{k:03d}.png.geometric.bin", n)
    cfg = FusionConfig(weak_planes=True)
    stats = {"cpu": {}, "cuda": {}}
    xyz = {b: np.concatenate([c.xyz for c in fuse_chunks(cfg, scene, sel, tmp_path / "stereo", b, progress=False,
                                                            stats=stats[b])]) for b in ("cpu", "cuda")}
    assert stats["cpu"]["planar_pixels"] == stats["cuda"]["planar_pixels"] > 0
    assert abs(len(xyz["cuda"]) - len(xyz["cpu"])) <= 0.005 * len(xyz["cpu"])
    assert abs(np.median(np.abs(xyz["cuda"][:, 2])) - np.median(np.abs(xyz["cpu"][:, 2]))) < 1e-4


def test_reach_puts_a_regions_gross_errors_on_the_nearest_plane():
    """Two walls meeting at the image's middle column in one weak region: their depths go onto each wall's plane;
    reach 0 leaves the gross errors (but the few that happen to lie on a plane), a finite reach takes those
    within it, and an unbounded one every depth, each onto its own side's wall (the nearest plane in the image)."""
    K = intrinsics(W, H)
    left, left_n = plane_maps(K, np.eye(3), np.zeros(3), W, H, plane_n=(0.5, 0.0, -1.0), plane_c=-3.0)
    right, right_n = plane_maps(K, np.eye(3), np.zeros(3), W, H, plane_n=(-0.5, 0.0, -1.0), plane_c=-3.0)
    side = np.arange(W)[None, :].repeat(H, 0) < W // 2
    depth = np.where(side, left, right)
    normal = np.where(side[..., None], left_n, right_n)
    d, n, gross = _corrupt(depth, normal, np.random.default_rng(9), gross_share=0.1)
    away = np.broadcast_to(np.abs(np.arange(W) - W // 2) > 6, (H, W))   # near the crease the walls' depths are alike
    counts = {}
    for reach in (0.0, 0.25, float("inf")):
        dd, nn = d.copy(), n.copy()
        counts[reach] = snap_weak_planes(dd, nn, ALL_WEAK, K,
                                         WeakPlanes(4.0, 0.03, 0.3, 0.0025, reach), seed=0)
        on_wall = np.abs(dd - depth) <= 0.01 * depth   # the wall's plane, within the 1 % noise
        assert on_wall[~gross & away].all()
        if reach == 0.0:
            assert (dd[gross] == d[gross]).mean() > 0.9
        if reach == float("inf"):
            assert counts[reach] == H * W and on_wall[away].all()
            np.testing.assert_allclose(nn[away], normal[away], atol=0.02)
    assert (~gross & away).sum() <= counts[0.0] < counts[0.25] < counts[float("inf")]


def test_the_refit_band_keeps_what_stands_before_the_wall_out_of_its_plane():
    """A wall with 0.4 % noise and, on a quarter of its pixels, a flat box 2 % in front of it (inside the 3 %
    tolerance, as furniture or a skirting board sits before a real wall): least squares on every depth within the
    tolerance puts the plane ~0.5 % in front of the wall; refitted within 2 robust deviations of it (the wall's own
    noise, measured on the region) the plane is the wall's within 0.1 %. Snapping then puts the wall's depths on
    the wall (and the box's too: one weak region, every depth within the tolerance, as without the refit)."""
    K, depth, normal = _tilted_wall()
    rng = np.random.default_rng(5)
    box = np.zeros((H, W), bool)
    box[H // 4:3 * H // 4, W // 4:3 * W // 4] = True   # a quarter of the image
    truth = np.where(box, 0.98 * depth, depth)
    d = (truth * (1 + rng.normal(0, 0.004, depth.shape))).astype(np.float32)
    v, u = np.mgrid[0:H, 0:W] + 0.5
    errors, held = {}, {}
    for sigmas in (0.0, 2.0):
        coef, inl = fit_plane(u.ravel(), v.ravel(), d.ravel().astype(np.float64), 0.03, np.random.default_rng(0),
                              sigmas)
        held[sigmas] = inl.mean()   # the plane's inliers at the tolerance (what min_share counts)
        errors[sigmas] = np.abs(plane_depth(coef, u, v) / depth - 1)
    assert held[2.0] > 0.98 and held[0.0] > 0.98
    assert np.median(errors[0.0]) > 0.003   # pulled towards the box
    assert errors[2.0].max() < 0.001
    dd, nn = d.copy(), normal.astype(np.float32).copy()
    snap_weak_planes(dd, nn, ALL_WEAK, K, WeakPlanes(4.0, 0.03, 0.4, 0.0025, refine_sigmas=2.0), seed=0)
    np.testing.assert_allclose(dd[~box], depth[~box], rtol=0.001)
    assert np.median(np.abs(dd[box] / depth[box] - 1)) < 0.001   # the box's depths went onto the wall's plane


def test_the_refit_band_without_outliers_is_the_least_squares_plane():
    """Gaussian noise only: the refit within 2 robust deviations stays on the plane (no bias from cutting the
    noise's tails symmetrically), as close as least squares on every depth."""
    K, depth, _ = _tilted_wall()
    d = depth * (1 + np.random.default_rng(6).normal(0, 0.005, depth.shape))
    v, u = np.mgrid[0:H, 0:W] + 0.5
    for sigmas in (0.0, 2.0):
        coef, _ = fit_plane(u.ravel(), v.ravel(), d.ravel(), 0.03, np.random.default_rng(0), sigmas)
        np.testing.assert_allclose(plane_depth(coef, u, v), depth, rtol=0.0015)


def test_later_share_gives_a_third_wall_its_plane():
    """One weak region over three walls holding 55 / 30 / 15 % of its depths (a corner seen with a far wall): at
    min_share 0.4 of the region only the first wall gets a plane and the others keep their noisy depths; with
    later_share 0.4 (of the depths no earlier plane holds, sequential RANSAC) the rest get planes too, but ranked by
    their inliers the second plane straddles walls 2 and 3 (both within its 3 % band: more depths than wall 2 alone);
    ranked by MSAC each wall gets its own plane and every depth lands on its wall."""
    K = intrinsics(W, H)
    walls = [plane_maps(K, np.eye(3), np.zeros(3), W, H, plane_n=n, plane_c=-3.0)
             for n in ((0.6, 0.0, -1.0), (0.0, 0.0, -1.0), (-0.6, 0.0, -1.0))]
    col = np.arange(W)[None, :].repeat(H, 0)
    which = np.where(col < int(0.55 * W), 0, np.where(col < int(0.85 * W), 1, 2))
    depth = np.choose(which, [w[0] for w in walls])
    normal = np.choose(which[..., None], [w[1] for w in walls])
    d, n, _ = _corrupt(depth, normal, np.random.default_rng(11), gross_share=0.0)
    off = {}   # median relative depth error per wall after snapping
    for later, score in ((None, "inliers"), (0.4, "inliers"), (0.4, "msac"), (None, "msac")):
        dd, nn = d.copy(), n.copy()
        snap_weak_planes(dd, nn, ALL_WEAK, K, WeakPlanes(4.0, 0.03, 0.4, 0.0025, 0.0, 0.0, later, score), seed=0)
        off[later, score] = [float(np.median(np.abs(dd[which == k] / depth[which == k] - 1))) for k in range(3)]
    for key in ((None, "inliers"), (None, "msac")):
        assert off[key][0] < 0.001 and min(off[key][1:]) > 0.004   # the 1 % noise (median 0.5 %) left on walls 2, 3
    assert off[0.4, "inliers"][0] < 0.001 and max(off[0.4, "inliers"][1:]) > 0.003   # a plane between walls 2 and 3
    assert max(off[0.4, "msac"]) < 0.001


def test_auto_tolerance_follows_the_focal_length():
    """tolerance None (fusion.weak_plane_tolerance: auto): 0.03 x 256 / the view's focal length, within 0.01..0.03.
    A patch 2 % behind a wall (0.3 % noise) lies within 3 % (focal 256 px: snapped onto the wall) but not within
    1.5 % (512 px: kept); each run equals the one with that tolerance given."""
    _, depth, normal = _tilted_wall()
    patch = np.zeros((H, W), bool)
    patch[H // 3:2 * H // 3, W // 3:2 * W // 3] = True   # a ninth of the image
    noise = 1 + np.random.default_rng(7).normal(0, 0.003, depth.shape)
    d0 = (np.where(patch, 1.02 * depth, depth) * noise).astype(np.float32)
    results = {}
    for focal, tolerance in ((256.0, 0.03), (512.0, 0.015)):
        K = np.array([[focal, 0.0, W / 2], [0.0, focal, H / 2], [0.0, 0.0, 1.0]])
        runs = []
        for tol in (None, tolerance):
            dd, nn = d0.copy(), normal.astype(np.float32).copy()
            snap_weak_planes(dd, nn, ALL_WEAK, K, WeakPlanes(4.0, tol, 0.4, 0.0025, refine_sigmas=2.0), seed=0)
            runs.append((dd, nn))
        np.testing.assert_array_equal(runs[0][0], runs[1][0])
        np.testing.assert_array_equal(runs[0][1], runs[1][1])
        results[focal] = runs[0][0]
    assert np.abs(results[256.0] / depth - 1).max() < 0.001              # the patch went onto the wall
    kept = results[512.0][patch] == d0[patch]
    assert kept.mean() > 0.9   # the patch kept its depths, but for the noise's tail within 1.5 % (1.7 sigma: 5 %)
    assert np.abs(results[512.0][~patch] / depth[~patch] - 1).max() < 0.001
