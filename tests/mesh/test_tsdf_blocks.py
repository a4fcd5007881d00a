"""Only the blocks near some view's surface hold voxels (mesh/blocks.py): the mesh must equal the
one of a dense grid (every block of the box around them), bit for bit; and the surface-view
count (min_surface) keeps what one view alone saw out of the mesh."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

from mvs_pipeline.mesh import tsdf
from mvs_pipeline.mesh.blocks import allocate_blocks
from mvs_pipeline.mesh.tsdf import stack_views, tsdf_mesh

from .random_views import random_views
from .sphere_views import CENTRE, RADIUS, sphere_views


def dense_allocation(xp, dv, voxel, truncation, min_surface=1, incidence_floor=1.0):
    """Every block of the box two blocks around the allocated ones (the grid a dense TSDF would fill),
    on the same grid (origin: the voxel centres, and so the float32 sums, are the same)."""
    origin, found = allocate_blocks(xp, dv, voxel, truncation, min_surface, incidence_floor)
    lo, hi = np.maximum(found.min(axis=0) - 2, 0), found.max(axis=0) + 3
    box = np.stack(np.meshgrid(*[np.arange(a, b) for a, b in zip(lo, hi)], indexing="ij"), -1).reshape(-1, 3)
    return origin, box.astype(np.int32)


def same_mesh_as_dense(dv, voxel, truncation, **kwargs):
    sparse, cs = tsdf_mesh(dv, voxel, truncation, **kwargs)
    with mock.patch.object(tsdf, "allocate_blocks", dense_allocation):
        dense, cd = tsdf_mesh(dv, voxel, truncation, **kwargs)
    assert cs["mesh_blocks"] < cd["mesh_blocks"]
    np.testing.assert_array_equal(sparse.vertices, dense.vertices)
    np.testing.assert_array_equal(sparse.faces, dense.faces)
    np.testing.assert_array_equal(sparse.colors, dense.colors)
    return sparse, cs, cd


def test_sphere_blocks_give_the_dense_grids_mesh():
    views, depths, colours = sphere_views()
    _, cs, cd = same_mesh_as_dense(stack_views(views, depths, colours), 0.02, 0.08)
    assert cs["mesh_blocks"] < 0.4 * cd["mesh_blocks"]   # the shell, not the box


@pytest.mark.parametrize("incidence_floor", [1.0, 0.2])
def test_sphere_blocks_two_views_reserve_give_the_dense_grids_mesh(incidence_floor):
    views, depths, colours = sphere_views()
    same_mesh_as_dense(stack_views(views, depths, colours), 0.02, 0.08, min_surface=2, incidence_floor=incidence_floor)


@pytest.mark.parametrize("seed, truncation, min_surface, floor", [
    (3, 0.25, 1, 1.0), (4, 0.25, 1, 1.0), (3, 0.5, 2, 1.0), (4, 0.5, 2, 1.0), (3, 0.25, 1, 0.3), (4, 0.5, 2, 0.3)])
def test_random_views_blocks_give_the_dense_grids_mesh(seed, truncation, min_surface, floor):
    # random depths: surfaces at every depth and angle, a camera inside the volume (two views agree
    # by chance only: a longer truncation for min_surface 2); floor < 1: the band stretched along
    # each pixel's ray by 1 / its incidence cosine, which the allocation must cover
    mesh, _, _ = same_mesh_as_dense(random_views(np.random.default_rng(seed), 6), 0.06, truncation,
                                    min_surface=min_surface, incidence_floor=floor)
    assert mesh.num_faces > 100


def test_min_surface_drops_what_one_view_alone_saw():
    views, depths, colours = sphere_views()
    depths = [d.copy() for d in depths]
    rows, cols = np.nonzero(depths[0] > 0)
    patch = (np.abs(rows - rows.mean()) < 8) & (np.abs(cols - cols.mean()) < 8)
    depths[0][rows[patch], cols[patch]] -= 0.3   # 16 x 16 px 30 cm in front of the sphere, in one view
    dv = stack_views(views, depths, colours)
    one, _ = tsdf_mesh(dv, 0.02, 0.08)
    two, _ = tsdf_mesh(dv, 0.02, 0.08, min_surface=2)
    off = lambda m: np.abs(np.linalg.norm(m.vertices.astype(np.float64) - CENTRE, axis=1) - RADIUS) > 0.05
    assert off(one).sum() > 100           # the floater became a surface
    assert off(two).sum() == 0            # near a surface in one view only: gone
    # so are the sphere's caps, which one view alone sees from near the equator (8 views at +-20 deg)
    assert 0.7 * one.area() < two.area() < one.area()
