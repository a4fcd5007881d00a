"""The mesh stage in the pipeline: opt-in stage list, fingerprint keys, outputs and bad input."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest

from mvs_pipeline import fingerprints
from mvs_pipeline.config.loader import load_config
from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.mesh_ply import face_count, read_mesh_ply
from mvs_pipeline.io.ply import write_ply
from mvs_pipeline.mesh.params import MeshConfig
from mvs_pipeline.mesh.stage import build_mesh
from mvs_pipeline.pipeline import parse_stages

from .test_poisson import sphere_cloud


def test_mesh_is_opt_in():
    assert "mesh" not in parse_stages(None)
    assert parse_stages(None, optional=("mesh",))[-2:] == ["mesh", "evaluate"]
    assert parse_stages("fusion,mesh") == ["fusion", "mesh"]


def test_a_mesh_key_changes_the_mesh_chain_only(tmp_path):
    def chains(cfg):
        ctx = SimpleNamespace(cfg=cfg, out_dir=tmp_path, backend="cpu", gt=None)
        return {s: fingerprints.stage_chain(s, ctx) for s in ("sampling", "mesh", "evaluate")}

    cfg = load_config(None, ["views.num_neighbors=4", "depth.coarsest_max_size=120", "depth.filter_median=false",
                             "fusion.consume_pixels=false", "mesh.closed=false", "fusion.max_normal_angle=10",
                             "fusion.weak_plane_tolerance=0.03", "fusion.weak_plane_consensus=false"])   # the `auto` keys resolved
    a = chains(cfg)
    b = chains(dataclasses.replace(cfg, mesh=dataclasses.replace(cfg.mesh, trim_spacings=5.0)))
    assert a["sampling"] == b["sampling"] and a["evaluate"] == b["evaluate"]
    assert a["mesh"] != b["mesh"]
    assert "mesh.trim_spacings 3.0 -> 5.0" in fingerprints.describe_changes(a["mesh"], b["mesh"], "mesh")
    assert fingerprints.UPSTREAM["mesh"] == "fusion"


def test_poisson_stage_writes_mesh_record_and_preview(tmp_path):
    write_ply(tmp_path / "fused.ply", sphere_cloud(8000))
    record = build_mesh(MeshConfig(), tmp_path)
    assert (tmp_path / "mesh.ply").is_file() and face_count(tmp_path / "mesh.ply") == record["faces"] > 1000
    assert json.loads((tmp_path / "mesh.json").read_text())["method"] == "poisson"
    assert (tmp_path / "previews" / "mesh.npz").is_file()
    mesh = read_mesh_ply(tmp_path / "mesh.ply")
    assert mesh.colors is not None and abs(mesh.area() - np.pi) < 0.05 * np.pi
    # the record's area is the mesh's, in the scene's units squared (no unit in the key: DTU's are mm)
    assert abs(json.loads((tmp_path / "mesh.json").read_text())["area"] - mesh.area()) < 1e-5
    stamp = (tmp_path / "mesh.ply").stat().st_mtime_ns
    build_mesh(MeshConfig(), tmp_path)   # current: skipped
    assert (tmp_path / "mesh.ply").stat().st_mtime_ns == stamp


def test_bad_inputs_are_one_line(tmp_path):
    with pytest.raises(MVSError, match="fused.ply not found"):
        build_mesh(MeshConfig(), tmp_path)
    cloud = sphere_cloud(100)
    cloud.normals = None
    write_ply(tmp_path / "fused.ply", cloud)
    with pytest.raises(MVSError, match="no normals"):
        build_mesh(MeshConfig(), tmp_path)
    scene = SimpleNamespace(views=[])
    with pytest.raises(MVSError, match="no depth maps"):
        build_mesh(MeshConfig(method="tsdf"), tmp_path, scene=scene)


def test_preview_points_lie_on_the_surface_spread_by_area(tmp_path):
    """The preview draws its points by area: on two squares of 1 and 3 m^2 a quarter land on the first, all on
    the squares' planes, colours blended from the vertices'."""
    from mvs_pipeline.io.cloud_preview import PREVIEW_POINTS, read_cloud_preview
    from mvs_pipeline.io.mesh_ply import TriangleMesh, triangle_areas, write_mesh_ply
    from mvs_pipeline.mesh.stage import _write_preview

    small = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], np.float32)
    big = small * np.float32(np.sqrt(3)) + np.float32([5, 0, 1])
    faces = np.array([[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 7]], np.int32)
    colors = np.array([[200, 0, 0]] * 4 + [[0, 0, 100]] * 4, np.uint8)
    mesh = TriangleMesh(np.concatenate([small, big]), faces, colors)
    areas = triangle_areas(mesh.vertices, mesh.faces)
    np.testing.assert_allclose(areas, [0.5, 0.5, 1.5, 1.5], rtol=1e-6)
    write_mesh_ply(tmp_path / "mesh.ply", mesh)
    _write_preview(tmp_path / "mesh.ply", mesh, areas)
    preview = read_cloud_preview(tmp_path / "mesh.ply")
    xyz, rgb = preview["xyz"], preview["rgb"]
    on_small = xyz[:, 2] == 0
    assert len(xyz) == PREVIEW_POINTS
    assert np.all(on_small | (np.abs(xyz[:, 2] - 1) < 1e-6))
    assert np.all((xyz[on_small, :2] >= 0) & (xyz[on_small, :2] <= 1))
    assert abs(on_small.mean() - 0.25) < 0.01
    assert np.all(rgb[on_small] == [200, 0, 0]) and np.all(rgb[~on_small] == [0, 0, 100])


def test_triangle_areas_take_float32_int32_as_float64_int64():
    from mvs_pipeline.io.mesh_ply import triangle_areas

    rng = np.random.default_rng(5)
    v = rng.uniform(-3, 3, (300, 3)).astype(np.float32)
    f = rng.integers(0, 300, (2000, 3))
    np.testing.assert_array_equal(triangle_areas(v, f.astype(np.int32)), triangle_areas(v.astype(np.float64), f))
    assert triangle_areas(v, np.zeros((0, 3), np.int32)).shape == (0,)


def test_silhouettes_enter_the_mesh_chain_with_their_masks(tmp_path):
    """fusion.mask_silhouettes carves the mesh (mesh/silhouette_carve.py): switching it, or editing a mask,
    redoes the mesh; a Poisson mesh without silhouettes does not read the masks."""
    masks = tmp_path / "masks"
    masks.mkdir()
    (masks / "a.png.png").write_bytes(b"x")
    cfg = load_config(None, ["views.num_neighbors=4", "depth.coarsest_max_size=120", "depth.filter_median=false",
                             "fusion.consume_pixels=false", "mesh.closed=false", f"fusion.mask_dir={masks}",
                             "fusion.max_normal_angle=10", "fusion.weak_plane_tolerance=0.03",
                             "fusion.weak_plane_consensus=false"])

    def mesh_chain(silhouettes):
        c = dataclasses.replace(cfg, fusion=dataclasses.replace(cfg.fusion, mask_silhouettes=silhouettes))
        return fingerprints.stage_chain("mesh", SimpleNamespace(cfg=c, out_dir=tmp_path, backend="cpu", gt=None))

    plain, carved = mesh_chain(False), mesh_chain(True)
    assert plain != carved
    assert "masks" not in json.dumps(plain["mesh"]) and "masks" in json.dumps(carved["mesh"])
    (masks / "a.png.png").write_bytes(b"xy")
    assert mesh_chain(True) != carved and mesh_chain(False)["mesh"] == plain["mesh"]
