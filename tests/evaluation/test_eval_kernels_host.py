"""cuda/evaluation_eth3d.cu's kernels compiled as *host* C++ and run thread by thread (no GPU needed).

This checks the kernels' logic on every machine with a C++ compiler: the CUDA keywords are
defined away, each kernel is called once per thread index from a plain loop, and the results are
compared with the CPU twins / brute force. It cannot find CUDA-specific faults (launch limits,
memory spaces, races); the `gpu`-marked tests in test_eval_gpu.py do that on a real GPU.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest
from scipy.spatial import cKDTree

from mvs_pipeline.evaluation.cpu import classify_points_cpu
from mvs_pipeline.evaluation.sphere_grid import ANGLE_SLACK, build_sphere_grids, direction_cells
from mvs_pipeline.evaluation.toy_scenes import perturbed_reconstruction, room_scene
from mvs_pipeline.paths import CUDA_DIR
from tests.host_kernels import build_host_library
from tests.host_kernels import pointer as _p

# Test scaffolding (not kernel code): CUDA's keywords for a host compiler, and one loop per kernel.
HOST_PRELUDE = r"""
#include <math.h>
#include <string.h>
struct HostDim { unsigned x, y, z; };
static HostDim blockIdx, threadIdx, blockDim;
static inline double host_ll_as_double(long long v) { double d; memcpy(&d, &v, 8); return d; }
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __longlong_as_double host_ll_as_double
// CUDA's round-to-nearest float intrinsics: plain IEEE float operations on the host (-ffp-contract=off)
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static void set_thread(long long i) { blockDim.x = 256; blockIdx.x = (unsigned)(i / 256); threadIdx.x = (unsigned)(i % 256); }
"""
HOST_WRAPPERS = r"""
extern "C" void host_sphere_cells(const float* p, int m, int ni, int na, long long* cells) {
  for (long long i = 0; i < m; ++i) { set_thread(i); eth3d_sphere_cells(p, m, ni, na, cells); } }
extern "C" void host_classify(const float* xyz, int n, const double* rot, const double* trans, const float* pts,
    const long long* starts, const long long* base, const int* ni, const int* na, int s, double b0, double td,
    double slack, double stop, double* best, unsigned char* front) {
  for (long long i = 0; i < n; ++i) { set_thread(i);
    eth3d_accuracy_classify(xyz, n, rot, trans, pts, starts, base, ni, na, s, b0, td, slack, stop, best, front); } }
extern "C" void host_grid_keys(const float* p, int n, double ox, double oy, double oz, double inv_h,
    long long nx, long long ny, long long nz, long long* keys) {
  for (long long i = 0; i < n; ++i) { set_thread(i); eth3d_grid_keys(p, n, ox, oy, oz, inv_h, nx, ny, nz, keys); } }
extern "C" void host_grid_nearest(const double* q, const long long* subset, int nq, const float* pts,
    const long long* keys, long long n, double ox, double oy, double oz, double h, long long nx, long long ny,
    long long nz, int rings, double* out) {
  for (long long i = 0; i < nq; ++i) { set_thread(i);
    eth3d_grid_nearest(q, subset, nq, pts, keys, n, ox, oy, oz, h, nx, ny, nz, rings, out); } }
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    source = HOST_PRELUDE + f'#include "{CUDA_DIR / "evaluation_eth3d.cu"}"\n' + HOST_WRAPPERS
    return build_host_library(tmp_path_factory, "host_kernels", source)


def test_sphere_cells_match_cpu_layout(lib):
    rng = np.random.default_rng(0)
    p = np.concatenate([rng.normal(size=(3000, 3)), [[0, 0, 1], [0, 0, -1], [-1, 0, 0], [-1, -1e-9, 0], [0, 0, 0]]])
    p = np.ascontiguousarray(p, np.float32)
    cells = np.empty(len(p), np.int64)
    lib.host_sphere_cells(_p(p), len(p), 32, 64, _p(cells))
    np.testing.assert_array_equal(cells[:-1], direction_cells(p[:-1], 32, 64))
    assert cells[-1] == 32 * 64  # the scanner origin: sentinel after every real cell


@pytest.mark.parametrize("seed", range(2))
def test_accuracy_kernel_matches_cpu_twin(lib, seed):
    scans, _, _ = room_scene(3000, n_scans=2, seed=seed)
    gt = np.concatenate([s.points_in_world() for s in scans])
    recon = np.ascontiguousarray(perturbed_reconstruction(gt, 800, seed=seed, noise=0.03), np.float32)
    g = build_sphere_grids(scans)
    b0, td = 0.02, math.tan(math.radians(0.3))
    for stop in (-1.0, 0.01**2):
        ref_best, ref_front = classify_points_cpu(recon, g, b0, td, stop_dist2=stop)
        best = np.full(len(recon), np.nan)  # poisoned: every entry must be written
        front = np.full(len(recon), 0xFF, np.uint8)
        pts32 = np.ascontiguousarray(g.points, np.float32)
        lib.host_classify(_p(recon), len(recon), _p(g.scan_from_world_r), _p(g.scan_from_world_t), _p(pts32),
                          _p(g.starts), _p(g.start_base), _p(g.n_incl.astype(np.int32)), _p(g.n_az.astype(np.int32)),
                          len(scans), ctypes.c_double(b0), ctypes.c_double(td), ctypes.c_double(ANGLE_SLACK),
                          ctypes.c_double(stop), _p(best), _p(front))
        assert not np.isnan(best).any() and set(np.unique(front).tolist()) <= {0, 1}
        np.testing.assert_array_equal(np.isinf(best), np.isinf(ref_best))
        fin = np.isfinite(best)
        np.testing.assert_allclose(best[fin], ref_best[fin], rtol=1e-12)
        if stop < 0:  # without early exit the front flag is fully defined
            np.testing.assert_array_equal(front.astype(bool), ref_front)


@pytest.mark.parametrize("h, rings", [(0.05, 0), (0.05, 2), (0.2, 1), (0.013, 5)])
def test_grid_nearest_contract(lib, h, rings):
    """Result >= 0: the exact NN distance^2, <= (rings h)^2. Result -1: no point within rings * h."""
    rng = np.random.default_rng(1)
    pts = np.concatenate([rng.normal(scale=0.3, size=(1500, 3)), rng.uniform(-3, 3, size=(100, 3))]).astype(np.float32)
    q = np.concatenate([rng.normal(scale=0.5, size=(2000, 3)), rng.uniform(-8, 8, size=(200, 3))])
    lo, hi = pts.min(0).astype(np.float64), pts.max(0).astype(np.float64)
    dims = (np.floor((hi - lo) / h).astype(np.int64) + 1)
    keys = np.empty(len(pts), np.int64)
    lib.host_grid_keys(_p(pts), len(pts), ctypes.c_double(lo[0]), ctypes.c_double(lo[1]), ctypes.c_double(lo[2]),
                       ctypes.c_double(1 / h), ctypes.c_longlong(dims[0]), ctypes.c_longlong(dims[1]),
                       ctypes.c_longlong(dims[2]), _p(keys))
    order = np.argsort(keys, kind="stable")
    spts, skeys = np.ascontiguousarray(pts[order]), np.ascontiguousarray(keys[order])
    subset = np.arange(0, len(q), 2, dtype=np.int64)  # every other query; the rest stay poisoned
    out = np.full(len(q), np.nan)
    lib.host_grid_nearest(_p(q), _p(subset), len(subset), _p(spts), _p(skeys), ctypes.c_longlong(len(pts)),
                          ctypes.c_double(lo[0]), ctypes.c_double(lo[1]), ctypes.c_double(lo[2]), ctypes.c_double(h),
                          ctypes.c_longlong(dims[0]), ctypes.c_longlong(dims[1]), ctypes.c_longlong(dims[2]),
                          rings, _p(out))
    assert np.isnan(out[1::2]).all() and not np.isnan(out[subset]).any()
    true_d, _ = cKDTree(pts.astype(np.float64)).query(q[subset])
    res = out[subset]
    found = res >= 0
    np.testing.assert_allclose(res[found], true_d[found] ** 2, rtol=1e-12)
    assert (res[found] <= (rings * h) ** 2 * (1 + 1e-12)).all()
    assert (true_d[~found] > rings * h * (1 - 1e-12)).all()
    if rings >= 2:
        assert found.mean() > 0.1 and (~found).any()  # the test exercises both outcomes


@pytest.mark.parametrize("max_dist, outlier", [(0.5, False), (0.05, False), (0.2, True)])
def test_nearest_level_loop_matches_kdtree(lib, max_dist, outlier):
    """The launcher's multi-level search (nearest_dist2_levels) driven by the host-emulated kernels."""
    from mvs_pipeline.evaluation.cpu import nearest_dist2_cpu
    from mvs_pipeline.evaluation.cuda import nearest_dist2_levels

    rng = np.random.default_rng(2)
    pts = rng.normal(scale=0.4, size=(3000, 3))
    if outlier:  # a far outlier makes the key span exceed int64: the grid coarsens itself
        pts = np.concatenate([pts, [[1e7, -1e7, 1e7]]])
    pts = np.ascontiguousarray(pts, np.float32)
    q = np.ascontiguousarray(np.concatenate([rng.normal(scale=0.6, size=(3000, 3)), rng.uniform(-5, 5, (100, 3))]))

    def grid_keys(p, lo, h, dims):
        keys = np.empty(len(p), np.int64)
        lib.host_grid_keys(_p(p), len(p), *(ctypes.c_double(v) for v in (*lo, 1 / h)),
                           *(ctypes.c_longlong(int(d)) for d in dims), _p(keys))
        return keys

    def grid_nearest(qs, pending, spts, skeys, lo, h, dims, rings, out):
        lib.host_grid_nearest(_p(qs), _p(pending), len(pending), _p(spts), _p(skeys), ctypes.c_longlong(len(spts)),
                              *(ctypes.c_double(v) for v in (*lo, h)), *(ctypes.c_longlong(int(d)) for d in dims),
                              rings, _p(out))

    got = nearest_dist2_levels(np, q, pts, max_dist, None, grid_keys, grid_nearest)
    ref = nearest_dist2_cpu(q, pts, max_dist)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got[fin], ref[fin], rtol=1e-12)
    assert 0.1 < fin.mean() < 1.0  # both outcomes exercised
