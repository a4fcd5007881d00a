"""Fusion's view cache beside the depth stage (fusion/view_cache.py): while the fusion loop waits for one slow
load, the loader threads go on with the next written views and the finished ones become resident, so a slow
view does not leave the loaders idle (issue #36: the 2-GPU cluster's fusion tail); without read-ahead they wait
in plan order, as before."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from mvs_pipeline.fusion.trailing import MapsGate
from mvs_pipeline.fusion.view_cache import PIXEL_COUNTS, ViewCache

VIEWS = 12
SLOW = 1   # this view's load takes SLOW_SECONDS, the others none
SLOW_SECONDS = 1.0


class _Engine:
    """Resident entries are the view's HostView; eviction hands back its marks."""

    def upload(self, host, blocked):
        return host

    def evict(self, entry, keep_marks):
        return entry.blocked if keep_marks else None


def _run(read_ahead: bool) -> tuple[dict, dict, list[int]]:
    """(load end times by view, the cache's stats, the views in the order their steps got them)."""
    ended, lock = {}, threading.Lock()

    def load(inp):
        if inp.view_idx == SLOW:
            time.sleep(SLOW_SECONDS)
        with lock:
            ended[inp.view_idx] = time.perf_counter()
        return SimpleNamespace(blocked=np.zeros((2, 2), np.uint8), **{k: 1 for k in PIXEL_COUNTS})

    gate = MapsGate("geometric")
    gate.planned(list(range(VIEWS)))
    for v in range(VIEWS):   # every map written: the wait is for a load, not for the depth stage
        gate.written(v)
    stats = {"load_seconds": 0.0, "load_wait_seconds": 0.0, "reloads": 0, **{k: 0 for k in PIXEL_COUNTS}}
    inputs = [SimpleNamespace(view_idx=v) for v in range(VIEWS)]
    plan = [[v] for v in range(VIEWS)]   # one view a step: a finished later load waits in `pending`
    cache = ViewCache(_Engine(), inputs, plan, capacity=VIEWS, prefetch=2, threads=2, stats=stats, load=load,
                      gate=gate, read_ahead=read_ahead)
    got = []
    try:
        for step in range(VIEWS):
            got.extend(cache.acquire(step))
    finally:
        cache.close()
    return ended, stats, got


@pytest.mark.parametrize("read_ahead", [True, False])
def test_the_loaders_go_on_while_fusion_waits_for_a_slow_load(read_ahead):
    ended, stats, got = _run(read_ahead)
    assert got == list(range(VIEWS)) and stats["valid_pixels"] == VIEWS and stats["reloads"] == 0
    after_slow = [v for v in range(VIEWS) if ended[v] > ended[SLOW]]
    if read_ahead:   # every other view was loaded, and made resident, while view SLOW was loading
        assert after_slow == [] and stats["loaded_ahead"] == VIEWS - SLOW - 1, (after_slow, stats)
    else:   # prefetch 2: one more view ahead of SLOW, the rest only once its step came
        assert after_slow == list(range(SLOW + 2, VIEWS)) and stats["loaded_ahead"] == 0, (after_slow, stats)
