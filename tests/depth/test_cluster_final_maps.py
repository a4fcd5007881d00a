"""depth/cluster_final_maps.FinalMapsWatcher: fusion beside a `--cluster` depth stage is handed a view only
once its final maps are complete in their files, and not for the maps an earlier run left there."""

from __future__ import annotations

import threading
import time

import numpy as np

from mvs_pipeline.depth.cluster_final_maps import FinalMapsWatcher
from mvs_pipeline.depth.passes import DepthPass
from mvs_pipeline.io.colmap_maps import write_colmap_array


class RecordingGate:
    def __init__(self):
        self.written_views: list[int] = []
        self.changed = threading.Event()

    def written(self, view_idx: int) -> None:
        self.written_views.append(view_idx)
        self.changed.set()


def final_pass(root) -> DepthPass:
    return DepthPass(index=0, scale=0, kind="geometric", repeat=1, final=True, root=root,
                     kinds=("depth", "normal"), required=("depth", "normal"))


def write_maps(pss: DepthPass, name: str, value: float) -> None:
    for kind, channels in (("normal", 3), ("depth", 1)):   # depth last, as the writer does
        path = pss.map_path(kind, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_colmap_array(path, np.full((6, 8, channels) if channels > 1 else (6, 8), value, np.float32),
                           durable=False)


def wait_for(gate: RecordingGate, views: list[int], timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while sorted(gate.written_views) != sorted(views) and time.monotonic() < end:
        gate.changed.wait(0.05)
        gate.changed.clear()


def test_a_view_is_handed_over_once_its_files_are_complete(tmp_path):
    pss, gate = final_pass(tmp_path), RecordingGate()
    watcher = FinalMapsWatcher(gate, pss, {0: "a.png", 1: "b.png", 2: "c.png"})
    try:
        watcher.computed(0)
        watcher.computed(1)
        time.sleep(0.2)
        assert gate.written_views == []   # the tasks ended, the workers' writes have not landed
        write_maps(pss, "a.png", 1.0)
        wait_for(gate, [0])
        assert gate.written_views == [0]
        # only the normal map of view 1: not complete
        path = pss.map_path("normal", "b.png")
        write_colmap_array(path, np.zeros((6, 8, 3), np.float32), durable=False)
        write_maps(pss, "c.png", 1.0)   # view 2's maps landed, but no task of it has ended yet
        time.sleep(0.2)
        assert gate.written_views == [0]
        write_maps(pss, "b.png", 2.0)
        wait_for(gate, [0, 1])
        assert sorted(gate.written_views) == [0, 1]
    finally:
        watcher.close(flushed=False)
    assert sorted(gate.written_views) == [0, 1]   # not flushed: nothing more handed over


def test_an_earlier_runs_maps_wait_for_their_replacement(tmp_path):
    """--overwrite: the previous run's complete maps are in place when the pass starts."""
    pss, gate = final_pass(tmp_path), RecordingGate()
    write_maps(pss, "a.png", 1.0)
    time.sleep(0.01)   # a new file gets a later mtime (and a new inode: the writes replace the file)
    watcher = FinalMapsWatcher(gate, pss, {0: "a.png"})
    try:
        watcher.computed(0)
        time.sleep(0.2)
        assert gate.written_views == []
        write_maps(pss, "a.png", 2.0)
        wait_for(gate, [0])
        assert gate.written_views == [0]
    finally:
        watcher.close(flushed=True)


def test_a_flushed_pass_releases_what_is_still_watched(tmp_path):
    pss, gate = final_pass(tmp_path), RecordingGate()
    watcher = FinalMapsWatcher(gate, pss, {0: "a.png", 1: "b.png"})
    watcher.computed(1)
    watcher.close(flushed=True)   # every worker's writes are on disk and checked
    assert gate.written_views == [1]
