"""Three nearest neighbours (grid search), inverse-distance interpolation and its backward pass."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial import cKDTree

from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.ply import PointCloud
from mvs_pipeline.sampling.points.grid import choose_grid
from mvs_pipeline.sampling.points.three_nn import cpu as cpu_nn
from mvs_pipeline.sampling.points.three_nn.ops import (
    interpolate_attributes,
    inverse_distance_weights,
    three_interpolate,
    three_interpolate_backward,
    three_nn,
)


def sphere(n: int, seed: int, radius: float = 1.0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, 3))
    return (radius * v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def cases():
    rng = np.random.default_rng(0)
    return {
        "volume": (rng.random((3000, 3)).astype(np.float32), (rng.random((8000, 3)) * 1.6 - 0.3).astype(np.float32)),
        "surface": (sphere(6000, 1), sphere(20000, 2, 1.02)),
        "far_queries": (sphere(500, 3), (rng.normal(size=(300, 3)) * 50).astype(np.float32)),
        "flat": (np.c_[rng.random((2000, 2)), np.zeros(2000)].astype(np.float32),
                 np.c_[rng.random((3000, 2)), rng.normal(0, 0.01, 3000)].astype(np.float32)),
        "lattice_ties": (np.stack(np.meshgrid(*[np.arange(6)] * 3), -1).reshape(-1, 3).astype(np.float32),
                         (rng.integers(0, 12, (2000, 3)) * 0.5).astype(np.float32)),
    }


def kdtree_reference(queries, known):
    """Distances and indices of the 3 nearest, plus the 4th distance (to spot ties at slot 3)."""
    k = min(4, len(known))
    d, i = cKDTree(known.astype(np.float64)).query(queries.astype(np.float64), k=k)
    d4 = d[:, 3] if k == 4 else np.full(len(queries), np.inf)
    return d[:, :3], i[:, :3], d4


@pytest.mark.parametrize("name", list(cases()))
def test_three_nn_matches_kdtree(name):
    known, queries = cases()[name]
    dist, idx = three_nn(queries, known, backend="cpu")
    assert dist.dtype == np.float32 and idx.dtype == np.int64 and dist.shape == idx.shape == (len(queries), 3)
    ref_d, ref_i, ref_d4 = kdtree_reference(queries, known)
    np.testing.assert_allclose(dist, ref_d, rtol=1e-5, atol=1e-6)
    # Indices agree wherever the neighbour distances are not (near-)tied.
    gaps = np.diff(np.c_[ref_d, ref_d4], axis=1)  # [N, 3]: d1-d0, d2-d1, d3-d2
    clear = (gaps > 1e-5) & np.c_[np.ones(len(ref_d), bool), gaps[:, :2] > 1e-5]
    assert clear.mean() > (0.05 if name == "lattice_ties" else 0.95)
    np.testing.assert_array_equal(idx[clear], ref_i[clear])
    # Exact order: ascending float32 distance, ties to the lower index.
    d2 = ((queries[:, None, :] - known[idx]) ** 2).sum(-1)
    assert np.all((np.diff(dist, axis=1) > 0) | ((np.diff(dist, axis=1) == 0) & (np.diff(idx, axis=1) > 0)))
    np.testing.assert_allclose(dist, np.sqrt(d2), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["lattice_ties", "far_queries"])
def test_three_nn_exact_against_brute_force(name):
    """Bit-exact against a brute-force float32 search ordered by (dist2, index): ties included."""
    known, queries = cases()[name]
    dist, idx = three_nn(queries, known, backend="cpu")
    e = known[None, :, :] - queries[:, None, :]  # [N, M, 3] float32, same operation order
    d2 = e[..., 0] * e[..., 0] + e[..., 1] * e[..., 1] + e[..., 2] * e[..., 2]
    order = np.lexsort((np.broadcast_to(np.arange(len(known)), d2.shape), d2), axis=1)[:, :3]
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_array_equal(dist, np.sqrt(np.take_along_axis(d2, order, axis=1)))


def test_grid_independence():
    """The result must not depend on the grid: compare two very different cell sizes bit for bit."""
    known, queries = cases()["surface"]
    g = choose_grid(known)
    coarse = type(g)(g.origin, g.cell_size * 7.3, tuple(max(1, d // 7) for d in g.dims), g.margin)
    d1, i1 = cpu_nn.three_nn(queries, known, g)
    d2, i2 = cpu_nn.three_nn(queries, known, coarse)
    np.testing.assert_array_equal(d1, d2)
    np.testing.assert_array_equal(i1, i2)


def test_fewer_than_three_known():
    known = np.array([[0, 0, 0], [1, 0, 0]], np.float32)
    dist, idx = three_nn(np.array([[0.2, 0, 0]], np.float32), known, backend="cpu")
    assert idx.tolist() == [[0, 1, -1]]
    np.testing.assert_allclose(dist[0, :2], [0.2, 0.8], rtol=1e-6)
    assert np.isinf(dist[0, 2])
    w = inverse_distance_weights(dist, idx)
    assert w[0, 2] == 0 and abs(w.sum() - 1) < 1e-6


def test_bad_input():
    with pytest.raises(MVSError, match="empty"):
        three_nn(np.zeros((3, 3), np.float32), np.zeros((0, 3), np.float32), backend="cpu")
    with pytest.raises(MVSError, match="NaN"):
        three_nn(np.array([[np.nan, 0, 0]], np.float32), np.zeros((3, 3), np.float32), backend="cpu")
    dist, idx = three_nn(np.zeros((0, 3), np.float32), np.zeros((3, 3), np.float32), backend="cpu")
    assert dist.shape == (0, 3) and idx.shape == (0, 3)
    with pytest.raises(MVSError, match="out of range"):
        three_interpolate(np.zeros((2, 1), np.float32), np.array([[0, 1, 2]]), np.ones((1, 3), np.float32),
                          backend="cpu")


def test_interpolate_and_backward():
    rng = np.random.default_rng(5)
    known, queries = cases()["surface"]
    feats = rng.normal(size=(len(known), 5)).astype(np.float32)
    dist, idx = three_nn(queries, known, backend="cpu")
    w = inverse_distance_weights(dist, idx)
    np.testing.assert_allclose(w.sum(1), 1, rtol=1e-6)
    out = three_interpolate(feats, idx, w, backend="cpu")
    ref = np.einsum("nk,nkc->nc", w.astype(np.float64), feats[idx].astype(np.float64))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    # Backward: the adjoint of the forward map, <grad_out, J f> == <J^T grad_out, f>.
    grad_out = rng.normal(size=out.shape).astype(np.float32)
    grad = three_interpolate_backward(grad_out, idx, w, len(known), backend="cpu")
    lhs = float((grad_out.astype(np.float64) * out).sum())
    rhs = float((grad.astype(np.float64) * feats).sum())
    assert abs(lhs - rhs) < 1e-3 * max(1.0, abs(lhs))
    # At a known point its own value dominates (distance 0): interpolation reproduces it.
    d0, i0 = three_nn(known[:50], known, backend="cpu")
    np.testing.assert_array_equal(i0[:, 0], np.arange(50))
    at_known = three_interpolate(feats, i0, inverse_distance_weights(d0, i0), backend="cpu")
    np.testing.assert_allclose(at_known, feats[:50], atol=1e-5)


def test_interpolate_attributes_between_clouds():
    rng = np.random.default_rng(6)
    full = sphere(5000, 7)
    colors = np.clip((full + 1) * 127.5, 0, 255).astype(np.uint8)
    support = rng.integers(2, 9, len(full)).astype(np.uint8)
    source = PointCloud(xyz=full, normals=full.copy(), colors=colors, extra={"support": support,
                                                                             "conf": full[:, 2].copy()})
    target = sphere(800, 8)
    moved = interpolate_attributes(source, target, backend="cpu")
    assert moved.colors.dtype == np.uint8 and moved.extra["support"].dtype == np.uint8
    np.testing.assert_allclose(np.linalg.norm(moved.normals, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(moved.normals, target, atol=0.1)  # a sphere's normal is its position
    np.testing.assert_allclose(moved.extra["conf"], target[:, 2], atol=0.1)
    assert np.abs(moved.colors.astype(int) - np.clip((target + 1) * 127.5, 0, 255)).max() <= 13
    assert set(np.unique(moved.extra["support"])) <= set(range(2, 9))
    same = interpolate_attributes(source, full[:100], ["colors"], backend="cpu")  # exact hits copy
    np.testing.assert_array_equal(same.colors, colors[:100])
    with pytest.raises(MVSError, match="not in the source"):
        interpolate_attributes(source, target, ["nope"], backend="cpu")


# ---------------------------------------------------------------------------------------------
# CUDA
# ---------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name", list(cases()))
def test_gpu_three_nn_matches_cpu_twin(cupy, name):
    from mvs_pipeline.sampling.points.three_nn import cuda as knn

    known, queries = cases()[name]
    grid = choose_grid(known)
    d, i = knn.three_nn(cupy.asarray(queries), cupy.asarray(known), grid)  # outputs poisoned with NaN / -2
    cupy.cuda.Device().synchronize()
    ref_d, ref_i = cpu_nn.three_nn(queries, known, grid)
    np.testing.assert_array_equal(d.get(), ref_d)
    np.testing.assert_array_equal(i.get(), ref_i)


@pytest.mark.gpu
def test_gpu_public_api_and_chunking(cupy, monkeypatch):
    from mvs_pipeline.sampling.points.three_nn import ops as api

    known, queries = cases()["surface"]
    ref = three_nn(queries, known, backend="cpu")
    monkeypatch.setattr(api, "gpu_free_bytes", lambda: 4000 * 48 * 2)  # forces ~4000-query chunks
    d, i = three_nn(cupy.asarray(queries), cupy.asarray(known), backend="cuda")
    assert isinstance(d, cupy.ndarray)
    np.testing.assert_array_equal(d.get(), ref[0])
    np.testing.assert_array_equal(i.get(), ref[1])


@pytest.mark.gpu
def test_gpu_interpolate_forward_backward(cupy):
    from mvs_pipeline.sampling.points.three_nn import cuda as knn

    rng = np.random.default_rng(9)
    known, queries = cases()["surface"]
    dist, idx = three_nn(queries, known, backend="cpu")
    idx[::7, 2] = -1  # skipped slots
    w = inverse_distance_weights(dist, idx)
    feats = rng.normal(size=(len(known), 6)).astype(np.float32)
    out = knn.three_interpolate(cupy.asarray(feats), cupy.asarray(idx.astype(np.int32)), cupy.asarray(w))
    np.testing.assert_array_equal(out.get(), cpu_nn.three_interpolate(feats, idx, w))
    grad_out = rng.normal(size=(len(queries), 6)).astype(np.float32)
    g = knn.three_interpolate_backward(cupy.asarray(grad_out), cupy.asarray(idx.astype(np.int32)),
                                       cupy.asarray(w), len(known))
    np.testing.assert_allclose(g.get(), cpu_nn.three_interpolate_backward(grad_out, idx, w, len(known)),
                               rtol=1e-5, atol=1e-5)
