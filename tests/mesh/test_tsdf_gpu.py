"""The TSDF kernels (cuda/mesh_tsdf.cu, cuda/mesh_cubes.cu) against their Numba twins (mesh/cpu.py):
the same sums and the same marching-cubes outputs, bit for bit, on random inputs and edge cases;
and the same mesh end to end."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.mesh import cpu
from mvs_pipeline.mesh.layout import BLOCK_VOXELS, empty_accumulators
from mvs_pipeline.mesh.march import neighbour_table
from mvs_pipeline.mesh.tsdf import stack_views, tsdf_mesh

from .random_views import random_views
from .sphere_views import sphere_views

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernel_matches_twin_bit_for_bit(cupy, seed):
    from mvs_pipeline.mesh import cuda  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    dv = random_views(rng, 7)
    # a random set of blocks, in random order (the kernel takes any list)
    box = np.stack(np.meshgrid(*[np.arange(6)] * 3, indexing="ij"), -1).reshape(-1, 3)
    blocks = rng.permutation(box)[: int(rng.integers(20, 150))].astype(np.int32)
    origin = rng.uniform(-1.2, -0.8, 3).astype(np.float32)
    voxel, trunc = np.float32(rng.uniform(0.02, 0.08)), np.float32(rng.uniform(0.05, 0.5))
    host = empty_accumulators(np, len(blocks) * BLOCK_VOXELS)
    dev = empty_accumulators(cupy, len(blocks) * BLOCK_VOXELS)
    for vr in ((0, 3), (3, 7), (7, 7)):   # two groups, then an empty range
        cpu.tsdf_integrate(dv.depth, dv.rgb, dv.cams, dv.offsets, dv.sizes, vr, origin, voxel, trunc, blocks, host)
        cuda.tsdf_integrate(cupy.asarray(dv.depth), cupy.asarray(dv.rgb), cupy.asarray(dv.cams),
                            cupy.asarray(dv.offsets), cupy.asarray(dv.sizes), vr, origin, voxel, trunc,
                            cupy.asarray(blocks), dev)
    assert host["weight"].max() > 0 and host["rgb_weight"].max() > 0
    for key in host:
        np.testing.assert_array_equal(cupy.asnumpy(dev[key]), host[key], err_msg=key)


def test_voxels_on_pixel_edges(cupy):
    """Voxel centres that project exactly onto pixel borders and the image's last column/row."""
    from mvs_pipeline.mesh import cuda  # noqa: PLC0415
    from .sphere_views import View  # noqa: PLC0415

    w, h = 8, 8
    K = np.array([[4.0, 0, 0], [0, 4.0, 0], [0, 0, 1.0]])   # (u, v) = 4 (x, y) / z: at z = 2, u = 2 x
    view = View("edge", K, np.eye(3), np.zeros(3), w, h)
    dv = stack_views([view], [np.full((h, w), 2.0, np.float32)], [np.full((h, w, 3), 7, np.uint8)])
    blocks = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], np.int32)   # 16 x 16 x 8 voxels
    origin = np.array([-0.5, -0.5, 2.0], np.float32)   # x, y = -0.5 .. 7.0: u, v = -1 .. 14 (past the image's edge)
    n = len(blocks) * BLOCK_VOXELS
    host, dev = empty_accumulators(np, n), empty_accumulators(cupy, n)
    cpu.tsdf_integrate(dv.depth, dv.rgb, dv.cams, dv.offsets, dv.sizes, (0, 1), origin, 0.5, 0.2, blocks, host)
    cuda.tsdf_integrate(cupy.asarray(dv.depth), cupy.asarray(dv.rgb), cupy.asarray(dv.cams), cupy.asarray(dv.offsets),
                        cupy.asarray(dv.sizes), (0, 1), origin, 0.5, 0.2, cupy.asarray(blocks), dev)
    for key in host:
        np.testing.assert_array_equal(cupy.asnumpy(dev[key]), host[key], err_msg=key)
    assert int(host["weight"].reshape(len(blocks), 8, 8, 8)[:, :, :, 0].sum()) == 8 * 8   # u, v in 0 .. 7 only


def random_batch(rng, num_owned: int, num_halo: int):
    """A batch of blocks (owned rows first, then halo rows; gaps between them) and a random field on
    them: values in -1 .. 1, a tenth NaN, some exactly 0 (ties of the sign test)."""
    box = np.stack(np.meshgrid(*[np.arange(5)] * 3, indexing="ij"), -1).reshape(-1, 3)
    blocks = rng.permutation(box)[: num_owned + num_halo].astype(np.int32)
    field = rng.uniform(-1, 1, len(blocks) * BLOCK_VOXELS).astype(np.float32)
    field[rng.random(field.shape) < 0.1] = np.nan
    field[rng.random(field.shape) < 0.02] = 0.0
    return field, blocks


@pytest.mark.parametrize("seed", [0, 1])
def test_cubes_kernels_match_twins_bit_for_bit(cupy, seed):
    from mvs_pipeline.mesh import cuda  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    num_owned = int(rng.integers(10, 40))
    field, blocks = random_batch(rng, num_owned, int(rng.integers(0, 30)))
    nbr = neighbour_table(np, blocks, int(blocks.max()) + 2)
    n = len(blocks) * BLOCK_VOXELS
    out = {}
    for name, xp, mod in (("cpu", np, cpu), ("cuda", cupy, cuda)):
        f, nb = xp.asarray(field), xp.asarray(nbr)
        cases, ntri, edges = xp.empty(n, xp.uint8), xp.empty(n, xp.int32), xp.empty(n, xp.uint8)
        mod.cubes_classify(f, nb, num_owned, cases, ntri, edges)
        nvert = ((edges & 1) + ((edges >> 1) & 1) + ((edges >> 2) & 1)).astype(xp.int64)
        tri_end, vert_end = xp.cumsum(ntri, dtype=xp.int64), xp.cumsum(nvert)
        faces = xp.empty((int(tri_end[-1]), 3), xp.int64)
        nv = int(vert_end[-1])
        vert_edge, vert_t, vert_voxel = xp.empty(nv, xp.int64), xp.empty(nv, xp.float32), xp.empty(nv, xp.int64)
        mod.cubes_emit(f, nb, cases, edges, tri_end - ntri, vert_end - nvert, faces, vert_edge, vert_t, vert_voxel)
        out[name] = [a if xp is np else cupy.asnumpy(a)
                     for a in (cases, ntri, edges, faces, vert_edge, vert_t, vert_voxel)]
    assert out["cpu"][3].shape[0] > 100
    names = ("cases", "ntri", "edges", "faces", "vert_edge", "vert_t", "vert_voxel")
    for a, b, what in zip(out["cpu"], out["cuda"], names):
        np.testing.assert_array_equal(b, a, err_msg=what)


@pytest.mark.parametrize("kwargs", [{}, {"min_surface": 2, "max_block_bytes": 40 * 82 * BLOCK_VOXELS}])
def test_gpu_and_cpu_meshes_agree(kwargs):
    views, depths, colours = sphere_views()
    dv = stack_views(views, depths, colours)
    a, ca = tsdf_mesh(dv, 0.02, 0.08, backend="cpu", **kwargs)
    b, cb = tsdf_mesh(dv, 0.02, 0.08, backend="cuda", **kwargs)
    assert ca["mesh_batches"] == cb["mesh_batches"]
    # the pool's readings per phase on CuPy only: the blocks are alive after the allocation
    assert "mesh_pool_bytes" not in ca
    assert all(cb["mesh_pool_bytes"][k]["held"] >= cb["mesh_pool_bytes"][k]["used"] for k in cb["mesh_pool_bytes"])
    assert cb["mesh_pool_bytes"]["after_alloc"]["used"] > 0
    # the highest reading (the batches' are read too, unnamed), the cache released after each phase
    pool = cb["mesh_pool_bytes"]
    assert pool["peak"]["held"] >= max(pool[k]["held"] for k in pool) and cb["mesh_pool_batch_releases"] >= 0
    assert {"after_alloc", "after_upload", "after_batches", "after_join"} <= set(pool)
    np.testing.assert_array_equal(a.faces, b.faces)
    np.testing.assert_array_equal(a.vertices, b.vertices)
    np.testing.assert_array_equal(a.colors, b.colors)


def test_gpu_and_cpu_meshes_agree_on_random_views():
    dv = random_views(np.random.default_rng(5), 7)
    a, _ = tsdf_mesh(dv, 0.05, 0.2, backend="cpu")
    b, _ = tsdf_mesh(dv, 0.05, 0.2, backend="cuda")
    np.testing.assert_array_equal(a.faces, b.faces)
    np.testing.assert_array_equal(a.vertices, b.vertices)


@pytest.mark.parametrize("seed, min_surface, floor", [(0, 1, 1.0), (1, 2, 0.3)])
def test_allocation_on_the_device_matches_the_host(cupy, seed, min_surface, floor):
    """blocks.reserved_blocks' array code (each pixel's box spelt out elementwise: no BLAS) gives the
    same blocks and counts on CuPy as on NumPy, in small chunks and runs or in one piece."""
    from mvs_pipeline.mesh.blocks import reserved_blocks  # noqa: PLC0415

    dv = random_views(np.random.default_rng(seed), 6)
    host = reserved_blocks(np, dv, 0.06, 0.5, min_surface, floor)
    for chunk, run in ((23, 5), (1 << 40, 1 << 40)):
        dev = reserved_blocks(cupy, dv, 0.06, 0.5, min_surface, floor, chunk_pixels=chunk, expand_blocks=run)
        np.testing.assert_array_equal(dev[0], host[0])
        np.testing.assert_array_equal(cupy.asnumpy(dev[1]), host[1])
        if min_surface > 1:
            np.testing.assert_array_equal(cupy.asnumpy(dev[2]), host[2])


@pytest.mark.parametrize("seed, on_device", [(0, True), (1, True), (0, False)])
def test_merge_parts_on_the_device_matches_the_host(cupy, seed, on_device):
    """march.merge_parts' array code on CuPy against NumPy: random parts whose marked keys repeat
    within and across parts, and faces that collapse when copies merge; the parts on the device, or
    on the host (as tsdf.py keeps them) with the index work on the device."""
    from mvs_pipeline.mesh.march import merge_parts  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(3):
        nv = int(rng.integers(200, 400))
        key = rng.integers(0, 150, nv)                      # repeats: copies of one vertex
        merge = rng.random(nv) < 0.6
        pos = (key[:, None] * np.array([1.0, 2.0, 3.0])).astype(np.float32)   # copies share places
        col = (key[:, None] % 256).astype(np.uint8).repeat(3, axis=1)
        faces = rng.integers(0, nv, (int(rng.integers(300, 600)), 3)).astype(np.int32)
        parts.append((pos, col, faces, key, merge))
    dev = merge_parts([tuple(cupy.asarray(a) if on_device else a for a in p) for p in parts], cupy)
    host = merge_parts(parts)   # empties `parts`
    assert len(host[1]) > 100
    for a, b, what in zip(host, dev, ("positions", "faces", "colours")):
        np.testing.assert_array_equal(cupy.asnumpy(b), a, err_msg=what)


@pytest.mark.parametrize("seed", [0, 1])
def test_kernel_with_incidence_scale_matches_twin_and_the_scale_on_the_device_the_hosts(cupy, seed):
    from mvs_pipeline.mesh import cuda  # noqa: PLC0415
    from mvs_pipeline.mesh.layout import incidence_cos  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    dv = random_views(rng, 5)
    scales = []
    for v in range(dv.num_views):
        d = dv.view_depth(v)
        host = incidence_cos(np, d, dv.K[v], 0.25)
        dev = incidence_cos(cupy, cupy.asarray(d), dv.K[v], 0.25)
        np.testing.assert_array_equal(cupy.asnumpy(dev), host)
        scales.append(host.ravel())
    scale = np.concatenate(scales)
    assert scale.min() == np.float32(0.25) and ((scale > 0.25) & (scale < 1)).sum() > 50   # floored and not
    box = np.stack(np.meshgrid(*[np.arange(6)] * 3, indexing="ij"), -1).reshape(-1, 3)
    blocks = rng.permutation(box)[:100].astype(np.int32)
    origin = rng.uniform(-1.2, -0.8, 3).astype(np.float32)
    host = empty_accumulators(np, len(blocks) * BLOCK_VOXELS)
    dev = empty_accumulators(cupy, len(blocks) * BLOCK_VOXELS)
    cpu.tsdf_integrate(dv.depth, dv.rgb, dv.cams, dv.offsets, dv.sizes, (0, 5), origin, 0.05, 0.3, blocks, host,
                       scale=scale)
    cuda.tsdf_integrate(cupy.asarray(dv.depth), cupy.asarray(dv.rgb), cupy.asarray(dv.cams), cupy.asarray(dv.offsets),
                        cupy.asarray(dv.sizes), (0, 5), origin, 0.05, 0.3, cupy.asarray(blocks), dev,
                        scale=cupy.asarray(scale))
    assert host["rgb_weight"].max() > 0
    for key in host:
        np.testing.assert_array_equal(cupy.asnumpy(dev[key]), host[key], err_msg=key)


def test_gpu_and_cpu_meshes_agree_with_incidence_scale():
    views, depths, colours = sphere_views()
    dv = stack_views(views, depths, colours)
    a, _ = tsdf_mesh(dv, 0.02, 0.08, backend="cpu", min_surface=2, incidence_floor=0.2)
    b, _ = tsdf_mesh(dv, 0.02, 0.08, backend="cuda", min_surface=2, incidence_floor=0.2)
    np.testing.assert_array_equal(a.faces, b.faces)
    np.testing.assert_array_equal(a.vertices, b.vertices)
    np.testing.assert_array_equal(a.colors, b.colors)
