"""On the GPU a run fuses beside its depth stage by default (fusion/trailing.py, its own CUDA stream):
the same fused.ply and .vis byte for byte as fusing after it."""

from __future__ import annotations

import json

import pytest

from mvs_pipeline.cli import main

pytestmark = pytest.mark.gpu


def test_beside_and_after_the_depth_stage_give_the_same_files(synth_scene_factory, tmp_path):
    scene = synth_scene_factory("object", views=8, width=160, height=120)
    outs = {}
    for during in ("true", "false"):
        out = tmp_path / during
        assert main(["-q", "run", str(scene), "-o", str(out), "--set", "backend=cuda", "--stages",
                     "load,views,depth,fusion", "--set", f"fusion.during_depth={during}"]) == 0
        outs[during] = out
    counts = json.loads((outs["true"] / "run.json").read_text())["counts"]
    assert counts["fusion_beside_depth_seconds"] > 0 and counts["fused_points"] > 10000
    assert "fusion_beside_depth_seconds" not in json.loads((outs["false"] / "run.json").read_text())["counts"]
    for name in ("fused.ply", "fused.ply.vis"):
        assert (outs["true"] / name).read_bytes() == (outs["false"] / name).read_bytes(), name
