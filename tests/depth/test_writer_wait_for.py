"""MapWriter.wait_for: a map read back from its file waits only for that map's own queued write,
not for everything this writer queued (a cluster worker reading another worker's map)."""

from __future__ import annotations

import threading

import numpy as np

from mvs_pipeline.depth import writer as writer_module
from mvs_pipeline.depth.params import DepthConfig
from mvs_pipeline.depth.passes import plan_passes


def test_wait_for_waits_only_for_queued_paths(tmp_path, monkeypatch):
    pss = plan_passes(DepthConfig(multi_scale=False, geometric_passes=0), tmp_path, 64)[0]
    release = threading.Event()
    written = []

    def slow_write(p, name, maps, durable):
        assert release.wait(10)   # the write is stuck until the test releases it
        written.append(name)

    monkeypatch.setattr(writer_module, "write_view_maps", slow_write)
    w = writer_module.MapWriter(threads=1)
    d = np.ones((4, 5), np.float32)
    w.submit(pss, "a.png", d, np.zeros((4, 5, 3), np.float32), d)
    # another view's file (say, a map another worker wrote): no wait, although a.png is stuck
    w.wait_for(pss.map_path("depth", "b.png"))
    assert written == []
    threading.Timer(0.2, release.set).start()
    w.wait_for(pss.map_path("normal", "a.png"))   # this one must wait for the write
    assert written == ["a.png"]
    w.close()
