"""CuPy launchers of `cuda/fps.cu` (exact farthest point sampling).

    fps_block  [B, N, 3] -> [B, M]: one thread block per cloud (batches of small clouds).
    fps_tree   [N, 3] -> [M]: one large cloud over the whole GPU in a single persistent launch
               (Morton-sorted leaves with bounding-box pruning, grid barrier per sample).

Both take validated float32 CuPy arrays (see mvs_pipeline/points/validate.py) and return the
same index sequence as mvs_pipeline/cpu/fps.py.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import MVSError
from .loader import get_kernel, import_cupy

_CU = "fps.cu"
_OPTIONS = ("--fmad=false",)
BLOCK_THREADS = 512
TREE_THREADS = 256
MIN_LEAF_SIZE = 32
# Dynamic shared memory per leaf of a block: u64 key + 6 float box + int active-list slot.
TREE_SHARED_BYTES_PER_LEAF = 36
# Stay under the 48 KiB that needs no opt-in (static shared memory of the kernel is ~300 B).
MAX_LEAVES_PER_BLOCK = 1344
LEAVES_PER_THREAD = 4
# The tree kernel's keys hold the point index in 27 bits (a 6-bit step tag sits on top).
TREE_MAX_POINTS = 1 << 27
_INDEX_MASK = (1 << 27) - 1


def _check(name: str, arr, cupy, dtype, ndim: int, last: int | None = None) -> None:
    if not isinstance(arr, cupy.ndarray):
        raise TypeError(f"{name}: expected a cupy.ndarray, got {type(arr).__name__}")
    if arr.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {np.dtype(dtype).name}, got {arr.dtype}")
    if arr.ndim != ndim or (last is not None and arr.shape[-1] != last):
        raise ValueError(f"{name}: unexpected shape {arr.shape}")
    if not arr.flags.c_contiguous:
        raise ValueError(f"{name}: must be C-contiguous")
    if arr.device.id != cupy.cuda.Device().id:
        raise ValueError(f"{name}: lives on device {arr.device.id}, current device is {cupy.cuda.Device().id}")


def fps_block(xyz, start, num_samples: int):
    """One block per cloud. xyz [B, N, 3] float32, start [B] int32
    -> (indices [B, M] int32, d2 at selection [B, M] float32, +inf for sample 0)."""
    cupy = import_cupy()
    _check("xyz", xyz, cupy, np.float32, 3, 3)
    _check("start", start, cupy, np.int32, 1)
    b, n = int(xyz.shape[0]), int(xyz.shape[1])
    m = int(num_samples)
    if start.shape[0] != b:
        raise ValueError(f"start: expected shape ({b},), got {start.shape}")
    if not 1 <= m <= n:
        raise ValueError(f"num_samples must be in [1, {n}], got {m}")
    mind = cupy.empty((b, n), dtype=cupy.float32)
    out_idx = cupy.full((b, m), -1, dtype=cupy.int32)
    out_d2 = cupy.full((b, m), np.nan, dtype=cupy.float32)
    if b == 0:
        return out_idx, out_d2
    kernel = get_kernel(_CU, "fps_block", _OPTIONS)
    kernel((b,), (BLOCK_THREADS,), (xyz, start, mind, out_idx, out_d2, np.int32(n), np.int32(m)))
    return out_idx, out_d2


def tree_memory_bytes(n: int, m: int) -> int:
    """GPU memory the tree path needs: sort keys and permutation, sorted SoA copy, scratch."""
    return 96 * int(n) + 8 * int(m) + (64 << 20)


def choose_leaf_size(n: int, grid: int, threads: int = TREE_THREADS) -> int:
    """Smallest power-of-two leaf (>= 32 points, one per lane) giving at most LEAVES_PER_THREAD
    leaves per thread of a block: small leaves prune tightly, the per-sample scan of leaf boxes
    stays short."""
    leaf = MIN_LEAF_SIZE
    while leaf * grid * threads * LEAVES_PER_THREAD < n:
        leaf *= 2
    while math.ceil(math.ceil(n / leaf) / grid) > MAX_LEAVES_PER_BLOCK:
        leaf *= 2
    return leaf


def _max_blocks_per_sm(cupy, kernel, threads: int, shared_bytes: int) -> int | None:
    try:
        return int(cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
            kernel.kernel.ptr, threads, shared_bytes))
    except Exception:  # older CuPy without the binding: trust one block per SM
        return None


def fps_tree(xyz, num_samples: int, start: int, *, leaf_size: int | None = None, blocks_per_sm: int = 1,
             threads: int = TREE_THREADS, timeout_s: float = 10.0):
    """Exact FPS of one cloud with the persistent kernel. xyz [N, 3] float32
    -> (indices [M] int64, d2 at selection [M] float32 (+inf for sample 0), info dict)."""
    cupy = import_cupy()
    _check("xyz", xyz, cupy, np.float32, 2, 3)
    n, m = int(xyz.shape[0]), int(num_samples)
    if not 1 <= m <= n:
        raise ValueError(f"num_samples must be in [1, {n}], got {m}")
    if not 0 <= start < n:
        raise ValueError(f"start must be in [0, {n}), got {start}")
    if n >= TREE_MAX_POINTS:
        raise ValueError(f"fps_tree handles fewer than 2^27 = {TREE_MAX_POINTS} points, got {n}")
    if threads % 32 or not 32 <= threads <= 1024:
        raise ValueError(f"threads must be a multiple of 32 in [32, 1024], got {threads}")
    device = cupy.cuda.Device()
    num_sms = int(device.attributes["MultiProcessorCount"])
    grid = num_sms * int(blocks_per_sm)
    leaf = int(leaf_size) if leaf_size is not None else choose_leaf_size(n, grid, threads)
    if leaf < 1:
        raise ValueError(f"leaf_size must be >= 1, got {leaf}")
    num_leaves = -(-n // leaf)
    leaves_per_block = -(-num_leaves // grid)
    if leaves_per_block > MAX_LEAVES_PER_BLOCK:
        raise ValueError(f"leaf_size {leaf} gives {leaves_per_block} leaves per block "
                         f"(max {MAX_LEAVES_PER_BLOCK}); use a larger leaf_size")
    shared = leaves_per_block * TREE_SHARED_BYTES_PER_LEAF
    kernel = get_kernel(_CU, "fps_tree_persistent", _OPTIONS)
    per_sm = _max_blocks_per_sm(cupy, kernel, threads, shared)
    if per_sm is not None and per_sm < blocks_per_sm:
        raise MVSError(f"fps_tree: {blocks_per_sm} blocks per SM requested but only {per_sm} fit "
                       f"({threads} threads, {shared} B shared); all blocks must be resident at once")

    # Spatial sort: Morton codes in the bounding cube, radix sort, SoA gather.
    lo = cupy.asnumpy(xyz.min(axis=0)).astype(np.float64)
    extent = float((cupy.asnumpy(xyz.max(axis=0)).astype(np.float64) - lo).max())
    scale = 2097151.0 / extent if extent > 0 else 0.0
    codes = cupy.empty(n, dtype=cupy.uint64)
    get_kernel(_CU, "fps_morton_codes", _OPTIONS)(
        (-(-n // 256),), (256,),
        (xyz, np.int32(n), np.float32(lo[0]), np.float32(lo[1]), np.float32(lo[2]), np.float32(scale), codes))
    order = cupy.argsort(codes)
    del codes
    xs = cupy.ascontiguousarray(xyz[order, 0])
    ys = cupy.ascontiguousarray(xyz[order, 1])
    zs = cupy.ascontiguousarray(xyz[order, 2])
    orig = order.astype(cupy.int32)
    del order
    inv = cupy.empty(n, dtype=cupy.int32)
    inv[orig] = cupy.arange(n, dtype=cupy.int32)
    mind = cupy.empty(n, dtype=cupy.float32)
    slots = cupy.zeros(2 * grid, dtype=cupy.uint64)
    sel_key = cupy.zeros(m, dtype=cupy.uint64)
    status = cupy.zeros(1, dtype=cupy.int32)
    leaf_updates = cupy.zeros(grid, dtype=cupy.uint64)

    kernel((grid,), (threads,),
           (xyz, xs, ys, zs, orig, inv, mind, slots, sel_key, status, leaf_updates, np.int32(n), np.int32(m),
            np.int32(start),
            np.int32(leaf), np.int32(leaves_per_block), np.int64(int(timeout_s * 1e9))),
           shared_mem=shared)
    if int(status.get()[0]) != 0:
        raise RuntimeError(f"fps_tree_persistent: a grid barrier timed out after {timeout_s} s; the {grid} "
                           "blocks were not all resident (another kernel running on the GPU, or MPS limits?)")
    # 58-bit keys: (distance bits + 1) << 27 | (2^27 - 1 - index); sample 0 is the start.
    indices = (np.uint64(_INDEX_MASK) - (sel_key & np.uint64(_INDEX_MASK))).astype(cupy.int64)
    d2 = ((sel_key >> np.uint64(27)).astype(cupy.uint32) - np.uint32(1)).view(cupy.float32)
    indices[0] = start
    d2[0] = np.inf
    updated_leaves = int(leaf_updates.sum().get())
    info = {"grid": grid, "threads": threads, "leaf_size": leaf, "leaves_per_block": leaves_per_block,
            "shared_bytes": shared, "max_blocks_per_sm": per_sm, "leaf_updates": updated_leaves,
            # points visited / (N * (M - 1)), the share of a plain FPS's distance work (upper bound:
            # every updated leaf counted full)
            "work_fraction": updated_leaves * leaf / max(1, n * (m - 1))}
    return indices, d2, info
