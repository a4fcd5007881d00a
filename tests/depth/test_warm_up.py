"""The worker warm-up (depth/warm_up.py) takes every solver path a depth run takes, so a run after
it loads no new kernel module (GPU), and it runs on the CPU twins too."""

from __future__ import annotations

import pytest

from mvs_pipeline.config.loader import load_config
from mvs_pipeline.depth.warm_up import warm_up_solver


@pytest.mark.slow   # compiles the Numba twins on a cold cache
def test_warm_up_runs_on_the_cpu_twins():
    warm_up_solver(load_config(None), 3, "cpu")


@pytest.mark.gpu
def test_a_run_after_the_warm_up_loads_no_new_kernels(synth_scene_factory, tmp_path):
    from mvs_pipeline.cli import main
    from mvs_pipeline.gpu import loader

    scene = synth_scene_factory("object", views=6, width=320, height=240)   # 2 scales under auto, 5 sources
    cfg = load_config(None, ["backend=cuda"])
    warm_up_solver(cfg, 5, "cuda")
    before = loader._load.cache_info().misses
    assert main(["-q", "run", str(scene), "-o", str(tmp_path / "out"), "--set", "backend=cuda",
                 "--stages", "load,views,depth"]) == 0
    assert loader._load.cache_info().misses == before
