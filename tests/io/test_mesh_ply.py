"""Mesh PLY files (our writer; Open3D and plyfile read them), uniform surface sampling, and the
evaluate stage's scoring of a mesh by its surface samples."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.mesh_ply import (
    TriangleMesh,
    face_count,
    read_mesh_ply,
    sample_surface,
    triangle_areas,
    write_mesh_ply,
)
from mvs_pipeline.io.ply import read_ply


def unit_square(colours: bool = True) -> TriangleMesh:
    v = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], np.float32)
    f = np.array([[0, 1, 2], [0, 2, 3]], np.int32)
    c = np.array([[255, 0, 0], [255, 0, 0], [0, 0, 255], [0, 0, 255]], np.uint8) if colours else None
    return TriangleMesh(v, f, c)


def test_round_trip_and_other_readers(tmp_path):
    import open3d as o3d  # noqa: PLC0415

    path = tmp_path / "mesh.ply"
    mesh = unit_square()
    write_mesh_ply(path, mesh)
    assert path.read_bytes().startswith(b"ply\nformat binary_little_endian 1.0\n")
    back = read_mesh_ply(path)
    np.testing.assert_array_equal(back.vertices, mesh.vertices)
    np.testing.assert_array_equal(back.faces, mesh.faces)
    np.testing.assert_array_equal(back.colors, mesh.colors)
    o3 = o3d.io.read_triangle_mesh(str(path))
    np.testing.assert_array_equal(np.asarray(o3.triangles), mesh.faces)
    np.testing.assert_allclose(np.asarray(o3.vertex_colors)[0], [1, 0, 0])
    assert face_count(path) == 2
    assert len(read_ply(path)) == 4   # the pipeline's cloud reader reads a mesh's vertices


def test_bad_faces_and_missing_files(tmp_path):
    bad = TriangleMesh(np.zeros((3, 3), np.float32), np.array([[0, 1, 3]], np.int32))
    with pytest.raises(ValueError):
        write_mesh_ply(tmp_path / "bad.ply", bad)
    with pytest.raises(MVSError, match="not found"):
        read_mesh_ply(tmp_path / "none.ply")


def test_triangle_areas_against_heron_and_given_areas_sample_the_same():
    rng = np.random.default_rng(3)
    v = rng.uniform(-2, 2, (50, 3)).astype(np.float32)
    f = rng.integers(0, 50, (400, 3)).astype(np.int32)
    a, b, c = (np.linalg.norm(v[f[:, i]].astype(np.float64) - v[f[:, j]], axis=1) for i, j in ((0, 1), (1, 2), (2, 0)))
    s = np.sort(np.stack([a, b, c]), axis=0)[::-1]          # Kahan's stable Heron: x >= y >= z
    x, y, z = s
    heron = 0.25 * np.sqrt(np.maximum((x + (y + z)) * (z - (x - y)) * (z + (x - y)) * (x + (y - z)), 0))
    areas = triangle_areas(v, f)
    np.testing.assert_allclose(areas, heron, rtol=1e-9, atol=1e-12)
    mesh = TriangleMesh(v, f)
    for got, want in zip(sample_surface(mesh, 0.05, areas=areas), sample_surface(mesh, 0.05)):
        assert got == want if isinstance(got, str) else np.array_equal(got, want)


def test_surface_samples_have_the_stated_density():
    mesh = unit_square()
    xyz, rgb, note = sample_surface(mesh, spacing=0.01)
    assert abs(len(xyz) - 10000) < 300                     # 1 / 0.01^2 per m^2 on 1 m^2
    assert np.all((xyz[:, :2] >= 0) & (xyz[:, :2] <= 1)) and np.all(xyz[:, 2] == 0)
    hist, _, _ = np.histogram2d(xyz[:, 0], xyz[:, 1], bins=4, range=[[0, 1], [0, 1]])
    assert hist.min() > 0.8 * hist.mean()                  # uniform across both triangles
    assert "10000 points per unit^2" in note or "1e+04 points per unit^2" in note
    assert "on its 1 unit^2 surface" in note and "mean spacing 0.01 units of the scene" in note
    # colours blend the vertices': red at y = 0, blue at y = 1
    low, high = xyz[:, 1] < 0.1, xyz[:, 1] > 0.9
    assert rgb[low, 0].mean() > 200 and rgb[high, 2].mean() > 200
    capped, _, note = sample_surface(mesh, spacing=0.001, max_points=5000)
    assert abs(len(capped) - 5000) < 200 and "5000 points per unit^2" in note


def test_evaluate_scores_a_mesh_by_its_surface(tmp_path):
    from mvs_pipeline.evaluation.eth3d import evaluate_eth3d, load_reconstruction  # noqa: PLC0415
    from mvs_pipeline.evaluation.mlp import Scan  # noqa: PLC0415

    # GT: a dense scan of the plane z = 0 over [0.2, 0.8]^2, scanner 1 m above
    g = np.linspace(0.2, 0.8, 121)
    gx, gy = np.meshgrid(g, g)
    pts = np.stack([gx.ravel() - 0.5, gy.ravel() - 0.5, np.full(gx.size, -1.0)], axis=1).astype(np.float32)
    pose = np.eye(4)
    pose[:3, 3] = [0.5, 0.5, 1.0]
    scans = [Scan(name="s", path=None, world_from_scan=pose, points=pts)]
    path = tmp_path / "mesh.ply"
    write_mesh_ply(path, unit_square())
    xyz, notes = load_reconstruction(path, mesh_spacing=0.005)
    assert abs(len(xyz) - 40000) < 800 and "sampled uniformly" in notes[0]
    res = evaluate_eth3d(xyz, scans, [0.02], backend="cpu")
    assert res["completeness"][0] > 0.99          # the mesh covers the scanned square
    assert res["accuracy"][0] > 0.99              # samples outside the scan are unobserved, not inaccurate
    # the vertices alone (a sparse "cloud") would not complete the scan
    verts = read_ply(path).xyz
    assert evaluate_eth3d(verts, scans, [0.02], backend="cpu")["completeness"][0] < 0.1


def test_triangles_are_read_as_fixed_records_and_polygons_are_fanned(tmp_path):
    import plyfile  # noqa: PLC0415

    from mvs_pipeline.io.mesh_ply import _read_triangles_fast  # noqa: PLC0415

    rng = np.random.default_rng(5)
    mesh = TriangleMesh(rng.uniform(-1, 1, (300, 3)).astype(np.float32),
                        rng.integers(0, 300, (5000, 3)).astype(np.int32))
    write_mesh_ply(tmp_path / "tri.ply", mesh)
    lists = _read_triangles_fast(tmp_path / "tri.ply")["face"].data["vertex_indices"]
    assert lists.dtype != object and lists.shape == (5000, 3)   # one memory map, not 5000 Python lists
    np.testing.assert_array_equal(read_mesh_ply(tmp_path / "tri.ply").faces, mesh.faces)
    # a triangle and a quad (plyfile's own writer): the count check fails, the slow read fans the quad
    faces = np.empty(2, dtype=[("vertex_indices", "O")])
    faces["vertex_indices"] = [np.array([0, 1, 2], np.int32), np.array([0, 2, 3, 4], np.int32)]
    verts = np.array([(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0, 2, 0)], dtype=[("x", "f4"), ("y", "f4"), ("z", "f4")])
    plyfile.PlyData([plyfile.PlyElement.describe(verts, "vertex"),
                     plyfile.PlyElement.describe(faces, "face")]).write(str(tmp_path / "quad.ply"))
    np.testing.assert_array_equal(read_mesh_ply(tmp_path / "quad.ply").faces, [[0, 1, 2], [0, 2, 3], [0, 3, 4]])
