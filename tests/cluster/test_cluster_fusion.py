"""The fusion stage on `--cluster` (issue 36, item 5): reference-view ranges as Dask tasks on a
LocalCluster of 2 CPU worker processes, against the single-process fusion of the same maps
(fusion/cluster_run.py states what must hold). The analytic plane scene of tests/fusion.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("distributed")
pytestmark = pytest.mark.slow   # two worker processes start and compile the Numba kernels

from mvs_pipeline.cluster.client import open_client  # noqa: E402
from mvs_pipeline.cluster.params import ClusterConfig  # noqa: E402
from mvs_pipeline.errors import MVSError  # noqa: E402
from mvs_pipeline.fusion import cluster_run  # noqa: E402
from mvs_pipeline.fusion.params import FusionConfig  # noqa: E402
from mvs_pipeline.fusion.stage import fuse_chunks, fuse_depth_maps, resolve_config  # noqa: E402
from mvs_pipeline.io.fused_ply import HEADER_BYTES, VERTEX_DTYPE  # noqa: E402
from mvs_pipeline.synth.camera import look_at  # noqa: E402
from tests.fusion.fusion_scene import arc_poses, make_scene  # noqa: E402

VIEWS, W, H = 8, 64, 48
# counts that are about time or each process's cache, not about the cloud
NOT_THE_CLOUD = {"seconds", "load_seconds", "load_wait_seconds", "loop_seconds", "reloads", "cache_views", "cluster",
                 "consensus_seconds"}


@pytest.fixture(scope="module")
def client():
    with open_client(ClusterConfig(kind="local", workers=2)) as c:
        yield c


@pytest.fixture(scope="module")
def maps(tmp_path_factory):
    root = tmp_path_factory.mktemp("maps")
    scene, sel, _ = make_scene(root, arc_poses(VIEWS, arc_deg=40), W, H)
    return root, scene, sel


def workspace(maps, where: Path) -> Path:
    shutil.copytree(maps[0], where)
    return where


def body(out: Path) -> bytes:
    return (out / "fused.ply").read_bytes()[HEADER_BYTES:]


def counts(out: Path) -> dict:
    return {k: v for k, v in json.loads((out / "stereo" / "fusion.json").read_text())["counts"].items()
            if k not in NOT_THE_CLOUD}


def test_without_consumption_the_files_are_the_single_process_bytes(maps, client, tmp_path):
    _, scene, sel = maps
    cfg = FusionConfig(consume_pixels=False)
    single, cluster = workspace(maps, tmp_path / "single"), workspace(maps, tmp_path / "cluster")
    fuse_depth_maps(cfg, scene, sel, single, "cpu", progress=False)
    got = cluster_run.fuse_depth_maps_on_cluster(cfg, scene, sel, cluster, "cpu", client, progress=False)
    assert got["cluster"]["tasks"] == 8   # 4 ranges per worker: 1 view each here
    for name in ("fused.ply", "fused.ply.vis"):
        assert (cluster / name).read_bytes() == (single / name).read_bytes(), name
    with np.load(cluster / "previews/fused.npz") as got_preview, np.load(single / "previews/fused.npz") as want:
        assert set(got_preview.files) == set(want.files)
        for key in set(want.files) - {"ply_stamp"}:   # fused.ply's size and mtime
            np.testing.assert_array_equal(got_preview[key], want[key], err_msg=key)
    assert counts(cluster) == counts(single)
    assert counts(single)["points"] > 1000
    assert not (cluster / cluster_run.RANGES_DIR).exists()   # the range files went into fused.ply


def test_with_consumption_each_range_consumes_within_itself(client, tmp_path):
    # cameras sliding along a plane, each with the 3 nearest on either side as neighbours: the
    # layout of a capture path, where only views near a range boundary see the other range's surface
    n = 24
    poses = [look_at((0.5 * k, 0.0, 3.0), (0.5 * k, 0.0, 0.0), up=(0.0, -1.0, 0.0)) for k in range(n)]
    near = [[j for j in sorted(range(n), key=lambda j: abs(j - i)) if j != i and abs(j - i) <= 3] for i in range(n)]
    scene, sel, _ = make_scene(tmp_path / "maps", poses, W, H, neighbors=near)
    cfg = resolve_config(FusionConfig(consume_pixels=True), scene, sel)
    single, cluster = (shutil.copytree(tmp_path / "maps", tmp_path / d) for d in ("single", "cluster"))
    fuse_depth_maps(cfg, scene, sel, single, "cpu", progress=False)
    got = cluster_run.fuse_depth_maps_on_cluster(cfg, scene, sel, cluster, "cpu", client, progress=False)
    ranges = got["cluster"]["ranges"]
    assert [r[:3] for r in ranges] == [[0, 11, 12], [12, 23, 12]]   # one contiguous range per worker
    records = np.frombuffer(body(cluster), VERTEX_DTYPE)
    # each range's points are the fusion of that range alone, in view order
    alone = {}
    at = 0
    for first, last, _, points in ranges:
        chunks = list(fuse_chunks(cfg, scene, sel, cluster / "stereo", "cpu", progress=False,
                                  references=range(first, last + 1)))
        alone.update((c.view_idx, c) for c in chunks)
        xyz = np.concatenate([c.xyz for c in chunks])
        assert points == len(xyz)
        np.testing.assert_array_equal(np.column_stack([records[a][at:at + points] for a in "xyz"]), xyz)
        at += points
    assert at == len(records) == got["points"]
    # the first range's points are the single process's first bytes exactly
    first_bytes = ranges[0][3] * VERTEX_DTYPE.itemsize
    assert body(cluster)[:first_bytes] == body(single)[:first_bytes]
    # the views whose points differ: the first few of range 1 (the boundary and a neighbourhood past it)
    whole = {c.view_idx: c for c in fuse_chunks(cfg, scene, sel, single / "stereo", "cpu", progress=False)}
    differ = {v for v in whole if not np.array_equal(whole[v].pixel, alone[v].pixel)}
    assert differ and differ <= set(range(12, 12 + 5)), differ
    # more points than the single process, at most those without consumption
    dense = fuse_depth_maps(dataclasses.replace(cfg, consume_pixels=False), scene, sel,
                            shutil.copytree(tmp_path / "maps", tmp_path / "dense"), "cpu", progress=False)["points"]
    single_points = counts(single)["points"]
    assert single_points < got["points"] <= min(dense, 1.1 * single_points)
    # the per-view pixel counts are the single process's (each view counted once)
    assert {k: v for k, v in counts(cluster).items() if k != "points"} == \
        {k: v for k, v in counts(single).items() if k != "points"}


def test_a_failed_range_is_one_line_and_a_rerun_fuses_only_the_rest(maps, client, tmp_path):
    _, scene, sel = maps
    cfg = resolve_config(FusionConfig(consume_pixels=True), scene, sel)
    out = workspace(maps, tmp_path / "out")
    reference = workspace(maps, tmp_path / "reference")
    cluster_run.fuse_depth_maps_on_cluster(cfg, scene, sel, reference, "cpu", client, progress=False)
    # range 1's file cannot be written: a folder stands where it goes
    job = cluster_run.FusionJob(cfg, scene.without_points(), sel, out.resolve(), "cpu")
    blocker = cluster_run._range_paths(job, 1, [4, 5, 6, 7])[0]
    blocker.mkdir(parents=True)
    with pytest.raises(MVSError) as err:
        cluster_run.fuse_depth_maps_on_cluster(cfg, scene, sel, out, "cpu", client, retries=0, progress=False)
    message = str(err.value)
    assert "\n" not in message and "fusion range 1 (views 4-7) failed on the cluster" in message
    assert "rerun the same command to resume" in message
    assert not (out / "fused.ply").exists()
    blocker.rmdir()
    got = cluster_run.fuse_depth_maps_on_cluster(cfg, scene, sel, out, "cpu", client, progress=False)
    assert got["cluster"]["resumed_ranges"] == 1   # range 0 was kept from the failed run
    assert (out / "fused.ply").read_bytes() == (reference / "fused.ply").read_bytes()
    assert (out / "fused.ply.vis").read_bytes() == (reference / "fused.ply.vis").read_bytes()


def test_a_finished_fusion_is_not_redone_and_needs_no_cluster(maps, client, tmp_path):
    _, scene, sel = maps
    cfg = FusionConfig(consume_pixels=False)
    out = workspace(maps, tmp_path / "out")
    first = cluster_run.fuse_depth_maps_on_cluster(cfg, scene, sel, out, "cpu", client, progress=False)
    stamp = (out / "fused.ply").stat().st_mtime_ns

    def no_client():
        raise AssertionError("a finished fusion asked for the cluster")

    again = cluster_run.fuse_depth_maps_on_cluster(cfg, scene, sel, out, "cpu", no_client, progress=False)
    assert again == first and (out / "fused.ply").stat().st_mtime_ns == stamp


def test_ranges_are_contiguous_and_cover_every_reference_view():
    refs = [0, 2, 3, 5, 6, 7, 9]
    assert cluster_run.split_ranges(refs, 2, consume=True) == [[0, 2, 3, 5], [6, 7, 9]]
    assert sum(cluster_run.split_ranges(refs, 2, consume=False), []) == refs
    assert len(cluster_run.split_ranges(refs, 2, consume=False)) == 7   # at most one range per view
    assert cluster_run.split_ranges([4], 3, consume=True) == [[4]]
