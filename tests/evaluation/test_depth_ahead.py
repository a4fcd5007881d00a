"""The depth-map metrics started as the depth stage ends (evaluation/depth_ahead.py): the evaluate
stage takes their result (the same as computing it itself), re-raises their error, and an
interrupted run cancels them without writing eval/depth.json."""

from __future__ import annotations

import contextlib
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from mvs_pipeline.config.loader import load_config
from mvs_pipeline.errors import MVSError
from mvs_pipeline.evaluation.depth_ahead import start_depth_metrics
from mvs_pipeline.evaluation.depth_metrics import DepthMetricsCancelled
from mvs_pipeline.evaluation.stage import depth_metrics_job, evaluate_run
from mvs_pipeline.io.colmap_maps import write_colmap_array


@pytest.fixture
def run(tmp_path):
    rng = np.random.default_rng(5)
    (tmp_path / "out" / "stereo" / "depth_maps").mkdir(parents=True)
    (tmp_path / "ws" / "gt" / "depth").mkdir(parents=True)
    for i, name in enumerate(("a.png", "b.png", "c.png")):
        gt = rng.uniform(1, 3, (12, 16)).astype(np.float32)
        np.save(tmp_path / "ws" / "gt" / "depth" / f"{name}.npy", gt)
        est = gt * np.float32(1.0 + 0.03 * i)   # within 2 %: a only
        write_colmap_array(tmp_path / "out" / "stereo" / "depth_maps" / f"{name}.geometric.bin", est)
    return tmp_path


def _ctx(root, cfg):
    return SimpleNamespace(cfg=SimpleNamespace(evaluate=cfg), out_dir=root / "out", workspace=root / "ws",
                           backend="cpu", overwrite=False, depth_metrics_ahead=None)


def test_evaluate_takes_the_result_started_ahead(run):
    cfg = load_config(None).evaluate
    ctx = _ctx(run, cfg)
    with contextlib.ExitStack() as stack:
        start_depth_metrics(ctx, stack)
        assert ctx.depth_metrics_ahead is not None
        ahead = evaluate_run(cfg, run / "out", workspace=run / "ws", backend="cpu", make_report=False,
                             depth_ahead=ctx.depth_metrics_ahead)["depth"]
    assert ahead["within_2pct"] == pytest.approx(1 / 3)
    # the same as the stage computing them itself, from scratch
    own = evaluate_run(cfg, run / "out", workspace=run / "ws", backend="cpu", make_report=False,
                       overwrite=True)["depth"]
    assert ahead == own


def test_nothing_started_without_gt_or_with_metrics_off(run):
    ctx = _ctx(run, load_config(None, ["evaluate.depth_metrics=false"]).evaluate)
    with contextlib.ExitStack() as stack:
        start_depth_metrics(ctx, stack)
    assert ctx.depth_metrics_ahead is None
    ctx = _ctx(run, load_config(None).evaluate)
    ctx.workspace = run / "elsewhere"
    with contextlib.ExitStack() as stack:
        start_depth_metrics(ctx, stack)
    assert ctx.depth_metrics_ahead is None


def test_an_error_ahead_is_raised_by_the_evaluate_stage(run):
    for f in (run / "ws" / "gt" / "depth").iterdir():   # GT for no view: the one-line error
        f.rename(f.with_name("x" + f.name))
    cfg = load_config(None).evaluate
    ctx = _ctx(run, cfg)
    with contextlib.ExitStack() as stack:
        start_depth_metrics(ctx, stack)
        with pytest.raises(MVSError, match="no GT depth map matches"):
            evaluate_run(cfg, run / "out", workspace=run / "ws", backend="cpu", make_report=False,
                         depth_ahead=ctx.depth_metrics_ahead)


def test_cancelled_between_views_writes_nothing(run):
    cfg = load_config(None).evaluate
    cancel = threading.Event()
    cancel.set()
    job = depth_metrics_job(cfg, run / "out", run / "ws", None, "cpu", False, cancel=cancel)
    with pytest.raises(DepthMetricsCancelled, match="after 0 of 3 views"):
        job()
    assert not (run / "out" / "eval" / "depth.json").exists()
