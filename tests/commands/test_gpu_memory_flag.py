"""`run --gpu-memory GIB` is the config's `gpu_memory`: validated like any key, recorded in
config.resolved.yaml, and redoing nothing when it changes (it changes no output)."""

from __future__ import annotations

import logging

import yaml

from mvs_pipeline.cli import main
from mvs_pipeline.config.loader import load_config


def test_flag_sets_the_key_and_is_checked(tmp_path, capsys):
    assert load_config(None, ["gpu_memory=8"]).gpu_memory == 8.0 and load_config(None).gpu_memory is None
    code = main(["run", str(tmp_path / "nowhere"), "-o", str(tmp_path / "out"), "--gpu-memory", "0.1"])
    assert code == 2 and "gpu_memory" in capsys.readouterr().err


def test_a_changed_budget_redoes_nothing(synth_scene_factory, tmp_path, caplog):
    scene = synth_scene_factory("object", views=4, width=64, height=48)
    out = tmp_path / "out"
    args = ["run", str(scene), "-o", str(out), "--stages", "load,views", "--set", "backend=cpu"]
    assert main([*args, "--gpu-memory", "4"]) == 0
    assert yaml.safe_load((out / "config.resolved.yaml").read_text())["gpu_memory"] == 4.0
    views_json = out / "stereo" / "views.json"
    before = views_json.stat().st_mtime_ns
    with caplog.at_level(logging.WARNING):
        assert main([*args, "--gpu-memory", "8"]) == 0
    assert not [r for r in caplog.records if "redoing" in r.message]
    assert views_json.stat().st_mtime_ns == before
    assert yaml.safe_load((out / "config.resolved.yaml").read_text())["gpu_memory"] == 8.0
