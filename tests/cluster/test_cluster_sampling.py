"""`run --cluster` for the sampling stage (issue #36 item 5): the voxel pooling's key ranges as Dask
tasks on a LocalCluster of 2 CPU worker processes (sampling/cluster_pool.py) write the single-process
fused_fps.ply byte for byte, with the whole-cloud plan and with budgets that stream in several parts;
a failing task fails the stage in one line; a finished stage is not redone (nor the cluster started).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("distributed")
pytestmark = pytest.mark.slow   # worker processes start and load numba: ~10-30 s on 2 cores

from mvs_pipeline.cli import main  # noqa: E402
from mvs_pipeline.cluster.client import open_client  # noqa: E402
from mvs_pipeline.cluster.params import ClusterConfig  # noqa: E402
from mvs_pipeline.depth import cluster_run  # noqa: E402
from mvs_pipeline.errors import MVSError  # noqa: E402
from mvs_pipeline.fingerprints import record_path  # noqa: E402
from mvs_pipeline.io.ply import write_ply  # noqa: E402
from mvs_pipeline.sampling import stage as sampling  # noqa: E402
from mvs_pipeline.sampling.params import SamplingConfig  # noqa: E402
from mvs_pipeline.sampling.points.voxel_pool import streamed as voxel_streamed  # noqa: E402

from ..sampling.test_sampling_stage import exact_fps, fused_cloud  # noqa: E402
from ..sampling.test_streamed_sampling import budgets, fused20k  # noqa: E402, F401 (a fixture)

CONFIGS = {
    "default": SamplingConfig(max_samples=300),
    "fixed_voxel_samples_only": SamplingConfig(max_samples=100, keep_unsampled=False, pre_pool_voxel_size=0.05),
    "xyz_only": SamplingConfig(max_samples=200, transfer_attributes=False, start_index=11),
}


@pytest.fixture(scope="module")
def client():
    with open_client(ClusterConfig(kind="local", workers=2)) as c:
        yield c


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_pooled_on_the_workers_gives_the_single_process_file(client, fused20k, tmp_path, name):
    cfg = CONFIGS[name]
    single = sampling.sample_fused_cloud(cfg, fused20k, tmp_path / "single", backend="cpu")["samples"].read_bytes()
    for mode, budget in {"whole": None, **budgets(fused20k)}.items():
        info: dict = {}
        got = sampling.sample_fused_cloud(cfg, fused20k, tmp_path / mode, backend="cpu", memory_budget=budget,
                                          client=client, timings=info)
        assert got["samples"].read_bytes() == single, mode
        # every range was a task, on the workers (not this process); the budgets stream in more parts
        workers = info["cluster_workers"]
        assert info["cluster_tasks"] == sum(w["tasks"] for w in workers.values()) >= 2, mode
        assert "client" not in workers and sum(w["points"] for w in workers.values()) == 20000
        assert info["pool_tasks_seconds"] <= info["pooling_seconds"]
        if budget is not None:
            assert info["cluster_tasks"] > 2 and info["part_points"] < 10000, mode


def test_without_pooling_the_client_is_not_asked_for(fused20k, tmp_path):
    """Exact FPS of every point: nothing to spread, the stage runs here as without --cluster."""
    cfg = exact_fps(num_samples=250, start_index=5)
    single = sampling.sample_fused_cloud(cfg, fused20k, tmp_path / "single", backend="cpu")

    def no_client():
        raise AssertionError("the cluster was asked for")

    info: dict = {}
    got = sampling.sample_fused_cloud(cfg, fused20k, tmp_path / "cluster", backend="cpu", client=no_client,
                                      timings=info)
    assert "cluster_tasks" not in info
    for key in single:
        assert got[key].read_bytes() == single[key].read_bytes()


def test_a_failing_task_fails_in_one_line(client, fused20k, tmp_path, monkeypatch):
    """fused.ply gone once the client planned the ranges: what a worker that does not see the output
    folder meets. One line naming the file and the cause; no output written."""
    work = tmp_path / "fused.ply"
    shutil.copy(fused20k, work)
    plan = voxel_streamed.plan_key_ranges

    def plan_then_lose_the_file(*args, **kw):
        ranges = plan(*args, **kw)
        work.rename(tmp_path / "moved.ply")
        return ranges

    monkeypatch.setattr(voxel_streamed, "plan_key_ranges", plan_then_lose_the_file)
    with pytest.raises(MVSError) as err:
        sampling.sample_fused_cloud(CONFIGS["default"], work, tmp_path / "out", backend="cpu", client=client,
                                    retries=0)
    message = str(err.value)
    assert "\n" not in message and "Traceback" not in message
    assert str(work) in message and "voxel pooling failed on the cluster" in message
    assert "FileNotFoundError" in message and "must see" in message
    assert not (tmp_path / "out" / "fused_fps.ply").exists()


SCENE_RUN = ["-c", "small", "--set", "backend=cpu", "--set", "patchmatch.iterations=1", "--set",
             "depth.geometric_passes=0", "--set", "depth.multi_scale=false"]
CLUSTER = ["--cluster", "local", "--set", "cluster.workers=2", "--set", "cluster.later_stages=workers"]


def test_run_cluster_samples_the_same_file_and_resumes(synth_scene_factory, tmp_path, monkeypatch):
    """`run --stages sampling --cluster local` on a fused.ply of 20 000 points (written over the tiny
    scene's): the single-process file, the tasks in run.json; run again, nothing is redone and no
    cluster is started. A whole run with only sampling left starts the cluster with the run but
    has the workers decode no images (that head start is the depth stage's)."""
    scene = synth_scene_factory("object", views=4, width=96, height=72)
    base = tmp_path / "base"
    assert main(["-q", "run", str(scene), "-o", str(base), *SCENE_RUN, "--stages", "load,views,depth,fusion"]) == 0
    write_ply(base / "fused.ply", fused_cloud(20000, seed=4))
    single, cluster = tmp_path / "single", tmp_path / "cluster"
    shutil.copytree(base, single)
    shutil.copytree(base, cluster)

    def sample(out: Path, *extra: str) -> dict:
        assert main(["-q", "run", str(scene), "-o", str(out), *SCENE_RUN, "--stages", "sampling", *extra]) == 0
        return json.loads((out / "run.json").read_text())["counts"]

    assert "sampling_cluster_tasks" not in sample(single)
    counts = sample(cluster, *CLUSTER)
    assert (cluster / "fused_fps.ply").read_bytes() == (single / "fused_fps.ply").read_bytes()
    assert counts["sampling_cluster_tasks"] >= 2
    assert sum(w["tasks"] for w in counts["sampling_cluster_workers"].values()) == counts["sampling_cluster_tasks"]
    assert counts["sampling_step_seconds"]["pool_tasks"] >= 0
    stamp = (cluster / "fused_fps.ply").stat().st_mtime_ns
    again = sample(cluster, *CLUSTER)
    assert "sampling_cluster_tasks" not in again and "sampled_points" not in again
    assert "cluster_wait_seconds" not in again   # a finished stage starts no cluster
    assert (cluster / "fused_fps.ply").stat().st_mtime_ns == stamp
    prefetched = []
    monkeypatch.setattr(cluster_run, "prefetch_images_on_workers", lambda *a: prefetched.append(a))
    (cluster / "fused_fps.ply").unlink()
    record_path(cluster, "sampling").unlink()
    assert main(["-q", "run", str(scene), "-o", str(cluster), *SCENE_RUN, "--stages", "load,views,depth,fusion,sampling",
                 *CLUSTER]) == 0
    assert json.loads((cluster / "run.json").read_text())["counts"]["sampling_cluster_tasks"] >= 1
    assert not prefetched


def test_cluster_plan():
    """cluster_plan leaves a streamed plan's chunk rows (its budget) and shrinks only its parts."""
    from mvs_pipeline.sampling.memory_plan import MIN_PART_POINTS, MemoryPlan, cluster_plan  # noqa: PLC0415

    streamed = MemoryPlan(whole=False, resident=False, chunk_rows=1000, part_points=50_000, bin_bits=12)
    assert cluster_plan(streamed, 1_000_000, 2) == streamed
    assert cluster_plan(streamed, 40_000, 2) == dataclasses.replace(streamed, part_points=22_000)
    whole = cluster_plan(MemoryPlan(whole=True), 40_000, 4)
    assert not whole.whole and whole.resident and whole.chunk_rows == 40_000 and whole.part_points == 11_000
    assert cluster_plan(MemoryPlan(whole=True), 100, 8).part_points == MIN_PART_POINTS


def _plant_state(dask_worker=None) -> None:
    from mvs_pipeline.cluster.client import _STATE_ATTR  # noqa: PLC0415

    dask_worker.__dict__.setdefault(_STATE_ATTR, {})["an-earlier-depth-run"] = object()


def _states(dask_worker=None) -> list[str]:
    from mvs_pipeline.cluster.client import _STATE_ATTR  # noqa: PLC0415

    return sorted(dask_worker.__dict__.get(_STATE_ATTR, {}))


def test_pooling_drops_an_earlier_stages_worker_state(client, fused20k, tmp_path):
    """depth's map cache and textures (GPU memory with local-cuda) leave a worker once it pools."""
    client.run(_plant_state)
    info: dict = {}
    sampling.sample_fused_cloud(CONFIGS["default"], fused20k, tmp_path / "out", backend="cpu", client=client,
                                timings=info)
    states = client.run(_states)
    for worker in info["cluster_workers"]:
        assert "an-earlier-depth-run" not in states[worker] and len(states[worker]) == 1


def _trim_threshold() -> str | None:
    import os  # noqa: PLC0415

    return os.environ.get("MALLOC_TRIM_THRESHOLD_")


def test_local_workers_allocate_as_one_process(client):
    """No MALLOC_TRIM_THRESHOLD_ from distributed's defaults (cluster/client._glibc_malloc_defaults)."""
    import os  # noqa: PLC0415

    expected = os.environ.get("MALLOC_TRIM_THRESHOLD_")   # one the caller set still reaches them
    assert set(client.run(_trim_threshold).values()) == {expected}
