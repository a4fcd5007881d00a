"""Cloud previews: a subsample with the whole cloud's exact statistics, remade when the cloud changes."""

from __future__ import annotations

import os

import numpy as np
import pytest

from mvs_pipeline.io.cloud_preview import preview_path, read_cloud_preview, write_cloud_preview
from mvs_pipeline.io.ply import PointCloud, write_ply


def test_preview_statistics_are_the_whole_clouds(tmp_path):
    rng = np.random.default_rng(5)
    xyz = (rng.normal(size=(5000, 3)) * [3, 1, 0.5] + [500_000.0, 4_000_000.0, 30.0]).astype(np.float32)
    colors = rng.integers(0, 256, (5000, 3)).astype(np.uint8)
    ply = tmp_path / "fused.ply"
    write_ply(ply, PointCloud(xyz=xyz, colors=colors))
    write_cloud_preview(ply, max_points=800)
    p = read_cloud_preview(ply)
    ref = xyz.astype(np.float64)
    assert p["points"] == 5000 and len(p["xyz"]) == 800
    np.testing.assert_array_equal(p["bbox_min"], ref.min(0))
    np.testing.assert_array_equal(p["bbox_max"], ref.max(0))
    np.testing.assert_allclose(p["centroid"], ref.mean(0), rtol=1e-12)
    # the sample is made of the cloud's own points (float32 offsets from the centre: ~1e-6 m here)
    # with their colours
    nearest = np.array([np.argmin(((ref - q) ** 2).sum(1)) for q in p["xyz"]])
    assert np.abs(ref[nearest] - p["xyz"]).max() < 1e-3
    assert len(set(nearest.tolist())) == 800
    np.testing.assert_array_equal(colors[nearest], p["rgb"])

def test_preview_is_remade_when_the_cloud_changes_and_kept_when_it_is_gone(tmp_path):
    ply = tmp_path / "fused_fps.ply"
    write_ply(ply, PointCloud(xyz=np.zeros((10, 3), np.float32)))
    assert read_cloud_preview(ply)["points"] == 10 and preview_path(ply).is_file()   # made on demand
    write_ply(ply, PointCloud(xyz=np.ones((25, 3), np.float32)))
    os.utime(ply, ns=(1, 1))  # a rewrite in the same clock tick is still seen (size and mtime)
    again = read_cloud_preview(ply)
    assert again["points"] == 25 and again["rgb"] is None and again["bbox_min"] == [1.0, 1.0, 1.0]
    ply.unlink()
    assert read_cloud_preview(ply)["points"] == 25
    assert read_cloud_preview(tmp_path / "never.ply") is None


def _preview_arrays(ply):
    with np.load(preview_path(ply)) as z:
        return {k: z[k] for k in z.files}


def _check_same_preview(a: dict, b: dict):
    assert set(a) == set(b)
    for key in a:
        if key == "centroid":  # float64 sums in another order
            np.testing.assert_allclose(a[key], b[key], rtol=1e-12)
        else:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_preview_from_the_writers_arrays_equals_the_one_read_back(tmp_path):
    rng = np.random.default_rng(6)
    xyz = (rng.normal(size=(3000, 3)) * [3, 1, 0.5] + [20.0, -4.0, 3.0]).astype(np.float32)
    for colors in (rng.integers(0, 256, (3000, 3)).astype(np.uint8), None):
        cloud = PointCloud(xyz=xyz, colors=colors)
        ply = tmp_path / "c.ply"
        write_ply(ply, cloud)
        write_cloud_preview(ply, max_points=700)
        from_file = _preview_arrays(ply)
        write_cloud_preview(ply, max_points=700, cloud=cloud)
        _check_same_preview(_preview_arrays(ply), from_file)
        assert len(from_file["xyz"]) == 700 and from_file["points"] == 3000



@pytest.mark.gpu
def test_gpu_preview_from_device_arrays(tmp_path, cupy):
    rng = np.random.default_rng(7)
    xyz = rng.normal(size=(250_000, 3)).astype(np.float32)
    colors = rng.integers(0, 256, (250_000, 3)).astype(np.uint8)
    ply = tmp_path / "c.ply"
    write_ply(ply, PointCloud(xyz=xyz, colors=colors))
    write_cloud_preview(ply)
    from_file = _preview_arrays(ply)
    write_cloud_preview(ply, cloud=PointCloud(xyz=cupy.asarray(xyz), colors=cupy.asarray(colors)))
    _check_same_preview(_preview_arrays(ply), from_file)
