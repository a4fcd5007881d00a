"""scripts/eth3d_scene.sh end to end on a synthetic scene laid out like an ETH3D training scene
(images/dslr_images_undistorted/, dslr_calibration_undistorted/*.txt, dslr_scan_eval/)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pycolmap
import pytest

REPO = Path(__file__).resolve().parents[2]


def _as_eth3d(scene: Path, root: Path) -> Path:
    rec = pycolmap.Reconstruction(str(scene / "sparse" / "0"))
    (root / "images" / "dslr_images_undistorted").mkdir(parents=True)
    for im in list(rec.images.values()):   # ETH3D image names are relative to images/
        shutil.copy(scene / "images" / im.name, root / "images" / "dslr_images_undistorted" / im.name)
        im.name = f"dslr_images_undistorted/{im.name}"
    calib = root / "dslr_calibration_undistorted"
    calib.mkdir()
    rec.write_text(str(calib))
    for extra in ("rigs.txt", "frames.txt"):   # ETH3D ships the three legacy files only
        (calib / extra).unlink(missing_ok=True)
    shutil.copytree(scene / "gt" / "eth3d", root / "dslr_scan_eval")
    return root


@pytest.mark.slow
def test_eth3d_scene_script_runs_and_scores(synth_scene_factory, tmp_path):
    root = _as_eth3d(synth_scene_factory("object", views=5, width=200, height=150), tmp_path / "scene")
    cfg = tmp_path / "quick.yaml"
    cfg.write_text("extends: small\npatchmatch:\n  iterations: 1\ndepth:\n  geometric_passes: 1\n")
    env = {**os.environ, "BACKEND": "cpu", "OUT": str(tmp_path / "out"), "MVS": f"{sys.executable} -m mvs_pipeline"}
    env.pop("ETH3D_BINARY", None)
    proc = subprocess.run(["bash", str(REPO / "scripts" / "eth3d_scene.sh"), str(root), str(cfg)], env=env,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    scores = json.loads((tmp_path / "out" / "eval" / "eth3d_fused.json").read_text())
    assert scores["tolerances"][0] == 0.01 and len(scores["f1"]) == 6
    # a real reconstruction of the scanned table: clearly better than nothing at 10 cm
    assert scores["f1"][3] > 0.3, scores
    assert (tmp_path / "out" / "report.html").is_file()


def test_eth3d_scene_script_usage_errors(tmp_path):
    script = str(REPO / "scripts" / "eth3d_scene.sh")
    assert subprocess.run(["bash", script], capture_output=True).returncode == 2
    proc = subprocess.run(["bash", script, str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "scan_alignment.mlp not found" in proc.stderr
