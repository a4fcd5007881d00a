"""CuPy launcher of `fps_batched_persistent` (cuda/sampling_fps_batched.cu): exact FPS of one large cloud
with many samples per grid-wide exchange. The GPU's default for exact FPS of one cloud.

The tree kernel (cuda.py) pays one all-gather between the blocks per sample (~3 us on an H100,
nearly all latency). Here every block offers its T farthest points and the largest distance it
does not offer; on the offered points alone the next samples are certain while the farthest of
them stays above every block's unoffered distance, so one exchange yields ~100 samples. The
sequence is the tree kernel's (the same keys, ties to the lower original index), which is the
Numba twins' and the plain reference's (cpu.py), with the same contract as `fps_tree`.
Why: docs/decisions.md, "FPS: the batched exact kernel"; timings: BENCHMARKS.md, "Sampling and FPS".
The derivation in full (a CPU study): the section "FPS: several exact samples per barrier" of the
old session diary, `git show ec29931:BENCHMARKS.md`.
"""

from __future__ import annotations

import numpy as np

from mvs_pipeline.errors import BackendUnavailable
from mvs_pipeline.gpu.loader import get_kernel, import_cupy

from .cuda import (
    _OPTIONS,
    _indices_of_keys,
    _max_blocks_per_sm,
    _morton_sorted,
    check_one_cloud,
    opt_in_shared,
    raise_if_timed_out,
    static_shared_bytes,
)

_CU = "sampling_fps_batched.cu"
# Compile-time shape (two precompiled variants, also listed as ci-variants in the .cu):
OFFERS = 4          # points each block offers per round (T); its candidate slots live in registers
MAX_GRID = 132      # blocks at most (G x T candidates: 17 register slots a lane)
MAX_LEAF = 256      # points per leaf at most (a warp keeps a leaf's keys in registers, 8 a lane)
# Clouds whose leaves of MAX_LEAF points overrun SHARED_BUDGET (above ~150 M points on 132 blocks; at
# ~180 M they no longer fit an H100's or H200's 227 KiB) take larger leaves, from a second variant with
# 32 keys a lane (sm_90: 128 registers, no spills, against 123: one 512-thread block per SM either way).
# 1024 keeps the leaves of any cloud below TREE_MAX_POINTS (2^29) on 132 blocks within SHARED_BUDGET.
LARGE_MAX_LEAF = 1024
THREADS = 512


def variant_options(max_leaf: int) -> tuple[str, ...]:
    return (*_OPTIONS, f"-DFPS_THREADS={THREADS}", f"-DFPS_BATCHED_OFFERS={OFFERS}",
            f"-DFPS_BATCHED_MAX_GRID={MAX_GRID}", f"-DFPS_BATCHED_MAX_LEAF={max_leaf}")


OPTIONS = variant_options(MAX_LEAF)
LARGE_OPTIONS = variant_options(LARGE_MAX_LEAF)
# Leaf size: 128 unless a block's leaves would not fit its shared memory.
DEFAULT_LEAF = 128
SHARED_BUDGET = 160 * 1024
PROFILE_FIELDS = ("cycles_update", "cycles_offer", "cycles_exchange", "cycles_certify", "leaf_sample_hits",
                  "leaves_updated", "candidates_above_threshold", "taken_as_prefix")


def kernel_variants() -> list[tuple[str, tuple[str, ...]]]:
    """The (file, options) variants `mvs-pipeline build-kernels` precompiles."""
    return [(_CU, OPTIONS), (_CU, LARGE_OPTIONS)]


def shared_bytes(lpb: int) -> int:
    """Dynamic shared memory: a 6-float box, a u64 key and a hit-list entry per leaf, and a
    6-float box per group of 32 leaves."""
    return lpb * 36 + -(-lpb // 32) * 24


def leaves_per_block(n: int, leaf: int, grid: int) -> int:
    num_leaves = -(-n // leaf)
    return -(-num_leaves // grid)


def choose_leaf_size(n: int, grid: int) -> int:
    leaf = DEFAULT_LEAF
    while leaf < LARGE_MAX_LEAF and shared_bytes(leaves_per_block(n, leaf, grid)) > SHARED_BUDGET:
        leaf *= 2
    return leaf


def leaf_variant_options(leaf: int) -> tuple[str, ...]:
    """The variant for leaves of `leaf` points: the default one up to MAX_LEAF, else the large one."""
    return OPTIONS if leaf <= MAX_LEAF else LARGE_OPTIONS


def fps_batched(xyz, num_samples: int, start: int, *, leaf_size: int | None = None, grid: int | None = None,
                timeout_s: float = 10.0, profile: bool = False):
    """Exact FPS of one cloud. xyz [N, 3] float32 CuPy -> (indices [M] int64, d2 at selection
    [M] float32 (+inf for sample 0), info dict: grid, leaf_size, rounds; with `profile`, block 0's
    cycles per phase and counters under "profile", from a variant built with them (NVRTC at its
    first use: it is not precompiled))."""
    cupy = import_cupy()
    n, m = check_one_cloud(cupy, xyz, num_samples, start, "fps_batched")
    device = cupy.cuda.Device()
    sms = int(device.attributes["MultiProcessorCount"])
    grid = min(sms, MAX_GRID) if grid is None else int(grid)
    if not 1 <= grid <= min(sms, MAX_GRID):
        raise ValueError(f"fps_batched: grid must be in [1, {min(sms, MAX_GRID)}], got {grid}")
    leaf = choose_leaf_size(n, grid) if leaf_size is None else int(leaf_size)
    if not 1 <= leaf <= LARGE_MAX_LEAF:
        raise ValueError(f"fps_batched: leaf_size must be in [1, {LARGE_MAX_LEAF}], got {leaf}")
    lpb = leaves_per_block(n, leaf, grid)
    shared = shared_bytes(lpb)
    options = leaf_variant_options(leaf)
    kernel = get_kernel(_CU, "fps_batched_persistent", (*options, "-DFPS_BATCHED_PROFILE=1") if profile else options)
    static = static_shared_bytes(kernel)
    max_shared = int(device.attributes.get("MaxSharedMemoryPerBlockOptin", 48 * 1024))
    # BackendUnavailable (an MVSError): farthest_point_sampling runs a cloud too large for this GPU's
    # shared memory on the CPU when its backend is `auto`.
    if shared + static > max_shared:
        raise BackendUnavailable(f"fps_batched: {lpb} leaves per block need {shared + static} B of shared "
                                 f"memory, more than the GPU's {max_shared}; use a larger leaf_size")
    opt_in_shared(kernel, shared)
    per_sm = _max_blocks_per_sm(cupy, kernel, THREADS, shared)
    if per_sm is not None and per_sm < 1:
        raise BackendUnavailable(f"fps_batched: a block of {THREADS} threads with {shared} B shared does not fit "
                                 "an SM")
    pts, order = _morton_sorted(cupy, xyz)
    start_pos = int(cupy.nonzero(order == start)[0][0].get())
    del order
    mind = cupy.empty(n, dtype=cupy.float32)
    slots = cupy.zeros(2 * grid * (OFFERS + 1) * 8, dtype=cupy.uint64)
    sel_key = cupy.zeros(m, dtype=cupy.uint64)
    status = cupy.zeros(1, dtype=cupy.int32)
    rounds = cupy.zeros(1, dtype=cupy.int32)
    counters = cupy.zeros(len(PROFILE_FIELDS), dtype=cupy.int64)
    kernel((grid,), (THREADS,),
           (pts, mind, slots, sel_key, status, rounds, counters, np.int32(n), np.int32(m), np.int32(start_pos),
            np.int32(leaf), np.int32(lpb), np.int64(int(timeout_s * 1e9))),
           shared_mem=shared)
    raise_if_timed_out(status, "fps_batched_persistent", "an exchange", timeout_s, grid)
    indices, d2 = _indices_of_keys(cupy, sel_key, start)
    info = {"grid": grid, "threads": THREADS, "leaf_size": leaf, "leaves_per_block": lpb,
            "rounds": int(rounds.get()[0]), "offers": OFFERS}
    if profile:
        info["profile"] = dict(zip(PROFILE_FIELDS, counters.get().tolist()))
    return indices, d2, info
