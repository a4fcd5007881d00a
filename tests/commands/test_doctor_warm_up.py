"""`doctor --warm-up`'s sampling step: its cloud takes the path a real run's cloud takes."""
from __future__ import annotations

import numpy as np

from mvs_pipeline.commands.doctor import WARM_UP_CLOUD_POINTS, warm_up_cloud
from mvs_pipeline.config.loader import load_config
from mvs_pipeline.sampling.points.fps.ops import AUTO_TREE_MIN_POINTS, _pick_method
from mvs_pipeline.sampling.stage import sample_cloud


def test_the_warm_up_cloud_lies_on_its_three_planes():
    cloud = warm_up_cloud(np, 3000)
    on_plane = np.isclose(cloud.xyz, 0.0)
    assert (on_plane.sum(axis=1) >= 1).all()
    axis = np.argmax(cloud.normals, axis=1)
    assert on_plane[np.arange(3000), axis].all()   # each normal is its plane's
    assert np.bincount(axis, minlength=3).min() > 900
    assert cloud.colors.dtype == np.uint8 and cloud.extra["support"].dtype == np.uint8


def test_the_warm_up_cloud_pools_to_the_tree_fps_of_real_clouds():
    """The default sampling pools it to more points than the one-block FPS takes, so the warm-up compiles the
    batched tree kernel's array operations (which the tiny scene's pooled cloud does not reach)."""
    cfg = load_config("default").sampling
    info = {}
    sampled, _ = sample_cloud(cfg, warm_up_cloud(np), "cpu", info)
    assert info["input_points"] == WARM_UP_CLOUD_POINTS
    assert info["pooled_points"] > AUTO_TREE_MIN_POINTS
    assert _pick_method("auto", info["pooled_points"]) == "tree"
    assert info["pooled_points"] < info["input_points"]   # voxels of two spacings: some hold several points
    assert info["num_samples"] == round(cfg.ratio * info["pooled_points"])
    assert len(sampled) == info["pooled_points"]   # keep_unsampled: FPS order, then the rest
