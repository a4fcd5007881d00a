"""`run --cluster` (issue 17): the depth stage as Dask tasks on a LocalCluster of 2 CPU worker
processes writes the same bytes as the single-process run, and survives a worker killed with
SIGKILL mid-stage. CPU backend, the tiny synthetic scene of tests/test_stale_outputs.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("distributed")
pytestmark = pytest.mark.slow   # worker processes start and load numba: ~20-50 s each on 2 cores

from mvs_pipeline.cli import main  # noqa: E402
from mvs_pipeline.cluster.client import open_client  # noqa: E402
from mvs_pipeline.cluster.params import ClusterConfig  # noqa: E402
from mvs_pipeline.config.loader import load_config  # noqa: E402
from mvs_pipeline.depth.cluster_run import compute_depth_maps_on_cluster, prefetch_images_on_workers  # noqa: E402
from mvs_pipeline.errors import MVSError  # noqa: E402
from mvs_pipeline.io.ply import read_ply  # noqa: E402
from mvs_pipeline.scene.workspace import read_scene  # noqa: E402
from mvs_pipeline.views.stage import select_and_write  # noqa: E402
from tests.child_env import child_env  # noqa: E402

SETTINGS = ["backend=cpu", "patchmatch.iterations=1", "depth.geometric_passes=1", "depth.multi_scale=false"]
FAST = ["-c", "small", *[a for s in SETTINGS for a in ("--set", s)]]
STAGES = ["--stages", "load,views,depth,fusion"]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scene(synth_scene_factory) -> Path:
    return synth_scene_factory("object", views=4, width=96, height=72)


@pytest.fixture(scope="module")
def single(scene, tmp_path_factory) -> Path:
    """The single-process run, in a fresh interpreter that must not import dask at all."""
    out = tmp_path_factory.mktemp("single") / "out"
    code = ("import sys; from mvs_pipeline.cli import main; "
            f"rc = main({['-q', 'run', str(scene), '-o', str(out), *FAST, *STAGES]!r}); "
            "assert rc == 0; bad = [m for m in ('dask', 'distributed') if m in sys.modules]; "
            "assert not bad, f'imported without --cluster: {bad}'")
    env = child_env()
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=600)
    return out


def maps(out: Path) -> dict[str, bytes]:
    files = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted((out / "stereo").rglob("*.bin"))}
    assert files
    return files


def point_set(out: Path) -> np.ndarray:
    """The fused points (xyz, normal, colour) as rows, sorted: the set, whatever the order."""
    cloud = read_ply(out / "fused.ply")
    rows = np.column_stack([cloud.xyz, cloud.normals, cloud.colors]).astype(np.float64)
    return rows[np.lexsort(rows.T[::-1])]


def test_two_workers_write_the_single_process_bytes(scene, single, tmp_path):
    out = tmp_path / "out"
    assert main(["-q", "run", str(scene), "-o", str(out), *FAST, *STAGES, "--cluster", "local",
                 "--set", "cluster.workers=2", "--set", "cluster.threads_per_worker=2",
                 "--set", "cluster.later_stages=workers"]) == 0
    reference = maps(single)
    assert len(reference) == 4 * 2   # 4 views x the final depth/normal (the photometric pass's removed)
    assert maps(out) == reference
    fused = point_set(out)
    assert len(fused) > 20   # the tiny scene at 1 iteration fuses a few dozen points
    np.testing.assert_array_equal(fused, point_set(single))
    record = json.loads((out / "run.json").read_text())
    workers = record["counts"]["depth_cluster_workers"]
    assert len(workers) == 2   # both worker processes got tasks
    assert sum(w["views"] for w in workers.values()) == record["counts"]["depth_view_passes_computed"] == 8
    # cluster.task_megapixels: each worker's two tiny views of a pass in one task (2 passes x 2 workers)
    assert sum(w["tasks"] for w in workers.values()) == 4
    assert record["cluster"] == "local"
    assert record["counts"]["cluster_wait_seconds"] >= 0   # the load stage's wait for the cluster's start
    # fusion ran on the workers too (consume_pixels auto: off at this size): the same files
    assert record["counts"]["fusion_cluster"]["tasks"] >= 2
    for name in ("fused.ply", "fused.ply.vis"):
        assert (out / name).read_bytes() == (single / name).read_bytes(), name
    # each task's span (seconds from its pass's submission) lies inside that pass's task phase
    phases = record["counts"]["depth_cluster_pass_phases"]
    assert set(phases) == set(record["counts"]["depth_pass_seconds"])
    for w in workers.values():
        assert len(w["spans"]) == w["tasks"]
        for pass_id, start, end in w["spans"]:
            assert 0 <= start <= end <= phases[pass_id]["tasks"] + 0.01
        # two threads per worker, but its tasks take turns: within a pass no two spans overlap
        # (spans are rounded to 1 ms)
        for pass_id in phases:
            spans = sorted((start, end) for p, start, end in w["spans"] if p == pass_id)
            assert all(b[0] >= a[1] - 0.002 for a, b in zip(spans, spans[1:])), (pass_id, spans)
    # the fingerprints do not depend on the engine: a single-process rerun finds nothing to redo
    assert main(["-q", "run", str(scene), "-o", str(out), *FAST, *STAGES, "--resume-only"]) == 0
    again = json.loads((out / "run.json").read_text())["counts"]
    assert again["depth_view_passes_computed"] == 0 and again["depth_view_passes_resumed"] == 8
    assert maps(out) == reference


def test_by_default_fusion_runs_beside_the_cluster_depth_stage_on_the_first_worker(scene, single, tmp_path,
                                                                                   monkeypatch):
    """cluster.later_stages auto on a local cluster: the depth stage's tasks on the workers, fusion beside them in
    the first worker's process (fusion/worker_hosted.py; on the CPU too, for the test), handed each view as the
    workers' final maps land; the single process's files, no fusion range task, and the cluster's shutdown begun
    once fusion's result is taken (it runs on a worker), i.e. after the depth stage."""
    import mvs_pipeline.cluster.client as cluster_client
    from mvs_pipeline import pipeline

    monkeypatch.setattr(pipeline, "TRAILING_BACKENDS", ("cuda", "cpu"))
    real_start, closing, workers = cluster_client.ClusterStart, [], []

    class RecordedStart(real_start):
        def client(self):
            client = super().client()
            workers.extend(client.scheduler_info()["workers"])
            return client

        def begin_close(self):
            closing.append(time.time())
            super().begin_close()

    monkeypatch.setattr(cluster_client, "ClusterStart", RecordedStart)
    out = tmp_path / "out"
    # cluster.fusion_host_share 0.5: the host computes one of its two final-pass views, the other worker three
    assert main(["-q", "run", str(scene), "-o", str(out), *FAST, *STAGES, "--cluster", "local",
                 "--set", "cluster.workers=2", "--set", "cluster.fusion_host_share=0.5"]) == 0
    assert maps(out) == maps(single)
    for name in ("fused.ply", "fused.ply.vis"):
        assert (out / name).read_bytes() == (single / name).read_bytes(), name
    record = json.loads((out / "run.json").read_text())
    counts = record["counts"]
    assert sum(w["views"] for w in counts["depth_cluster_workers"].values()) == 8
    host_views = counts["depth_cluster_workers"][counts["fusion_beside_depth_worker"]]["views"]
    assert host_views == 3, counts["depth_cluster_workers"]   # 2 photometric + 1 final (hints are loose: Dask kept them)
    assert "fusion_cluster" not in counts and counts["fusion_beside_depth_seconds"] > 0
    assert counts["fusion_beside_depth_worker"] == sorted(set(workers))[0]
    fusion_record = json.loads((out / "stereo" / "fusion.json").read_text())["counts"]
    single_record = json.loads((single / "stereo" / "fusion.json").read_text())["counts"]
    assert fusion_record["points"] == single_record["points"] > 0
    assert fusion_record["reference_views"] == single_record["reference_views"] == 4
    depth_start, depth_end = record["stage_unix_times"]["depth"]
    fusion_start, fusion_end = record["stage_unix_times"]["fusion"]
    assert closing and depth_end - 0.001 <= closing[0] <= fusion_end + 0.001
    # every pass's marker, written beside the next pass; the photometric pass's maps removed
    markers = list((out / "stereo").rglob("*.finished"))
    assert markers and all(json.loads(p.read_text())["views"] == 4 for p in markers)
    assert not list((out / "stereo").rglob("*.photometric.bin"))


def test_a_finished_depth_stage_starts_no_cluster_and_a_lost_map_starts_it(scene, single, tmp_path, monkeypatch):
    """A rerun with --cluster whose depth maps are all on disk starts no cluster (~2-3 s and a
    GPU's memory per worker for nothing); one whose finished depth stage lost a map starts it when
    the stage finds that map missing, computes only it, and shuts the cluster down after fusion."""
    out = tmp_path / "out"
    cluster_run = [*FAST, *STAGES, "--cluster", "local", "--set", "cluster.workers=1", "--set", "cluster.later_stages=workers"]
    assert main(["-q", "run", str(scene), "-o", str(out), *FAST, *STAGES]) == 0
    import mvs_pipeline.cluster.client as cluster_client

    real_start = cluster_client.ClusterStart
    started = []

    def no_start(*args, **kwargs):
        started.append(args)
        raise AssertionError("a cluster was started")

    monkeypatch.setattr(cluster_client, "ClusterStart", no_start)
    assert main(["-q", "run", str(scene), "-o", str(out), *cluster_run]) == 0
    counts = json.loads((out / "run.json").read_text())["counts"]
    assert not started and "cluster_wait_seconds" not in counts
    assert counts["depth_view_passes_computed"] == 0 and counts["depth_view_passes_resumed"] == 8

    class RecordedStart(real_start):
        def begin_close(self):
            started.append(("closing", time.time()))
            super().begin_close()

    monkeypatch.setattr(cluster_client, "ClusterStart", RecordedStart)
    lost = sorted((out / "stereo" / "depth_maps").glob("*.geometric.bin"))[0]
    lost.unlink()
    assert main(["-q", "run", str(scene), "-o", str(out), *cluster_run]) == 0
    record = json.loads((out / "run.json").read_text())
    counts = record["counts"]
    # the lost view, after the photometric pass it reads, whose maps were removed, for all 4 views
    assert counts["depth_view_passes_computed"] == 1 + 4 and counts["depth_view_passes_resumed"] == 3
    assert counts["cluster_wait_seconds"] >= 0   # started by the depth stage, which waited for it
    # fusion (a cluster stage too, redone after the new map) ran on it; its shutdown began as fusion
    # ended, the run's last cluster stage (close() at the end of the run asks again, a no-op)
    assert counts["fusion_cluster"]["tasks"] >= 1
    assert started and {what for what, _ in started} == {"closing"}
    fusion_start, fusion_end = record["stage_unix_times"]["fusion"]
    assert fusion_start - 0.001 <= started[0][1] <= fusion_end + 0.001
    assert maps(out) == maps(single)


def prepared(scene: Path, out: Path):
    """(cfg, Scene, ViewSelection) of OUT after the load and views stages."""
    assert main(["-q", "run", str(scene), "-o", str(out), *FAST, "--stages", "load,views"]) == 0
    cfg = load_config("small", SETTINGS)
    scene_ = read_scene(out / "images", out / "sparse")
    return cfg, scene_, select_and_write(cfg.views, scene_, out, overwrite=False)


def test_a_worker_killed_mid_stage_loses_nothing(scene, single, tmp_path):
    out = tmp_path / "out"
    cfg, scene_, sel = prepared(scene, out)
    # what a worker killed in the middle of a write leaves (mkstemp's name; timing decides whether
    # the kill below lands in a write): removed at the end of the pass, when no writer is busy
    planted = out / "stereo" / "cost_maps" / ".view_000.png.photometric.bin.tmp-v_9akw3m.bin"
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_bytes(b"96&72&1&")
    killed = []
    with open_client(ClusterConfig(kind="local", workers=2)) as client:
        pids = client.run(os.getpid)   # worker address -> pid

        def kill_a_worker(result):
            if not killed:   # after the first finished task: its worker dies with kill -9
                pid = pids[result["worker"]]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

        counts = compute_depth_maps_on_cluster(cfg, scene_, sel, out, "cpu", client, retries=3, progress=False,
                                               on_task_done=kill_a_worker)
        after = set(client.run(os.getpid).values())
    assert killed and killed[0] not in after   # the worker really died (the nanny started another)
    # 8 tasks, plus the views whose maps were still queued on the killed worker when it died (if any),
    # which the end-of-pass check computes again
    assert 8 <= counts["depth_view_passes_computed"] <= 12
    assert not planted.exists()
    assert maps(out) == maps(single)   # every .bin under stereo/, temporaries included


def test_workers_decode_the_images_while_the_client_selects_views(scene, tmp_path):
    """After the load stage every worker starts decoding all full-size images in its own threads
    (the host's cores shared by its workers), so the depth stage's first pass need not."""
    cfg, scene_, sel = prepared(scene, tmp_path / "out")

    def decoded(dask_worker):   # run on each worker: (image files, full-size images decoded, threads)
        key, images = dask_worker.__dict__["_mvs_pipeline_images"]
        done = sum(isinstance(images._cache.get((v, 0)), np.ndarray) for v in range(len(key)))
        return [k[0] for k in key], done, images._pool._max_workers

    with open_client(ClusterConfig(kind="local", workers=2)) as client:
        prefetch_images_on_workers(client, scene_)
        deadline = time.monotonic() + 60
        while True:
            states = client.run(decoded, on_error="return")
            if all(isinstance(v, tuple) and v[1] == scene_.num_views for v in states.values()) \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    assert len(states) == 2
    for files, done, threads in states.values():
        assert files == [str(v.image_path) for v in scene_.views] and done == scene_.num_views
        assert threads == max(2, min(8, (os.cpu_count() or 1) // 2))


def test_local_workers_share_the_cores_unless_pinned(monkeypatch):
    """Each local worker's solvers get the machine's cores split among the workers (Numba's
    threads), or cluster.cores_per_worker when it is set, over the environment's NUMBA_NUM_THREADS;
    a worker's two threads (threads_per_worker) take turns, so they do not split its share."""
    def numba_threads():
        return os.environ["NUMBA_NUM_THREADS"]

    cores = os.cpu_count() or 1
    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    with open_client(ClusterConfig(kind="local", workers=2, threads_per_worker=2)) as client:
        assert sorted(client.run(numba_threads).values()) == [str(max(1, cores // 2))] * 2
        assert all(w["nthreads"] == 2 for w in client.scheduler_info()["workers"].values())
    monkeypatch.setenv("NUMBA_NUM_THREADS", "1")
    with open_client(ClusterConfig(kind="local", workers=1, cores_per_worker=cores + 5)) as client:
        assert list(client.run(numba_threads).values()) == [str(cores)]   # pinned, at most the machine's


def test_a_local_cluster_whose_workers_did_not_start_fails_in_one_line(scene, tmp_path, monkeypatch, capsys):
    """distributed only logs a worker process that failed to start; a run on such a cluster would wait for
    tasks no worker takes. A local cluster with none of its workers up is one line naming the cause."""
    import distributed  # noqa: PLC0415

    real = distributed.LocalCluster
    monkeypatch.setattr(distributed, "LocalCluster", lambda *a, **kw: real(*a, **{**kw, "n_workers": 0}))
    with pytest.raises(MVSError, match="none of the local cluster's workers started"):
        with open_client(ClusterConfig(kind="local", workers=1)):
            pass
    out = tmp_path / "out"
    assert main(["-q", "run", str(scene), "-o", str(out), *FAST, "--stages", "load,views,depth", "--cluster",
                 "local", "--set", "cluster.workers=1"]) == 2
    err = capsys.readouterr().err
    assert "none of the local cluster's workers started" in err and "Traceback" not in err, err


def test_dask_logs_only_its_warnings_unless_verbose(scene, tmp_path):
    """The command's own output on --cluster: Dask's INFO lines (scheduler, nanny, client) show with
    -v only. In a fresh interpreter, where the CLI configures logging itself (not pytest)."""
    env = child_env()
    command = [sys.executable, "-m", "mvs_pipeline", "run", str(scene), "-o", str(tmp_path / "out"), *FAST,
               "--stages", "load,views,depth", "--cluster", "local", "--set", "cluster.workers=1"]
    quiet = subprocess.run([*command[:3], "-q", *command[3:]], capture_output=True, text=True, env=env, timeout=600)
    assert quiet.returncode == 0, quiet.stderr
    assert "distributed" not in quiet.stderr and "INFO" not in quiet.stderr
    verbose = subprocess.run([*command[:3], "-v", *command[3:], "--overwrite"], capture_output=True, text=True,
                             env=env, timeout=600)
    assert verbose.returncode == 0, verbose.stderr
    assert "INFO distributed.scheduler" in verbose.stderr   # -v: Dask's own lines too
    assert "INFO mvs_pipeline.cluster.client: cluster: local, 1 worker(s)" in verbose.stderr


def test_cluster_options_fail_in_one_line(scene, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["-q", "run", str(scene), "-o", str(out), "--cluster", "lokal"]) != 0
    assert "--cluster: 'lokal' is not local, local-cuda" in capsys.readouterr().err
    assert main(["-q", "run", str(scene), "-o", str(out), "--set", "cluster.kind=address"]) != 0
    err = capsys.readouterr().err
    assert "kind 'address' needs 'address'" in err and "Traceback" not in err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_lost_scheduler_leaves_a_resumable_folder(scene, single, tmp_path):
    """An external scheduler (`dask scheduler`) killed with SIGKILL after the first finished task:
    one-line MVSError; a rerun on another cluster resumes and ends with the single-process bytes."""
    out = tmp_path / "out"
    cfg, scene_, sel = prepared(scene, out)
    # one view a task: the scheduler dies after the first view, not after the whole pass's batch
    cfg = replace(cfg, cluster=replace(cfg.cluster, task_megapixels=0.0))
    address = f"tcp://127.0.0.1:{free_port()}"
    python_m = [sys.executable, "-m"]
    scheduler = subprocess.Popen([*python_m, "distributed.cli.dask_scheduler", "--port", address.rsplit(":", 1)[1],
                                  "--no-dashboard"], stderr=subprocess.DEVNULL)
    worker = subprocess.Popen([*python_m, "distributed.cli.dask_worker", address, "--nthreads", "1",
                               "--no-dashboard"], stderr=subprocess.DEVNULL)
    try:
        with pytest.raises(MVSError) as err, open_client(ClusterConfig(kind="address", address=address)) as client:
            client.wait_for_workers(1, timeout=60)
            compute_depth_maps_on_cluster(cfg, scene_, sel, out, "cpu", client, progress=False,
                                          on_task_done=lambda result: scheduler.kill())
    finally:
        worker.kill()
        scheduler.kill()
    message = str(err.value)
    assert "\n" not in message and "rerun the same command to resume" in message
    finished = maps(out)
    assert 0 < len(finished) < len(maps(single))
    with open_client(ClusterConfig(kind="local", workers=1)) as client:
        counts = compute_depth_maps_on_cluster(cfg, scene_, sel, out, "cpu", client, progress=False)
    assert counts["depth_view_passes_resumed"] >= 1
    assert counts["depth_view_passes_computed"] + counts["depth_view_passes_resumed"] == 8
    assert maps(out) == maps(single)
