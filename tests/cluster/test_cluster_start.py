"""cluster/client.ClusterStart: the cluster opens in a background thread while the caller goes on
(the load stage), is shut down in the thread that opened it, and a failed start is raised where
the client is needed."""

from __future__ import annotations

import contextlib
import threading

import pytest

pytest.importorskip("distributed")

from mvs_pipeline.cluster import client as cluster_client  # noqa: E402
from mvs_pipeline.cluster.params import ClusterConfig  # noqa: E402
from mvs_pipeline.errors import MVSError  # noqa: E402


def test_the_cluster_opens_while_the_caller_goes_on_and_closes_where_it_opened(monkeypatch):
    opening, release, threads, opened = threading.Event(), threading.Event(), {}, []

    @contextlib.contextmanager
    def fake_open_client(cfg):
        threads["open"] = threading.current_thread()
        opening.set()
        assert release.wait(10), "the caller never went on while the cluster was starting"
        yield "client"
        threads["close"] = threading.current_thread()

    monkeypatch.setattr(cluster_client, "open_client", fake_open_client)
    start = cluster_client.ClusterStart(ClusterConfig(kind="local", workers=1), on_open=opened.append)
    assert opening.wait(10)            # started without the caller waiting for it...
    release.set()                      # ...which now does its own work and lets the start finish
    assert start.client() == "client" and opened == ["client"]
    start.close()
    assert threads["open"] is threads["close"] is not threading.main_thread()


def test_a_failed_start_is_raised_where_the_client_is_needed(monkeypatch):
    @contextlib.contextmanager
    def failing_open_client(cfg):
        raise MVSError("cluster: cannot reach the Dask scheduler at tcp://nowhere:8786")
        yield  # pragma: no cover

    monkeypatch.setattr(cluster_client, "open_client", failing_open_client)
    start = cluster_client.ClusterStart(ClusterConfig(kind="address", address="tcp://nowhere:8786"))
    with pytest.raises(MVSError, match="cannot reach the Dask scheduler"):
        start.client()
    start.close()   # nothing was opened: nothing to shut down, no second error


def test_a_missing_package_is_reported_before_the_start(monkeypatch):
    """Only looked up at once (importing dask_cuda takes ~1.4 s, which the start's thread pays)."""
    real_find_spec = cluster_client.importlib.util.find_spec
    monkeypatch.setattr(cluster_client.importlib.util, "find_spec",
                        lambda name, *a: None if name == "dask_cuda" else real_find_spec(name, *a))
    opened = []
    monkeypatch.setattr(cluster_client, "open_client", lambda cfg: opened.append(cfg))
    with pytest.raises(MVSError, match=r"local-cuda needs dask-cuda \(it is not installed\); install the "
                                       r"cluster-cuda extra"):
        cluster_client.ClusterStart(ClusterConfig(kind="local-cuda"))
    assert opened == []   # no thread was started
    cluster_client.ClusterStart(ClusterConfig(kind="local", workers=1)).close()   # local needs no dask_cuda
    assert len(opened) == 1


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_local_workers_start_as_cluster_start_method_says(method):
    """forkserver (the default): the workers are children of multiprocessing's fork server, which the start
    began with distributed preloaded; spawn: children of this process (through their nannies), a fresh
    interpreter each."""
    import multiprocessing.forkserver
    import os

    cfg = ClusterConfig(kind="local", workers=1, cores_per_worker=1, start_method=method)
    assert ClusterConfig().start_method == "forkserver"
    start = cluster_client.ClusterStart(cfg)
    try:
        client = start.client()
        parents = set(client.run(os.getppid).values())
        preloaded = set(client.run(lambda: "distributed" in __import__("sys").modules).values())
    finally:
        start.close()
    server = multiprocessing.forkserver._forkserver._forkserver_pid
    if method == "forkserver":
        assert server is not None and parents == {server}
    else:
        assert parents == {os.getpid()} and parents != {server}
    assert preloaded == {True}


def test_a_platform_without_a_fork_server_spawns(monkeypatch):
    import multiprocessing
    import multiprocessing.forkserver

    import dask

    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    cfg = ClusterConfig(kind="local", workers=1)
    assert cluster_client._start_method_name(cfg) == "spawn"
    with cluster_client._start_method(cfg):
        assert dask.config.get("distributed.worker.multiprocessing-method") == "spawn"
    started = []
    monkeypatch.setattr(multiprocessing.forkserver, "ensure_running", lambda: started.append(1))
    cluster_client.start_fork_server(cfg)
    assert started == []
