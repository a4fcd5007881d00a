"""`run --cluster local-cuda` (dask-cuda, one worker per visible GPU) writes the maps of the
single-process CUDA run byte for byte, and its fused.ply (fusion beside the depth stage on the first worker by default,
on the workers with cluster.later_stages=workers). Needs a GPU and dask-cuda."""

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
    on_workers = tmp_path / "on_workers"
    assert main(["-q", "run", str(scene), "-o", str(on_workers), *GPU_FAST, *STAGES, "--cluster", "local-cuda",
                 "--set", "cluster.later_stages=workers"]) == 0
    reference = maps(single)
    assert len(reference) >= 6 * 2 * 3
    assert maps(cluster) == reference and maps(on_workers) == reference
    record = json.loads((cluster / "run.json").read_text())
    assert record["backend"] == "cuda" and record["cluster"] == "local-cuda"
    workers = record["counts"]["depth_cluster_workers"]
    assert sum(w["views"] for w in workers.values()) == record["counts"]["depth_view_passes_computed"]
    # by default fusion ran beside the depth stage in the first worker's process (fusion/worker_hosted.py), fed
    # by the final maps' files as the workers wrote them
    assert "fusion_cluster" not in record["counts"] and record["counts"]["fusion_beside_depth_seconds"] > 0
    assert record["counts"]["fusion_beside_depth_worker"] == sorted(workers)[0]
    # with later_stages=workers as range tasks on the GPU workers (consume_pixels auto: off at this size)
    assert json.loads((on_workers / "run.json").read_text())["counts"]["fusion_cluster"]["tasks"] >= 1
    for out in (cluster, on_workers):   # either way the single process's files
        np.testing.assert_array_equal(point_set(out), point_set(single))
        for name in ("fused.ply", "fused.ply.vis"):
            assert (out / name).read_bytes() == (single / name).read_bytes(), name


@pytest.mark.parametrize("consume", [False, True])
def test_fusion_ranges_on_gpu_workers(consume, tmp_path):
    """fusion/cluster_run.py with the CUDA engine on every GPU worker, against the single-process
    CUDA fusion: the same bytes without consumption; with it, the first range's bytes (all of
    them on one GPU, where there is one range)."""
    pytest.importorskip("dask_cuda")
    import shutil  # noqa: PLC0415

    from mvs_pipeline.cluster.client import open_client  # noqa: PLC0415
    from mvs_pipeline.cluster.params import ClusterConfig  # noqa: PLC0415
    from mvs_pipeline.fusion.cluster_run import fuse_depth_maps_on_cluster  # noqa: PLC0415
    from mvs_pipeline.fusion.params import FusionConfig  # noqa: PLC0415
    from mvs_pipeline.fusion.stage import fuse_depth_maps  # noqa: PLC0415
    from mvs_pipeline.io.fused_ply import HEADER_BYTES, VERTEX_DTYPE  # noqa: PLC0415
    from tests.fusion.fusion_scene import arc_poses, make_scene  # noqa: PLC0415

    scene, sel, _ = make_scene(tmp_path / "maps", arc_poses(8, arc_deg=40), 64, 48)
    cfg = FusionConfig(consume_pixels=consume)
    single, cluster = (shutil.copytree(tmp_path / "maps", tmp_path / d) for d in ("single", "cluster"))
    fuse_depth_maps(cfg, scene, sel, single, "cuda", progress=False)
    with open_client(ClusterConfig(kind="local-cuda")) as client:
        got = fuse_depth_maps_on_cluster(cfg, scene, sel, cluster, "cuda", client, progress=False)
    ranges = got["cluster"]["ranges"]
    if not consume or len(ranges) == 1:
        for name in ("fused.ply", "fused.ply.vis"):
            assert (cluster / name).read_bytes() == (single / name).read_bytes(), name
    else:
        first = HEADER_BYTES + ranges[0][3] * VERTEX_DTYPE.itemsize
        assert (cluster / "fused.ply").read_bytes()[HEADER_BYTES:first] == \
            (single / "fused.ply").read_bytes()[HEADER_BYTES:first]


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
