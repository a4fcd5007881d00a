"""Voxel pooling: interval reduction (CUDA kernel, Numba twin) against an np.unique reference."""

from __future__ import annotations

import numpy as np
import pytest

from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.ply import PointCloud
from mvs_pipeline.sampling.points.voxel_pool import cpu as cpu_vp
from mvs_pipeline.sampling.points.voxel_pool.ops import sort_intervals, voxel_coordinates, voxel_downsample, voxel_pool


def cloud(n: int, seed: int = 0, scale: float = 3.0):
    rng = np.random.default_rng(seed)
    xyz = (rng.random((n, 3)) * scale - 1).astype(np.float32)
    feats = rng.normal(size=(n, 5)).astype(np.float32)
    return xyz, feats


def reference_keys(xyz, voxel):
    """Voxel keys written independently of the implementation (same float64 floor rule)."""
    origin = xyz.min(axis=0).astype(np.float64)
    c = np.floor((xyz.astype(np.float64) - origin) * (1.0 / voxel)).astype(np.int64)
    return c, c[:, 0] + 10**6 * (c[:, 1] + 10**6 * c[:, 2])


@pytest.mark.parametrize("voxel", [0.05, 0.3, 10.0])
def test_pool_matches_unique_reference(voxel):
    xyz, feats = cloud(20000, 1)
    pooled = voxel_pool(xyz, feats, voxel, backend="cpu")
    coords, keys = reference_keys(xyz, voxel)
    uniq, means, counts = cpu_vp.pool_reference(keys, np.concatenate([xyz, feats], axis=1))
    # Both enumerate voxels in increasing (k, j, i) order, so rows line up.
    assert len(uniq) == len(pooled.counts)
    np.testing.assert_array_equal(pooled.counts, counts)
    np.testing.assert_array_equal(pooled.xyz, means[:, :3])  # same summation order: bit-exact
    np.testing.assert_array_equal(pooled.features, means[:, 3:])
    np.testing.assert_array_equal(pooled.coords[pooled.point_voxel], coords)
    # Every point's voxel holds it: mean of its members equals the pooled position.
    v = pooled.point_voxel[123]
    members = xyz[pooled.point_voxel == v]
    np.testing.assert_allclose(members.mean(axis=0), pooled.xyz[v], rtol=1e-6, atol=1e-6)


def test_interval_reductions_twins():
    rng = np.random.default_rng(2)
    keys = rng.integers(0, 50, 5000)
    values = rng.normal(size=5000).astype(np.float32)
    values[::97] = values.max()  # ties of the maximum: the first (lowest index) wins
    iv = sort_intervals(keys)
    np.testing.assert_array_equal(iv.keys, np.unique(keys))
    top, arg = cpu_vp.pool_max(values, iv.order, iv.starts)
    for v, k in enumerate(iv.keys):
        members = np.flatnonzero(keys == k)
        assert top[v] == values[members].max()
        assert arg[v] == members[np.argmax(values[members])]


def numpy_voxel_reference(pc: PointCloud, voxel: float):
    """The pooled cloud written with plain NumPy (np.unique, bincount, maximum.at), independently of
    the implementation: mean xyz/normal/colour, normal re-normalised, colour rounded, support max."""
    _, keys = reference_keys(pc.xyz, voxel)
    uniq, inv, counts = np.unique(keys, return_inverse=True, return_counts=True)

    def mean(a):
        a = np.asarray(a, np.float32).astype(np.float64)
        return np.stack([np.bincount(inv, weights=a[:, i], minlength=len(uniq)) for i in range(a.shape[1])],
                        axis=1) / counts[:, None]

    normals = mean(pc.normals)
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    support = np.zeros(len(uniq), np.uint8)
    np.maximum.at(support, inv, pc.extra["support"])
    return {"xyz": mean(pc.xyz), "normals": normals, "colors": mean(pc.colors), "support": support,
            "voxel_count": counts}


def attributed_cloud(n: int, seed: int = 3) -> PointCloud:
    xyz, feats = cloud(n, seed)
    normals = feats[:, :3] / np.linalg.norm(feats[:, :3], axis=1, keepdims=True)
    rng = np.random.default_rng(seed + 1)
    colors = (rng.random((n, 3)) * 255).astype(np.uint8)
    support = rng.integers(2, 10, n).astype(np.uint8)
    return PointCloud(xyz=xyz, normals=normals.astype(np.float32), colors=colors, extra={"support": support})


def test_downsample_cloud_attributes():
    pc = attributed_cloud(5000)
    out = voxel_downsample(pc, 0.5, backend="cpu")
    ref = numpy_voxel_reference(pc, 0.5)
    assert out.extra["voxel_count"].dtype == np.int32 and out.colors.dtype == np.uint8
    assert out.extra["support"].dtype == np.uint8
    np.testing.assert_array_equal(out.extra["voxel_count"], ref["voxel_count"])
    assert out.extra["voxel_count"].sum() == 5000 and out.extra["voxel_count"].max() > 1
    np.testing.assert_allclose(out.xyz, ref["xyz"], atol=1e-6)
    np.testing.assert_allclose(out.normals, ref["normals"], atol=1e-5)
    # colours are means rounded to uint8; float32 vs float64 means may round a .5 the other way
    assert np.abs(out.colors.astype(int) - np.rint(ref["colors"])).max() <= 1
    assert np.mean(out.colors == np.rint(ref["colors"])) > 0.99
    np.testing.assert_array_equal(out.extra["support"], ref["support"])  # the maximum, not the mean


def test_edge_cases_and_bad_input():
    one = voxel_pool(np.array([[1, 2, 3]], np.float32), None, 0.1, backend="cpu")
    assert one.counts.tolist() == [1] and one.features.shape == (1, 0)
    same = voxel_pool(np.ones((10, 3), np.float32), None, 0.1, backend="cpu")
    assert same.counts.tolist() == [10]
    lattice = np.stack(np.meshgrid(*[np.arange(4)] * 3), -1).reshape(-1, 3).astype(np.float32)
    assert len(voxel_pool(lattice, None, 1.0, backend="cpu").counts) == 64  # points on voxel faces
    assert len(voxel_pool(lattice, None, 2.0, backend="cpu").counts) == 8
    xyz, feats = cloud(100)
    with pytest.raises(MVSError, match="voxel_size"):
        voxel_pool(xyz, None, 0.0, backend="cpu")
    with pytest.raises(MVSError, match="too small"):
        voxel_pool(np.array([[0, 0, 0], [1e30, 1e30, 1e30]], np.float32), None, 1e-9, backend="cpu")
    with pytest.raises(MVSError, match="NaN"):
        voxel_pool(np.array([[np.nan, 0, 0]], np.float32), None, 1.0, backend="cpu")
    with pytest.raises(MVSError, match="features"):
        voxel_pool(xyz, feats[:50], 1.0, backend="cpu")
    with pytest.raises(MVSError, match="origin"):
        voxel_pool(xyz, None, 1.0, origin=(0, 0, 0), backend="cpu")
    with pytest.raises(MVSError, match="empty"):
        voxel_pool(np.zeros((0, 3), np.float32), None, 1.0, backend="cpu")


def test_voxel_coordinates_rule():
    xyz = np.array([[0.0, 0.1, 0.29999], [0.3, -0.05, 0.6]], np.float32)
    c = voxel_coordinates(xyz, 0.1, np.array([-0.1, -0.1, -0.1]))
    np.testing.assert_array_equal(c, np.floor((xyz.astype(np.float64) + 0.1) * 10).astype(np.int64))


# ---------------------------------------------------------------------------------------------
# CUDA
# ---------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_kernels_match_twins(cupy):
    from mvs_pipeline.sampling.points.voxel_pool import cuda as kvp

    rng = np.random.default_rng(7)
    keys = rng.integers(0, 3000, 100000)
    feats = rng.normal(size=(100000, 7)).astype(np.float32)
    iv = sort_intervals(keys)
    iv_gpu = sort_intervals(cupy.asarray(keys))
    np.testing.assert_array_equal(iv_gpu.order.get(), iv.order)  # stable on both
    np.testing.assert_array_equal(iv_gpu.starts.get(), iv.starts)
    mean = kvp.pool_mean(cupy.asarray(feats), iv_gpu.order, iv_gpu.starts)  # output poisoned with NaN
    np.testing.assert_array_equal(mean.get(), cpu_vp.pool_mean(feats, iv.order, iv.starts))
    values = feats[:, 0].copy()
    values[::101] = values.max()
    top, arg = kvp.pool_max(cupy.asarray(values), iv_gpu.order, iv_gpu.starts)
    ref_top, ref_arg = cpu_vp.pool_max(values, iv.order, iv.starts)
    np.testing.assert_array_equal(top.get(), ref_top)
    np.testing.assert_array_equal(arg.get(), ref_arg)


@pytest.mark.gpu
def test_gpu_pooled_cloud_matches_cpu(cupy):
    """The device-resident pooling (the sampling stage's) equals the CPU twin bit for bit, from host
    or device inputs, and its outputs stay on the GPU."""
    from mvs_pipeline.sampling.points.device_cloud import to_device, to_host_cloud
    from mvs_pipeline.sampling.points.voxel_pool.ops import pool_point_cloud

    pc = attributed_cloud(300000, 9)
    pc.extra["weight"] = np.random.default_rng(1).random(300000).astype(np.float32)
    ref = voxel_downsample(pc, 0.05, backend="cpu")
    for source in (pc, to_device(pc)):
        got = pool_point_cloud(source, 0.05, backend="cuda")
        assert isinstance(got.xyz, cupy.ndarray) and isinstance(got.extra["support"], cupy.ndarray)
        got = to_host_cloud(got)
        np.testing.assert_array_equal(got.xyz, ref.xyz)
        np.testing.assert_array_equal(got.normals, ref.normals)
        np.testing.assert_array_equal(got.colors, ref.colors)
        assert set(got.extra) == set(ref.extra)
        for name in ref.extra:
            assert got.extra[name].dtype == ref.extra[name].dtype
            np.testing.assert_array_equal(got.extra[name], ref.extra[name])


@pytest.mark.gpu
def test_gpu_public_api_matches_cpu(cupy):
    xyz, feats = cloud(200000, 8)
    a = voxel_pool(xyz, feats, 0.07, backend="cuda")
    b = voxel_pool(xyz, feats, 0.07, backend="cpu")
    for name in ("xyz", "features", "counts", "coords", "point_voxel"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_float_attributes_checked_and_flushed():
    """Float attribute columns are checked (NaN raises) and their subnormals pooled as 0 (what the
    GPU's flush-to-zero arithmetic would make of them); integer columns need neither."""
    from mvs_pipeline.sampling.points.voxel_pool.ops import pool_point_cloud

    pc = attributed_cloud(3000, 5)
    pc.xyz[[5, 9]] = [[50, 50, 50], [60, 60, 60]]  # alone in their voxels: their means are their values
    pc.extra["weight"] = np.random.default_rng(2).random(3000).astype(np.float32)
    tiny = PointCloud(xyz=pc.xyz, normals=pc.normals.copy(), colors=pc.colors,
                      extra={**pc.extra, "weight": pc.extra["weight"].copy()})
    tiny.normals[[5, 77], 1] = [1e-40, -3e-39]
    tiny.extra["weight"][9] = 2e-41
    assert voxel_downsample(tiny, 0.3, backend="cpu").extra["weight"][-1] == 0  # flushed, not 2e-41
    flushed = PointCloud(xyz=pc.xyz, normals=tiny.normals.copy(), colors=pc.colors,
                         extra={**pc.extra, "weight": tiny.extra["weight"].copy()})
    flushed.normals[[5, 77], 1] = 0
    flushed.extra["weight"][9] = 0
    a, b = voxel_downsample(tiny, 0.3, backend="cpu"), voxel_downsample(flushed, 0.3, backend="cpu")
    np.testing.assert_array_equal(a.normals, b.normals)
    np.testing.assert_array_equal(a.extra["weight"], b.extra["weight"])
    tiny.normals[12, 0] = np.nan
    with pytest.raises(MVSError, match="NaN"):
        pool_point_cloud(tiny, 0.3, backend="cpu")
