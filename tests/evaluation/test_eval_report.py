"""report.html / report.json from a fake run folder, and the evaluate stage that feeds them."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys

import numpy as np
import pytest

from mvs_pipeline.cli import main
from mvs_pipeline.config.loader import dump_config, load_config
from mvs_pipeline.evaluation.depth_metrics import evaluate_run_depths
from mvs_pipeline.evaluation.mlp import write_mlp
from mvs_pipeline.evaluation.report import write_report
from mvs_pipeline.evaluation.stage import evaluate_run as run_stage
from mvs_pipeline.evaluation.toy_scenes import perturbed_reconstruction, room_scene
from mvs_pipeline.io.cloud_preview import write_cloud_preview
from mvs_pipeline.io.colmap_maps import write_colmap_array, write_previews
from mvs_pipeline.io.ply import PointCloud, write_ply


def _fake_run(root):
    rng = np.random.default_rng(0)
    cfg = load_config("default")
    (root / "config.resolved.yaml").parent.mkdir(parents=True, exist_ok=True)
    (root / "config.resolved.yaml").write_text(dump_config(cfg))
    (root / "run.json").write_text(json.dumps({"backend": "cpu", "stage_seconds": {"load": 1.25, "views": 0.5},
                                               "counts": {"views": 3}}))
    st = root / "stereo"
    for name in ("v0.png", "v1.png", "v2.png"):
        d = rng.uniform(1, 3, (24, 32)).astype(np.float32)
        d[:3] = 0  # no estimate
        write_colmap_array(st / "depth_maps" / f"{name}.geometric.bin", d)
        n = rng.normal(size=(24, 32, 3)).astype(np.float32)
        write_colmap_array(st / "normal_maps" / f"{name}.geometric.bin", n / np.linalg.norm(n, axis=-1, keepdims=True))
        write_colmap_array(st / "cost_maps" / f"{name}.geometric.bin", rng.uniform(0, 2, (24, 32)).astype(np.float32))
        gt = (d + rng.normal(scale=0.01, size=d.shape)).astype(np.float32)
        (root / "gt_depth").mkdir(exist_ok=True)
        np.save(root / "gt_depth" / f"{name[:-4]}.npy", gt)
    eval_dir = root / "eval"
    depth = evaluate_run_depths(root, root / "gt_depth", error_image_dir=eval_dir / "depth_errors")
    from mvs_pipeline.evaluation.jsonutil import to_json

    (eval_dir / "depth.json").write_text(to_json(depth))
    eth = {"tolerances": [0.01, 0.1], "accuracy": [0.5, 0.9], "completeness": [0.25, 0.8], "f1": [0.3333, 0.8471],
           "notes": ["a note"]}
    (eval_dir / "eth3d_fused.json").write_text(json.dumps(eth))
    xyz = rng.normal(size=(3000, 3)).astype(np.float32)
    write_ply(root / "fused.ply", PointCloud(xyz=xyz, colors=rng.integers(0, 255, (3000, 3)).astype(np.uint8)))
    write_ply(root / "fused_fps.ply", PointCloud(xyz=xyz[:500]))
    return eth, depth


def test_report_from_fake_run(tmp_path):
    eth, depth = _fake_run(tmp_path)
    json_path, html_path = write_report(tmp_path, max_views=2, render_points=2000)
    page = html_path.read_text()
    # Self-contained: every image is embedded, nothing is fetched.
    srcs = re.findall(r'src="([^"]*)"', page)
    # 2 views (max_views) x depth/normal/cost previews, 2 error PNGs (max_views)
    assert len(srcs) == 2 * 3 + 2
    assert all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "http" not in page and "<script src" not in page and "<link" not in page
    # charts are inline SVG: timings, ETH3D accuracy/completeness/F1, two error histograms
    assert page.count("<svg") == 1 + 3 + 2
    # one WebGL viewer per cloud, with all of these small clouds' points inline
    canvases = re.findall(r'<canvas class="cloud"[^>]*data-xyz="([^"]*)" data-rgb="([^"]*)"', page)
    assert [len(base64.b64decode(x)) // 12 for x, _ in canvases] == [2000, 500]  # render_points caps fused
    assert [len(base64.b64decode(c)) // 3 for _, c in canvases] == [2000, 500]
    for title in ("Settings", "Timings", "Depth / normal / cost maps", "ETH3D evaluation", "Depth-map errors",
                  "Point clouds"):
        assert f"<h2>{title}</h2>" in page
    assert "1 more views not shown" in page and "a note" in page
    rep = json.loads(json_path.read_text())
    assert rep["eth3d"]["fused"]["f1"] == eth["f1"]
    assert rep["run"]["stage_seconds"]["load"] == 1.25
    assert rep["config"]["views"]["num_neighbors"] == load_config("default").views.num_neighbors
    assert rep["depth_metrics"]["overall"]["completeness"] == pytest.approx(depth["overall"]["completeness"])
    assert rep["clouds"]["fused.ply"]["points"] == 3000 and rep["clouds"]["fused_fps.ply"]["points"] == 500
    assert rep["depth_maps"]["v0.png"]["valid_fraction"] == pytest.approx(21 / 24)


def test_report_reads_previews_not_maps_or_clouds(tmp_path):
    """With the stages' previews in place the report needs neither the maps nor the clouds: it
    works with the maps cut to nothing and fused.ply deleted, and never imports matplotlib."""
    _fake_run(tmp_path)
    rng = np.random.default_rng(1)
    big = rng.uniform(1, 3, (480, 1280)).astype(np.float32)
    for name in ("v0.png", "v1.png", "v2.png"):
        write_previews(tmp_path / "stereo" / "previews" / name, depth=big, cost=big - 1, depth_range=(1.0, 3.0),
                       max_size=320)
        (tmp_path / "stereo" / "depth_maps" / f"{name}.geometric.bin").write_bytes(b"cut")  # unreadable now
    write_cloud_preview(tmp_path / "fused.ply", max_points=700)
    (tmp_path / "fused.ply").unlink()
    code = ("import sys; from mvs_pipeline.evaluation.report import write_report; "
            f"write_report({str(tmp_path)!r}, max_views=3, render_points=100000); "
            "print('matplotlib' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["depth_maps"]["v1.png"]["valid_fraction"] == 1.0
    assert (rep["depth_maps"]["v1.png"]["height"], rep["depth_maps"]["v1.png"]["width"]) == (480, 1280)
    assert rep["depth_maps"]["v2.png"]["max"] == float(big.max())
    assert rep["clouds"]["fused.ply"]["points"] == 3000  # the whole cloud's count, from the preview
    page = (tmp_path / "report.html").read_text()
    xyz = re.findall(r'<canvas class="cloud"[^>]*data-xyz="([^"]*)"', page)
    assert [len(base64.b64decode(x)) // 12 for x in xyz] == [700, 500]
    assert len(re.findall(r'alt="v\d.png (depth|cost)"', page)) == 6


def test_report_of_empty_folder_and_cli(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2  # issue 19: an empty folder is an error, not an empty report
    assert "no run outputs" in capsys.readouterr().err
    assert not (tmp_path / "report.html").exists() and not (tmp_path / "report.json").exists()
    assert main(["report", str(tmp_path / "missing")]) == 2


def test_evaluate_stage_scores_reuses_and_reports(tmp_path):
    scans, _, _ = room_scene(3000, n_scans=2, seed=1)
    ws = tmp_path / "ws"
    entries = []
    for s in scans:
        write_ply(ws / "gt" / "eth3d" / f"{s.name}.ply", PointCloud(xyz=s.points))
        entries.append((f"{s.name}.ply", s.world_from_scan))
    write_mlp(ws / "gt" / "eth3d" / "scan_alignment.mlp", entries)  # found in the workspace: no --gt needed
    out = tmp_path / "out"
    gt = np.concatenate([s.points_in_world() for s in scans])
    write_ply(out / "fused.ply", PointCloud(xyz=perturbed_reconstruction(gt, 1000, seed=1)))
    cfg = load_config("default", ["evaluate.report_render_points=1000", "evaluate.write_clouds=true"]).evaluate
    summary = run_stage(cfg, out, workspace=ws, backend="cpu")
    res = json.loads((out / "eval" / "eth3d_fused.json").read_text())
    assert summary["eth3d"]["fused"]["f1"] == res["f1"] and len(res["f1"]) == 6
    assert (out / "eval" / "eth3d_fused.accuracy.tolerance_0.05.ply").is_file()
    assert (out / "report.html").is_file() and "ETH3D evaluation" in (out / "report.html").read_text()
    mtime = (out / "eval" / "eth3d_fused.json").stat().st_mtime_ns
    assert run_stage(cfg, out, workspace=ws, backend="cpu")["eth3d"] == {}  # up to date: reused
    assert (out / "eval" / "eth3d_fused.json").stat().st_mtime_ns == mtime
    write_ply(out / "fused.ply", PointCloud(xyz=gt[:100].astype(np.float32)))  # a new cloud: scored again
    assert "fused" in run_stage(cfg, out, workspace=ws, backend="cpu")["eth3d"]
