"""Smoke tests of the command line: help, run (load+views), info, exit codes on bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from mvs_pipeline.cli import COMMANDS, main
from tests.tiny_model import write_colmap_project


@pytest.mark.parametrize("command", COMMANDS)
def test_help_for_every_command(command, capsys):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    assert "usage: mvs-pipeline" in capsys.readouterr().out


def test_run_then_rerun_resumes(tmp_path, capsys):
    write_colmap_project(tmp_path / "ws")
    out = tmp_path / "out"
    assert main(["-q", "run", str(tmp_path / "ws"), "-o", str(out), "--set", "backend=cpu",
                 "--set", "views.num_neighbors=3", "--stages", "load,views"]) == 0
    record = json.loads((out / "run.json").read_text())
    assert record["stages"] == ["load", "views"] and record["backend"] == "cpu"
    assert record["counts"]["views"] == 5
    resolved = yaml.safe_load((out / "config.resolved.yaml").read_text())
    assert resolved["views"]["num_neighbors"] == 3
    assert record["config"]["views"]["num_neighbors"] == 3 and record["config"] == resolved
    for name in ("pair.txt", "patch-match.cfg", "views.json"):
        assert (out / "stereo" / name).is_file()
    views_mtime = (out / "stereo" / "views.json").stat().st_mtime_ns
    # the same settings resume (the views are kept); other settings redo them (issue 19: no stale outputs)
    assert main(["-q", "run", str(tmp_path / "ws"), "-o", str(out), "--set", "backend=cpu",
                 "--set", "views.num_neighbors=3", "--stages", "views"]) == 0
    assert (out / "stereo" / "views.json").stat().st_mtime_ns == views_mtime
    assert main(["-q", "run", str(tmp_path / "ws"), "-o", str(out), "--set", "backend=cpu",
                 "--stages", "views"]) == 0
    assert (out / "stereo" / "views.json").stat().st_mtime_ns != views_mtime
    assert len(json.loads((out / "stereo" / "views.json").read_text())["views"][0]["neighbors"]) == 4  # 10 wanted, 4 exist


def test_info_prints_table(tmp_path, capsys):
    write_colmap_project(tmp_path / "ws")
    assert main(["info", str(tmp_path / "ws")]) == 0
    out = capsys.readouterr().out
    assert "views:    5" in out and "img_04.png" in out and "view_idx" in out


def test_bad_input_exits_nonzero_with_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mvs_pipeline", "run", str(tmp_path / "missing"), "-o",
                           str(tmp_path / "o")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("mvs-pipeline run: error:")
    assert "missing: workspace folder not found" in proc.stderr


def test_bad_config_and_stage_names(tmp_path, capsys):
    write_colmap_project(tmp_path / "ws")
    assert main(["run", str(tmp_path / "ws"), "-o", str(tmp_path / "o"), "--set", "views.bogus=1"]) == 2
    assert "unknown key 'views.bogus'" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "ws"), "-o", str(tmp_path / "o"), "--stages", "load,teleport"]) == 2
    assert "unknown stage 'teleport'" in capsys.readouterr().err


def test_explicit_cuda_without_gpu_is_an_error(tmp_path, capsys, monkeypatch):
    from mvs_pipeline.gpu import backend as backend

    monkeypatch.setattr(backend, "cuda_usable", lambda: (False, "no CUDA device (simulated)"))
    write_colmap_project(tmp_path / "ws")
    assert main(["run", str(tmp_path / "ws"), "-o", str(tmp_path / "o"), "--set", "backend=cuda"]) == 2
    assert "backend 'cuda' was requested but cannot run: no CUDA device (simulated)" in capsys.readouterr().err
    assert backend.resolve_backend("auto") == "cpu"
