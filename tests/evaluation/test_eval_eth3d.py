"""The ETH3D metric on the CPU: hand-computed scenes, voxel weighting, and the fast path against
the brute-force definition (mvs_pipeline/evaluation/reference.py) on random inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.evaluation.cpu import classify_points_cpu
from mvs_pipeline.evaluation.eth3d import (
    ACCURATE,
    INACCURATE,
    UNOBSERVED,
    classify_accuracy,
    evaluate_eth3d,
    f1_score,
    load_reconstruction,
    parse_tolerances,
)
from mvs_pipeline.evaluation.mlp import Scan
from mvs_pipeline.evaluation.reference import reference_eth3d
from mvs_pipeline.evaluation.sphere_grid import build_sphere_grids
from mvs_pipeline.evaluation.toy_scenes import perturbed_reconstruction, pose, random_rotation, room_scene

TOL = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)


def plane_scan(world_from_scan=np.eye(4), z=2.0, half=0.3, step=0.005):
    """Scan of the plane z = `z` (scanner frame): a grid of points `step` apart."""
    g = np.arange(-half, half + step / 2, step)
    xx, yy = np.meshgrid(g, g, indexing="ij")
    pts = np.stack([xx.ravel(), yy.ravel(), np.full(xx.size, z)], 1).astype(np.float32)
    return Scan(name="plane", path=None, world_from_scan=np.asarray(world_from_scan, float), points=pts)


def to_world(scan, p_local):
    return (np.asarray(p_local, float) @ scan.rotation.T + scan.translation).astype(np.float32)


@pytest.mark.parametrize("posed", [False, True])
def test_plane_points_on_in_front_behind_and_aside(posed):
    """Hand-computed classes; each point sits alone in its voxel cells, so scores are plain ratios."""
    rng = np.random.default_rng(0)
    m = pose(random_rotation(rng), [3.0, -1.0, 0.5]) if posed else np.eye(4)
    scan = plane_scan(m)
    s_a = scan.points[1000].astype(float)  # a measured point
    s_b = scan.points[3000].astype(float)
    s_c = scan.points[6000].astype(float)
    local = np.array([
        s_a,                                          # on the surface: distance 0
        s_b * (1 - 0.03 / np.linalg.norm(s_b)),       # 3 cm in front, on the ray: free space
        s_c * (1 + 0.03 / np.linalg.norm(s_c)),       # 3 cm behind the surface: occluded
        [5.0, 0.0, 2.0],                              # aside: no beam passes near it
    ])
    result = evaluate_eth3d(to_world(scan, local), [scan], TOL, backend="cpu", return_point_results=True)
    classes = classify_accuracy(result["points"]["recon_best_dist2"], result["points"]["recon_front"], TOL)
    expected = np.array([
        [ACCURATE] * 6,
        [INACCURATE, INACCURATE] + [ACCURATE] * 4,
        [UNOBSERVED, UNOBSERVED] + [ACCURATE] * 4,
        [UNOBSERVED] * 6,
    ]).T
    np.testing.assert_array_equal(classes, expected)
    # accurate / (accurate + inaccurate): 1/2 at 1 and 2 cm, 3/3 from 5 cm on.
    np.testing.assert_allclose(result["accuracy"], [0.5, 0.5, 1, 1, 1, 1], atol=1e-12)


def test_beam_radius_and_divergence():
    """A point next to a ray is a candidate only within b = start + r tan(divergence)."""
    scan = Scan(name="one", path=None, world_from_scan=np.eye(4),
                points=np.array([[0.0, 0.0, 10.0]], np.float32))  # one ray along +z, surface at 10 m
    b = 1e-3 + 8.0 * math.tan(math.radians(0.05))  # at r ~ 8 m
    inside = [b * 0.9, 0.0, 8.0]
    outside = [b * 1.1, 0.0, 8.0]
    behind_origin = [0.0, 0.0, -3.0]  # opposite side of the ray: d.X < 0
    res = evaluate_eth3d(np.array([inside, outside, behind_origin], np.float32), [scan], [1.0, 3.0],
                         beam_start=1e-3, beam_divergence_deg=0.05, backend="cpu", return_point_results=True)
    best, front = res["points"]["recon_best_dist2"], res["points"]["recon_front"]
    assert front.tolist() == [True, False, False]
    assert np.isinf(best[1]) and np.isinf(best[2])
    np.testing.assert_allclose(best[0], (b * 0.9) ** 2 + 4.0, rtol=1e-6)  # |S - X|^2
    # 2.0 m from the surface: inaccurate at 1 m, accurate at 3 m; the others are unobserved.
    assert res["accuracy"] == [0.0, 1.0]


def _iso_scan(local_points):
    return Scan(name="s", path=None, world_from_scan=np.eye(4), points=np.asarray(local_points, np.float32))


def test_completeness_and_f1_hand_computed():
    """Ten GT points 1 m apart (each alone in its cells): completeness is a plain fraction."""
    gt = np.array([[0.0025 + 1.0 * k, 0.0025, 2.0005] for k in range(10)])
    scan = _iso_scan(gt)
    recon = np.array([gt[0], gt[1] + [0, 0.015, 0], gt[2] + [0, 0.3, 0]], np.float32)
    res = evaluate_eth3d(recon, [scan], TOL, backend="cpu")
    np.testing.assert_allclose(res["completeness"], [0.1, 0.2, 0.2, 0.2, 0.2, 0.3], atol=1e-12)
    for a, c, f in zip(res["accuracy"], res["completeness"], res["f1"]):
        assert f == pytest.approx(f1_score(a, c))
    assert f1_score(0.0, 0.0) == 0.0
    assert f1_score(0.5, 1.0) == pytest.approx(2 * 0.5 / 1.5)


def test_voxel_weighting_constructed():
    """3 complete GT points at x=-1 mm and 1 incomplete at x=+1 mm: grid 0 splits them into two
    cells (ratios 1 and 0), the half-shifted grid 1 has them in one cell (ratio 3/4):
    completeness = (1 + 0 + 0.75) / 3. Plus a far, dense, complete cluster of 100 points that
    counts as just one cell per grid: (1 + 0 + 0.75 + 1 + 1) / 5."""
    near = [[-0.001, 0.0025, 2.0005]] * 3 + [[0.001, 0.0025, 2.0005]]
    recon = np.array([[-0.0105, 0.0025, 2.0005]], np.float32)  # 9.5 mm from the first three, 11.5 from the 4th
    res = evaluate_eth3d(recon, [_iso_scan(near)], [0.01], backend="cpu")
    assert res["completeness"][0] == pytest.approx((1 + 0 + 0.75) / 3)
    cluster = np.array([[1.0025, 0.0025, 2.0025]]) + np.random.default_rng(0).uniform(-1e-3, 1e-3, (100, 3))
    recon2 = np.concatenate([recon, [[1.0025, 0.0025, 2.0025]]]).astype(np.float32)
    res = evaluate_eth3d(recon2, [_iso_scan(np.concatenate([near, cluster]))], [0.01], backend="cpu")
    assert res["completeness"][0] == pytest.approx((1 + 0 + 0.75 + 1 + 1) / 5)


def _random_scene(seed):
    """Two or three posed scans of a room, a noisy partial reconstruction with outliers."""
    scans, _, _ = room_scene(2500, n_scans=2 + seed % 2, seed=seed)
    gt = np.concatenate([s.points_in_world() for s in scans])
    recon = perturbed_reconstruction(gt, 700, seed=seed, noise=0.03, outlier_fraction=0.1)
    return scans, recon


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("beam", [(1.125e-3, 0.011), (0.03, 0.5)])
def test_fast_path_matches_brute_force(seed, beam):
    scans, recon = _random_scene(seed)
    kw = dict(beam_start=beam[0], beam_divergence_deg=beam[1])
    fast = evaluate_eth3d(recon, scans, TOL, backend="cpu", **kw)
    ref = reference_eth3d(recon, scans, TOL, **kw)
    for key in ("accuracy", "completeness", "f1"):
        np.testing.assert_allclose(fast[key], ref[key], atol=1e-12, err_msg=key)
    if beam[0] > 0.01:  # wide beams: the scene must exercise every class, or the test proves little
        classes = classify_accuracy(ref["best_dist2"], ref["front"], TOL)
        assert {ACCURATE, INACCURATE, UNOBSERVED} <= set(np.unique(classes[1]).tolist())


@pytest.mark.parametrize("seed", range(3))
def test_per_point_results_exact_without_early_exit(seed):
    """best_dist2 and front per point equal the brute force's, including near the poles of the
    direction grid (straight up/down from a scanner), across the azimuth seam (+-pi), and for
    points inside the beam's start disc (r < b: every ray is searched)."""
    rng = np.random.default_rng(100 + seed)
    m = pose(random_rotation(rng), rng.normal(size=3))
    # Dense ray bundles around +z, -z, -x (seam) and a random direction.
    pts = []
    for axis in ([0, 0, 1.0], [0, 0, -1.0], [-1.0, 0, 0], rng.normal(size=3)):
        axis = np.asarray(axis) / np.linalg.norm(axis)
        d = axis + rng.normal(scale=0.02, size=(400, 3))
        d /= np.linalg.norm(d, axis=1, keepdims=True)
        pts.append(d * rng.uniform(1.0, 3.0, size=(400, 1)))
    scan = Scan(name="bundles", path=None, world_from_scan=m, points=np.concatenate(pts).astype(np.float32))
    local = np.concatenate(pts)[rng.integers(1600, size=600)]
    local = local * rng.uniform(0.9, 1.1, size=(600, 1)) + rng.normal(scale=0.004, size=(600, 3))
    local = np.concatenate([local, rng.normal(scale=0.002, size=(5, 3))])  # within 2 mm of the scanner
    recon = to_world(scan, local)
    beam_start, div = 0.004, 0.05
    grids = build_sphere_grids([scan])
    best, front = classify_points_cpu(recon, grids, beam_start, math.tan(math.radians(div)), stop_dist2=-1.0)
    ref = reference_eth3d(recon, [scan], TOL, beam_start=beam_start, beam_divergence_deg=div)
    np.testing.assert_array_equal(np.isfinite(best), np.isfinite(ref["best_dist2"]))
    fin = np.isfinite(best)
    np.testing.assert_allclose(best[fin], ref["best_dist2"][fin], rtol=1e-9, atol=1e-15)
    np.testing.assert_array_equal(front, ref["front"])
    assert 0.2 < fin.mean() < 1.0 and front.any() and not front.all()


def test_empty_reconstruction_scores_zero():
    scans, _ = _random_scene(0)
    res = evaluate_eth3d(np.zeros((0, 3), np.float32), scans, TOL, backend="cpu")
    assert res["accuracy"] == [0.0] * 6 and res["completeness"] == [0.0] * 6 and res["f1"] == [0.0] * 6
    assert any("no points" in n for n in res["notes"])


def test_non_finite_points_dropped_and_noted():
    scans, recon = _random_scene(1)
    bad = np.concatenate([recon, [[np.nan, 0, 0], [np.inf, 1, 1]]]).astype(np.float32)
    a = evaluate_eth3d(recon, scans, TOL, backend="cpu")
    b = evaluate_eth3d(bad, scans, TOL, backend="cpu")
    assert a["f1"] == b["f1"] and any("2 non-finite" in n for n in b["notes"])


def test_double_precision_ply_converted_not_zero(tmp_path):
    """A PLY with double x/y/z is read (converted to float32, with a note) and scores like float32."""
    import plyfile

    scans, recon = _random_scene(2)
    v = np.zeros(len(recon), dtype=[("x", "<f8"), ("y", "<f8"), ("z", "<f8")])
    for i, a in enumerate("xyz"):
        v[a] = recon[:, i]
    plyfile.PlyData([plyfile.PlyElement.describe(v, "vertex")]).write(str(tmp_path / "d.ply"))
    xyz, notes = load_reconstruction(tmp_path / "d.ply")
    assert xyz.dtype == np.float32 and notes and "converted" in notes[0]
    kw = dict(beam_start=0.03, beam_divergence_deg=0.5, backend="cpu")  # wide beams: most points observed
    res = evaluate_eth3d(xyz, scans, TOL, **kw)
    assert res["f1"] == evaluate_eth3d(recon, scans, TOL, **kw)["f1"] and min(res["f1"]) > 0.001


def test_bad_arguments():
    scans, recon = _random_scene(0)
    assert parse_tolerances("0.05, 0.01") == [0.01, 0.05]
    for bad in ("", "0.1,x", "-0.1", "nan"):
        with pytest.raises(MVSError):
            parse_tolerances(bad)
    with pytest.raises(MVSError, match="voxel_size"):
        evaluate_eth3d(recon, scans, TOL, voxel_size=0, backend="cpu")
    with pytest.raises(MVSError, match=r"\[N, 3\]"):
        evaluate_eth3d(recon[:, :2], scans, TOL, backend="cpu")
    with pytest.raises(MVSError, match="no scans"):
        evaluate_eth3d(recon, [], TOL, backend="cpu")
    with pytest.raises(MVSError, match="not found"):
        load_reconstruction("/nonexistent/r.ply")


def test_tolerances_sorted_in_output():
    scans, recon = _random_scene(3)
    a = evaluate_eth3d(recon, scans, [0.5, 0.01, 0.1], backend="cpu")
    b = evaluate_eth3d(recon, scans, [0.01, 0.1, 0.5], backend="cpu")
    assert a["tolerances"] == [0.01, 0.1, 0.5] and a["f1"] == b["f1"]
    assert a["completeness"] == sorted(a["completeness"])  # monotone in the tolerance
