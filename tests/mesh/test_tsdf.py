"""TSDF fusion (the Numba twins) and marching cubes against an analytic sphere; masks, batches, view
groups, colours and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.mesh import cpu
from mvs_pipeline.mesh.layout import BLOCK_VOXELS, camera_table, empty_accumulators
from mvs_pipeline.mesh.tsdf import MAP_BYTES_PER_PIXEL, pixel_footprint, stack_views, tsdf_mesh

from .mesh_compare import assert_same_mesh
from .sphere_views import CENTRE, RADIUS, sphere_views

VOXEL = 0.02


@pytest.fixture(scope="module")
def sphere():
    views, depths, colours = sphere_views()
    return views, depths, colours, stack_views(views, depths, colours)


def radial_error(mesh):
    return np.linalg.norm(mesh.vertices.astype(np.float64) - CENTRE, axis=1) - RADIUS


def test_sphere_mesh_lies_on_the_sphere_and_faces_outwards(sphere):
    *_, dv = sphere
    mesh, counts = tsdf_mesh(dv, VOXEL, 4 * VOXEL)
    err = radial_error(mesh)
    assert np.abs(err).max() < VOXEL          # every vertex within a voxel of the true surface
    assert np.median(np.abs(err)) < 0.25 * VOXEL
    # the cameras circle the equator: all but the poles is seen, so most of the area is there
    assert 0.85 * 4 * np.pi * RADIUS ** 2 < mesh.area() < 1.02 * 4 * np.pi * RADIUS ** 2
    v = mesh.vertices.astype(np.float64)
    f = mesh.faces
    n = np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]])
    assert np.mean((n * (v[f].mean(axis=1) - CENTRE)).sum(axis=1) > 0) > 0.99
    assert counts["mesh_batches"] == 1


def test_batches_give_the_same_mesh(sphere):
    *_, dv = sphere
    one, _ = tsdf_mesh(dv, VOXEL, 4 * VOXEL)
    many, counts = tsdf_mesh(dv, VOXEL, 4 * VOXEL, max_block_bytes=40 * 82 * BLOCK_VOXELS)
    assert counts["mesh_batches"] > 4
    assert_same_mesh(many, one)   # the halos' copies merged, nothing lost



def test_view_groups_add_the_same_sums(sphere):
    views, depths, colours, dv = sphere
    blocks = np.stack(np.meshgrid(*[np.arange(3)] * 3, indexing="ij"), -1).reshape(-1, 3).astype(np.int32)
    origin = np.asarray(CENTRE - 0.6, np.float32)
    whole = empty_accumulators(np, len(blocks) * BLOCK_VOXELS)
    cpu.tsdf_integrate(dv.depth, dv.rgb, dv.cams, dv.offsets, dv.sizes, (0, dv.num_views), origin, 0.05, 0.2, blocks,
                       whole)
    parts = empty_accumulators(np, len(blocks) * BLOCK_VOXELS)
    for v0, v1 in ((0, 3), (3, 5), (5, dv.num_views)):
        cpu.tsdf_integrate(dv.depth, dv.rgb, dv.cams, dv.offsets, dv.sizes, (v0, v1), origin, 0.05, 0.2, blocks, parts)
    for key in whole:
        np.testing.assert_array_equal(whole[key], parts[key])
    assert whole["weight"].max() >= 3


def test_small_map_budget_gives_the_same_mesh(sphere):
    *_, dv = sphere
    a, _ = tsdf_mesh(dv, VOXEL, 4 * VOXEL, incidence_floor=0.3)
    b, counts = tsdf_mesh(dv, VOXEL, 4 * VOXEL, max_map_bytes=2 * (MAP_BYTES_PER_PIXEL + 4) * 96 * 72,
                          incidence_floor=0.3)
    assert counts["mesh_view_groups"] == 4
    np.testing.assert_array_equal(a.vertices, b.vertices)
    np.testing.assert_array_equal(a.faces, b.faces)


def test_masked_pixels_are_no_depth(sphere):
    views, depths, colours, _ = sphere
    # only the upper half of every image has depth: the mesh keeps to the half of the sphere seen there
    masked = [np.where(np.arange(d.shape[0])[:, None] < d.shape[0] // 2, d, 0).astype(np.float32) for d in depths]
    mesh, _ = tsdf_mesh(stack_views(views, masked, colours), VOXEL, 4 * VOXEL)
    full, _ = tsdf_mesh(stack_views(views, depths, colours), VOXEL, 4 * VOXEL)
    assert mesh.area() < 0.7 * full.area()
    assert np.abs(radial_error(mesh)).max() < VOXEL


def test_vertex_colours_come_from_the_images(sphere):
    *_, dv = sphere
    mesh, _ = tsdf_mesh(dv, VOXEL, 4 * VOXEL)
    # the images colour a point by its world x: grey = 128 + 200 (x - cx), red = grey, green = 255 - grey
    x = mesh.vertices[:, 0].astype(np.float64) - CENTRE[0]
    expect = np.clip(128 + 200 * x, 0, 255)
    assert np.median(np.abs(mesh.colors[:, 0] - expect)) < 6
    assert np.all(mesh.colors[:, 2] == 60)


def test_pixel_footprint_is_depth_over_focal(sphere):
    views, *_ , dv = sphere
    f = views[0].K[0, 0]
    assert 1.3 / f < pixel_footprint(dv) < 2.0 / f   # the sphere's near side is 1.5-2 m away


def test_camera_table_projects_like_the_views(sphere):
    views, *_ = sphere
    P = camera_table(views)[0].reshape(3, 4).astype(np.float64)
    X = np.array([0.2, -0.1, 3.1])
    cam = views[0].R @ X + views[0].t
    uvw = views[0].K @ cam
    np.testing.assert_allclose(P @ np.append(X, 1.0), uvw, rtol=1e-5)


def test_no_depth_is_one_clear_error(sphere):
    views, depths, colours, _ = sphere
    empty = stack_views(views, [np.zeros_like(d) for d in depths], colours)
    with pytest.raises(MVSError, match="no valid depth"):
        tsdf_mesh(empty, VOXEL, 4 * VOXEL)


def test_incidence_cos_of_tilted_planes_and_their_edge():
    """Planes at known tilts: each pixel's |n . r| (the ray r = (u, v, 1)) from the depths, to the
    one-pixel differences' error (1 / z is linear in the pixel, z is not), and from a normal map; at
    a step to a farther plane each side reads its own plane, not the step (one-sided differences)."""
    from mvs_pipeline.mesh.layout import incidence_cos, normal_cos  # noqa: PLC0415

    f, w, h = 300.0, 120, 90
    K = np.array([[f, 0, w / 2 - 7.0], [0, f, h / 2 + 4.0], [0, 0, 1]])
    uu, vv = np.meshgrid((np.arange(w) + 0.5 - K[0, 2]) / f, (np.arange(h) + 0.5 - K[1, 2]) / f)
    for deg in (0.0, 30.0, 60.0, 80.0):
        a = np.radians(deg)
        n = np.array([np.sin(a) * 0.8, np.sin(a) * 0.6, np.cos(a)])   # tilted about a skew axis
        ndotr = uu * n[0] + vv * n[1] + n[2]
        z = np.where(np.arange(w)[None, :] < w // 2, 2.0, 3.0) / ndotr   # n . X = 2, then n . X = 3
        z = np.where(ndotr > 0.05, z, 0.0)                                # the plane behind the camera: none
        cos = incidence_cos(np, z.astype(np.float32), K, 0.1)
        np.testing.assert_allclose(cos, np.where(z > 0, np.maximum(ndotr, 0.1), 1.0), rtol=0.03,
                                   err_msg=f"{deg} deg")
        normals = np.broadcast_to(-n.astype(np.float32), (h, w, 3))              # facing the camera
        np.testing.assert_allclose(normal_cos(normals, K), np.abs(ndotr), rtol=1e-5, atol=1e-7)   # exact
    assert np.all(incidence_cos(np, np.zeros((4, 5), np.float32), K, 0.1) == 1)        # no depth: 1
    assert np.all(incidence_cos(np, np.full((4, 5), 2.0, np.float32), K, 1.0) == 1)    # floor 1: off
