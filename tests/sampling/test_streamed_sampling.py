"""The sampling stage within a memory budget (sampling/memory_plan.py, streamed.py): in chunks and
parts it writes the file the whole-cloud path writes, byte for byte, and its working memory stays
within the budget it was given."""

from __future__ import annotations

import dataclasses
import logging
import tracemalloc

import numpy as np
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.ply import PointCloud, write_ply
from mvs_pipeline.io.ply_records import cloud_dtype, read_layout
from mvs_pipeline.sampling import stage as sampling
from mvs_pipeline.sampling.memory_plan import CHUNK_BYTES, HEADROOM, min_streamed_budget, plan_memory, whole_bytes
from mvs_pipeline.sampling.ordered_output import pick_rows, write_in_fps_order
from mvs_pipeline.sampling.params import SamplingConfig
from mvs_pipeline.sampling.points.cloud_source import parts_source
from mvs_pipeline.sampling.points.device_cloud import take
from mvs_pipeline.sampling.sample_count import with_unsampled

from .test_sampling_stage import exact_fps, fused_cloud

CONFIGS = {
    "default": SamplingConfig(max_samples=300),
    "fixed_voxel_samples_only": SamplingConfig(max_samples=100, keep_unsampled=False, pre_pool_voxel_size=0.05),
    "xyz_only": SamplingConfig(max_samples=200, transfer_attributes=False, start_index=11),
    "exact": exact_fps(num_samples=250, start_index=5),
    "exact_keep_unsampled": dataclasses.replace(exact_fps(num_samples=120), keep_unsampled=True),
}


def plan_for(path, budget):
    layout = read_layout(path)
    return plan_memory(layout.count, layout.dtype.itemsize, len(layout.dtype.names), budget)


def budgets(path):
    """A budget that holds the records for the passes, and a smaller one that reads them per chunk."""
    layout = read_layout(path)
    n, record = layout.count, layout.dtype.itemsize
    resident, per_chunk = 3 * n * record, int(1.2 * n * record)
    assert plan_for(path, resident).resident and not plan_for(path, resident).whole
    assert not plan_for(path, per_chunk).resident and plan_for(path, per_chunk) is not None
    return {"resident": resident, "per_chunk": per_chunk}


@pytest.fixture(scope="module")
def fused20k(tmp_path_factory):
    path = tmp_path_factory.mktemp("fused") / "fused.ply"
    write_ply(path, fused_cloud(20000, seed=4))
    return path


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_budget_gives_the_same_files(fused20k, tmp_path, name, caplog):
    cfg = CONFIGS[name]
    whole = sampling.sample_fused_cloud(cfg, fused20k, tmp_path / "whole", backend="cpu")
    for mode, budget in budgets(fused20k).items():
        timings = {}
        with caplog.at_level(logging.INFO):
            got = sampling.sample_fused_cloud(cfg, fused20k, tmp_path / mode, backend="cpu", memory_budget=budget,
                                              timings=timings)
        assert "in chunks of" in caplog.text  # the streamed path ran
        if sampling.pools(cfg):
            assert "parts of at most" in caplog.text
        caplog.clear()
        assert set(got) == set(whole)
        for key in whole:
            assert got[key].read_bytes() == whole[key].read_bytes(), (mode, key)
        for step in ("read", "fps", "order", "write", "preview"):
            assert timings[f"{step}_seconds"] >= 0
        assert timings["written_points"] == timings.get("pooled_points", 20000) or not cfg.keep_unsampled


def test_preview_of_the_streamed_output(fused20k, tmp_path):
    """The preview of a streamed output shows the same points and bounds (its centroid is a float64
    sum in another order: equal to rounding)."""
    from mvs_pipeline.io.cloud_preview import read_cloud_preview

    cfg = CONFIGS["default"]
    a = sampling.sample_fused_cloud(cfg, fused20k, tmp_path / "a", backend="cpu")["samples"]
    b = sampling.sample_fused_cloud(cfg, fused20k, tmp_path / "b", backend="cpu",
                                    memory_budget=budgets(fused20k)["per_chunk"])["samples"]
    pa, pb = read_cloud_preview(a), read_cloud_preview(b)
    np.testing.assert_array_equal(pa["xyz"], pb["xyz"])
    np.testing.assert_array_equal(pa["rgb"], pb["rgb"])
    assert pa["points"] == pb["points"] and pa["bbox_min"] == pb["bbox_min"] and pa["bbox_max"] == pb["bbox_max"]
    np.testing.assert_allclose(pa["centroid"], pb["centroid"], rtol=1e-12)


def test_float64_cloud_in_parts(tmp_path):
    """A georeferenced (double) cloud: pooled on offsets from the centre, its means summed in float64;
    the parts give the whole pooling's file."""
    cloud = fused_cloud(12000, seed=2)
    cloud.xyz = cloud.xyz.astype(np.float64) + np.array([4.5e5, 5.2e6, 310.0])
    path = tmp_path / "geo.ply"
    write_ply(path, cloud)
    for cfg in (SamplingConfig(max_samples=150), SamplingConfig(max_samples=150, pre_pool_voxel_size=0.05)):
        whole = sampling.sample_fused_cloud(cfg, path, tmp_path / "w", backend="cpu", overwrite=True)
        for budget in budgets(path).values():
            got = sampling.sample_fused_cloud(cfg, path, tmp_path / "p", backend="cpu", overwrite=True,
                                              memory_budget=budget)
            assert got["samples"].read_bytes() == whole["samples"].read_bytes()


def test_dense_spots_and_one_huge_voxel(tmp_path, caplog):
    """Points piled into a few voxels: histogram bins over a part's size are split again (a finer
    histogram), and one voxel holding more than a part is pooled on its own: the same file."""
    rng = np.random.default_rng(5)
    base = fused_cloud(16000, seed=6)
    pile = np.repeat(base.xyz[:1], 6000, axis=0)  # one voxel of 6000 points
    spot = base.xyz[100] + rng.normal(0, 2e-3, (4000, 3)).astype(np.float32)
    idx = rng.permutation(26000)
    cloud = PointCloud(xyz=np.concatenate([base.xyz, pile, spot])[idx],
                       normals=np.concatenate([base.normals] * 3)[:26000][idx],
                       colors=np.concatenate([base.colors] * 3)[:26000][idx],
                       extra={"support": np.concatenate([base.extra["support"]] * 3)[:26000][idx]})
    path = tmp_path / "piled.ply"
    write_ply(path, cloud)
    cfg = SamplingConfig(max_samples=200, pre_pool_voxel_size=0.01)
    whole = sampling.sample_fused_cloud(cfg, path, tmp_path / "w", backend="cpu")
    budget = budgets(path)["per_chunk"]
    assert plan_for(path, budget).part_points < 6000  # the pile's voxel is over a part
    with caplog.at_level(logging.WARNING):
        got = sampling.sample_fused_cloud(cfg, path, tmp_path / "p", backend="cpu", memory_budget=budget)
    assert "one voxel holds" in caplog.text
    assert got["samples"].read_bytes() == whole["samples"].read_bytes()


def test_streamed_pooling_stays_within_its_budget(fused20k):
    """The plan's per-point costs hold for the array code: pooling in parts (the scan pass, the
    histogram and gathering passes, each part's pooling) allocates no more than the budget leaves
    beside the records held for the passes, apart from the pooled parts it keeps (NumPy's
    allocations, traced)."""
    from mvs_pipeline.sampling.points.cloud_scan import scan_cloud
    from mvs_pipeline.sampling.points.voxel_pool.frame import voxel_frame
    from mvs_pipeline.sampling.points.voxel_pool.streamed import pool_in_parts
    from mvs_pipeline.sampling.streamed import _source

    layout = read_layout(fused20k)
    for budget in budgets(fused20k).values():
        plan = plan_for(fused20k, budget)
        source = _source(fused20k, layout, plan, False)  # the held records, if any, are outside the trace
        held = layout.count * layout.dtype.itemsize if plan.resident else 0
        scan = scan_cloud(source, plan.chunk_rows)
        frame = voxel_frame(scan.lo, scan.hi, 0.02)
        args = (source, frame, scan.centre, plan.part_points, plan.chunk_rows, plan.bin_bits)
        pool_in_parts(*args)  # compiles the twins outside the measurement
        tracemalloc.start()
        try:
            scan_cloud(source, plan.chunk_rows)
            parts = pool_in_parts(*args)
            kept, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert len(parts) > 2
        assert peak - kept <= HEADROOM * budget - held, (peak - kept, budget, held)


def _parts_and_samples(n_parts=5, seed=9):
    """Pooled-like parts of uneven sizes (one empty) and samples that fill a whole block, touch the
    parts' edges and leave other blocks untouched."""
    rng = np.random.default_rng(seed)
    cloud = fused_cloud(3000, seed=seed)
    cuts = [0, 700, 700, 1500, 2999, 3000][:n_parts + 1]
    parts = [take(cloud, np.arange(a, b)) for a, b in zip(cuts[:-1], cuts[1:])]
    samples = np.concatenate([[2999, 0, 699, 1500], np.arange(100, 240), rng.choice(np.arange(1600, 2900), 300,
                                                                                    replace=False)])
    return cloud, parts, rng.permutation(samples).astype(np.int64)


@pytest.mark.parametrize("threads", [1, 3])
def test_write_in_fps_order_is_write_ply_of_the_rows(tmp_path, threads):
    """The blocks packed on worker threads, written in order, make write_ply's file of the rows in
    FPS order (then the others), with the columns kept or xyz alone; the totals are those rows'."""
    cloud, parts, samples = _parts_and_samples()
    source = parts_source(parts)
    for keep, xyz_only in ((True, False), (False, False), (True, True)):
        first = pick_rows(source, samples, 64, xyz_only=xyz_only)
        path = tmp_path / f"w{threads}{keep}{xyz_only}.ply"
        count, lo, hi, total = write_in_fps_order(path, source, first, samples, keep, 200, threads=threads)
        rows = with_unsampled(samples, len(cloud)) if keep else samples
        expect = take(PointCloud(xyz=cloud.xyz) if xyz_only else cloud, rows)
        write_ply(tmp_path / "ref.ply", expect)
        assert path.read_bytes() == (tmp_path / "ref.ply").read_bytes(), (keep, xyz_only)
        assert count == len(rows)
        np.testing.assert_array_equal(lo, expect.xyz.min(0))
        np.testing.assert_array_equal(hi, expect.xyz.max(0))
        np.testing.assert_allclose(total, expect.xyz.astype(np.float64).sum(0), rtol=1e-12)


def test_write_holds_at_most_a_chunk_of_records(tmp_path):
    """What the write allocates beyond the samples' rows it is given: blocks of at most chunk_rows
    records together (each packed, then stripped of the samples: 2 R + 1 bytes a row), within a
    chunk pass's allowance (memory_plan.CHUNK_BYTES), plus the sorted samples."""
    cloud = fused_cloud(60000, seed=3)
    parts = [take(cloud, np.arange(a, min(60000, a + 17000))) for a in range(0, 60000, 17000)]
    source = parts_source(parts)
    samples = np.random.default_rng(1).choice(60000, 5000, replace=False).astype(np.int64)
    first = pick_rows(source, samples, 4096, xyz_only=False)
    record = cloud_dtype(first).itemsize
    chunk_rows = 8000
    write_in_fps_order(tmp_path / "warm.ply", source, first, samples, True, chunk_rows, threads=3)
    tracemalloc.start()
    try:
        write_in_fps_order(tmp_path / "out.ply", source, first, samples, True, chunk_rows, threads=3)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak - kept <= chunk_rows * (2 * record + 1) + 8 * len(samples) + (1 << 16), (peak - kept, record)
    assert 2 * record + 1 <= record + CHUNK_BYTES


def test_plan_memory():
    n, record, fields = 1_000_000, 28, 10
    assert plan_memory(n, record, fields, None).whole
    assert plan_memory(n, record, fields, int(whole_bytes(n, record, fields) / HEADROOM) + 1).whole
    held = plan_memory(n, record, fields, 300 * n)
    assert not held.whole and held.resident and held.part_points < n and held.chunk_rows <= n
    chunked = plan_memory(n, record, fields, 60 * n)
    assert not chunked.resident and 1024 <= chunked.part_points < held.part_points
    assert plan_memory(n, record, fields, 100_000) is None
    least = min_streamed_budget(n, record, fields)
    assert plan_memory(n, record, fields, least - 1) is None and plan_memory(n, record, fields, least) is not None


def test_gpu_plan_follows_the_runs_budget(fused20k, monkeypatch, caplog):
    """The stage's choice on a GPU (resolve_backend and the free memory stubbed: no GPU here): the
    whole cloud where it fits, in chunks within the run's budget where not, the CPU (auto) or an
    error (cuda) where not even chunks fit."""
    from mvs_pipeline.errors import BackendUnavailable
    from mvs_pipeline.gpu import backend as gpu_backend
    from mvs_pipeline.sampling.points import validate

    layout = read_layout(fused20k)
    monkeypatch.setattr(gpu_backend, "resolve_backend", lambda _b: "cuda")
    monkeypatch.setattr(validate, "gpu_free_bytes", lambda: 10**12)
    assert sampling._plan("auto", fused20k, layout, None) == (True, plan_for(fused20k, None))
    monkeypatch.setattr(validate, "gpu_free_bytes", lambda: budgets(fused20k)["resident"])
    on_gpu, plan = sampling._plan("auto", fused20k, layout, None)
    assert on_gpu and not plan.whole and plan.resident
    monkeypatch.setattr(validate, "gpu_free_bytes", lambda: 50_000)
    with caplog.at_level(logging.WARNING):
        on_gpu, plan = sampling._plan("auto", fused20k, layout, None)
    assert not on_gpu and plan.whole and "in chunks needs about" in caplog.text
    with pytest.raises(BackendUnavailable):
        sampling._plan("cuda", fused20k, layout, None)


def test_budget_too_small(fused20k, tmp_path):
    with pytest.raises(MVSError, match=r"too small even in chunks \(it needs [0-9.]+ MiB\)"):
        sampling.sample_fused_cloud(SamplingConfig(), fused20k, tmp_path / "t", backend="cpu", memory_budget=50_000)


def test_non_finite_points_in_chunks(tmp_path):
    cloud = fused_cloud(20000, seed=1)
    cloud.xyz[[1234, 14321], 1] = [np.nan, np.inf]
    path = tmp_path / "bad.ply"
    write_ply(path, cloud)
    for budget in (None, budgets(path)["per_chunk"]):
        with pytest.raises(MVSError, match=r"2 point\(s\) have NaN or infinite coordinates \(first: index 1234\)"):
            sampling.sample_fused_cloud(exact_fps(num_samples=10), path, tmp_path / "b", backend="cpu",
                                        memory_budget=budget, overwrite=True)


# ---------------------------------------------------------------------------------------------
# CUDA
# ---------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_gpu_budget_gives_the_cpu_files(fused20k, tmp_path, name, cupy, caplog):
    """On the GPU, in chunks and parts (records held on the device, or read per chunk through
    pinned buffers), the stage writes the CPU's whole-cloud files."""
    cfg = CONFIGS[name]
    cpu = sampling.sample_fused_cloud(cfg, fused20k, tmp_path / "cpu", backend="cpu")
    for mode, budget in budgets(fused20k).items():
        with caplog.at_level(logging.INFO):
            got = sampling.sample_fused_cloud(cfg, fused20k, tmp_path / mode, backend="cuda", memory_budget=budget)
        assert "in chunks of" in caplog.text
        caplog.clear()
        for key in cpu:
            assert got[key].read_bytes() == cpu[key].read_bytes(), (mode, key)


@pytest.mark.gpu
def test_gpu_key_histogram_and_parts_match_numpy(cupy):
    """The passes' array code on CuPy (bincount of the keys, the parts' pooling) equals NumPy's."""
    from mvs_pipeline.sampling.points.cloud_source import parts_source
    from mvs_pipeline.sampling.points.device_cloud import to_device
    from mvs_pipeline.sampling.points.voxel_pool.frame import voxel_frame
    from mvs_pipeline.sampling.points.voxel_pool.streamed import key_histogram, pool_in_parts

    rng = np.random.default_rng(3)
    cloud = fused_cloud(50000, seed=8)
    cloud.xyz[:5000] = cloud.xyz[0] + rng.normal(0, 1e-3, (5000, 3)).astype(np.float32)  # a dense spot
    frame = voxel_frame(cloud.xyz.min(0), cloud.xyz.max(0), 0.01)
    host, dev = parts_source([cloud]), parts_source([to_device(cloud)])
    for shift in (0, 7, 20):
        np.testing.assert_array_equal(key_histogram(dev, frame, np.zeros(3), 0, frame.num_keys, shift, 7000),
                                      key_histogram(host, frame, np.zeros(3), 0, frame.num_keys, shift, 7000))
    a = pool_in_parts(host, frame, np.zeros(3), 4000, 7000)
    b = pool_in_parts(dev, frame, np.zeros(3), 4000, 7000)
    assert len(a) == len(b) > 2
    for pa, pb in zip(a, b):
        for name in ("xyz", "normals", "colors"):
            np.testing.assert_array_equal(getattr(pa, name), getattr(pb, name))
        for name in pa.extra:
            np.testing.assert_array_equal(pa.extra[name], pb.extra[name])
