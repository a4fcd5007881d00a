"""Accuracy against the official program on an oblique-pose case with a missing region (issue #19
item 6). The numbers are what `ETH3DMultiViewEvaluation` (github.com/ETH3D/multi-view-evaluation
at 0daa4f4, PCL 1.13, unmodified) printed for oblique_case.write_case(seed 3, kind "cut") with
--tolerances 0.01,0.02,0.05,0.1,0.2,0.5 (6 significant digits). With the beam test in float64
our accuracy was 3.4e-4 off at n = 15000: one point whose distance to a scan ray equals the beam
radius to float32 precision fell the other way; the official test runs in float32, and so do
ours now (reference.py, cpu.py, the kernel), operation for operation."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.evaluation.eth3d import evaluate_eth3d, load_reconstruction
from mvs_pipeline.evaluation.mlp import load_scans
from mvs_pipeline.evaluation.reference import reference_eth3d
from tests.evaluation.oblique_case import write_case

TOLERANCES = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5]
# official accuracy, keyed by write_case's n (2000: small enough for the O(N*M) reference)
OFFICIAL_ACCURACY = {
    2000: [0.941368, 0.968254, 0.981073, 0.981308, 0.987692, 0.994065],
    15000: [0.629852, 0.737265, 0.875805, 0.920129, 0.939185, 0.978705],
}


def _case(tmp_path, n):
    mlp, ply = write_case(tmp_path / "case", 3, n, "cut")
    xyz, _ = load_reconstruction(ply)
    return xyz, load_scans(mlp)


def test_reference_accuracy_matches_the_official_program(tmp_path):
    xyz, scans = _case(tmp_path, 2000)
    res = reference_eth3d(xyz, scans, TOLERANCES)
    np.testing.assert_allclose(res["accuracy"], OFFICIAL_ACCURACY[2000], atol=1.5e-6)


@pytest.mark.parametrize("n", [2000, 15000])
def test_cpu_accuracy_matches_the_official_program(tmp_path, n):
    xyz, scans = _case(tmp_path, n)
    res = evaluate_eth3d(xyz, scans, TOLERANCES, backend="cpu")
    np.testing.assert_allclose(res["accuracy"], OFFICIAL_ACCURACY[n], atol=1.5e-6)
    if n == 2000:
        ref = reference_eth3d(xyz, scans, TOLERANCES)
        np.testing.assert_allclose(res["accuracy"], ref["accuracy"], atol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [2000, 15000])
def test_cuda_accuracy_matches_the_official_program(tmp_path, n):
    xyz, scans = _case(tmp_path, n)
    gpu = evaluate_eth3d(xyz, scans, TOLERANCES, backend="cuda", return_point_results=True)
    cpu = evaluate_eth3d(xyz, scans, TOLERANCES, backend="cpu", return_point_results=True)
    np.testing.assert_allclose(gpu["accuracy"], OFFICIAL_ACCURACY[n], atol=1.5e-6)
    # float32 beam test, no FMA on either side: the same classification for every point
    np.testing.assert_array_equal(gpu["points"]["recon_front"], cpu["points"]["recon_front"])
    np.testing.assert_array_equal(gpu["points"]["recon_best_dist2"], cpu["points"]["recon_best_dist2"])
