"""Depth-map metrics against hand-computed values; COLMAP / ETH3D depth file reading; a run folder."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.evaluation.depth_io import read_eth3d_depth, read_gt_depth
from mvs_pipeline.evaluation.depth_metrics import (
    DepthAccumulator,
    depth_errors,
    error_image,
    evaluate_run_depths,
    format_depth_table,
    resample_to_camera,
)
from mvs_pipeline.io.colmap_maps import read_colmap_array, write_colmap_array

GT = np.array([[1.0, 2.0, 4.0], [8.0, np.inf, np.nan]], np.float32)
PRED = np.array([[1.005, 2.03, 4.2], [0.0, 3.0, 8.0]], np.float32)


def test_depth_errors_hand_computed():
    m = depth_errors(PRED.astype(np.float64), GT)
    # GT-valid: 1, 2, 4, 8; estimated among them: the first three (0 = no estimate).
    assert m["gt_pixels"] == 4 and m["evaluated_pixels"] == 3 and m["completeness"] == 0.75
    abs_err = np.array([0.005, 0.03, 0.2])
    np.testing.assert_allclose(m["mean_abs_error"], abs_err.mean(), rtol=1e-6)
    np.testing.assert_allclose(m["median_abs_error"], 0.03, rtol=1e-5)
    np.testing.assert_allclose(m["mean_rel_error"], (0.005 + 0.015 + 0.05) / 3, rtol=1e-5)
    np.testing.assert_allclose(m["median_rel_error"], 0.015, rtol=1e-5)
    assert m["within_1pct"] == pytest.approx(1 / 3) and m["within_2pct"] == pytest.approx(2 / 3)
    assert m["within_2cm"] == pytest.approx(1 / 3) and m["within_10cm"] == pytest.approx(2 / 3)


def test_no_estimates_gives_nan_errors_and_zero_completeness():
    m = depth_errors(np.zeros_like(GT), GT)
    assert m["completeness"] == 0 and np.isnan(m["mean_abs_error"]) and np.isnan(m["within_2cm"])
    with pytest.raises(MVSError, match="shape"):
        depth_errors(np.zeros((3, 3)), GT)


def test_accumulator_pools_pixels():
    rng = np.random.default_rng(0)
    gts = [rng.uniform(1, 5, (20, 30)) for _ in range(3)]
    preds = [g * (1 + rng.normal(scale=0.02, size=g.shape)) for g in gts]
    preds[1][:5] = np.nan  # missing estimates
    acc = DepthAccumulator()
    for p, g in zip(preds, gts):
        acc.add(p, g)
    out = acc.result()
    p_all = np.concatenate([p.ravel() for p in preds])
    g_all = np.concatenate([g.ravel() for g in gts])
    pooled = depth_errors(p_all, g_all)  # one big "image" holding all pixels
    for k in ("completeness", "mean_abs_error", "mean_rel_error", "within_1pct", "within_2pct", "within_2cm"):
        assert out[k] == pytest.approx(pooled[k], rel=1e-12), k
    for k in ("median_abs_error", "median_rel_error"):  # histogram medians: within 0.05 %
        assert out[k] == pytest.approx(pooled[k], rel=6e-4), k


def test_colmap_array_layout(tmp_path):
    # Written by hand: header, then channel-major rows. 3 wide, 2 high, 1 channel.
    (tmp_path / "d.bin").write_bytes(b"3&2&1&" + np.arange(6, dtype="<f4").tobytes())
    np.testing.assert_array_equal(read_colmap_array(tmp_path / "d.bin"), [[0, 1, 2], [3, 4, 5]])
    normals = np.random.default_rng(0).normal(size=(4, 5, 3)).astype(np.float32)
    write_colmap_array(tmp_path / "n.bin", normals)
    np.testing.assert_array_equal(read_colmap_array(tmp_path / "n.bin"), normals)
    raw = (tmp_path / "n.bin").read_bytes()
    first_channel = np.frombuffer(raw[len(b"5&4&3&"):], "<f4")[:20].reshape(4, 5)
    np.testing.assert_array_equal(first_channel, normals[..., 0])  # x of all pixels comes first
    (tmp_path / "bad.bin").write_bytes(b"3&2&1&" + b"\0" * 8)
    with pytest.raises(MVSError, match="holds 8 bytes"):
        read_colmap_array(tmp_path / "bad.bin")


def test_eth3d_raw_depth(tmp_path):
    d = np.array([[1.5, np.inf, 2.0], [np.inf, 3.25, 4.0]], "<f4")
    (tmp_path / "DSC_0001.JPG").write_bytes(d.tobytes())  # ETH3D: raw row-major floats, image's name
    out = read_eth3d_depth(tmp_path / "DSC_0001.JPG", 3, 2)
    np.testing.assert_array_equal(out, d)
    assert np.isinf(out[0, 1])
    with pytest.raises(MVSError, match="24 bytes"):
        read_eth3d_depth(tmp_path / "DSC_0001.JPG", 2, 2)
    with pytest.raises(MVSError, match="image size"):
        read_gt_depth(tmp_path / "DSC_0001.JPG")


def test_resample_distorted_gt_into_pinhole_camera():
    """Nearest GT pixel of each undistorted pixel centre, by OpenCV's radial model written out."""
    import pycolmap

    f, cx, cy, k1 = 100.0, 40.0, 30.0, 0.2
    src = pycolmap.Camera.create_from_model_name(1, "OPENCV", f, 80, 60)
    src.params = [f, f, cx, cy, k1, 0.0, 0.0, 0.0]
    dst = pycolmap.Camera.create_from_model_name(2, "PINHOLE", f, 80, 60)
    dst.params = [f, f, cx, cy]
    gt = (np.arange(60)[:, None] * 1000 + np.arange(80)[None, :] + 1).astype(np.float32)  # unique per pixel
    out = resample_to_camera(gt, src, dst)
    for (j, i) in [(0, 0), (30, 40), (5, 70), (59, 79), (45, 12)]:
        x, y = (i + 0.5 - cx) / f, (j + 0.5 - cy) / f
        s = 1 + k1 * (x * x + y * y)
        u, v = f * x * s + cx, f * y * s + cy
        if 0 <= u < 80 and 0 <= v < 60:
            assert out[j, i] == gt[int(np.floor(v)), int(np.floor(u))]
        else:
            assert np.isinf(out[j, i])  # outside the distorted image: unknown
    assert np.isinf(out[0, 0])  # the corner maps outside with k1 > 0


def test_error_image_colours():
    rgb = error_image(PRED, GT)
    assert rgb.shape == (2, 3, 3) and rgb.dtype == np.uint8
    assert (rgb[1, 1] == 40).all() and (rgb[1, 2] == 40).all()  # GT unknown
    assert (rgb[1, 0] == 255).all()  # GT known, no estimate
    assert not (rgb[0, 2] == rgb[0, 0]).all()  # 5 % vs 0.5 % error: different colours


def test_evaluate_run_folder(tmp_path):
    import cv2

    run, gt_dir = tmp_path / "run", tmp_path / "gt"
    dm = run / "stereo" / "depth_maps"
    dm.mkdir(parents=True)
    gt_dir.mkdir()
    rng = np.random.default_rng(1)
    gts = {n: rng.uniform(1, 3, (12, 16)).astype(np.float32) for n in ("a.png", "b.png")}
    preds = {n: (g * (1 + rng.normal(scale=0.01, size=g.shape))).astype(np.float32) for n, g in gts.items()}
    for n in gts:
        np.save(gt_dir / f"{n[:-4]}.npy", gts[n])
        write_colmap_array(dm / f"{n}.geometric.bin", preds[n])
        write_colmap_array(dm / f"{n}.photometric.bin", np.zeros_like(preds[n]))  # must not be used
    write_colmap_array(dm / "c.png.geometric.bin", np.ones((12, 16), np.float32))  # no GT: skipped
    np.save(gt_dir / "big.npy", np.ones((24, 32), np.float32))
    out = evaluate_run_depths(run, gt_dir, error_image_dir=tmp_path / "err")
    assert set(out["images"]) == {"a.png", "b.png"} and out["skipped"] == ["c.png"]
    for n in gts:
        assert out["images"][n] == depth_errors(preds[n], gts[n])
    assert out["overall"]["completeness"] == 1.0
    img = cv2.imread(str(tmp_path / "err" / "a.png.error.png"))
    assert img.shape == (12, 16, 3)
    assert "OVERALL" in format_depth_table(out)
    with pytest.raises(MVSError, match="no depth maps"):
        evaluate_run_depths(tmp_path, gt_dir)


def _write_text_model(folder, camera_line: str, image_names):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cameras.txt").write_text(f"# COLMAP text model\n{camera_line}\n")
    lines = "".join(f"{k + 1} 1 0 0 0 0 0 0 1 {n}\n\n" for k, n in enumerate(image_names))
    (folder / "images.txt").write_text("# images\n" + lines)
    (folder / "points3D.txt").write_text("")


def test_eth3d_raw_gt_resampled_into_run_cameras(tmp_path):
    """ETH3D layout: raw GT for the distorted image (OPENCV camera, dslr_calibration_jpg), our depth
    map for the undistorted PINHOLE camera at half resolution (run's sparse/ model)."""
    f, cx, cy, k1 = 100.0, 40.0, 30.0, 0.05
    calib = tmp_path / "dslr_calibration_jpg"
    _write_text_model(calib, f"1 OPENCV 80 60 {f} {f} {cx} {cy} {k1} 0 0 0", ["dslr_images/DSC_0001.JPG"])
    run = tmp_path / "run"
    name = "dslr_images_undistorted/DSC_0001.JPG"
    _write_text_model(run / "sparse", f"1 PINHOLE 80 60 {f} {f} {cx} {cy}", [name])
    # GT: a fronto-parallel plane at 2 m (z-depth is the same in both cameras), unknown in one corner.
    gt = np.full((60, 80), 2.0, np.float32)
    gt[:10, :10] = np.inf
    gt_dir = tmp_path / "ground_truth_depth" / "dslr_images"
    gt_dir.mkdir(parents=True)
    (gt_dir / "DSC_0001.JPG").write_bytes(gt.astype("<f4").tobytes())
    pred = np.full((30, 40), 2.02, np.float32)  # half resolution: the camera is rescaled to match
    write_colmap_array(run / "stereo" / "depth_maps" / f"{name}.geometric.bin", pred)
    out = evaluate_run_depths(run, gt_dir, gt_cameras=calib)
    m = out["images"][name]
    assert m["mean_abs_error"] == pytest.approx(0.02, rel=1e-5) and m["within_2pct"] == 1.0
    assert 0 < m["gt_pixels"] < 30 * 40  # the unknown corner (and pixels mapping outside) are excluded
    with pytest.raises(MVSError, match="gt-cameras"):  # raw GT of another size without its cameras
        evaluate_run_depths(run, gt_dir)


def test_cli_depth_mode(tmp_path, capsys):
    import json

    from mvs_pipeline.cli import main

    run, gt_dir = tmp_path / "run", tmp_path / "gt"
    gt_dir.mkdir()
    d = np.full((8, 10), 3.0, np.float32)
    np.save(gt_dir / "view_000.npy", d)
    write_colmap_array(run / "stereo" / "depth_maps" / "view_000.png.photometric.bin", d * 1.005)
    rc = main(["evaluate", "--depth-run", str(run), "--gt-depth", str(gt_dir), "--json", str(tmp_path / "d.json"),
               "--error-images", str(tmp_path / "err")])
    assert rc == 0
    data = json.loads((tmp_path / "d.json").read_text())
    overall = data["depth"]["overall"]
    assert overall["mean_rel_error"] == pytest.approx(0.005, rel=1e-4)
    assert overall["within_1pct"] == 1.0 and overall["within_2cm"] == 1.0  # 0.5 %, 1.5 cm
    assert (tmp_path / "err" / "view_000.png.error.png").is_file()
    assert "OVERALL" in capsys.readouterr().out
    assert main(["evaluate", "--depth-run", str(run)]) == 2  # needs --gt-depth


def test_error_images_only_for_previewed_views_downscaled(tmp_path):
    import cv2

    run, gt_dir = tmp_path / "run", tmp_path / "gt"
    dm = run / "stereo" / "depth_maps"
    dm.mkdir(parents=True)
    gt_dir.mkdir()
    gt = np.full((40, 2000), 2.0, np.float32)
    names = ["v2.png", "v0.png", "v1.png"]
    for n in names:
        np.save(gt_dir / f"{n[:-4]}.npy", gt)
        write_colmap_array(dm / f"{n}.geometric.bin", gt * 1.01)
    out = evaluate_run_depths(run, gt_dir, error_image_dir=tmp_path / "prev", error_images="previews",
                              preview_views=2)
    assert sorted(p.name for p in (tmp_path / "prev").iterdir()) == ["v0.png.error.png", "v1.png.error.png"]
    assert cv2.imread(str(tmp_path / "prev" / "v0.png.error.png")).shape == (32, 1600, 3)
    assert set(out["images"]) == set(names)  # metrics for every view all the same
    evaluate_run_depths(run, gt_dir, error_image_dir=tmp_path / "all", error_images="all", preview_views=2)
    assert len(list((tmp_path / "all").iterdir())) == 3
    assert cv2.imread(str(tmp_path / "all" / "v2.png.error.png")).shape == (40, 2000, 3)
    with pytest.raises(MVSError, match="error_images"):
        evaluate_run_depths(run, gt_dir, error_images="some")


def test_error_images_config_default_is_previews():
    from mvs_pipeline.evaluation.params import EvaluateConfig

    assert EvaluateConfig().error_images == "previews"
