"""The TSDF kernel (cuda/mesh_tsdf.cu) against its Numba twin (mesh/cpu.py): the same sums, bit for
bit, on random inputs and edge cases; and the same mesh end to end."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.mesh import cpu
from mvs_pipeline.mesh.layout import empty_accumulators
from mvs_pipeline.mesh.tsdf import stack_views, tsdf_mesh

from .sphere_views import sphere_views

pytestmark = pytest.mark.gpu


def random_views(rng, num_views: int):
    """Random cameras around the unit cube, random depth maps (a fifth without depth), random colours;
    sizes differ per view."""
    from .sphere_views import View, look_at  # noqa: PLC0415

    views, depths, colours = [], [], []
    for i in range(num_views):
        w, h = int(rng.integers(17, 90)), int(rng.integers(13, 70))
        f = float(rng.uniform(0.5, 1.5)) * w
        K = np.array([[f, 0, w / 2 + rng.uniform(-3, 3)], [0, f * rng.uniform(0.9, 1.1), h / 2], [0, 0, 1.0]])
        eye = rng.normal(size=3)
        eye = 2.5 * eye / np.linalg.norm(eye)
        if i == 0:
            eye = np.array([0.0, 0.0, 0.3])   # inside the volume: voxels behind it (z <= 0)
        R, t = look_at(eye, rng.uniform(-0.3, 0.3, 3) + (0.0 if i else 1.0))
        d = rng.uniform(0.5, 4.0, (h, w)).astype(np.float32)
        d[rng.random((h, w)) < 0.2] = 0.0
        d[0, 0] = -1.0
        views.append(View(f"r{i}", K, R, t, w, h))
        depths.append(d)
        colours.append(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    return stack_views(views, depths, colours)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernel_matches_twin_bit_for_bit(cupy, seed):
    from mvs_pipeline.mesh import cuda  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    dv = random_views(rng, 7)
    shape = (int(rng.integers(5, 40)), int(rng.integers(5, 40)), int(rng.integers(5, 40)))
    origin = rng.uniform(-1.2, -0.8, 3).astype(np.float32)
    voxel, trunc = np.float32(rng.uniform(0.02, 0.08)), np.float32(rng.uniform(0.05, 0.5))
    host = empty_accumulators(np, shape)
    dev = empty_accumulators(cupy, shape)
    for vr in ((0, 3), (3, 7), (7, 7)):   # two groups, then an empty range
        cpu.tsdf_integrate(dv.depth, dv.rgb, dv.cams, dv.offsets, dv.sizes, vr, origin, voxel, trunc, shape, host)
        cuda.tsdf_integrate(cupy.asarray(dv.depth), cupy.asarray(dv.rgb), cupy.asarray(dv.cams),
                            cupy.asarray(dv.offsets), cupy.asarray(dv.sizes), vr, origin, voxel, trunc, shape, dev)
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
    shape = (10, 10, 3)
    origin = np.array([-0.5, -0.5, 2.0], np.float32)   # x, y = -0.5 .. 4.0: u, v = -1 .. 8 (the image's edge)
    host, dev = empty_accumulators(np, shape), empty_accumulators(cupy, shape)
    cpu.tsdf_integrate(dv.depth, dv.rgb, dv.cams, dv.offsets, dv.sizes, (0, 1), origin, 0.5, 0.2, shape, host)
    cuda.tsdf_integrate(cupy.asarray(dv.depth), cupy.asarray(dv.rgb), cupy.asarray(dv.cams), cupy.asarray(dv.offsets),
                        cupy.asarray(dv.sizes), (0, 1), origin, 0.5, 0.2, shape, dev)
    for key in host:
        np.testing.assert_array_equal(cupy.asnumpy(dev[key]), host[key], err_msg=key)
    assert int(host["weight"].reshape(shape)[:, :, 0].sum()) == 8 * 8   # u, v in 0 .. 7 only


def test_gpu_and_cpu_meshes_agree():
    views, depths, colours = sphere_views()
    dv = stack_views(views, depths, colours)
    a, _ = tsdf_mesh(dv, 0.02, 0.08, tile=32, backend="cpu")
    b, _ = tsdf_mesh(dv, 0.02, 0.08, tile=32, backend="cuda")
    np.testing.assert_array_equal(a.faces, b.faces)
    np.testing.assert_array_equal(a.vertices, b.vertices)
    np.testing.assert_array_equal(a.colors, b.colors)
