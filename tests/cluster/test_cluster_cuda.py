"""`run --cluster local-cuda` (dask-cuda, one worker per visible GPU) writes the maps of the
single-process CUDA run byte for byte, and the same fused point set. Needs a GPU and dask-cuda."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("distributed")

from mvs_pipeline.cli import main  # noqa: E402

from .test_cluster_depth import maps, point_set  # noqa: E402

pytestmark = pytest.mark.gpu
# every pass's maps are kept (depth.keep_pass_maps) so that each pass is compared, not only the last
GPU_FAST = ["-c", "small", "--set", "backend=cuda", "--set", "depth.geometric_passes=1",
            "--set", "depth.keep_pass_maps=true"]
STAGES = ["--stages", "load,views,depth,fusion"]


def test_local_cuda_matches_the_single_process_gpu_run(synth_scene_factory, tmp_path):
    pytest.importorskip("dask_cuda")
    scene = synth_scene_factory("object", views=6, width=320, height=240)
    single, cluster = tmp_path / "single", tmp_path / "cluster"
    assert main(["-q", "run", str(scene), "-o", str(single), *GPU_FAST, *STAGES]) == 0
    assert main(["-q", "run", str(scene), "-o", str(cluster), *GPU_FAST, *STAGES, "--cluster", "local-cuda"]) == 0
    reference = maps(single)
    assert len(reference) >= 6 * 2 * 3
    assert maps(cluster) == reference
    np.testing.assert_array_equal(point_set(cluster), point_set(single))
    record = json.loads((cluster / "run.json").read_text())
    assert record["backend"] == "cuda" and record["cluster"] == "local-cuda"
    workers = record["counts"]["depth_cluster_workers"]
    assert sum(w["tasks"] for w in workers.values()) == record["counts"]["depth_view_passes_computed"]


def test_sampling_pooled_on_gpu_workers_gives_the_single_gpu_file(tmp_path):
    """The sampling stage's key ranges pooled on dask-cuda workers (sampling/cluster_pool.py, each
    task reading fused.ply to its GPU): the single-process GPU file, whole-path plan and budgets
    that stream. Written without a GPU at hand (session 23): first run on a GPU machine."""
    pytest.importorskip("dask_cuda")
    from mvs_pipeline.cluster.client import open_client  # noqa: PLC0415
    from mvs_pipeline.cluster.params import ClusterConfig  # noqa: PLC0415
    from mvs_pipeline.io.ply import write_ply  # noqa: PLC0415
    from mvs_pipeline.sampling import stage as sampling  # noqa: PLC0415
    from mvs_pipeline.sampling.params import SamplingConfig  # noqa: PLC0415

    from ..sampling.test_sampling_stage import fused_cloud  # noqa: PLC0415
    from ..sampling.test_streamed_sampling import budgets  # noqa: PLC0415

    fused = tmp_path / "fused.ply"
    write_ply(fused, fused_cloud(20000, seed=4))
    cfg = SamplingConfig(max_samples=300)
    single = sampling.sample_fused_cloud(cfg, fused, tmp_path / "single", backend="cuda")["samples"].read_bytes()
    with open_client(ClusterConfig(kind="local-cuda")) as client:
        for mode, budget in {"whole": None, **budgets(fused)}.items():
            info: dict = {}
            got = sampling.sample_fused_cloud(cfg, fused, tmp_path / mode, backend="cuda", memory_budget=budget,
                                              client=client, timings=info)
            assert got["samples"].read_bytes() == single, mode
            assert info["cluster_tasks"] >= 1 and "client" not in info["cluster_workers"]
