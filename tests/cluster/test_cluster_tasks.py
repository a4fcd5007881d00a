"""How the cluster depth stage cuts a pass into tasks (depth/cluster_run.task_batches, views_per_task):
batches of one worker's views, every view once, in submission order, sized by cluster.task_megapixels."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from mvs_pipeline.config.loader import load_config
from mvs_pipeline.depth.cluster_locality import worker_blocks
from mvs_pipeline.depth.cluster_run import task_batches, views_per_task, worker_shares
from mvs_pipeline.depth.passes import plan_passes


def test_batches_hold_one_workers_consecutive_views_each_view_once():
    order = list(range(40))
    hints = worker_blocks(order, ["a", "b"], blocks_per_worker=4)   # blocks of 5: a a a a a b b b b b a ...
    batches = task_batches(order, worker_shares(order, hints), 3)
    assert sorted(v for b in batches for v in b) == order
    for b in batches:
        assert len({hints[v] for v in b}) == 1 and 1 <= len(b) <= 3
        share = [v for v in order if hints[v] == hints[b[0]]]
        at = share.index(b[0])
        assert list(b) == share[at:at + len(b)]   # consecutive in that worker's share
    firsts = [b[0] for b in batches]
    assert firsts == sorted(firsts)   # submitted in the order of their first view
    assert [len(b) for b in batches].count(3) == 12 and len(batches) == 14   # 20 views a worker: 3+3+3+3+3+3+2


def test_one_view_a_task_and_views_without_hints():
    assert task_batches([4, 2, 9], worker_shares([4, 2, 9], {}), 1) == [(4,), (2,), (9,)]
    assert task_batches([4, 2, 9], worker_shares([4, 2, 9], {}), 2) == [(4, 2), (9,)]


class _View:
    def __init__(self, w, h):
        self.width, self.height = w, h


class _Scene:
    def __init__(self, n, w, h):
        self.views = [_View(w, h) for _ in range(n)]


def test_views_per_task_follows_the_pass_scale():
    cfg = load_config(None)
    passes = plan_passes(cfg.depth, Path("/nonexistent"), 1024)
    coarse, fine = passes[0], passes[-1]
    assert (coarse.scale, fine.scale) == (1, 0)
    scene = _Scene(10, 1024, 768)
    # 2 MP: 512x384 (0.197 MP) ten a task, 1024x768 (0.786 MP) two a task
    assert views_per_task(cfg, scene, coarse) == 10
    assert views_per_task(cfg, scene, fine) == 2
    assert views_per_task(cfg, _Scene(3, 3200, 2130), fine) == 1   # larger than the target: one a task
    one = replace(cfg, cluster=replace(cfg.cluster, task_megapixels=0.0))
    assert views_per_task(one, scene, coarse) == 1
