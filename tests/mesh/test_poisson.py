"""Screened Poisson (Open3D) of oriented clouds: a sampled sphere, trimming of the sheets Poisson
fills in, vertex colours, pooling of dense clouds, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.point_cloud import PointCloud
from mvs_pipeline.mesh.poisson import SCALE, capped_depth, choose_depth, octree_points, poisson_mesh
from mvs_pipeline.mesh.params import MeshConfig


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
    untrimmed, _ = poisson_mesh(cloud, trim_cells=1e6, trim_spacings=1e6)
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


def grid_plane(n: int, size: float = 1.0) -> np.ndarray:
    """n x n points on a size x size square in z = 0, at the centres of its n x n squares."""
    u = (np.arange(n) + 0.5) * (size / n)
    x, y = np.meshgrid(u, u)
    return np.stack([x.ravel(), y.ravel(), np.zeros(n * n)], axis=1)


def test_octree_points_count_the_pooling_voxels():
    xyz = grid_plane(400)                      # 2.5 mm apart; extent 0.9975 m
    extent = float(np.ptp(xyz, axis=0).max())
    counts = octree_points(xyz, [5, 6, 7, 8, 9])
    for d in (5, 6, 7):                        # half cells of 17 .. 4.3 mm: several points each
        voxel = SCALE * extent / 2 ** (d + 1)
        per_axis = len(np.unique(np.floor((xyz[:400, 0] - xyz[0, 0]) / voxel)))
        assert counts[d] == per_axis ** 2
    assert counts[8] == counts[9] == 400 * 400  # 2.1 and 1.1 mm: one point each
    assert counts[5] < counts[6] < counts[7] < counts[8]
    assert octree_points(xyz, [7]) == {7: counts[7]}   # the same alone as below a finer depth


def test_depth_cap_by_the_pooled_points():
    xyz = grid_plane(400)
    counts = octree_points(xyz, range(6, 11))
    assert capped_depth(xyz, 10, None) == (10, {})
    assert capped_depth(xyz, 10, 400 * 400) == (10, {})       # no more points than the cap: not counted
    assert capped_depth(xyz, 10, counts[7]) == (7, counts)    # 8..10: one voxel a point
    assert capped_depth(xyz, 10, counts[7] - 1)[0] == 6
    assert capped_depth(xyz, 10, 10)[0] == 6                  # never below MIN_DEPTH
    assert capped_depth(xyz, 5, 10)[0] == 5


def test_a_capped_depth_still_meshes_the_sphere():
    cloud = sphere_cloud(60000)                # 3.4 mm apart: the spacing rule's depth 8
    free, c_free = poisson_mesh(cloud)
    cap = octree_points(cloud.xyz, [7])[7]
    capped, c_cap = poisson_mesh(cloud, max_points=cap)
    assert c_free["mesh_poisson_depth"] == c_free["mesh_poisson_spacing_depth"] == 8
    assert c_free["mesh_points_solved"] == 60000
    assert c_cap["mesh_poisson_depth"] == 7 and c_cap["mesh_poisson_spacing_depth"] == 8
    assert c_cap["mesh_points_solved"] == c_cap["mesh_octree_points"] == cap < 60000   # pooled to the count
    r = np.linalg.norm(capped.vertices.astype(np.float64), axis=1)
    assert np.abs(r - 0.5).max() < 2 * c_cap["mesh_poisson_cell"]
    assert abs(capped.area() - np.pi) < 0.03 * np.pi
    assert capped.num_faces < 0.5 * free.num_faces
    _, c_fixed = poisson_mesh(cloud, depth=8, max_points=cap)   # an explicit depth is not capped
    assert c_fixed["mesh_poisson_depth"] == 8


def test_pycolmap_solver_gives_the_sphere_too():
    cloud = sphere_cloud(20000)
    mesh, counts = poisson_mesh(cloud, solver="colmap")
    r = np.linalg.norm(mesh.vertices.astype(np.float64), axis=1)
    assert counts["mesh_poisson_solver"] == "colmap"
    assert np.abs(r - 0.5).max() < 2 * counts["mesh_poisson_cell"]
    assert abs(mesh.area() - np.pi) < 0.03 * np.pi
    assert mesh.colors is not None


def test_the_trim_distance_is_the_farther_of_cells_and_spacings():
    """A coarse octree (a capped or explicit low depth) trims at trim_cells cells, a fine one over sparse points
    at trim_spacings point spacings: random points leave gaps of several spacings on covered surface."""
    cloud = sphere_cloud(20000)
    cells = MeshConfig().trim_cells   # the default (1 since session 34)
    coarse, c = poisson_mesh(cloud, depth=5, trim_cells=cells)
    assert cells * c["mesh_poisson_cell"] > 3 * c["mesh_point_spacing"]
    assert c["mesh_trim_distance"] == pytest.approx(cells * c["mesh_poisson_cell"], rel=1e-4)
    fine, f = poisson_mesh(cloud, depth=9, trim_cells=cells)
    assert 3 * f["mesh_point_spacing"] > cells * f["mesh_poisson_cell"]
    assert f["mesh_trim_distance"] == pytest.approx(3 * f["mesh_point_spacing"], rel=1e-4)
    for mesh in (coarse, fine):   # either way the covered sphere keeps its area
        assert abs(mesh.area() - np.pi) < 0.05 * np.pi
