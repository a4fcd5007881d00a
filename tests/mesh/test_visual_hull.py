"""A closed Poisson mesh from a cloud seen in part (mesh.closed, mesh/visual_hull.py): the visual hull's points
lie where the object is and the cloud is not, with outward normals, and the stage's mesh of a half-observed
sphere on a "table" comes out closed and inside every silhouette, where the carved mesh is open."""

from __future__ import annotations

import json
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from mvs_pipeline.config.auto import AutoValue
from mvs_pipeline.config.loader import load_config
from mvs_pipeline.errors import MVSError
from mvs_pipeline.fusion.silhouettes import SilhouetteCheck
from mvs_pipeline.io.colmap_maps import write_depth_map
from mvs_pipeline.io.mesh_ply import read_mesh_ply
from mvs_pipeline.io.ply import write_ply
from mvs_pipeline.mesh.params import MeshConfig
from mvs_pipeline.mesh.stage import build_mesh
from mvs_pipeline.mesh.stage import run as run_mesh_stage
from mvs_pipeline.mesh.visual_hull import boundary_edges, hull_points, read_view_maps, seen_through
from mvs_pipeline.scene.scene import View
from mvs_pipeline.synth.camera import look_at
from tests.fusion.fusion_scene import intrinsics

from .test_poisson import sphere_cloud

RADIUS = 0.5
SEEN_Z = 0.15   # sphere_cloud's cap 0.3 of the radius: the cloud and the depth maps cover z > 0.15


def sphere_views(tmp_path, width=96, height=72):
    """Eight views on a ring 30 degrees above the equator and one from above, all at the origin, and
    their silhouettes of the sphere of RADIUS (a pixel is object when the sphere covers any of it) in
    tmp_path/masks, and depth maps of its seen cap in tmp_path/stereo/depth_maps."""
    K = intrinsics(width, height)
    centres = [(3 * np.cos(a) * np.cos(np.pi / 6), 3 * np.sin(a) * np.cos(np.pi / 6), 3 * np.sin(np.pi / 6))
               for a in np.linspace(0, 2 * np.pi, 8, endpoint=False)] + [(0.2, 0.1, 3.0)]
    masks, maps = tmp_path / "masks", tmp_path / "stereo" / "depth_maps"
    masks.mkdir()
    maps.mkdir(parents=True)
    views = []
    j, i = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
    pix = np.stack([j, i, np.ones_like(j)], axis=-1).reshape(-1, 3)
    for k, c in enumerate(centres):
        R, t = look_at(np.array(c), np.zeros(3))
        view = View(image_id=k + 1, name=f"v{k}.png", image_path=None, camera_model="PINHOLE", width=width,
                    height=height, K=K, R=R, t=t)
        rays = (R.T @ np.linalg.solve(K, pix.T)).T
        rays /= np.linalg.norm(rays, axis=1, keepdims=True)
        c = np.asarray(c)
        b = rays @ c   # |c + s r|^2 = R^2 has a root when (r.c)^2 - |c|^2 + R^2 >= 0
        hit = b * b - c @ c + RADIUS**2 >= 0
        # a pixel the sphere touches at all is object (one pixel of dilation), as a real mask's outline:
        # otherwise 5 % of the sphere's own points would fall on background per view
        mask = cv2.dilate(np.where(hit, 255, 0).astype(np.uint8).reshape(height, width), np.ones((3, 3), np.uint8))
        cv2.imwrite(str(masks / f"{view.name}.png"), mask)
        # the depth map of what the cloud covers (the cap z > SEEN_Z): z-depth of the ray's first hit
        s_hit = -b - np.sqrt(np.maximum(b * b - c @ c + RADIUS**2, 0.0))
        X = c + s_hit[:, None] * rays
        z = (X @ R.T + np.asarray(t).reshape(1, 3))[:, 2]
        depth = np.where(hit & (X[:, 2] > SEEN_Z), z, 0.0).astype(np.float32).reshape(height, width)
        write_depth_map(maps / f"{view.name}.geometric.bin", depth)
        views.append(view)
    return views, masks


def test_boundary_edges_of_a_closed_and_an_open_tetrahedron():
    tet = np.array([[0, 2, 1], [0, 1, 3], [1, 2, 3], [0, 3, 2]])
    assert boundary_edges(tet) == 0
    assert boundary_edges(tet[:3]) == 3


def test_seen_through_is_the_free_space_in_front_of_a_seen_surface(tmp_path):
    views, _ = sphere_views(tmp_path, 160, 120)
    maps = read_view_maps(SimpleNamespace(views=views), tmp_path / "stereo")
    assert len(maps) == 9
    up = np.array([0.0, 0.0, 1.0])
    above = up * (RADIUS + 0.1)           # 10 cm above the seen top: the top view's map has the top behind it
    inside = up * (RADIUS - 0.1)          # inside the sphere: behind every seen surface
    below = -up * (RADIUS + 0.1)          # under the sphere: no view has a depth there (unseen, or the sphere in front)
    got = seen_through(np.stack([above, inside, below]), maps, margin=0.02)
    np.testing.assert_array_equal(got, [True, False, False])
    assert not seen_through(np.stack([above]), maps, margin=0.2)[0]   # within the margin: not free


def test_hull_points_lie_where_the_cloud_is_not_with_outward_normals(tmp_path):
    views, masks = sphere_views(tmp_path)
    cloud = sphere_cloud(6000, RADIUS, cap=0.3)          # only the top is seen: z > 0.15
    check = SilhouetteCheck(SimpleNamespace(views=views), masks)
    maps = read_view_maps(SimpleNamespace(views=views), tmp_path / "stereo")
    xyz, normals, counts = hull_points(cloud.xyz, check, cells=48, maps=maps)
    # with coarse masks the hull stands off the seen cap; the maps see through those points
    assert counts["mesh_hull_seen_through"] > 0 and counts["mesh_hull_maps"] == 9
    assert len(xyz) > 200 and counts["mesh_hull_points"] == len(xyz)
    # every hull point is inside every silhouette up to a cell, below the seen cap, and faces away from the body
    assert check.inside(xyz).mean() > 0.9
    assert xyz[:, 2].max() < 0.15 + 0.1
    # what is left is the grid's cap under the seen part and its rim: normals down and out, away from the body
    cell, low = counts["mesh_hull_cell"], xyz[:, 2].min()
    bottom = xyz[:, 2] < low + 0.5 * cell
    assert bottom.sum() > 0.5 * len(xyz) and np.mean(normals[bottom, 2] < -0.9) > 0.9
    away = xyz - [0.0, 0.0, 0.3]
    assert np.mean(np.sum(normals * away, axis=1) / np.linalg.norm(away, axis=1) > 0.3) > 0.95
    # nothing near the cloud: at least keep_away (2) cells of 1/48 of the cloud's extent from every point
    from scipy.spatial import cKDTree  # noqa: PLC0415

    d, _ = cKDTree(cloud.xyz).query(xyz)
    assert d.min() > counts["mesh_hull_cell"]


def test_the_stage_closes_a_half_seen_sphere_inside_its_silhouettes(tmp_path):
    views, masks = sphere_views(tmp_path)
    write_ply(tmp_path / "fused.ply", sphere_cloud(8000, RADIUS, cap=0.3))
    scene = SimpleNamespace(views=views)
    carved = build_mesh(MeshConfig(closed=False), tmp_path, scene=scene, mask_dir=masks, silhouettes=True)
    open_faces = read_mesh_ply(tmp_path / "mesh.ply").faces
    # the default (mesh.closed auto) closes it: poisson with silhouettes
    record = build_mesh(MeshConfig(), tmp_path, scene=scene, mask_dir=masks, silhouettes=True, overwrite=True)
    mesh = read_mesh_ply(tmp_path / "mesh.ply")
    assert boundary_edges(open_faces) > 20                      # the trimmed, carved cap is open
    assert record["counts"]["mesh_boundary_edges"] == boundary_edges(mesh.faces) == 0
    assert record["counts"]["mesh_hull_points"] > 100 and carved["faces"] < record["faces"]
    # the closed mesh lies inside the silhouettes (its surface samples, as the evaluation's mask metric)
    from mvs_pipeline.io.mesh_ply import sample_surface  # noqa: PLC0415

    xyz, _, _ = sample_surface(mesh, 0.01)
    assert SilhouetteCheck(scene, masks).inside(xyz).mean() > 0.98
    # and it keeps the seen cap where it was: its top within a few mm of the sphere
    top = xyz[xyz[:, 2] > 0.25]
    assert np.abs(np.linalg.norm(top, axis=1) - RADIUS).mean() < 0.003
    assert json.loads((tmp_path / "mesh.json").read_text())["settings"]["closed"] is True


def test_pull_inside_moves_the_outside_vertices_to_the_silhouettes_and_keeps_the_faces(tmp_path):
    import open3d as o3d  # noqa: PLC0415

    from mvs_pipeline.io.mesh_ply import TriangleMesh  # noqa: PLC0415
    from mvs_pipeline.mesh.visual_hull import pull_inside, vertex_normals  # noqa: PLC0415

    views, masks = sphere_views(tmp_path, 320, 240)
    check = SilhouetteCheck(SimpleNamespace(views=views), masks)
    ball = o3d.geometry.TriangleMesh.create_sphere(radius=0.6, resolution=24)   # 10 cm outside the silhouettes
    mesh = TriangleMesh(np.asarray(ball.vertices, np.float32), np.asarray(ball.triangles, np.int32))
    n = vertex_normals(mesh.vertices, mesh.faces)
    assert np.all(np.sum(n * mesh.vertices, axis=1) > 0.55)          # outward, from the faces' winding
    pulled, counts = pull_inside(mesh, check, step=0.01, max_steps=20)
    was_out = ~check.inside(mesh.vertices)
    assert was_out.mean() > 0.9       # all but the underside, which the views from above see inside the sphere's cone
    assert counts["mesh_vertices_outside"] == counts["mesh_vertices_pulled"] == was_out.sum()
    assert check.inside(pulled.vertices).all()
    np.testing.assert_array_equal(pulled.faces, mesh.faces)
    np.testing.assert_array_equal(pulled.vertices[~was_out], mesh.vertices[~was_out])
    # each lands at the first step inside the hull: a step back out is outside again; the hull of nine
    # silhouettes is the sphere's within a few cm
    back = pulled.vertices[was_out] + 0.01 * n[was_out]
    assert not check.inside(back).any()
    upper = was_out & (mesh.vertices[:, 2] > 0.2)
    r = np.linalg.norm(pulled.vertices[upper], axis=1)
    assert r.max() < 0.55 and r.min() > 0.5 - 0.02
    # a vertex that no step brings inside stays where it was
    _, few = pull_inside(mesh, check, step=0.01, max_steps=3)
    assert few["mesh_vertices_pulled"] == 0


def test_closed_needs_silhouettes_and_poisson(tmp_path):
    views, masks = sphere_views(tmp_path, 32, 24)
    write_ply(tmp_path / "fused.ply", sphere_cloud(2000, RADIUS, cap=0.3))
    scene = SimpleNamespace(views=views)
    with pytest.raises(MVSError, match="mesh.closed: needs the object masks as silhouettes"):
        build_mesh(MeshConfig(closed=True), tmp_path, scene=scene, mask_dir=masks, silhouettes=False)
    with pytest.raises(MVSError, match="mesh.closed: only with mesh.method: poisson"):
        build_mesh(MeshConfig(closed=True, method="tsdf"), tmp_path, scene=scene, mask_dir=masks, silhouettes=True)
    empty = tmp_path / "no_masks"
    empty.mkdir()
    with pytest.raises(MVSError, match="mesh.closed: no view has a mask"):
        build_mesh(MeshConfig(closed=True), tmp_path, scene=scene, mask_dir=empty, silhouettes=True)


def test_auto_never_stops_the_run(tmp_path):
    """Without silhouettes, or with a mask folder that holds no view's mask, `auto` gives the open mesh."""
    views, masks = sphere_views(tmp_path, 32, 24)
    write_ply(tmp_path / "fused.ply", sphere_cloud(2000, RADIUS, cap=0.3))
    scene = SimpleNamespace(views=views)
    record = build_mesh(MeshConfig(), tmp_path, scene=scene, mask_dir=masks, silhouettes=False)
    assert "closed" not in record["settings"] and "mesh_boundary_edges" not in record["counts"]
    empty = tmp_path / "no_masks"
    empty.mkdir()
    record = build_mesh(MeshConfig(), tmp_path, scene=scene, mask_dir=empty, silhouettes=True, overwrite=True)
    assert "closed" not in record["settings"] and record["faces"] > 0
    # the pipeline's stage gets the resolved `true`; ctx.auto says it came from `auto`, which does not stop the run
    cfg = load_config(None, [f"fusion.mask_dir={empty}", "fusion.mask_silhouettes=true", "mesh.closed=true"])
    ctx = SimpleNamespace(cfg=cfg, out_dir=tmp_path, backend="cpu", overwrite=True, counts={},
                          require_scene=lambda: scene, auto=[AutoValue("mesh.closed", True, "poisson with silhouettes")])
    run_mesh_stage(ctx)
    assert ctx.counts["mesh_faces"] > 0
    ctx.auto = []
    with pytest.raises(MVSError, match="mesh.closed: no view has a mask"):
        run_mesh_stage(ctx)


@pytest.mark.gpu
def test_the_hull_on_the_gpu_matches_numpy(tmp_path, cupy):
    from mvs_pipeline.mesh.visual_hull import hull_grid, occupancy  # noqa: PLC0415

    views, masks = sphere_views(tmp_path, 160, 120)
    scene = SimpleNamespace(views=views)
    cloud = sphere_cloud(4000, RADIUS, cap=0.3)
    origin, cell, shape = hull_grid(cloud.xyz, 64)
    on_cpu = occupancy(SilhouetteCheck(scene, masks), origin, cell, shape)
    on_gpu = occupancy(SilhouetteCheck(scene, masks, cupy), origin, cell, shape)
    assert 0.05 < on_cpu.mean() < 0.95
    np.testing.assert_array_equal(on_gpu, on_cpu)
