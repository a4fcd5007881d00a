"""cuda/sampling_fps_morton.cuh (the Morton codes, the lean sort's keys and its gather) compiled as
*host* C++ and run thread by thread: the kernels' logic on any machine with a C++ compiler (as
tests/evaluation/test_eval_kernels_host.py does for the evaluation kernels). CUDA-specific faults
(launches, memory) are the `gpu` tests' part: test_fps_memory.py."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from mvs_pipeline.paths import CUDA_DIR
from mvs_pipeline.sampling.points.fps.cuda import _morton_frame, lean_key_bits
from tests.host_kernels import build_host_library
from tests.host_kernels import pointer as _p

from .test_fps import duplicate_cloud, sphere_cloud

# Test scaffolding (not kernel code): CUDA's keywords and vector type for a host compiler, one loop a kernel.
HOST_PRELUDE = r"""
struct HostDim { unsigned x, y, z; };
static HostDim blockIdx, threadIdx, blockDim;
struct uint4 { unsigned int x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
static void set_thread(long long i) {
    blockDim.x = 256; blockIdx.x = (unsigned)(i / 256); threadIdx.x = (unsigned)(i % 256); }
"""
HOST_WRAPPERS = r"""
extern "C" void host_codes(const float* xyz, int n, float lx, float ly, float lz, float s, unsigned long long* out) {
    for (long long i = 0; i < n + 300; ++i) { set_thread(i); fps_morton_codes(xyz, n, lx, ly, lz, s, out); } }
extern "C" void host_keys(const float* xyz, int n, float lx, float ly, float lz, float s, int shift, int bits,
                          unsigned long long* out) {
    for (long long i = 0; i < n + 300; ++i) {
        set_thread(i);
        fps_morton_index_keys(xyz, n, lx, ly, lz, s, shift, bits, out);
    } }
extern "C" void host_gather(const unsigned* xyz, const unsigned long long* keys, int n, int bits, int start,
                            uint4* pts, int* start_pos) {
    for (long long i = 0; i < n + 300; ++i) {
        set_thread(i);
        fps_gather_sorted(xyz, keys, n, bits, start, pts, start_pos);
    } }
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    source = HOST_PRELUDE + f'#include "{CUDA_DIR / "sampling_fps_morton.cuh"}"\n' + HOST_WRAPPERS
    return build_host_library(tmp_path_factory, "host_fps_morton", source)


def _frame(xyz):
    lo, scale = _morton_frame(xyz.min(0), xyz.max(0))
    return [ctypes.c_float(v) for v in (*lo.astype(np.float32), np.float32(scale))], lo.astype(np.float32), scale


def _reference_code(p, lo, scale) -> int:
    """Bit by bit: quantize each axis (float32 arithmetic, as the kernel) to 21 bits, interleave x, y, z."""
    q = []
    for a in range(3):
        v = (np.float32(p[a]) - np.float32(lo[a])) * np.float32(scale)
        q.append(0 if not v > 0 else 2097151 if v >= 2097151 else int(v))
    return sum(((q[a] >> b) & 1) << (3 * b + a) for b in range(21) for a in range(3))


CLOUDS = {"sphere": sphere_cloud(20011, 4), "duplicates": duplicate_cloud(5000, 5),
          "flat": np.c_[np.random.default_rng(6).random((3000, 2)), np.zeros(3000)].astype(np.float32)}


@pytest.mark.parametrize("name", list(CLOUDS))
def test_lean_keys_are_the_codes_top_levels_above_the_index(lib, name):
    xyz = np.ascontiguousarray(CLOUDS[name])
    n = len(xyz)
    args, lo, scale = _frame(xyz)
    codes = np.zeros(n + 300, np.uint64)   # past N: must stay untouched
    lib.host_codes(_p(xyz), n, *args, _p(codes))
    assert not codes[n:].any()
    for i in np.random.default_rng(7).choice(n, 40, replace=False):
        assert int(codes[i]) == _reference_code(xyz[i], lo, scale)
    shift, bits = lean_key_bits(n)
    keys = np.zeros(n + 300, np.uint64)
    lib.host_keys(_p(xyz), n, *args, shift, bits, _p(keys))
    assert not keys[n:].any()
    keys = keys[:n]
    np.testing.assert_array_equal(keys & np.uint64((1 << bits) - 1), np.arange(n, dtype=np.uint64))
    np.testing.assert_array_equal(keys >> np.uint64(bits), codes[:n] >> np.uint64(shift))


@pytest.mark.parametrize("name", list(CLOUDS))
def test_gather_copies_points_in_key_order(lib, name):
    """Sorted keys (NumPy's sort stands in for Thrust's) -> pts: each point's coordinate bits and
    index, a permutation in curve order (cells, then index), and start's sorted position."""
    xyz = np.ascontiguousarray(CLOUDS[name])
    n, start = len(xyz), len(xyz) // 3
    args, _lo, _scale = _frame(xyz)
    shift, bits = lean_key_bits(n)
    keys = np.zeros(n, np.uint64)
    lib.host_keys(_p(xyz), n, *args, shift, bits, _p(keys))
    keys = np.sort(keys)
    pts = np.zeros((n + 300, 4), np.uint32)
    start_pos = np.full(1, -1, np.int32)
    lib.host_gather(_p(xyz), _p(keys), n, bits, start, _p(pts), _p(start_pos))
    assert not pts[n:].any()
    order = pts[:n, 3].astype(np.int64)
    np.testing.assert_array_equal(np.sort(order), np.arange(n))
    np.testing.assert_array_equal(pts[:n, :3], xyz.view(np.uint32)[order])
    assert order[start_pos[0]] == start
    cells = keys >> np.uint64(bits)
    assert np.all(cells[1:] >= cells[:-1])
    assert np.all(np.diff(order)[cells[1:] == cells[:-1]] > 0)
