"""Exact farthest point sampling: reference, Numba twins, CUDA kernels and the public API."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from mvs_pipeline.errors import BackendUnavailable, MVSError
from mvs_pipeline.sampling.points import validate
from mvs_pipeline.sampling.points.fps.cpu import fps_plain, fps_reference, fps_tree
from mvs_pipeline.sampling.points.fps.ops import farthest_point_sampling, farthest_point_sampling_batch

# ---------------------------------------------------------------------------------------------
# Test clouds
# ---------------------------------------------------------------------------------------------

def random_cloud(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 3)).astype(np.float32) * 4 - 2


def sphere_cloud(n: int, seed: int = 0) -> np.ndarray:
    """Surface-like: points on a sphere plus a plane under it."""
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(n, 3))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    plane = np.c_[rng.uniform(-3, 3, n // 3), rng.uniform(-3, 3, n // 3), np.full(n // 3, -1.5)]
    return np.concatenate([v[: n - n // 3], plane]).astype(np.float32)


def duplicate_cloud(n: int, seed: int = 0) -> np.ndarray:
    """Few distinct positions on an integer lattice, each repeated many times: exact ties everywhere."""
    return np.random.default_rng(seed).integers(0, 5, size=(n, 3)).astype(np.float32)


def grid_plane(side: int) -> np.ndarray:
    """A regular planar grid: many exactly equal distances, so the tie rule decides."""
    u, v = np.meshgrid(np.arange(side), np.arange(side), indexing="ij")
    return np.c_[u.ravel(), v.ravel(), np.zeros(side * side)].astype(np.float32) * np.float32(0.1)


CLOUDS = {
    "random": random_cloud(3000, 1),
    "sphere": sphere_cloud(3000, 2),
    "duplicates": duplicate_cloud(2000, 3),
    "grid": grid_plane(40),
}


def brute_force_d2(xyz: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Independent check of the selection distances: d2[k] = max_i min_{j<k} |p_i - p_sel_j|^2 (float64)."""
    p = xyz.astype(np.float64)
    mind = np.full(len(p), np.inf)
    out = [np.inf]
    for k in range(1, len(indices)):
        mind = np.minimum(mind, ((p - p[indices[k - 1]]) ** 2).sum(1))
        out.append(mind.max())
    return np.array(out)


# ---------------------------------------------------------------------------------------------
# CPU: reference properties and twins
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(CLOUDS))
def test_reference_is_greedy_farthest(name):
    xyz = CLOUDS[name]
    m = 300
    idx, d2 = fps_reference(xyz, m, start=7)
    assert idx[0] == 7 and np.isinf(d2[0])
    assert len(set(idx.tolist())) == m  # distinct even with duplicates
    assert np.all(np.diff(d2[1:]) <= 0)  # covering radius never grows
    ref = brute_force_d2(xyz, idx)
    np.testing.assert_allclose(d2[1:], ref[1:], rtol=1e-5, atol=1e-6)
    # The pick is the lowest index among the points at the maximal distance.
    mind = np.full(len(xyz), np.inf, dtype=np.float32)
    selected = np.zeros(len(xyz), dtype=bool)
    for k in range(1, 40):
        dx = xyz - xyz[idx[k - 1]]
        mind = np.minimum(mind, dx[:, 0] * dx[:, 0] + dx[:, 1] * dx[:, 1] + dx[:, 2] * dx[:, 2])
        selected[idx[k - 1]] = True
        cand = np.flatnonzero(~selected & (mind == mind[~selected].max()))
        assert idx[k] == cand[0]


@pytest.mark.parametrize("name", list(CLOUDS))
@pytest.mark.parametrize("start", [0, 123])
def test_twins_match_reference(name, start):
    xyz = CLOUDS[name]
    m = 400
    ref_idx, ref_d2 = fps_reference(xyz, m, start)
    for idx, d2 in (fps_plain(xyz, m, start), fps_tree(xyz, m, start, leaf_size=8), fps_tree(xyz, m, start, 64)):
        np.testing.assert_array_equal(idx, ref_idx)
        np.testing.assert_array_equal(d2, ref_d2)


def test_all_points_and_tiny_clouds():
    xyz = duplicate_cloud(500, 9)  # 125 distinct positions, M = N: a full permutation
    ref = fps_reference(xyz, 500, 3)[0]
    np.testing.assert_array_equal(np.sort(ref), np.arange(500))
    np.testing.assert_array_equal(fps_tree(xyz, 500, 3, leaf_size=4)[0], ref)
    np.testing.assert_array_equal(fps_plain(xyz, 500, 3)[0], ref)
    one = np.zeros((1, 3), dtype=np.float32)
    assert fps_tree(one, 1, 0)[0].tolist() == [0]
    same = np.ones((7, 3), dtype=np.float32)  # all identical: lowest unselected index each time
    assert fps_tree(same, 7, 4, leaf_size=2)[0].tolist() == [4, 0, 1, 2, 3, 5, 6]


def test_tree_on_larger_surface_cloud():
    xyz = sphere_cloud(60000, 5)
    idx, d2 = fps_tree(xyz, 3000, 11)
    ref_idx, ref_d2 = fps_plain(xyz, 3000, 11)
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_array_equal(d2, ref_d2)


def _assert_same_or_tie(xyz, ours, theirs):
    """Equal sequences, or equal up to an exact distance tie that we broke towards the lower index."""
    theirs = np.asarray(theirs, dtype=np.int64)
    if np.array_equal(ours, theirs):
        return
    k = int(np.argmax(ours != theirs))
    mind = np.full(len(xyz), np.inf, dtype=np.float32)
    for s in ours[:k]:
        dx = xyz - xyz[s]
        mind = np.minimum(mind, dx[:, 0] * dx[:, 0] + dx[:, 1] * dx[:, 1] + dx[:, 2] * dx[:, 2])
    assert mind[ours[k]] == mind[theirs[k]], f"sequences differ at sample {k} without a tie"
    assert ours[k] < theirs[k]


@pytest.mark.parametrize("variant", ["fps_sampling", "bucket_fps_kdtree_sampling", "bucket_fps_kdline_sampling"])
def test_matches_fpsample_exact_variants(variant):
    fpsample = pytest.importorskip("fpsample")
    xyz = sphere_cloud(20000, 4)
    m = 1500
    fn = getattr(fpsample, variant)
    theirs = fn(xyz, m, h=5, start_idx=0) if "kdline" in variant else fn(xyz, m, start_idx=0)
    # fpsample's bucket variants may start elsewhere than start_idx; follow their first sample.
    start = int(theirs[0])
    ours = farthest_point_sampling(xyz, m, start, backend="cpu")
    _assert_same_or_tie(xyz, ours, theirs)


# ---------------------------------------------------------------------------------------------
# Public API (CPU)
# ---------------------------------------------------------------------------------------------

def test_public_api_methods_agree():
    xyz = sphere_cloud(20000, 6)
    ref = fps_plain(xyz, 500, 5)
    for method in ("auto", "tree", "plain"):
        idx, d2 = farthest_point_sampling(xyz, 500, 5, backend="cpu", method=method, return_d2=True)
        assert idx.dtype == np.int64
        np.testing.assert_array_equal(idx, ref[0])
        np.testing.assert_array_equal(d2, ref[1])


def test_float64_input_and_subnormals():
    xyz64 = random_cloud(2000, 7).astype(np.float64)
    np.testing.assert_array_equal(farthest_point_sampling(xyz64, 100, backend="cpu"),
                                  fps_reference(xyz64.astype(np.float32), 100)[0])
    xyz = random_cloud(1000, 8)
    xyz[:10, 0] = 1e-40  # subnormal: every backend treats it as 0
    flushed = xyz.copy()
    flushed[:10, 0] = 0
    np.testing.assert_array_equal(farthest_point_sampling(xyz, 200, backend="cpu"), fps_reference(flushed, 200)[0])


def test_batch_cpu():
    clouds = np.stack([random_cloud(800, s) for s in range(3)])
    out = farthest_point_sampling_batch(clouds, 50, start_index=[0, 5, 9], backend="cpu")
    assert out.shape == (3, 50)
    for b, s in enumerate([0, 5, 9]):
        np.testing.assert_array_equal(out[b], fps_reference(clouds[b], 50, s)[0])


@pytest.mark.parametrize("xyz, m, start, match", [
    (np.zeros((0, 3), np.float32), 1, 0, "empty"),
    (random_cloud(10), 11, 0, "exceeds"),
    (random_cloud(10), 0, 0, "at least 1"),
    (random_cloud(10), 5, 10, "out of range"),
    (random_cloud(10), 5, -1, "out of range"),
    (np.zeros((10, 2), np.float32), 5, 0, r"\[N, 3\]"),
    (np.array([[0, 0, 0], [np.nan, 0, 0], [1, 1, 1]], np.float32), 2, 0, "NaN"),
    (np.array([[0, 0, 0], [np.inf, 0, 0]], np.float32), 1, 0, "infinite"),
])
def test_bad_input(xyz, m, start, match):
    with pytest.raises(MVSError, match=match):
        farthest_point_sampling(xyz, m, start, backend="cpu")


def test_bad_batch_input():
    with pytest.raises(MVSError, match="exceeds"):
        farthest_point_sampling_batch(np.zeros((2, 5, 3), np.float32), 6, backend="cpu")
    with pytest.raises(MVSError, match="start_index"):
        farthest_point_sampling_batch(np.zeros((2, 5, 3), np.float32), 2, start_index=[0, 5], backend="cpu")


def test_gpu_memory_fallback_decision(monkeypatch, caplog):
    monkeypatch.setattr(validate, "gpu_free_bytes", lambda: 1000)
    with caplog.at_level(logging.WARNING):
        assert validate.gpu_memory_fallback("FPS of 1e9 points", 10**6, "auto") == "cpu"
    assert "running on the CPU" in caplog.text
    with pytest.raises(BackendUnavailable, match="GPU memory"):
        validate.gpu_memory_fallback("FPS of 1e9 points", 10**6, "cuda")
    assert validate.gpu_memory_fallback("small", 100, "auto") == "cuda"


@pytest.mark.parametrize("grid, threads", [(132, 512), (264, 256), (108, 512)])
def test_tree_auto_leaf_size_is_balanced_and_fits(grid, threads):
    from mvs_pipeline.sampling.points.fps import cuda as kfps

    # The tree kernel's auto shape up to 200 M points (on 108 blocks its largest leaf, 512, is too small
    # to balance from ~225 M and overruns the budget from ~250 M); fps_batched, the GPU default, takes
    # the larger clouds (test_batched_leaf_size_up_to_the_limit).
    for n in (1, 3000, 10**6, 4 * 10**6, 16 * 10**6, 50 * 10**6, 200 * 10**6):
        def balanced(leaf):
            return leaf * leaf * grid * threads >= n * kfps.AUTO_LEAF_BALANCE

        def fits(leaf):
            leaves_per_block = -(-n // (leaf * grid))  # = ceil(ceil(n / leaf) / grid)
            return (leaves_per_block * kfps.TREE_SHARED_BYTES_PER_LEAF <= kfps.AUTO_MAX_SHARED_BYTES
                    and -(-leaves_per_block // threads) <= kfps.MAX_LEAVES_PER_THREAD)

        leaf = kfps.choose_leaf_size(n, grid, threads)
        assert kfps.MIN_LEAF_SIZE <= leaf <= 32 * kfps.MAX_POINTS_PER_LANE and leaf & (leaf - 1) == 0
        assert fits(leaf) and balanced(leaf)
        assert leaf == kfps.MIN_LEAF_SIZE or not (fits(leaf // 2) and balanced(leaf // 2))  # the smallest


# ---------------------------------------------------------------------------------------------
# CUDA
# ---------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CLOUDS))
def test_gpu_block_kernel_matches_reference(cupy, name):
    from mvs_pipeline.sampling.points.fps import cuda as kfps

    xyz = CLOUDS[name]
    clouds = np.stack([xyz, xyz[::-1].copy(), np.roll(xyz, 17, axis=0)])
    starts = np.array([0, 42, len(xyz) - 1], dtype=np.int32)
    m = 400
    idx, d2 = kfps.fps_block(cupy.asarray(clouds), cupy.asarray(starts), m)
    cupy.cuda.Device().synchronize()
    idx, d2 = idx.get(), d2.get()
    for b in range(3):
        ref_idx, ref_d2 = fps_reference(clouds[b], m, int(starts[b]))
        np.testing.assert_array_equal(idx[b], ref_idx)
        np.testing.assert_array_equal(d2[b], ref_d2)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CLOUDS))
@pytest.mark.parametrize("leaf_size, blocks_per_sm", [(None, 1), (32, 1), (8, 2), (1, 1)])
def test_gpu_tree_kernel_matches_reference(cupy, name, leaf_size, blocks_per_sm):
    from mvs_pipeline.sampling.points.fps import cuda as kfps

    xyz = CLOUDS[name]
    m = 500
    idx, d2, info = kfps.fps_tree(cupy.asarray(xyz), m, 31, leaf_size=leaf_size, blocks_per_sm=blocks_per_sm)
    ref_idx, ref_d2 = fps_reference(xyz, m, 31)
    np.testing.assert_array_equal(idx.get(), ref_idx)
    np.testing.assert_array_equal(d2.get(), ref_d2)
    assert info["grid"] >= 1


@pytest.mark.gpu
@pytest.mark.parametrize("leaf_size, blocks_per_sm, threads", [
    (100, 1, 1024),  # 4 points per lane, the last lanes of each leaf idle
    (512, 1, 64),    # the largest leaf: 16 points per lane
    (1, 1, 64),      # 8 leaves per thread, some past the end of the cloud
    (3, 2, 64),      # two polling warps with 5 slots per lane
])
def test_gpu_tree_kernel_shapes(cupy, leaf_size, blocks_per_sm, threads):
    from mvs_pipeline.sampling.points.fps import cuda as kfps

    xyz = sphere_cloud(40000, 9)
    xyz[::7] = xyz[3]  # exact duplicates: ties and zero distances
    m = 300
    idx, d2, info = kfps.fps_tree(cupy.asarray(xyz), m, 5, leaf_size=leaf_size, blocks_per_sm=blocks_per_sm,
                                  threads=threads)
    ref_idx, ref_d2 = fps_reference(xyz, m, 5)
    np.testing.assert_array_equal(idx.get(), ref_idx)
    np.testing.assert_array_equal(d2.get(), ref_d2)
    assert info["threads"] == threads and info["leaf_size"] == leaf_size


@pytest.mark.gpu
def test_gpu_tree_all_points_and_odd_sizes(cupy):
    from mvs_pipeline.sampling.points.fps import cuda as kfps

    xyz = duplicate_cloud(1001, 12)  # N not a multiple of the leaf size, M = N
    idx, _d2, _ = kfps.fps_tree(cupy.asarray(xyz), 1001, 1000, leaf_size=32)
    np.testing.assert_array_equal(idx.get(), fps_reference(xyz, 1001, 1000)[0])
    one = cupy.zeros((1, 3), dtype=cupy.float32)
    assert kfps.fps_tree(one, 1, 0)[0].get().tolist() == [0]
    two = cupy.asarray(np.array([[0, 0, 0], [1, 0, 0]], np.float32))
    assert kfps.fps_tree(two, 2, 1)[0].get().tolist() == [1, 0]


@pytest.mark.gpu
def test_gpu_tree_large_surface_matches_cpu_tree(cupy):
    xyz = sphere_cloud(400000, 13)
    m = 20000
    gpu_idx, gpu_d2 = farthest_point_sampling(cupy.asarray(xyz), m, 77, backend="cuda", method="tree",
                                              return_d2=True)
    assert isinstance(gpu_idx, cupy.ndarray)
    cpu_idx, cpu_d2 = fps_tree(xyz, m, 77)
    np.testing.assert_array_equal(gpu_idx.get(), cpu_idx)
    np.testing.assert_array_equal(gpu_d2.get(), cpu_d2)
    # Pruning: far less distance work than a full pass per sample.
    from mvs_pipeline.sampling.points.fps import cuda as kfps

    _, _, info = kfps.fps_tree(cupy.asarray(xyz), m, 77)
    assert 0 < info["work_fraction"] < 0.01, info  # the CPU twin's tree does ~0.12% here


@pytest.mark.gpu
def test_gpu_matches_fpsample(cupy):
    fpsample = pytest.importorskip("fpsample")
    xyz = sphere_cloud(50000, 14)
    theirs = fpsample.bucket_fps_kdline_sampling(xyz, 2000, h=7, start_idx=0)
    ours = farthest_point_sampling(xyz, 2000, int(theirs[0]), backend="cuda")
    _assert_same_or_tie(xyz, ours, theirs)


@pytest.mark.gpu
def test_gpu_batch_and_methods(cupy):
    clouds = np.stack([sphere_cloud(5000, s) for s in range(4)])
    out = farthest_point_sampling_batch(clouds, 300, start_index=3, backend="cuda")
    for b in range(4):
        np.testing.assert_array_equal(out[b], fps_reference(clouds[b], 300, 3)[0])
    xyz = clouds[0]
    plain = farthest_point_sampling(xyz, 300, backend="cuda", method="plain")
    tree = farthest_point_sampling(xyz, 300, backend="cuda", method="tree")
    np.testing.assert_array_equal(plain, tree)
    np.testing.assert_array_equal(plain, fps_reference(xyz, 300)[0])


@pytest.mark.gpu
def test_gpu_out_of_memory_falls_back(cupy, monkeypatch, caplog):
    monkeypatch.setattr(validate, "gpu_free_bytes", lambda: 1 << 20)
    xyz = sphere_cloud(30000, 15)
    with caplog.at_level(logging.WARNING):
        idx = farthest_point_sampling(xyz, 100, backend="auto")
    assert "running on the CPU" in caplog.text
    np.testing.assert_array_equal(idx, fps_reference(xyz, 100)[0])
    with pytest.raises(BackendUnavailable):
        farthest_point_sampling(xyz, 100, backend="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(CLOUDS))
@pytest.mark.parametrize("leaf_size", [None, 32, 1])
def test_gpu_batched_kernel_matches_reference(cupy, name, leaf_size):
    """Many samples per exchange, the reference's sequence and distances (keys tie to the lower
    index on the grid plane and the duplicate cloud)."""
    from mvs_pipeline.sampling.points.fps.batched import fps_batched

    xyz = CLOUDS[name]
    m = 500
    idx, d2, info = fps_batched(cupy.asarray(xyz), m, 31, leaf_size=leaf_size)
    ref_idx, ref_d2 = fps_reference(xyz, m, 31)
    np.testing.assert_array_equal(idx.get(), ref_idx)
    np.testing.assert_array_equal(d2.get(), ref_d2)
    assert 1 <= info["rounds"] < m   # several samples a round


@pytest.mark.gpu
@pytest.mark.parametrize("grid", [1, 7])
def test_gpu_batched_kernel_on_few_blocks(cupy, grid):
    """Few blocks: many leaves per block (groups of 32 leaves, several groups per warp)."""
    from mvs_pipeline.sampling.points.fps.batched import fps_batched

    xyz = random_cloud(30000, 5)
    idx, _d2, info = fps_batched(cupy.asarray(xyz), 3000, 0, grid=grid, leaf_size=8)
    assert info["leaves_per_block"] > 32 * 16
    np.testing.assert_array_equal(idx.get(), fps_reference(xyz, 3000, 0)[0])


@pytest.mark.gpu
def test_gpu_batched_kernel_profile_variant_same_sequence(cupy):
    """The profiling build (block 0's counters) returns the plain build's sequence, and its
    counters add up: samples taken as a prefix are some of the M - 1, every phase took time."""
    from mvs_pipeline.sampling.points.fps.batched import fps_batched

    xyz = cupy.asarray(random_cloud(20000, 9))
    idx, _d2, info = fps_batched(xyz, 2000, 0)
    pidx, _pd2, pinfo = fps_batched(xyz, 2000, 0, profile=True)
    assert "profile" not in info
    np.testing.assert_array_equal(pidx.get(), idx.get())
    prof = pinfo["profile"]
    assert 0 < prof["taken_as_prefix"] <= 1999
    assert prof["candidates_above_threshold"] >= prof["taken_as_prefix"]
    assert prof["leaves_updated"] > 0
    assert min(prof[k] for k in ("cycles_update", "cycles_offer", "cycles_exchange", "cycles_certify")) > 0
    assert pinfo["rounds"] == info["rounds"]


@pytest.mark.gpu
def test_gpu_batched_kernel_all_points_duplicates_and_tiny(cupy):
    from mvs_pipeline.sampling.points.fps.batched import fps_batched

    xyz = duplicate_cloud(1001, 12)
    idx, _d2, _ = fps_batched(cupy.asarray(xyz), 1001, 1000, leaf_size=32)
    np.testing.assert_array_equal(idx.get(), fps_reference(xyz, 1001, 1000)[0])
    one = cupy.zeros((1, 3), dtype=cupy.float32)
    assert fps_batched(one, 1, 0)[0].get().tolist() == [0]
    two = cupy.asarray(np.array([[0, 0, 0], [1, 0, 0]], np.float32))
    assert fps_batched(two, 2, 1)[0].get().tolist() == [1, 0]


@pytest.mark.gpu
@pytest.mark.parametrize("leaf_size", [512, 1024])
def test_gpu_batched_large_leaf_variant_matches_reference(cupy, leaf_size):
    """Leaves above MAX_LEAF run the large variant (32 keys a lane), which clouds from ~150 M points
    get automatically; here forced on a small cloud with duplicates."""
    from mvs_pipeline.sampling.points.fps.batched import fps_batched

    xyz = sphere_cloud(200000, 17)
    xyz[::11] = xyz[5]
    idx, d2, info = fps_batched(cupy.asarray(xyz), 2000, 9, leaf_size=leaf_size)
    ref_idx, ref_d2 = fps_plain(xyz, 2000, 9)
    np.testing.assert_array_equal(idx.get(), ref_idx)
    np.testing.assert_array_equal(d2.get(), ref_d2)
    assert info["leaf_size"] == leaf_size


@pytest.mark.gpu
def test_gpu_cloud_the_batched_kernel_cannot_fit_falls_back(cupy, monkeypatch, caplog):
    """fps_batched raises BackendUnavailable when a block's leaves overrun the GPU's shared memory
    (e.g. ~390 M points on an A100): `auto` runs the CPU twin, `cuda` raises."""
    from mvs_pipeline.sampling.points.fps import batched

    monkeypatch.setattr(batched, "shared_bytes", lambda lpb: 1 << 30)
    xyz = sphere_cloud(30000, 18)
    with pytest.raises(BackendUnavailable, match="shared memory"):
        farthest_point_sampling(xyz, 100, backend="cuda")
    with caplog.at_level(logging.WARNING):
        idx = farthest_point_sampling(xyz, 100, backend="auto")
    assert "running on the CPU" in caplog.text
    np.testing.assert_array_equal(idx, fps_reference(xyz, 100)[0])


def _gpu_brute_force_fps(cupy, xyz, m: int, start: int):
    """Plain exact FPS on the GPU, independent of the kernels under test: per sample one pass of
    the definition (sampling_fps_common.cuh; dist2 as po_dist2, round-to-nearest without FMA) and a
    max of 64-bit keys (d2 bits + 1) << 32 | (2^32 - 1 - index): the larger wins, ties to the lower
    index. -> (indices [M] int64, d2 at selection [M] float32) on the host."""
    step = cupy.ElementwiseKernel(
        "float32 x, float32 y, float32 z, float32 sx, float32 sy, float32 sz, int64 s",
        "float32 mind, uint64 key",
        """
        float v = mind;
        if (i == s) {
            v = -1.0f;
            mind = v;
        } else if (v >= 0.0f) {
            const float dx = __fsub_rn(x, sx), dy = __fsub_rn(y, sy), dz = __fsub_rn(z, sz);
            const float d = __fadd_rn(__fadd_rn(__fmul_rn(dx, dx), __fmul_rn(dy, dy)), __fmul_rn(dz, dz));
            if (d < v) {
                v = d;
                mind = d;
            }
        }
        const unsigned long long hi = v < 0.0f ? 0ull : (unsigned long long)__float_as_uint(v) + 1ull;
        key = (hi << 32) | (0xffffffffull - (unsigned long long)i);
        """,
        "test_fps_brute_force_step", options=("--fmad=false",))
    x, y, z = (cupy.ascontiguousarray(xyz[:, a]) for a in range(3))
    host = {}
    mind = cupy.full(len(x), np.inf, dtype=cupy.float32)
    key = cupy.empty(len(x), dtype=cupy.uint64)
    indices, d2 = [start], [np.float32(np.inf)]
    for _ in range(1, m):
        s = indices[-1]
        if s not in host:
            host[s] = xyz[s].get()
        sx, sy, sz = host[s]
        step(x, y, z, np.float32(sx), np.float32(sy), np.float32(sz), np.int64(s), mind, key)
        best = int(key.max().get())
        indices.append(0xFFFFFFFF - (best & 0xFFFFFFFF))
        d2.append(np.array([(best >> 32) - 1], dtype=np.uint32).view(np.float32)[0])
    return np.array(indices, dtype=np.int64), np.array(d2, dtype=np.float32)


@pytest.mark.gpu
def test_gpu_default_path_above_2_27_points_matches_brute_force(cupy):
    """A cloud of 2^27 + 12345 points (the persistent kernels refused >= 2^27 before the 29-bit
    index field) through farthest_point_sampling's GPU default (fps_batched) equals a brute-force
    GPU FPS, indices and distances. Integer lattice coordinates make exact ties common, and the
    special points put samples above 2^27: sample 1 is a tie between index 5 and 2^27 + 2 (the
    lower index wins; a key that kept 27 index bits would see 2^27 + 2 as 2), then 2^27 + 2, then
    the lower of two duplicates at 2^27 + 4 and 2^27 + 9. About 10 GB of GPU memory at the peak."""
    n = (1 << 27) + 12345
    m = 300
    xyz = cupy.floor(cupy.random.RandomState(19).random_sample((n, 3), dtype=cupy.float32) * 1024)
    start = n - 1
    special = {start: (512, 512, 512), 5: (-3488, 512, 512), (1 << 27) + 2: (4512, 512, 512),
               (1 << 27) + 9: (512, 3512, 512), (1 << 27) + 4: (512, 3512, 512), n - 2: (512, 512, -1488)}
    for i, p in special.items():
        xyz[i] = cupy.asarray(np.array(p, dtype=np.float32))
    idx, d2 = farthest_point_sampling(xyz, m, start, backend="cuda", return_d2=True)
    ref_idx, ref_d2 = _gpu_brute_force_fps(cupy, xyz, m, start)
    assert ref_idx[:6].tolist() == [start, 5, (1 << 27) + 2, (1 << 27) + 4, n - 2, ref_idx[5]]
    assert int((ref_idx >= 1 << 27).sum()) >= 4
    np.testing.assert_array_equal(idx.get(), ref_idx)
    np.testing.assert_array_equal(d2.get(), ref_d2)


def test_batched_leaf_size_keeps_shared_memory_in_budget():
    from mvs_pipeline.sampling.points.fps import batched

    assert batched.choose_leaf_size(12_000_000, 132) == 128
    leaf = batched.choose_leaf_size(120_000_000, 132)
    assert leaf == 256
    assert batched.shared_bytes(batched.leaves_per_block(120_000_000, leaf, 132)) <= batched.SHARED_BUDGET


def test_key_index_bits_come_from_the_header_and_set_the_limit():
    """cuda.py's FPS_INDEX_BITS is the #define of sampling_fps_common.cuh the kernels use; the limit of the
    persistent kernels (and of the GPU in farthest_point_sampling) is 2^FPS_INDEX_BITS, 29 bits since
    a 4-bit publication tag suffices. 1000 views pooled 161 M points, which now stay on the GPU."""
    import re

    from mvs_pipeline.gpu.loader import cu_path
    from mvs_pipeline.sampling.points.fps import cuda as kfps
    from mvs_pipeline.sampling.points.fps import ops

    header = cu_path("sampling_fps_common.cuh").read_text()
    defines = dict(re.findall(r"^#define (FPS_INDEX_BITS|FPS_DIST_BITS) (\d+)$", header, re.MULTILINE))
    assert int(defines["FPS_INDEX_BITS"]) == kfps.FPS_INDEX_BITS == 29
    assert 64 - int(defines["FPS_DIST_BITS"]) - kfps.FPS_INDEX_BITS >= 2   # the tag's bits
    assert kfps.TREE_MAX_POINTS == 1 << 29 and ops.TREE_MAX_POINTS is kfps.TREE_MAX_POINTS
    assert 161_140_616 < kfps.TREE_MAX_POINTS


def test_keys_decode_indices_above_2_27():
    """_indices_of_keys reads the kernels' keys: ((d2 bits + 1) << 29) | (2^29 - 1 - index)."""
    from mvs_pipeline.sampling.points.fps import cuda as kfps

    index = np.array([0, 7, (1 << 27) + 5, (1 << 28) + 3, (1 << 29) - 1], dtype=np.uint64)
    d2 = np.array([np.inf, 2.5, 1e-3, 0.0, 7.0], dtype=np.float32)
    hi = d2.view(np.uint32).astype(np.uint64) + np.uint64(1)
    keys = (hi << np.uint64(29)) | (np.uint64((1 << 29) - 1) - index)
    got_index, got_d2 = kfps._indices_of_keys(np, keys, start=11)   # NumPy stands in for CuPy
    assert got_index.tolist() == [11, *index[1:].tolist()]
    np.testing.assert_array_equal(got_d2, d2)   # sample 0: +inf


def test_one_cloud_check_names_the_limit():
    """check_one_cloud (fps_tree, fps_batched) takes N = 2^29 - 1 and refuses 2^29, naming the bits."""
    from types import SimpleNamespace

    from mvs_pipeline.sampling.points.fps import cuda as kfps

    class FakeArray:   # only what the checks read: no memory behind it
        dtype = np.dtype(np.float32)
        ndim = 2
        flags = SimpleNamespace(c_contiguous=True)
        device = SimpleNamespace(id=0)

        def __init__(self, n):
            self.shape = (n, 3)

    fake_cupy = SimpleNamespace(ndarray=FakeArray, cuda=SimpleNamespace(Device=lambda: SimpleNamespace(id=0)))
    n = kfps.TREE_MAX_POINTS - 1
    assert kfps.check_one_cloud(fake_cupy, FakeArray(n), 64, n - 1, "fps_batched") == (n, 64)
    with pytest.raises(ValueError, match=r"fps_batched handles fewer than 2\^29 = 536870912 points, got 536870912"):
        kfps.check_one_cloud(fake_cupy, FakeArray(n + 1), 64, 0, "fps_batched")


def test_public_api_sends_clouds_over_the_limit_to_the_cpu(monkeypatch, caplog):
    """farthest_point_sampling's check uses TREE_MAX_POINTS: at or above it, `cuda` raises and `auto`
    runs the CPU twin (a small stand-in limit: the real one needs 6 GB of points)."""
    from mvs_pipeline.sampling.points.fps import ops

    monkeypatch.setattr(ops, "TREE_MAX_POINTS", 20000)
    xyz = sphere_cloud(20000, 16)
    with pytest.raises(BackendUnavailable, match="handles fewer than 20000 points"):
        farthest_point_sampling(xyz, 50, backend="cuda")
    with caplog.at_level(logging.WARNING):
        idx = farthest_point_sampling(xyz, 50, 3, backend="auto")
    assert "using the CPU" in caplog.text
    np.testing.assert_array_equal(idx, fps_reference(xyz, 50, 3)[0])


def test_tree_memory_estimate_grows_and_fits_up_to_the_limit():
    """tree_memory_bytes (gpu_memory_fallback's input) grows with N and M, covers the ~40 B a point
    counted at the Morton argsort plus a host copy, and keeps 2^29 - 1 points within 90 % of 80 GB."""
    from mvs_pipeline.sampling.points.fps import cuda as kfps

    sizes = [1, 10**6, 161_140_616, kfps.TREE_MAX_POINTS - 1]
    need = [kfps.tree_memory_bytes(n, 1000) for n in sizes]
    assert need == sorted(need) and len(set(need)) == len(need)
    assert kfps.tree_memory_bytes(10**6, 10**5) > kfps.tree_memory_bytes(10**6, 10**3)
    assert all(kfps.tree_memory_bytes(n, 1000) >= 52 * n for n in sizes)
    assert kfps.tree_memory_bytes(kfps.TREE_MAX_POINTS - 1, 10**6) < 0.9 * 80e9


# Static shared memory of both fps_batched_persistent variants (nvcc -Xptxas -v, sm_90: 36,928 B) and
# the largest block an H100 / H200 may opt in to.
BATCHED_STATIC_SHARED = 36928
H200_MAX_SHARED_OPTIN = 232448


@pytest.mark.parametrize("grid", [132, 114])
def test_batched_leaf_size_up_to_the_limit(grid):
    """fps_batched's leaves grow past MAX_LEAF (from the large variant) so that clouds up to
    TREE_MAX_POINTS fit a block's shared memory; before, leaves of 256 stopped at ~180 M points
    (MVSError) on an H200. The default variant keeps every cloud that fits it within SHARED_BUDGET."""
    from mvs_pipeline.sampling.points.fps import batched
    from mvs_pipeline.sampling.points.fps import cuda as kfps

    assert (batched._CU, batched.LARGE_OPTIONS) in batched.kernel_variants()
    assert "-DFPS_BATCHED_MAX_LEAF=1024" in batched.LARGE_OPTIONS
    for n in (1, 10**6, 120 * 10**6, 161_140_616, 180 * 10**6, 400 * 10**6, kfps.TREE_MAX_POINTS - 1):
        leaf = batched.choose_leaf_size(n, grid)
        assert batched.DEFAULT_LEAF <= leaf <= batched.LARGE_MAX_LEAF and leaf & (leaf - 1) == 0
        shared = batched.shared_bytes(batched.leaves_per_block(n, leaf, grid))
        assert shared + BATCHED_STATIC_SHARED <= H200_MAX_SHARED_OPTIN, (n, leaf, shared)
        if grid == 132:
            assert shared <= batched.SHARED_BUDGET, (n, leaf, shared)
        smaller = batched.shared_bytes(batched.leaves_per_block(n, leaf // 2, grid))
        assert leaf == batched.DEFAULT_LEAF or smaller > batched.SHARED_BUDGET   # the smallest that fits
        assert batched.leaf_variant_options(leaf) == (batched.OPTIONS if leaf <= batched.MAX_LEAF
                                                      else batched.LARGE_OPTIONS)
    assert batched.choose_leaf_size(kfps.TREE_MAX_POINTS - 1, grid) == 1024


def test_persistent_kernel_status_word_raises_naming_kernel_and_step():
    """A non-zero status word from fps_tree / fps_batched (a barrier or exchange waited past its
    timeout) becomes one RuntimeError naming the kernel, the step and the grid; zero passes."""
    from mvs_pipeline.sampling.points.fps.cuda import raise_if_timed_out

    class Status:  # what the kernels leave: a one-element device array, read back with .get()
        def __init__(self, value):
            self.value = value

        def get(self):
            return np.array([self.value], np.int32)

    raise_if_timed_out(Status(0), "fps_tree_persistent", "a grid barrier", 5.0, 132)
    with pytest.raises(RuntimeError, match=r"fps_batched_persistent: an exchange timed out after 5.0 s; the 66 blocks"):
        raise_if_timed_out(Status(1), "fps_batched_persistent", "an exchange", 5.0, 66)
