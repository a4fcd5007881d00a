"""`mvs-pipeline evaluate` end to end on files, and the optional official-binary plumbing."""

from __future__ import annotations

import json
import os
import stat
import sys

import numpy as np
import pytest

from mvs_pipeline.cli import main
from mvs_pipeline.errors import MVSError
from mvs_pipeline.evaluation.eth3d import evaluate_eth3d
from mvs_pipeline.evaluation.mlp import write_mlp
from mvs_pipeline.evaluation.official import find_official_binary, parse_official_output, run_official
from mvs_pipeline.evaluation.toy_scenes import perturbed_reconstruction, room_scene
from mvs_pipeline.io.ply import PointCloud, read_ply, write_ply

TOL = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5]


@pytest.fixture
def gt_folder(tmp_path):
    scans, _, _ = room_scene(4000, n_scans=2, seed=5)
    entries = []
    for s in scans:
        write_ply(tmp_path / "scans" / f"{s.name}.ply", PointCloud(xyz=s.points))
        entries.append((f"scans/{s.name}.ply", s.world_from_scan))
    write_mlp(tmp_path / "scan_alignment.mlp", entries)
    gt = np.concatenate([s.points_in_world() for s in scans])
    recon = perturbed_reconstruction(gt, 1500, seed=5, noise=0.02)
    write_ply(tmp_path / "recon.ply", PointCloud(xyz=recon))
    return tmp_path, scans, recon


def test_evaluate_writes_json_lists(gt_folder, capsys):
    folder, scans, recon = gt_folder
    out = folder / "res" / "eval.json"
    rc = main(["evaluate", str(folder / "recon.ply"), "--gt", str(folder / "scan_alignment.mlp"),
               "--backend", "cpu", "--json", str(out), "--no-official", "--beam-start-radius", "0.02"])
    assert rc == 0
    data = json.loads(out.read_text())
    expected = evaluate_eth3d(recon, scans, TOL, backend="cpu", beam_start=0.02)
    assert data["tolerances"] == TOL
    for k in ("accuracy", "completeness", "f1"):
        assert isinstance(data[k], list) and len(data[k]) == 6
        np.testing.assert_allclose(data[k], expected[k], atol=1e-12)
    printed = capsys.readouterr().out
    assert "tolerance" in printed and f"{expected['f1'][2]:.4f}" in printed


def test_evaluate_clouds_coloured(gt_folder):
    folder, scans, recon = gt_folder
    rc = main(["evaluate", str(folder / "recon.ply"), "--gt", str(folder / "scan_alignment.mlp"), "--backend", "cpu",
               "--tolerances", "0.05,0.2", "--no-official", "--beam-start-radius", "0.03",
               "--completeness-cloud", str(folder / "vis" / "comp"), "--accuracy-cloud", str(folder / "vis" / "acc")])
    assert rc == 0
    res = evaluate_eth3d(recon, scans, [0.05, 0.2], backend="cpu", beam_start=0.03, return_point_results=True)
    comp = read_ply(folder / "vis" / "comp.tolerance_0.05.ply")
    acc = read_ply(folder / "vis" / "acc.tolerance_0.2.ply")
    assert len(comp) == sum(len(s.points) for s in scans) and len(acc) == len(recon)
    green = (comp.colors == [0, 255, 0]).all(1)
    np.testing.assert_array_equal(green, res["points"]["gt_dist2"] <= 0.05**2)
    colours = {tuple(c) for c in acc.colors.tolist()}
    assert colours == {(0, 255, 0), (255, 0, 0), (0, 0, 255)}  # accurate, inaccurate, unobserved all occur


def test_empty_reconstruction_says_so(gt_folder, capsys):
    folder, _, _ = gt_folder
    write_ply(folder / "empty.ply", PointCloud(xyz=np.zeros((0, 3), np.float32)))
    out = folder / "e.json"
    assert main(["evaluate", str(folder / "empty.ply"), "--gt", str(folder / "scan_alignment.mlp"),
                 "--backend", "cpu", "--no-official", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["f1"] == [0.0] * 6 and data["accuracy"] == [0.0] * 6
    assert "no points" in capsys.readouterr().out


@pytest.mark.parametrize("case", ["missing_scan", "non_rigid", "missing_ply", "no_gt", "nothing"])
def test_bad_inputs_one_line_error(gt_folder, capsys, case):
    folder, _, _ = gt_folder
    args = ["evaluate", str(folder / "recon.ply"), "--gt", str(folder / "scan_alignment.mlp"), "--backend", "cpu"]
    if case == "missing_scan":
        os.remove(folder / "scans" / "scan1.ply")
    elif case == "non_rigid":
        write_mlp(folder / "scan_alignment.mlp", [("scans/scan0.ply", np.diag([2.0, 2.0, 2.0, 1.0]))])
    elif case == "missing_ply":
        args[1] = str(folder / "nope.ply")
    elif case == "no_gt":
        args = args[:2]
    else:
        args = ["evaluate"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error" in err[0]
    expected = {"missing_scan": "scan1.ply", "non_rigid": "not rigid", "missing_ply": "nope.ply",
                "no_gt": "--gt", "nothing": "reconstruction"}[case]
    assert expected in err[0]


# --- The official program is not installed here and cannot be downloaded. What follows tests only
# --- our *plumbing* around it (command line, output parsing, side-by-side printing) with a FAKE
# --- stand-in script; it says nothing about whether our numbers match the official program's.

REAL_OUTPUT_SHAPE = """Loading reconstruction: /data/recon.ply
Loading scan: /data/dslr_scan_eval/scan1.ply
Computing completeness
Computing accuracy
Tolerances: 0.01 0.02 0.05
Completenesses: 0.312 0.5 0.75
Accuracies: 0.8 0.9 0.95
F1-scores: 0.448921 0.642857 0.838235
"""


def test_parser_reads_official_output_format():
    out = parse_official_output(REAL_OUTPUT_SHAPE)
    assert out == {"tolerances": [0.01, 0.02, 0.05], "completeness": [0.312, 0.5, 0.75],
                   "accuracy": [0.8, 0.9, 0.95], "f1": [0.448921, 0.642857, 0.838235]}
    with pytest.raises(MVSError, match="lacks f1"):
        parse_official_output(REAL_OUTPUT_SHAPE.replace("F1-scores", "F2"))
    with pytest.raises(MVSError, match="different lengths"):
        parse_official_output(REAL_OUTPUT_SHAPE.replace("Accuracies: 0.8 0.9 0.95", "Accuracies: 0.8"))


def _fake_official(tmp_path, body: str):
    """A stand-in executable that records its arguments and prints official-format lines."""
    script = tmp_path / "ETH3DMultiViewEvaluation"
    script.write_text(f"#!{sys.executable}\nimport sys, json\n"
                      f"open({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_fake_binary_parser_test_side_by_side(gt_folder, capsys, monkeypatch):
    """PARSER TEST with a fake binary: flags passed, output parsed, both columns printed."""
    folder, _, _ = gt_folder
    fake = _fake_official(folder, "print('Tolerances: 0.05 0.1')\nprint('Completenesses: 0.25 0.5')\n"
                                  "print('Accuracies: 0.5 0.75')\nprint('F1-scores: 0.333333 0.6')")
    out = folder / "r.json"
    rc = main(["evaluate", str(folder / "recon.ply"), "--gt", str(folder / "scan_alignment.mlp"), "--backend", "cpu",
               "--tolerances", "0.05,0.1", "--eth3d-binary", str(fake), "--json", str(out)])
    assert rc == 0
    argv = json.loads((folder / "argv.json").read_text())
    assert argv[:6] == ["--reconstruction_ply_path", str(folder / "recon.ply"), "--ground_truth_mlp_path",
                        str(folder / "scan_alignment.mlp"), "--tolerances", "0.05,0.1"]
    data = json.loads(out.read_text())
    assert data["official"]["accuracy"] == [0.5, 0.75] and data["official"]["f1"] == [0.333333, 0.6]
    printed = capsys.readouterr().out
    assert "official" in printed and "0.7500" in printed
    # Found on PATH too.
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    assert find_official_binary() == fake


def test_fake_binary_failure_reported(tmp_path):
    fake = _fake_official(tmp_path, "print('Error: Last row in a scan transformation is not (0, 0, 0, 1).', "
                                    "file=sys.stderr)\nsys.exit(1)")
    with pytest.raises(MVSError, match="exited with code 1.*Last row"):
        run_official(fake, tmp_path / "r.ply", tmp_path / "g.mlp", [0.1])
    with pytest.raises(MVSError, match="not an executable"):
        find_official_binary(tmp_path / "missing")
