"""The mesh inside the object's silhouettes (mesh/silhouette_carve.py, fusion.mask_silhouettes): the faces
kept are exactly those whose three vertices a point-by-point projection finds inside every mask that sees
them, and the stage carves the sphere's Poisson mesh down to the half its mask leaves."""

from __future__ import annotations

import json
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from mvs_pipeline.io.mesh_ply import TriangleMesh, read_mesh_ply
from mvs_pipeline.io.ply import write_ply
from mvs_pipeline.mesh.params import MeshConfig
from mvs_pipeline.mesh.silhouette_carve import carve_to_silhouettes
from mvs_pipeline.mesh.stage import build_mesh
from mvs_pipeline.scene.scene import View
from mvs_pipeline.synth.camera import look_at
from tests.fusion.fusion_scene import intrinsics
from tests.fusion.test_fusion_silhouettes import _reference, _views

from .test_poisson import sphere_cloud


def test_carve_keeps_the_faces_whose_vertices_a_loop_finds_inside(tmp_path):
    views = _views()
    rng = np.random.default_rng(5)
    masks = []
    for k, view in enumerate(views):
        mask = np.full((view.height, view.width), 255, np.uint8)
        if k < 2:   # view 2 has no mask file: it constrains nothing
            mask[:, : view.width // 3 + 4 * k] = 0
            mask[rng.random(mask.shape) < 0.05] = 0
            cv2.imwrite(str(tmp_path / f"{view.name}.png"), mask)
        masks.append(mask if k < 2 else None)
    verts = rng.normal(0.0, 0.6, (2000, 3)).astype(np.float32)
    faces = rng.integers(0, len(verts), (5000, 3)).astype(np.int32)
    colors = rng.integers(0, 256, (len(verts), 3)).astype(np.uint8)
    carved, counts = carve_to_silhouettes(TriangleMesh(verts, faces, colors), SimpleNamespace(views=views), tmp_path)
    inside = _reference(views, masks, verts)
    expected = faces[inside[faces].all(axis=1)]
    assert 0.1 < len(expected) / len(faces) < 0.9   # the masks cut a real share, not all or none
    assert counts == {"mesh_silhouette_views": 2, "mesh_silhouette_dropped_faces": len(faces) - len(expected)}
    np.testing.assert_array_equal(carved.vertices[carved.faces], verts[expected])
    np.testing.assert_array_equal(carved.colors[carved.faces], colors[expected])
    assert len(np.unique(carved.faces)) == carved.num_vertices   # no vertex without a face


def test_the_stage_carves_the_sphere_to_the_masked_half(tmp_path):
    """A sphere of radius 0.5 seen head-on from z = 3, its view's mask blanking the image's left half: the
    Poisson mesh keeps the faces with x >= 0 (the camera's x axis points to -x of the world here),
    about half the sphere's area, and records what it removed; without silhouettes the whole sphere."""
    write_ply(tmp_path / "fused.ply", sphere_cloud(8000))
    w, h = 160, 120
    R, t = look_at((0.0, 0.0, 3.0), (0.0, 0.0, 0.0), up=(0.0, -1.0, 0.0))
    view = View(image_id=1, name="v0.png", image_path=None, camera_model="PINHOLE", width=w, height=h,
                K=intrinsics(w, h), R=R, t=t)
    mask = np.full((h, w), 255, np.uint8)
    mask[:, : w // 2] = 0
    masks = tmp_path / "masks"
    masks.mkdir()
    cv2.imwrite(str(masks / "v0.png.png"), mask)
    whole = build_mesh(MeshConfig(), tmp_path, scene=SimpleNamespace(views=[view]), mask_dir=masks)
    # closed false: the default `auto` closes a Poisson mesh with silhouettes by their hull instead of carving
    record = build_mesh(MeshConfig(closed=False), tmp_path, scene=SimpleNamespace(views=[view]), mask_dir=masks,
                        silhouettes=True, overwrite=True)
    mesh = read_mesh_ply(tmp_path / "mesh.ply")
    uv, z = view.project(mesh.vertices.astype(np.float64))
    assert np.all(z > 0) and np.all(np.floor(uv[:, 0]) >= w // 2)   # every vertex on the mask's kept half
    assert abs(mesh.area() - np.pi / 2) < 0.08 * np.pi / 2   # half of the sphere's 4 pi 0.5^2
    # two Poisson solves (Open3D's threads) may differ by a face or so: the carve's count against its own input
    dropped = record["counts"]["mesh_silhouette_dropped_faces"]
    assert dropped > 0.4 * (record["faces"] + dropped) and abs(record["faces"] + dropped - whole["faces"]) < 0.01 * whole["faces"]
    assert json.loads((tmp_path / "mesh.json").read_text())["settings"]["silhouettes"] == str(masks)


@pytest.mark.gpu
def test_carve_on_the_gpu_matches_numpy(tmp_path, cupy):
    views = _views()
    rng = np.random.default_rng(8)
    for view in views[:2]:
        cv2.imwrite(str(tmp_path / f"{view.name}.png"), ((rng.random((view.height, view.width)) < 0.9) * 255).astype(np.uint8))
    mesh = TriangleMesh(rng.normal(0.0, 0.6, (3000, 3)).astype(np.float32),
                        rng.integers(0, 3000, (8000, 3)).astype(np.int32), None)
    scene = SimpleNamespace(views=views)
    on_host, host_counts = carve_to_silhouettes(mesh, scene, tmp_path)
    on_gpu, gpu_counts = carve_to_silhouettes(mesh, scene, tmp_path, cupy)
    assert host_counts == gpu_counts and host_counts["mesh_silhouette_dropped_faces"] > 0
    np.testing.assert_array_equal(on_host.vertices, on_gpu.vertices)
    np.testing.assert_array_equal(on_host.faces, on_gpu.faces)
