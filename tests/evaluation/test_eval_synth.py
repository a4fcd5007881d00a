"""The ETH3D metric on a synthetic scene's own ground truth: the GT mesh, densely sampled, must
score near-perfectly against the scene's simulated laser scans."""

from __future__ import annotations

import numpy as np
import pytest

synth = pytest.importorskip("mvs_pipeline.synth")


def test_dense_gt_mesh_samples_score_high(tmp_path):
    import open3d as o3d

    from mvs_pipeline.evaluation.eth3d import evaluate_eth3d
    from mvs_pipeline.evaluation.mlp import load_scans

    out = synth.generate_scene("object", tmp_path / "obj", views=3, width=64, height=48, seed=0,
                               max_scan_points=200_000)
    scans = load_scans(out / "gt" / "eth3d" / "scan_alignment.mlp")
    mesh = o3d.io.read_triangle_mesh(str(out / "gt" / "mesh.ply"))
    o3d.utility.random.seed(0)
    xyz = np.asarray(mesh.sample_points_uniformly(500_000).points, dtype=np.float32)
    res = evaluate_eth3d(xyz, scans, [0.01, 0.02], backend="cpu")
    assert res["completeness"][0] >= 0.95, res
    assert res["accuracy"][0] >= 0.95, res
    # And a reconstruction shifted by 3 cm must fail at 1 cm: the test can tell good from bad.
    bad = evaluate_eth3d(xyz + np.float32(0.03), scans, [0.01], backend="cpu")
    assert bad["f1"][0] < 0.5, bad
