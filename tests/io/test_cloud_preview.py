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


def test_preview_from_a_streamed_writers_totals_equals_the_one_read_back(tmp_path, monkeypatch):
    """Fusion streams its cloud in chunks and hands the preview the writer's running statistics;
    they must be the file's own (bbox exact, centroid to float64 rounding), including empty chunks.
    The chosen points are then read a window of the file at a time (here 64 records)."""
    from mvs_pipeline.io import ply_records
    from mvs_pipeline.io.fused_ply import FusedCloudWriter

    monkeypatch.setattr(ply_records, "PICK_WINDOW_BYTES", 64 * 28)

    rng = np.random.default_rng(9)
    ply, vis = tmp_path / "fused.ply", tmp_path / "fused.ply.vis"
    with FusedCloudWriter(ply, vis) as w:
        for p in (700, 0, 1300, 1):
            xyz = (rng.normal(size=(p, 3)) * 4 + [-250.0, 1e5, 7.0]).astype(np.float32)
            normal = np.tile(np.float32([0, 0, 1]), (p, 1))
            color = rng.integers(0, 256, (p, 3)).astype(np.uint8)
            w.append(xyz, normal, color, np.full(p, 2, np.uint8), np.tile(np.uint32([1, 0]), p))
        w.finish()
        totals = w.totals()
    assert totals[0] == 2001
    write_cloud_preview(ply, max_points=300)
    from_file = read_cloud_preview(ply)
    os.remove(preview_path(ply))
    write_cloud_preview(ply, max_points=300, totals=totals)
    from_totals = read_cloud_preview(ply)
    assert from_totals["points"] == from_file["points"] == 2001
    np.testing.assert_array_equal(from_totals["bbox_min"], from_file["bbox_min"])
    np.testing.assert_array_equal(from_totals["bbox_max"], from_file["bbox_max"])
    np.testing.assert_allclose(from_totals["centroid"], from_file["centroid"], rtol=1e-13)
    np.testing.assert_array_equal(from_totals["xyz"], from_file["xyz"])
    np.testing.assert_array_equal(from_totals["rgb"], from_file["rgb"])
    with pytest.raises(Exception, match="writer counted"):
        write_cloud_preview(ply, totals=(5, *totals[1:]))
