"""Marching cubes over blocks (mesh/march.py with the Numba twins of cuda/mesh_cubes.cu) against
scikit-image's classic marching cubes on the same field laid out densely."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.mesh import cpu
from mvs_pipeline.mesh.layout import BLOCK
from mvs_pipeline.mesh.march import halo_blocks, march_batch, merge_parts, shared_blocks

from .mesh_compare import assert_same_mesh as assert_same_up_to_numbering

N_BLOCKS = 4   # a side: 32^3 voxels


def dense_to_blocks(vol: np.ndarray, keep=None):
    """(field [B * BLOCK^3], blocks [B, 3] int32 sorted) of a dense [n, n, n] volume, the blocks where keep."""
    nb = vol.shape[0] // BLOCK
    coords = np.stack(np.meshgrid(*[np.arange(nb)] * 3, indexing="ij"), -1).reshape(-1, 3)
    if keep is not None:
        coords = coords[keep(coords)]
    field = np.stack([vol[a * BLOCK:(a + 1) * BLOCK, b * BLOCK:(b + 1) * BLOCK, c * BLOCK:(c + 1) * BLOCK]
                      for a, b, c in coords]).reshape(-1)
    return np.ascontiguousarray(field, np.float32), coords.astype(np.int32)


def sphere_field(n: int, centre, radius: float) -> np.ndarray:
    g = np.indices((n, n, n), dtype=np.float64).transpose(1, 2, 3, 0)
    return np.clip((np.linalg.norm(g - centre, axis=-1) - radius) / 3.0, -1, 1).astype(np.float32)


def march(field, blocks):
    pos, _, faces, key, merge = march_batch(np, cpu, field, blocks, len(blocks), int(blocks.max()) + 2,
                                            np.zeros(len(blocks), bool))
    pos, faces, _ = merge_parts([(pos, np.zeros((len(pos), 3), np.uint8), faces, key, merge)])
    return pos, faces


def reference(vol: np.ndarray):
    """scikit-image's classic marching cubes (the same table) of vol: (vertices, faces). It reads a
    volume as (z, y, x), so it gets the transposed volume to cut each cube as the table's frame does."""
    from skimage.measure import marching_cubes  # noqa: PLC0415

    verts, faces, _, _ = marching_cubes(np.ascontiguousarray(vol.transpose(2, 1, 0)), 0.0, method="lorensen",
                                        allow_degenerate=False)
    return verts[:, ::-1].astype(np.float64), faces


def assert_same_mesh(pos, faces, ref_pos, ref_faces):
    """The same vertices (to float32 rounding) and the same triangles, orientation aside."""
    from scipy.spatial import cKDTree  # noqa: PLC0415

    assert len(pos) == len(ref_pos) and len(faces) == len(ref_faces)
    dist, idx = cKDTree(ref_pos).query(pos)
    assert dist.max() < 1e-5
    assert len(np.unique(idx)) == len(idx)
    assert {tuple(sorted(t)) for t in idx[faces].tolist()} == {tuple(sorted(t)) for t in ref_faces.tolist()}


@pytest.mark.parametrize("centre, radius", [((15.3, 16.1, 14.7), 9.4), ((10.0, 20.5, 16.2), 12.31)])
def test_blocks_mesh_equals_scikit_images_classic_marching_cubes(centre, radius):
    vol = sphere_field(N_BLOCKS * BLOCK, np.array(centre), radius)   # the second leaves the volume
    assert not np.any(vol == 0)
    assert_same_mesh(*march(*dense_to_blocks(vol)), *reference(vol))


def test_voxels_exactly_on_the_surface_leave_no_degenerate_face():
    # radius 12.3 from (10, 20.5, 16.2) passes exactly through 8 voxel centres: each closes several
    # edges at one point, whose vertices are merged
    vol = sphere_field(N_BLOCKS * BLOCK, np.array([10.0, 20.5, 16.2]), 12.3)
    assert np.count_nonzero(vol == 0) == 8
    pos, faces = march(*dense_to_blocks(vol))
    ref_pos, ref_faces = reference(vol)
    assert len(np.unique(pos, axis=0)) == len(pos)           # one vertex on each such voxel
    area = lambda p, f: 0.5 * np.linalg.norm(np.cross(p[f[:, 1]] - p[f[:, 0]], p[f[:, 2]] - p[f[:, 0]]), axis=1)  # noqa: E731
    assert area(pos, faces).min() > 0
    # scikit-image also merges vertices a field value of ~1e-15 puts within float32 rounding of a
    # voxel, and drops the faces between them: a few faces more here, of no area to speak of
    assert len(ref_faces) <= len(faces) <= len(ref_faces) + 20
    assert abs(area(pos, faces).sum() - area(ref_pos, ref_faces).sum()) < 1e-6 * area(ref_pos, ref_faces).sum()


def test_faces_point_to_the_positive_side_and_vertices_lie_on_the_sphere():
    centre, radius = np.array([15.3, 16.1, 14.7]), 9.4
    pos, faces = march(*dense_to_blocks(sphere_field(N_BLOCKS * BLOCK, centre, radius)))
    v = pos[faces]
    n = np.cross(v[:, 1] - v[:, 0], v[:, 2] - v[:, 0])
    assert np.all((n * (v.mean(axis=1) - centre)).sum(axis=1) > 0)
    assert np.abs(np.linalg.norm(pos - centre, axis=1) - radius).max() < 0.1
    # closed: every edge is shared by exactly two faces
    e = np.sort(np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]]), axis=1)
    _, count = np.unique(e, axis=0, return_counts=True)
    assert np.all(count == 2)


def test_unobserved_corners_and_missing_blocks_leave_no_cube():
    centre, radius = np.array([15.3, 16.1, 14.7]), 9.4
    vol = sphere_field(N_BLOCKS * BLOCK, centre, radius)
    vol[:, :, 20:] = np.nan                       # unobserved from z = 20 up
    pos, faces = march(*dense_to_blocks(vol, keep=lambda c: c[:, 0] != 3))   # and no block at x >= 24
    assert pos[:, 2].max() <= 19.0 and pos[:, 0].max() <= 23.0
    assert_same_mesh(pos, faces, *reference(vol[:24, :, :20]))   # the observed part alone


def test_batches_with_halos_give_one_mesh():
    vol = sphere_field(N_BLOCKS * BLOCK, np.array([15.3, 16.1, 14.7]), 9.4)
    field, blocks = dense_to_blocks(vol)
    whole = march(field, blocks)
    base, per_batch = int(blocks.max()) + 2, 13
    shared = shared_blocks(np, blocks, np.arange(len(blocks)) // per_batch, base)
    parts = []
    f3 = field.reshape(len(blocks), -1)
    for start in range(0, len(blocks), per_batch):
        owned = slice(start, min(start + per_batch, len(blocks)))
        halo = halo_blocks(np, blocks, owned, base)
        rows = np.concatenate([np.arange(owned.start, owned.stop), halo])
        pos, _, faces, key, merge = march_batch(np, cpu, f3[rows].reshape(-1), blocks[rows], owned.stop - owned.start,
                                                base, np.concatenate([shared[owned], np.ones(len(halo), bool)]))
        parts.append((pos, np.zeros((len(pos), 3), np.uint8), faces, key, merge))
    pos, faces, _ = merge_parts(parts)
    assert_same_up_to_numbering((pos, faces), whole)   # the halos' copies merged: nothing twice, nothing lost
    assert parts == [] and faces.dtype == np.int32     # the batches' arrays released; 32-bit indices
