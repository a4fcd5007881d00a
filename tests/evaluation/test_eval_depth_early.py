"""The depth maps' comparison started beside fusion and sampling (evaluation/depth_job.py): the evaluate
stage takes its result only when the maps and GT are those it compared, writes the same depth.json and
error previews as comparing itself, raises its errors as its own, and compares again after a stop."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from mvs_pipeline.config.loader import load_config
from mvs_pipeline.errors import MVSError
from mvs_pipeline.evaluation import depth_job, depth_metrics
from mvs_pipeline.evaluation.stage import evaluate_run
from mvs_pipeline.io.colmap_maps import write_colmap_array

NAMES = [f"v{i:02d}.png" for i in range(15)]   # more views than the report previews (12)


@pytest.fixture
def run(tmp_path):
    rng = np.random.default_rng(5)
    (tmp_path / "out" / "stereo" / "depth_maps").mkdir(parents=True)
    (tmp_path / "ws" / "gt" / "depth").mkdir(parents=True)
    for i, name in enumerate(NAMES):
        gt = rng.uniform(1, 3, (12, 16)).astype(np.float32)
        if i != 3:   # one view without GT: skipped, and not previewed
            np.save(tmp_path / "ws" / "gt" / "depth" / f"{name}.npy", gt)
        est = gt * np.float32(1 + 0.004 * i) + rng.normal(0, 0.01, gt.shape).astype(np.float32)
        est[rng.random(gt.shape) < 0.1] = 0   # holes
        write_colmap_array(tmp_path / "out" / "stereo" / "depth_maps" / f"{name}.geometric.bin", est)
    return tmp_path


def _cfg(*sets):
    return load_config(None, list(sets)).evaluate


def _early(root, cfg):
    gt_dir, calib = depth_job.depth_job(cfg, root / "out", root / "ws")
    inputs = depth_job.job_inputs(cfg, root / "out", gt_dir, calib)
    return depth_job.EarlyDepthMetrics(root / "out", gt_dir, calib, inputs, "cpu")


def _evaluate(root, cfg, **kw):
    return evaluate_run(cfg, root / "out", workspace=root / "ws", backend="cpu", make_report=False, **kw)


def _stored(root) -> dict:
    return json.loads((root / "out" / "eval" / "depth.json").read_text())


def _previews(root) -> dict[str, bytes]:
    folder = root / "out" / "eval" / "depth_errors"
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.png"))}


def test_the_early_result_is_the_stage_own(run, tmp_path_factory, monkeypatch):
    cfg = _cfg()
    alone = tmp_path_factory.mktemp("alone")
    shutil.copytree(run, alone, dirs_exist_ok=True)
    expected = _evaluate(alone, cfg)["depth"]

    early = _early(run, cfg).start()
    early._thread.join(60)
    calls = []
    real = depth_metrics.evaluate_run_depths
    monkeypatch.setattr(depth_metrics, "evaluate_run_depths", lambda *a, **k: calls.append(k.get("names")) or real(*a, **k))
    summary = _evaluate(run, cfg, early=early)
    assert summary["depth"] == expected and summary["depth_early"]["seconds"] > 0
    # the stage compared only the previewed views (the first 12 by name, v03 without GT among them)
    assert calls == [NAMES[:12]]
    mine, theirs = _stored(run), _stored(alone)
    assert mine["images"] == theirs["images"] and mine["overall"] == theirs["overall"]
    assert mine["skipped"] == theirs["skipped"] == ["v03.png"]
    assert mine["inputs"]["gt"] == theirs["inputs"]["gt"].replace(str(alone), str(run))
    previews = _previews(run)
    assert len(previews) == 11 and previews == _previews(alone)


def test_maps_written_again_are_compared_again(run):
    cfg = _cfg()
    early = _early(run, cfg).start()
    early._thread.join(60)
    path = run / "out" / "stereo" / "depth_maps" / "v00.png.geometric.bin"
    gt = np.load(run / "ws" / "gt" / "depth" / "v00.png.npy")
    write_colmap_array(path, gt * np.float32(1.05))   # 5 % off: none within 2 %
    os.utime(path, ns=(1, 1))
    summary = _evaluate(run, cfg, early=early)
    assert "depth_early" not in summary
    assert _stored(run)["images"]["v00.png"]["within_2pct"] == 0.0


def test_a_stopped_comparison_is_done_by_the_stage(run):
    cfg = _cfg()
    early = _early(run, cfg)
    early.stop()   # before its first view
    early.start()._thread.join(60)
    with pytest.raises(depth_metrics.DepthMetricsStopped):
        early._future.result()
    summary = _evaluate(run, cfg, early=early)
    direct = depth_metrics.evaluate_run_depths(run / "out", run / "ws" / "gt" / "depth")
    assert "depth_early" not in summary and summary["depth"] == direct["overall"]
    assert 0.2 < direct["overall"]["within_2pct"] < 0.5 and len(_stored(run)["images"]) == len(NAMES) - 1


def test_its_error_is_the_stage_error(run):
    cfg = _cfg()
    bad = run / "out" / "stereo" / "depth_maps" / "v05.png.geometric.bin"
    write_colmap_array(bad, np.ones((12, 16, 3), np.float32))   # three channels: not a depth map
    with pytest.raises(MVSError) as alone:
        _evaluate(run, cfg)
    early = _early(run, cfg).start()
    early._thread.join(60)
    with pytest.raises(MVSError) as taken:
        _evaluate(run, cfg, early=early)
    assert str(taken.value) == str(alone.value) and "v05.png.geometric.bin" in str(taken.value)


@pytest.mark.parametrize("backend, budget, sets, started", [
    ("cuda", None, [], True),
    ("cpu", None, [], False),                               # fusion's Numba threads take every core
    ("cuda", 8.0, [], False),                               # the budget's pool limit leaves no room
    ("cuda", None, ["evaluate.error_images=all"], False),   # every view's image: the stage writes them
    ("cuda", None, ["evaluate.depth_metrics=false"], False),
    ("cuda", None, ["evaluate.depth_metrics_early=false"], False),   # in the evaluate stage, as asked
])
def test_when_it_starts(run, monkeypatch, backend, budget, sets, started):
    made = []
    monkeypatch.setattr(depth_job.EarlyDepthMetrics, "start", lambda self: made.append(self) or self)
    early = depth_job.start_early(_cfg(*sets), run / "out", run / "ws", backend, budget, overwrite=False)
    assert (early is not None) == started == (len(made) == 1)


def test_not_started_when_depth_json_is_current(run, monkeypatch):
    cfg = _cfg()
    _evaluate(run, cfg)
    monkeypatch.setattr(depth_job.EarlyDepthMetrics, "start", lambda self: self)
    assert depth_job.start_early(cfg, run / "out", run / "ws", "cuda", None, overwrite=False) is None
    assert depth_job.start_early(cfg, run / "out", run / "ws", "cuda", None, overwrite=True) is not None
    assert depth_job.start_early(cfg, run / "out", run / "nothing", "cuda", None, overwrite=True) is None
