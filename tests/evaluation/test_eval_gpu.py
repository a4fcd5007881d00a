"""The ETH3D metric's CUDA path against its CPU twins (skipped where no GPU is usable)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mvs_pipeline.evaluation.cpu import classify_points_cpu, nearest_dist2_cpu
from mvs_pipeline.evaluation.eth3d import evaluate_eth3d
from mvs_pipeline.evaluation.mlp import Scan
from mvs_pipeline.evaluation.sphere_grid import build_sphere_grids, direction_cells
from mvs_pipeline.evaluation.toy_scenes import perturbed_reconstruction, pose, random_rotation, room_scene

pytestmark = pytest.mark.gpu
TOL = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)


def test_sphere_cells_match_cpu(cupy):
    from mvs_pipeline.evaluation.cuda import sphere_cells

    rng = np.random.default_rng(0)
    p = np.concatenate([rng.normal(size=(20000, 3)), [[0, 0, 1], [0, 0, -1], [-1, 0, 0], [0, 0, 0]]]).astype(np.float32)
    cells = sphere_cells(cupy.asarray(p), 64, 128).get()
    np.testing.assert_array_equal(cells[:-1], direction_cells(p[:-1], 64, 128))
    assert cells[-1] == 64 * 128


@pytest.mark.parametrize("seed", range(3))
def test_accuracy_kernel_matches_cpu(cupy, seed):
    from mvs_pipeline.evaluation.cuda import build_sphere_grids_cuda, classify_points_cuda

    scans, _, _ = room_scene(60000, n_scans=3, seed=seed)
    gt = np.concatenate([s.points_in_world() for s in scans])
    recon = perturbed_reconstruction(gt, 30000, seed=seed, noise=0.03, outlier_fraction=0.1)
    b0, td = 0.01, math.tan(math.radians(0.2))
    grids_gpu = build_sphere_grids_cuda(scans)
    grids_cpu = build_sphere_grids(scans)
    for stop in (-1.0, 0.02**2):
        n = len(recon)
        out_best = cupy.full(n, cupy.nan)  # poisoned: the kernel must write every entry
        out_front = cupy.full(n, 0xFF, dtype=cupy.uint8)
        best, front = classify_points_cuda(cupy.asarray(recon), grids_gpu, b0, td, stop, out_best, out_front)
        assert not bool(cupy.isnan(out_best).any()) and int(out_front.max()) <= 1
        ref_best, ref_front = classify_points_cpu(recon, grids_cpu, b0, td, stop)
        best, front = best.get(), front.get()
        np.testing.assert_array_equal(np.isinf(best), np.isinf(ref_best))
        fin = np.isfinite(best)
        np.testing.assert_allclose(best[fin], ref_best[fin], rtol=1e-9)
        if stop < 0:
            np.testing.assert_array_equal(front, ref_front)
        assert 0.1 < fin.mean() < 1.0


def test_accuracy_kernel_poles_seam_and_origin(cupy):
    """Ray bundles straight up/down, across azimuth +-pi, points within the beam's start disc, and
    a scan point at the scanner origin (dropped)."""
    from mvs_pipeline.evaluation.cuda import build_sphere_grids_cuda, classify_points_cuda

    rng = np.random.default_rng(7)
    m = pose(random_rotation(rng), rng.normal(size=3))
    pts = []
    for axis in ([0, 0, 1.0], [0, 0, -1.0], [-1.0, 0, 0]):
        d = np.asarray(axis) + rng.normal(scale=0.02, size=(3000, 3))
        d /= np.linalg.norm(d, axis=1, keepdims=True)
        pts.append(d * rng.uniform(1, 3, size=(3000, 1)))
    local = np.concatenate(pts + [np.zeros((1, 3))])
    scan = Scan(name="b", path=None, world_from_scan=m, points=local.astype(np.float32))
    q = local[rng.integers(len(local) - 1, size=5000)] * rng.uniform(0.9, 1.1, (5000, 1))
    q = np.concatenate([q + rng.normal(scale=0.004, size=q.shape), rng.normal(scale=0.002, size=(20, 3))])
    recon = ((q @ m[:3, :3].T) + m[:3, 3]).astype(np.float32)
    td = math.tan(math.radians(0.05))
    best, front = classify_points_cuda(cupy.asarray(recon), build_sphere_grids_cuda([scan]), 0.004, td, -1.0)
    ref_best, ref_front = classify_points_cpu(recon, build_sphere_grids([scan]), 0.004, td, -1.0)
    np.testing.assert_array_equal(np.isinf(best.get()), np.isinf(ref_best))
    fin = np.isfinite(ref_best)
    np.testing.assert_allclose(best.get()[fin], ref_best[fin], rtol=1e-9)
    np.testing.assert_array_equal(front.get(), ref_front)


@pytest.mark.parametrize("max_dist", [0.5, 0.05, 0.0])
def test_nearest_matches_kdtree(cupy, max_dist):
    from mvs_pipeline.evaluation.cuda import nearest_dist2_cuda

    rng = np.random.default_rng(3)
    pts = np.concatenate([rng.normal(scale=0.5, size=(200000, 3)), rng.uniform(-10, 10, (1000, 3))]).astype(np.float32)
    q = np.concatenate([rng.normal(scale=0.7, size=(300000, 3)), rng.uniform(-30, 30, (1000, 3)), pts[:100]])
    got = nearest_dist2_cuda(cupy.asarray(q), cupy.asarray(pts), max_dist).get()
    ref = nearest_dist2_cpu(q, pts, max_dist)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got[fin], ref[fin], rtol=1e-12)
    assert fin.any()


def test_nearest_far_outlier_and_empty(cupy):
    from mvs_pipeline.evaluation.cuda import nearest_dist2_cuda

    rng = np.random.default_rng(4)
    pts = np.concatenate([rng.normal(size=(5000, 3)), [[1e8, 0, 0]]]).astype(np.float32)  # key span > int64
    q = rng.normal(size=(5000, 3))
    got = nearest_dist2_cuda(cupy.asarray(q), cupy.asarray(pts), 0.2).get()
    ref = nearest_dist2_cpu(q, pts, 0.2)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))
    np.testing.assert_allclose(got[np.isfinite(ref)], ref[np.isfinite(ref)], rtol=1e-12)
    empty = nearest_dist2_cuda(cupy.asarray(q), cupy.zeros((0, 3), cupy.float32), 0.2).get()
    assert np.isinf(empty).all()


@pytest.mark.parametrize("seed", range(3))
def test_scores_cuda_equal_cpu(cupy, seed):
    scans, _, _ = room_scene(200000, n_scans=3, seed=seed)
    gt = np.concatenate([s.points_in_world() for s in scans])
    recon = perturbed_reconstruction(gt, 150000, seed=seed, noise=0.01)
    for kw in ({}, {"beam_start": 0.02, "beam_divergence_deg": 0.3}):
        a = evaluate_eth3d(recon, scans, TOL, backend="cuda", **kw)
        b = evaluate_eth3d(recon, scans, TOL, backend="cpu", **kw)
        assert a["backend"] == "cuda"
        for k in ("accuracy", "completeness", "f1"):
            np.testing.assert_allclose(a[k], b[k], atol=1e-9, err_msg=k)


def test_empty_reconstruction_cuda(cupy):
    scans, _, _ = room_scene(5000, n_scans=2, seed=0)
    res = evaluate_eth3d(np.zeros((0, 3), np.float32), scans, TOL, backend="cuda")
    assert res["f1"] == [0.0] * len(TOL)


def test_launcher_checks_arguments(cupy):
    from mvs_pipeline.evaluation.cuda import nearest_dist2_cuda, sphere_cells

    with pytest.raises(TypeError, match="points"):
        sphere_cells(cupy.zeros((4, 3), cupy.float64), 8, 16)
    with pytest.raises(TypeError, match="queries"):
        nearest_dist2_cuda(np.zeros((4, 3)), cupy.zeros((4, 3), cupy.float32), 0.1)
    with pytest.raises(ValueError, match="C-contiguous"):
        nearest_dist2_cuda(cupy.zeros((3, 4))[:, :3], cupy.zeros((4, 3), cupy.float32), 0.1)


def test_a_cloud_read_onto_the_gpu_scores_as_the_host_copy(cupy, tmp_path):
    """The evaluate stage reads clouds straight to the GPU (load_reconstruction(on_device=True));
    the points, the non-finite rows dropped and the scores must be those of the host path."""
    from mvs_pipeline.evaluation.eth3d import load_reconstruction
    from mvs_pipeline.io.fused_ply import FusedCloudWriter

    scans, _, _ = room_scene(100000, n_scans=2, seed=7)
    gt = np.concatenate([s.points_in_world() for s in scans])
    recon = perturbed_reconstruction(gt, 60000, seed=7, noise=0.01).astype(np.float32)
    recon[[5, 77, 901]] = [[np.nan, 0, 0], [0, np.inf, 0], [0, 0, -np.inf]]
    ply = tmp_path / "fused.ply"
    with FusedCloudWriter(ply, tmp_path / "fused.ply.vis") as w:
        n = len(recon)
        w.append(recon, np.zeros((n, 3), np.float32), np.zeros((n, 3), np.uint8), np.ones(n, np.uint8),
                 np.tile(np.uint32([1, 0]), n))
        w.finish()
    on_gpu, notes_gpu = load_reconstruction(ply, on_device=True)
    on_host, notes_host = load_reconstruction(ply)
    assert isinstance(on_gpu, cupy.ndarray) and isinstance(on_host, np.ndarray) and notes_gpu == notes_host == []
    np.testing.assert_array_equal(on_gpu.get(), on_host)
    a = evaluate_eth3d(on_gpu, scans, TOL, backend="cuda")
    b = evaluate_eth3d(on_host, scans, TOL, backend="cpu")
    assert a["notes"] == b["notes"] == ["3 non-finite reconstruction point(s) dropped"]
    assert a["num_reconstruction_points"] == b["num_reconstruction_points"] == 60000 - 3
    for k in ("accuracy", "completeness", "f1"):
        np.testing.assert_allclose(a[k], b[k], atol=1e-9, err_msg=k)
