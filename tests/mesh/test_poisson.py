"""Screened Poisson (Open3D) of oriented clouds: a sampled sphere, trimming of the sheets Poisson
fills in, vertex colours, pooling of dense clouds, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.point_cloud import PointCloud
from mvs_pipeline.mesh.poisson import choose_depth, poisson_mesh


def sphere_cloud(n: int, radius: float = 0.5, cap: float | None = None, seed: int = 0) -> PointCloud:
    """n points on a sphere (only z > cap * radius when cap is set), outward normals, colour by height."""
    rng = np.random.default_rng(seed)
    d = rng.normal(size=(4 * n, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    if cap is not None:
        d = d[d[:, 2] > cap]
    d = d[:n]
    grey = np.clip(128 + 200 * d[:, 2] * 0.5, 0, 255).astype(np.uint8)
    return PointCloud(xyz=(radius * d).astype(np.float32), normals=d.astype(np.float32),
                      colors=np.stack([grey, grey, np.full_like(grey, 30)], axis=1),
                      extra={"support": rng.integers(2, 6, len(d)).astype(np.uint8)})


def test_sampled_sphere_gives_the_sphere():
    cloud = sphere_cloud(20000)
    mesh, counts = poisson_mesh(cloud)
    r = np.linalg.norm(mesh.vertices.astype(np.float64), axis=1)
    cell = counts["mesh_poisson_cell"]
    assert np.abs(r - 0.5).max() < 2 * cell
    assert np.median(np.abs(r - 0.5)) < 0.5 * cell
    assert abs(mesh.area() - 4 * np.pi * 0.25) < 0.03 * 4 * np.pi * 0.25
    expect = np.clip(128 + 100 * mesh.vertices[:, 2] / 0.5, 0, 255)
    assert np.median(np.abs(mesh.colors[:, 0].astype(float) - expect)) < 8   # colours from the cloud
    assert np.all(np.abs(mesh.colors[:, 2].astype(int) - 30) <= 1)


def test_trimming_removes_the_filled_in_sheet_but_keeps_the_surface():
    cloud = sphere_cloud(15000, cap=0.0)   # the upper half only: Poisson extends it below the cut
    untrimmed, _ = poisson_mesh(cloud, trim_spacings=1e6)
    mesh, counts = poisson_mesh(cloud)
    v = mesh.vertices.astype(np.float64)
    assert untrimmed.vertices[:, 2].min() < -0.1 and untrimmed.area() > 1.25 * 2 * np.pi * 0.25
    assert v[:, 2].min() > -counts["mesh_trim_distance"]                 # nothing far below the cut
    assert 0.97 * 2 * np.pi * 0.25 < mesh.area() < 1.05 * 2 * np.pi * 0.25   # the half sphere stays
    assert np.abs(np.linalg.norm(v, axis=1) - 0.5)[v[:, 2] > 0.05].max() < 2 * counts["mesh_poisson_cell"]


def test_depth_follows_the_point_spacing():
    assert choose_depth(1.0, 0.01, 1.5) == 7      # 1.1 / 2^7 = 8.6 mm <= 15 mm
    assert choose_depth(1.0, 0.001, 1.5) == 10
    assert choose_depth(100.0, 1e-5, 1.5) == 12   # clamped
    assert choose_depth(1.0, 1.0, 1.5) == 6


def test_a_dense_cloud_is_pooled_first():
    cloud = sphere_cloud(60000)
    mesh, counts = poisson_mesh(cloud, depth=6)
    assert counts["mesh_points_solved"] < 0.7 * counts["mesh_points_in"]   # one point per half cell
    r = np.linalg.norm(mesh.vertices.astype(np.float64), axis=1)
    assert np.abs(r - 0.5).max() < 2 * counts["mesh_poisson_cell"]


def test_bad_clouds_are_one_clear_line():
    no_normals = sphere_cloud(1000)
    no_normals.normals = None
    with pytest.raises(MVSError, match="no normals"):
        poisson_mesh(no_normals)
    with pytest.raises(MVSError, match="empty"):
        poisson_mesh(PointCloud(xyz=np.zeros((0, 3), np.float32), normals=np.zeros((0, 3), np.float32)))
