"""The `sampling` stage and the fps / interpolate / voxelize / dsm subcommands."""

from __future__ import annotations

import dataclasses
import json
import logging

import numpy as np
import plyfile
import pytest

from mvs_pipeline.cli import main as cli_main
from mvs_pipeline.config.loader import load_config
from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.ply import PointCloud, read_ply, write_ply
from mvs_pipeline.sampling import stage as sampling
from mvs_pipeline.sampling.params import SamplingConfig
from mvs_pipeline.sampling.points.fps.cpu import fps_reference


def exact_fps(**kw) -> SamplingConfig:
    """The stage as it was before the scalable default: exact FPS of all fused points, only the
    samples written, no cap (what the tests of FPS order, indices and attributes check)."""
    return SamplingConfig(**{"pre_pool_spacing": None, "max_samples": None, "keep_unsampled": False, **kw})


def fused_cloud(n: int = 4000, seed: int = 0) -> PointCloud:
    """A fused.ply look-alike: a wavy surface with normals, colours and a uchar support channel."""
    rng = np.random.default_rng(seed)
    xy = rng.random((n, 2)) * 4
    z = 0.2 * np.sin(2 * xy[:, 0]) + 0.1 * xy[:, 1]
    xyz = np.c_[xy, z].astype(np.float32)
    normals = np.c_[-0.4 * np.cos(2 * xy[:, 0]), np.full(n, -0.1), np.ones(n)]
    normals = (normals / np.linalg.norm(normals, axis=1, keepdims=True)).astype(np.float32)
    colors = (rng.random((n, 3)) * 255).astype(np.uint8)
    support = rng.integers(3, 12, n).astype(np.uint8)
    return PointCloud(xyz=xyz, normals=normals, colors=colors, extra={"support": support})


@pytest.fixture
def fused(tmp_path):
    path = tmp_path / "fused.ply"
    cloud = fused_cloud()
    write_ply(path, cloud)
    return path, cloud


def ply_layout(path):
    v = plyfile.PlyData.read(str(path))["vertex"].data
    return [(name, v.dtype[name].str) for name in v.dtype.names]


def test_stage_samples_in_fps_order_with_same_layout(fused, tmp_path):
    path, cloud = fused
    out = tmp_path / "out"
    paths = sampling.sample_fused_cloud(exact_fps(num_samples=300, start_index=5), path, out, backend="cpu")
    assert set(paths) == {"samples", "indices"}
    assert ply_layout(paths["samples"]) == ply_layout(path)
    ref = fps_reference(cloud.xyz, 300, 5)[0]
    np.testing.assert_array_equal(np.load(paths["indices"]), ref)
    got = read_ply(paths["samples"])
    np.testing.assert_array_equal(got.xyz, cloud.xyz[ref])
    np.testing.assert_array_equal(got.normals, cloud.normals[ref])
    np.testing.assert_array_equal(got.colors, cloud.colors[ref])
    np.testing.assert_array_equal(got.extra["support"], cloud.extra["support"][ref])


def test_stage_skips_and_overwrites(fused, tmp_path):
    path, _ = fused
    out = tmp_path / "out"
    cfg = exact_fps(ratio=0.05)
    paths = sampling.sample_fused_cloud(cfg, path, out, backend="cpu")
    assert len(read_ply(paths["samples"])) == 200
    stamp = paths["samples"].stat().st_mtime_ns
    sampling.sample_fused_cloud(dataclasses.replace(cfg, ratio=0.1), path, out, backend="cpu")  # outputs exist: skipped
    assert paths["samples"].stat().st_mtime_ns == stamp
    sampling.sample_fused_cloud(dataclasses.replace(cfg, ratio=0.1), path, out, overwrite=True, backend="cpu")
    assert len(read_ply(paths["samples"])) == 400


def test_stage_more_samples_than_points_keeps_all(fused, tmp_path, caplog):
    path, cloud = fused
    with caplog.at_level(logging.WARNING):
        paths = sampling.sample_fused_cloud(exact_fps(num_samples=10**6), path, tmp_path / "o", backend="cpu")
    assert "keeping all" in caplog.text
    idx = np.load(paths["indices"])
    np.testing.assert_array_equal(np.sort(idx), np.arange(len(cloud)))


def test_stage_pre_pooling_and_attribute_transfer(fused, tmp_path):
    path, cloud = fused
    cfg = exact_fps(num_samples=150, pre_pool_voxel_size=0.2)
    paths = sampling.sample_fused_cloud(cfg, path, tmp_path / "pooled", backend="cpu")
    assert "indices" not in paths
    got = read_ply(paths["samples"])
    assert len(got) == 150
    assert set(got.extra) == {"support", "voxel_count"} and got.extra["support"].dtype == np.uint8
    assert got.extra["voxel_count"].min() >= 1
    np.testing.assert_allclose(np.linalg.norm(got.normals, axis=1), 1, atol=1e-5)
    # Samples are voxel centroids: each lies within its voxel's extent of some fused point.
    from scipy.spatial import cKDTree

    d, _ = cKDTree(cloud.xyz).query(got.xyz)
    assert d.max() < 0.2 * np.sqrt(3)
    bare = sampling.sample_fused_cloud(dataclasses.replace(cfg, transfer_attributes=False), path, tmp_path / "bare", backend="cpu")
    plain = read_ply(bare["samples"])
    assert plain.normals is None and plain.colors is None and not plain.extra
    np.testing.assert_array_equal(plain.xyz, got.xyz)


def test_stage_dsm_outputs(fused, tmp_path):
    path, _ = fused
    cfg = exact_fps(num_samples=100, dsm=True, dsm_cell_size=0.1)
    paths = sampling.sample_fused_cloud(cfg, path, tmp_path / "d", backend="cpu")
    assert {"dsm", "dsm_json", "ortho", "hillshade"} <= set(paths)
    meta = json.loads(paths["dsm_json"].read_text())
    assert meta["cell_size"] == 0.1 and meta["reduce"] == "max" and meta["width"] == 40


def test_stage_accepts_pipeline_config(fused, tmp_path):
    path, _ = fused
    cfg = load_config(None, ["backend=cpu", "sampling.num_samples=50", "sampling.keep_unsampled=false",
                             "sampling.pre_pool_spacing=null"])
    paths = sampling.sample_fused_cloud(cfg, path, tmp_path / "p")
    assert len(read_ply(paths["samples"])) == 50


def test_stage_bad_input(tmp_path, fused):
    empty = tmp_path / "empty.ply"
    write_ply(empty, PointCloud(xyz=np.zeros((0, 3), np.float32)))
    with pytest.raises(MVSError, match="no points"):
        sampling.sample_fused_cloud(exact_fps(), empty, tmp_path / "e", backend="cpu")
    with pytest.raises(MVSError, match="start_index"):
        sampling.sample_fused_cloud(exact_fps(start_index=4000), fused[0], tmp_path / "s", backend="cpu")
    bad = tmp_path / "nan.ply"
    xyz = np.zeros((5, 3), np.float32)
    xyz[2, 1] = np.nan
    write_ply(bad, PointCloud(xyz=xyz))
    with pytest.raises(MVSError, match="NaN"):
        sampling.sample_fused_cloud(exact_fps(num_samples=2), bad, tmp_path / "n", backend="cpu")


# ---------------------------------------------------------------------------------------------
# Subcommands
# ---------------------------------------------------------------------------------------------

def test_cli_fps(fused, tmp_path, capsys):
    path, cloud = fused
    out, idx_path = tmp_path / "s.ply", tmp_path / "s.npy"
    assert cli_main(["fps", str(path), "-n", "64", "-o", str(out), "--start-index", "9", "--indices",
                     str(idx_path), "--backend", "cpu"]) == 0
    ref = fps_reference(cloud.xyz, 64, 9)[0]
    np.testing.assert_array_equal(np.load(idx_path), ref)
    np.testing.assert_array_equal(read_ply(out).xyz, cloud.xyz[ref])
    assert ply_layout(out) == ply_layout(path)
    assert cli_main(["fps", str(path), "-n", "5000", "-o", str(out), "--backend", "cpu"]) == 2
    assert "exceeds" in capsys.readouterr().err
    assert cli_main(["fps", str(path), "--ratio", "0", "-o", str(out), "--backend", "cpu"]) == 2


def test_cli_interpolate_voxelize_dsm(fused, tmp_path):
    path, cloud = fused
    sample = tmp_path / "sample.ply"
    assert cli_main(["fps", str(path), "-n", "800", "-o", str(sample), "--backend", "cpu"]) == 0
    bare = tmp_path / "bare.ply"
    write_ply(bare, PointCloud(xyz=cloud.xyz))
    back = tmp_path / "back.ply"
    assert cli_main(["interpolate", str(sample), str(bare), "-o", str(back), "--attributes", "normals,support",
                     "--backend", "cpu"]) == 0
    moved = read_ply(back)
    assert moved.colors is None and moved.extra["support"].dtype == np.uint8
    cos = (moved.normals * cloud.normals).sum(1)
    assert np.median(cos) > 0.995
    vox = tmp_path / "vox.ply"
    assert cli_main(["voxelize", str(path), "--voxel-size", "0.5", "-o", str(vox), "--backend", "cpu"]) == 0
    assert read_ply(vox).extra["voxel_count"].sum() == len(cloud)
    assert cli_main(["dsm", str(path), "-o", str(tmp_path / "r" / "site.tif"), "--cell-size", "0.2",
                     "--backend", "cpu"]) == 0
    for name in ("site.tif", "site.json", "site_ortho.png", "site_hillshade.png"):
        assert (tmp_path / "r" / name).is_file()


@pytest.mark.gpu
def test_gpu_stage_reads_onto_the_device(fused, tmp_path, cupy, monkeypatch):
    """On the GPU the stage never builds a host copy of fused.ply (read_ply is not called) and its
    steps report their seconds."""
    path, _ = fused

    def host_read(*_args, **_kw):
        raise AssertionError("the GPU path read fused.ply into host arrays")

    monkeypatch.setattr(sampling, "read_ply", host_read)
    timings = {}
    paths = sampling.sample_fused_cloud(SamplingConfig(max_samples=50), path, tmp_path / "dev", backend="cuda",
                                        timings=timings)
    assert timings["num_samples"] == 50 and timings["written_points"] == timings["pooled_points"]
    monkeypatch.undo()
    cpu = sampling.sample_fused_cloud(SamplingConfig(max_samples=50), path, tmp_path / "cpu", backend="cpu")
    assert paths["samples"].read_bytes() == cpu["samples"].read_bytes()


@pytest.mark.gpu
def test_gpu_stage_matches_cpu(fused, tmp_path, cupy):
    path, _ = fused
    for cfg in (exact_fps(num_samples=700, dsm=True, dsm_cell_size=0.1),
                exact_fps(num_samples=300, pre_pool_voxel_size=0.1),
                SamplingConfig(ratio=0.5, max_samples=200, pre_pool_spacing=3.0, keep_unsampled=True),
                SamplingConfig(max_samples=100),  # the default, a smaller prefix
                SamplingConfig(transfer_attributes=False)):
        gpu = sampling.sample_fused_cloud(cfg, path, tmp_path / "gpu", overwrite=True, backend="cuda")
        cpu = sampling.sample_fused_cloud(cfg, path, tmp_path / "cpu", overwrite=True, backend="cpu")
        assert set(gpu) == set(cpu)
        assert gpu["samples"].read_bytes() == cpu["samples"].read_bytes()  # same file, byte for byte
        a, b = read_ply(gpu["samples"]), read_ply(cpu["samples"])
        np.testing.assert_array_equal(a.xyz, b.xyz)
        np.testing.assert_array_equal(a.normals, b.normals)
        np.testing.assert_array_equal(a.colors, b.colors)
        for name in b.extra:
            np.testing.assert_array_equal(a.extra[name], b.extra[name])
        if "dsm" in gpu:
            from mvs_pipeline.sampling.points.dsm import read_dsm

            np.testing.assert_array_equal(read_dsm(gpu["dsm"]), read_dsm(cpu["dsm"]))


# ---------------------------------------------------------------------------------------------
# Sample cap and pre-pooling at the cloud's own spacing
# ---------------------------------------------------------------------------------------------

def test_sample_cap_bounds_ratio_only():
    cfg = SamplingConfig(ratio=0.5, max_samples=300, pre_pool_spacing=None)
    assert sampling.resolve_num_samples(cfg, 4000) == 300       # 2000 wanted, capped
    assert sampling.resolve_num_samples(cfg, 400) == 200        # under the cap: the ratio
    assert sampling.resolve_num_samples(dataclasses.replace(cfg, max_samples=None), 4000) == 2000
    assert sampling.resolve_num_samples(dataclasses.replace(cfg, num_samples=1000), 4000) == 1000  # explicit wins


def test_stage_cap_keeps_the_exact_fps_prefix(fused, tmp_path):
    path, cloud = fused
    cfg = SamplingConfig(ratio=0.5, max_samples=250, pre_pool_voxel_size=None, pre_pool_spacing=None, start_index=3,
                         keep_unsampled=False)
    paths = sampling.sample_fused_cloud(cfg, path, tmp_path / "cap", backend="cpu")
    np.testing.assert_array_equal(np.load(paths["indices"]), fps_reference(cloud.xyz, 250, 3)[0])
    assert len(read_ply(paths["samples"])) == 250


def test_stage_pools_at_a_multiple_of_the_point_spacing(fused, tmp_path):
    from mvs_pipeline.sampling.points.spacing import estimate_spacing
    from mvs_pipeline.sampling.points.voxel_pool.ops import voxel_downsample

    path, cloud = fused
    cfg = SamplingConfig(ratio=0.25, max_samples=None, pre_pool_voxel_size=None, pre_pool_spacing=3.0,
                         keep_unsampled=False)
    paths = sampling.sample_fused_cloud(cfg, path, tmp_path / "sp", backend="cpu")
    assert "indices" not in paths
    pooled = voxel_downsample(cloud, 3.0 * estimate_spacing(cloud.xyz), backend="cpu")
    assert len(pooled) < 0.7 * len(cloud)  # the spacing is the fused points', so pooling merges some
    got = read_ply(paths["samples"])
    assert len(got) == round(0.25 * len(pooled))
    order = fps_reference(pooled.xyz, len(got), 0)[0]
    np.testing.assert_array_equal(got.xyz, pooled.xyz[order])
    # an explicit voxel size wins over the spacing multiple
    fixed = sampling.sample_fused_cloud(dataclasses.replace(cfg, pre_pool_voxel_size=0.2), path, tmp_path / "fx",
                                        backend="cpu")
    assert len(read_ply(fixed["samples"])) == round(0.25 * len(voxel_downsample(cloud, 0.2, backend="cpu")))


def test_stage_keeps_unsampled_points_after_the_fps_prefix(fused, tmp_path):
    path, cloud = fused
    cfg = SamplingConfig(ratio=0.5, max_samples=100, keep_unsampled=True, pre_pool_voxel_size=None,
                         pre_pool_spacing=None, start_index=7)
    paths = sampling.sample_fused_cloud(cfg, path, tmp_path / "ku", backend="cpu")
    idx = np.load(paths["indices"])
    ref = fps_reference(cloud.xyz, 100, 7)[0]
    np.testing.assert_array_equal(idx[:100], ref)
    rest = np.setdiff1d(np.arange(len(cloud)), ref)
    np.testing.assert_array_equal(idx[100:], rest)  # the others, in fused.ply's order
    got = read_ply(paths["samples"])
    np.testing.assert_array_equal(got.xyz, cloud.xyz[idx])
    np.testing.assert_array_equal(got.extra["support"], cloud.extra["support"][idx])
    # pooled: the file holds every voxel once, the FPS prefix first
    from mvs_pipeline.sampling.points.voxel_pool.ops import voxel_downsample

    pooled_cfg = dataclasses.replace(cfg, pre_pool_voxel_size=0.15)
    got = read_ply(sampling.sample_fused_cloud(pooled_cfg, path, tmp_path / "kp", backend="cpu")["samples"])
    pooled = voxel_downsample(cloud, 0.15, backend="cpu")
    order = fps_reference(pooled.xyz, 100, 7)[0]
    np.testing.assert_array_equal(got.xyz[:100], pooled.xyz[order])
    np.testing.assert_array_equal(got.xyz[100:], np.delete(pooled.xyz, order, axis=0))
    np.testing.assert_array_equal(np.sort(got.extra["voxel_count"]), np.sort(pooled.extra["voxel_count"]))


def test_default_writes_the_pooled_cloud_with_an_fps_prefix(fused, tmp_path):
    """The default: pool at 2x the estimated spacing, FPS orders min(ratio * pooled, max_samples)
    points first, every pooled point is written once with its voxel's mean attributes."""
    from mvs_pipeline.sampling.points.spacing import estimate_spacing
    from mvs_pipeline.sampling.points.voxel_pool.ops import voxel_downsample

    path, cloud = fused
    cfg = SamplingConfig()
    assert (cfg.pre_pool_spacing, cfg.keep_unsampled, cfg.max_samples) == (2.0, True, 200_000)
    yaml_cfg = load_config(None, []).sampling
    assert (yaml_cfg.pre_pool_spacing, yaml_cfg.keep_unsampled, yaml_cfg.max_samples) == (2.0, True, 200_000)
    paths = sampling.sample_fused_cloud(dataclasses.replace(cfg, max_samples=40), path, tmp_path / "d", backend="cpu")
    assert set(paths) == {"samples"}
    got = read_ply(paths["samples"])
    pooled = voxel_downsample(cloud, 2.0 * estimate_spacing(cloud.xyz), backend="cpu")
    assert len(got) == len(pooled) and 40 < 0.1 * len(pooled)
    order = fps_reference(pooled.xyz, 40, 0)[0]
    np.testing.assert_array_equal(got.xyz[:40], pooled.xyz[order])
    np.testing.assert_array_equal(np.sort(got.xyz.view("V12").ravel()), np.sort(pooled.xyz.view("V12").ravel()))
    # the written points are the pooled ones with their attributes, in FPS-then-voxel order
    full = sampling.with_unsampled(order, len(pooled))
    for name in ("xyz", "normals", "colors"):
        np.testing.assert_array_equal(getattr(got, name), getattr(pooled, name)[full])
    for name in ("support", "voxel_count"):
        np.testing.assert_array_equal(got.extra[name], pooled.extra[name][full])
    # support is each voxel's maximum: at least its mean, and above it in some multi-point voxel
    voxel = 2.0 * estimate_spacing(cloud.xyz)
    keys = np.floor((cloud.xyz.astype(np.float64) - cloud.xyz.min(0)) * (1.0 / voxel)).astype(np.int64)
    _, inv = np.unique(keys[:, 0] + 10**6 * (keys[:, 1] + 10**6 * keys[:, 2]), return_inverse=True)
    top = np.zeros(inv.max() + 1, np.uint8)
    np.maximum.at(top, inv, cloud.extra["support"])
    np.testing.assert_array_equal(pooled.extra["support"], top)


def test_stage_reports_step_timings(fused, tmp_path):
    path, _ = fused
    timings = {}
    sampling.sample_fused_cloud(SamplingConfig(), path, tmp_path / "t", backend="cpu", timings=timings)
    for step in ("read", "spacing", "pooling", "fps", "order", "write", "preview"):
        assert 0 <= timings[f"{step}_seconds"] < 60, step
    assert timings["input_points"] == 4000 and 0 < timings["pooled_points"] < 4000
    assert timings["written_points"] == timings["pooled_points"]


@pytest.mark.parametrize("requested,resolved,expected", [
    ("auto", "cuda", "auto"),   # may still fall back to the CPU when the cloud does not fit the GPU
    ("auto", "cpu", "cpu"),
    ("cuda", "cuda", "cuda"),   # an explicit GPU request fails with a clear error instead
    ("cpu", "cpu", "cpu"),
])
def test_pipeline_run_keeps_auto_for_the_memory_fallback(requested, resolved, expected):
    assert sampling.stage_backend(requested, resolved) == expected


def test_memory_fallback_message_names_the_headroom(monkeypatch, caplog):
    from mvs_pipeline.sampling.points import validate

    monkeypatch.setattr(validate, "gpu_free_bytes", lambda: 10 * 2**30)
    with caplog.at_level(logging.WARNING):
        assert validate.gpu_memory_fallback("sampling x.ply", int(9.5 * 2**30), "auto") == "cpu"
    assert "needs about 9.50 GiB of GPU memory, more than 90 % of the 10.00 GiB free" in caplog.text
    assert validate.gpu_memory_fallback("sampling x.ply", 8 * 2**30, "auto") == "cuda"
