"""Fusion beside a `--cluster` depth stage in a worker's process (fusion/worker_hosted.py): the client's gate
sends what it is told to the worker's gate (batched, then everything again with the stop); the hosted fusion
writes the same fused.ply and .vis as a fusion after the maps, leaves the worker's slot to other tasks while it
waits, and a failed one reports None (the pipeline then fuses after the depth stage). An in-process
LocalCluster (worker threads, not processes), so that a monkeypatch reaches the worker."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from mvs_pipeline.fusion import worker_hosted
from mvs_pipeline.fusion.params import FusionConfig
from mvs_pipeline.fusion.trailing import MapsGate
from mvs_pipeline.fusion.worker_hosted import ForwardingGate, WorkerHostedFusion
from tests.fusion.test_fusion_trailing import VIEWS, _fused, maps  # noqa: F401 (the fixture)


class FakeWorker:
    """What _update_gate reads of a dask Worker: its __dict__."""


class FakeClient:
    """client.run as distributed runs a coroutine on one worker; every call recorded."""

    def __init__(self):
        self.worker = FakeWorker()
        self.calls: list[dict] = []

    def run(self, fn, *args, workers, wait):
        token, map_type, planned, written, stop = args
        self.calls.append({"planned": planned, "written": list(written), "stop": stop, "wait": wait,
                           "workers": workers})
        asyncio.run(fn(*args, dask_worker=self.worker))


def worker_gate(client: FakeClient, token: str) -> MapsGate:
    return client.worker.__dict__[worker_hosted._GATES_ATTR][token]


def test_the_client_gate_forwards_batches_and_finishes_with_everything_then_the_stop():
    client = FakeClient()
    gate = ForwardingGate(client, "tcp://w0:1", "run1", "geometric")
    gate.planned([0, 1, 2, 3])
    assert client.calls[0] == {"planned": [0, 1, 2, 3], "written": [], "stop": None, "wait": False,
                               "workers": ["tcp://w0:1"]}
    on_worker = worker_gate(client, "run1")
    assert on_worker.views() == [0, 1, 2, 3] and on_worker.map_type == "geometric"
    for v in (2, 0):
        gate.written(v)
    deadline = time.monotonic() + 5
    while sum(len(c["written"]) for c in client.calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    on_worker.wait(2)
    on_worker.wait(0)   # both arrived: wait() returns at once
    assert gate.views() == [0, 1, 2, 3]
    gate.written(1)
    gate.finish("the depth stage ended")
    last = client.calls[-1]
    assert last["written"] == [0, 1, 2] and last["stop"] == "the depth stage ended" and last["wait"] is True
    on_worker.wait(1)
    with pytest.raises(Exception, match="the depth stage ended"):
        on_worker.wait(3)   # never written: released with DepthStopped
    # a later run's gate replaces this one and stops it
    ForwardingGate(client, "tcp://w0:1", "run2", "geometric").planned([0])
    assert list(client.worker.__dict__[worker_hosted._GATES_ATTR]) == ["run2"]


@pytest.fixture
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as lc, \
            distributed.Client(lc) as client:
        yield client


def test_a_hosted_fusion_writes_the_files_of_a_fusion_after_the_maps(maps, cluster):  # noqa: F811
    scene, sel, ws, expected = maps
    hosted = WorkerHostedFusion(lambda: cluster, FusionConfig(), scene, sel, ws, "cpu", "geometric").start()
    assert hosted.host == sorted(cluster.scheduler_info()["workers"])[0]
    hosted.gate.planned(list(range(VIEWS)))
    # while fusion waits for its maps, the worker's one slot runs other tasks (the depth stage's)
    assert cluster.submit(lambda x: x + 1, 1, pure=False).result(timeout=30) == 2
    for v in range(VIEWS):
        hosted.gate.written(v)
    counts = hosted.result()
    assert counts is not None and counts["reference_views"] == VIEWS and counts["points"] > 0
    assert hosted.seconds > 0
    assert _fused(ws) == expected


def test_a_failed_hosted_fusion_reports_none(maps, cluster, monkeypatch, caplog):  # noqa: F811
    scene, sel, ws, _ = maps

    def fails(*args):
        raise MemoryError("no room beside the depth stage")

    monkeypatch.setattr(worker_hosted, "fuse_beside_depth", fails)
    hosted = WorkerHostedFusion(cluster, FusionConfig(), scene, sel, ws, "cpu", "geometric").start()
    hosted.gate.planned(list(range(VIEWS)))
    with caplog.at_level(logging.INFO):
        assert hosted.result() is None
    assert "MemoryError: no room beside the depth stage" in caplog.text and "fusing after it" in caplog.text
    assert not (ws / "fused.ply").exists()


def test_a_stopped_run_releases_the_hosted_fusion(maps, cluster, caplog):  # noqa: F811
    scene, sel, ws, _ = maps
    hosted = WorkerHostedFusion(cluster, FusionConfig(), scene, sel, ws, "cpu", "geometric").start()
    hosted.gate.planned(list(range(VIEWS)))
    hosted.gate.written(0)
    hosted.stop("the run ended")   # returns at once; the worker's fusion stops waiting for view 1
    done = threading.Event()
    threading.Thread(target=lambda: (hosted._future.exception(timeout=30), done.set()), daemon=True).start()
    assert done.wait(30)
    assert "the run ended" in str(hosted._future.exception())
