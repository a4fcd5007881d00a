"""CuPy launchers of `cuda/sampling_fps_block.cu` and `cuda/sampling_fps_tree.cu` (exact farthest
point sampling).

    fps_block  [B, N, 3] -> [B, M]: one thread block per cloud (batches of small clouds).
    fps_tree   [N, 3] -> [M]: one large cloud over the whole GPU in a single persistent launch
               (Morton-sorted leaves with bounding-box pruning, an all-gather of every block's
               best point per sample). Its shape (threads, leaves per thread, points per lane,
               polling warps) is compiled in through -D options, one cached module per shape.
    batched.py beside it: the same sequence with many samples per all-gather (the GPU default).

Both take validated float32 CuPy arrays (see mvs_pipeline/points/validate.py) and return the
same index sequence as cpu.py.
"""

from __future__ import annotations

import numpy as np

from mvs_pipeline.arrays import column_bounds
from mvs_pipeline.errors import MVSError
from mvs_pipeline.gpu.loader import get_kernel, import_cupy

# One source per kernel variant (shared device code: sampling_fps_common.cuh); batched.py has its own.
BLOCK_CU = "sampling_fps_block.cu"
TREE_CU = "sampling_fps_tree.cu"  # also fps_morton_codes, the sort batched.py shares
_OPTIONS = ("--fmad=false",)
BLOCK_THREADS = 512
# Tree kernel: threads per block with one block per SM (halved per extra block per SM, so the
# registers of all co-resident blocks fit).
TREE_THREADS = 512
MIN_LEAF_SIZE = 32
# Auto leaf size balances the two per-sample costs: testing the block's leaf boxes (N / (leaf *
# grid * threads) per thread) and updating the leaves near the new sample (leaf points each), so
# leaf ~ sqrt(N): the smallest power of two >= 32 with leaf^2 * grid * threads >= N * this.
# Measured on an H200 (132 SMs x 512 threads, surface clouds, M = 100k, benchmarks/bench_fps.py):
# the best leaf is 32 at N = 1M, 64 at 4M and 128 at 16M, which this picks.
AUTO_LEAF_BALANCE = 64
# Auto leaf size also keeps the leaf boxes of a block within this much shared memory.
AUTO_MAX_SHARED_BYTES = 160 * 1024
# Compile-time limits of the kernel variants: leaves owned per thread (keys in registers) and
# points per lane of a leaf update (leaf_size <= 32 * MAX_POINTS_PER_LANE).
MAX_LEAVES_PER_THREAD = 16
MAX_POINTS_PER_LANE = 16
# Dynamic shared memory per leaf of a block: 6 float box + 3 float coordinates of its best point.
TREE_SHARED_BYTES_PER_LEAF = 36


# The persistent kernels' (fps_tree, fps_batched) keys hold a point's original index in
# FPS_INDEX_BITS bits (29: the distance takes 31 and a 4-bit publication tag the top; why:
# sampling_fps_common.cuh), so they take clouds of fewer than TREE_MAX_POINTS points.
# The same number as the header's #define (tests/sampling/test_fps.py compares them); a constant,
# not read from the header at import, so the CPU path imports without the CUDA sources.
FPS_INDEX_BITS = 29
TREE_MAX_POINTS = 1 << FPS_INDEX_BITS
_INDEX_MASK = TREE_MAX_POINTS - 1


def _pow2_at_least(v: int) -> int:
    return 1 << max(0, int(v) - 1).bit_length()


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


def check_one_cloud(cupy, xyz, num_samples: int, start: int, who: str) -> tuple[int, int]:
    """The checks of fps_tree and fps_batched: xyz [N, 3] float32 on the current device,
    1 <= num_samples <= N, 0 <= start < N, N < TREE_MAX_POINTS (the keys' index bits) -> (N, M)."""
    _check("xyz", xyz, cupy, np.float32, 2, 3)
    n, m = int(xyz.shape[0]), int(num_samples)
    if not 1 <= m <= n:
        raise ValueError(f"num_samples must be in [1, {n}], got {m}")
    if not 0 <= start < n:
        raise ValueError(f"start must be in [0, {n}), got {start}")
    if n >= TREE_MAX_POINTS:
        raise ValueError(f"{who} handles fewer than 2^{FPS_INDEX_BITS} = {TREE_MAX_POINTS} points, got {n}")
    return n, m


def static_shared_bytes(kernel) -> int:
    return int(getattr(kernel, "shared_size_bytes", 0) or 0)


def opt_in_shared(kernel, shared: int) -> None:
    """Let `kernel` take `shared` B of dynamic shared memory (the caller checked the device's
    limit). Dynamic plus static above 48 KiB needs an opt-in per kernel: at 45.6 M points the tree
    needed 48,600 B dynamic, under 48 KiB alone but not with the kernel's static arrays, and no
    block fitted (H200, bench_sampling --sizes 50M)."""
    if shared + static_shared_bytes(kernel) > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = shared


def raise_if_timed_out(status, kernel_name: str, what: str, timeout_s: float, grid: int) -> None:
    """The persistent kernels' status word: non-zero when `what` (a barrier or exchange) waited past
    timeout_s, which means the grid's blocks were not all resident at once."""
    if int(status.get()[0]) != 0:
        raise RuntimeError(f"{kernel_name}: {what} timed out after {timeout_s} s; the {grid} "
                           "blocks were not all resident (another kernel running on the GPU, or MPS limits?)")


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
    kernel = get_kernel(BLOCK_CU, "fps_block", _OPTIONS)
    kernel((b,), (BLOCK_THREADS,), (xyz, start, mind, out_idx, out_d2, np.int32(n), np.int32(m)))
    return out_idx, out_d2


def tree_memory_bytes(n: int, m: int) -> int:
    """GPU memory the tree path (fps_tree and fps_batched) needs: sort keys and permutation, sorted
    float4 copy, scratch. Counted from the arrays (not measured), the peak is the Morton argsort's,
    about 40 B a point (the uint64 codes, CuPy's copy of them, the int64 order and the sort's double
    buffers), plus 12 B when the cloud comes from the host: 96 leaves a margin. Linear in N up to
    TREE_MAX_POINTS (about 51.5 GB at 2^29 points, within an 80 GB GPU's 90 %)."""
    return 96 * int(n) + 8 * int(m) + (64 << 20)


def default_tree_threads(blocks_per_sm: int) -> int:
    return max(64, (TREE_THREADS // max(1, int(blocks_per_sm))) // 32 * 32)


def choose_leaf_size(n: int, grid: int, threads: int = TREE_THREADS) -> int:
    """Power-of-two leaf (>= 32 points, one per lane) balancing the box tests against the leaf
    updates (see AUTO_LEAF_BALANCE), enlarged if needed to fit the kernel's limits. The largest
    leaf (512) balances up to ~225 M points and fits AUTO_MAX_SHARED_BYTES up to ~250 M on 108
    blocks of 512 threads (~300 M on 132); above, it is returned all the same, and fps_tree raises
    once the leaves overrun the device's shared memory (~430 M on 132 SMs with 227 KiB). The GPU
    default, fps_batched, grows its leaves further and takes clouds up to TREE_MAX_POINTS."""
    def fits(leaf: int) -> bool:
        num_leaves = -(-n // leaf)
        leaves_per_block = -(-num_leaves // grid)
        return (_pow2_at_least(-(-leaves_per_block // threads)) <= MAX_LEAVES_PER_THREAD
                and leaves_per_block * TREE_SHARED_BYTES_PER_LEAF <= AUTO_MAX_SHARED_BYTES)

    leaf = MIN_LEAF_SIZE
    while leaf < 32 * MAX_POINTS_PER_LANE and (leaf * leaf * grid * threads < n * AUTO_LEAF_BALANCE
                                               or not fits(leaf)):
        leaf *= 2
    return leaf


def tree_shape(n: int, grid: int, threads: int, leaf: int) -> dict:
    """The tree kernel's shape for n points on `grid` blocks: its -D `options` and the launch's
    `leaves_per_block`, `leaves_per_thread`, `poll_warps`."""
    num_leaves = -(-n // leaf)
    leaves_per_block = -(-num_leaves // grid)
    leaves_per_thread = _pow2_at_least(-(-leaves_per_block // threads))
    if leaves_per_thread > MAX_LEAVES_PER_THREAD:
        raise ValueError(f"leaf_size {leaf} gives {leaves_per_block} leaves per block, more than "
                         f"{MAX_LEAVES_PER_THREAD} per thread; use a larger leaf_size")
    points_per_lane = _pow2_at_least(-(-leaf // 32))
    slot_rows = -(-grid // 32)  # publication slots per lane if one warp polled them all
    num_poll_warps = min(threads // 32, slot_rows)
    slots_per_lane = -(-slot_rows // num_poll_warps)
    options = (*_OPTIONS, f"-DFPS_THREADS={threads}", f"-DFPS_LEAVES_PER_THREAD={leaves_per_thread}",
               f"-DFPS_POINTS_PER_LANE={points_per_lane}", f"-DFPS_SLOTS_PER_LANE={slots_per_lane}")
    return {"options": options, "leaves_per_block": leaves_per_block, "leaves_per_thread": leaves_per_thread,
            "poll_warps": num_poll_warps}


# Streaming multiprocessors of the GPUs the tree kernel's shapes are precompiled for (A100, A10/A40/
# RTX 30xx-40xx sizes, H100 PCIe/SXM, H200/B200-class); other counts compile with NVRTC at first use.
PRECOMPILE_SM_COUNTS = (108, 84, 114, 132, 144, 148)


def kernel_variants() -> list[tuple[str, tuple[str, ...]]]:
    """The (file, options) variants `mvs-pipeline build-kernels` precompiles: the block kernel and
    the tree kernel's automatic shape for clouds of 2^10 .. 2^26 points on the GPUs above."""
    variants = {(BLOCK_CU, _OPTIONS), (TREE_CU, _OPTIONS)}  # the block kernel; the Morton codes
    threads = default_tree_threads(1)
    for sms in PRECOMPILE_SM_COUNTS:
        for k in range(10, 27):
            n = 1 << k
            variants.add((TREE_CU, tree_shape(n, sms, threads, choose_leaf_size(n, sms, threads))["options"]))
    return sorted(variants)


def _max_blocks_per_sm(cupy, kernel, threads: int, shared_bytes: int) -> int | None:
    try:
        return int(cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
            kernel.kernel.ptr, threads, shared_bytes))
    except Exception:  # older CuPy without the binding: trust one block per SM
        return None


def _morton_sorted(cupy, xyz):
    """(pts [N, 4] float32: x, y, z sorted along a Morton curve and the original index as int
    bits, one 16-byte load a point; order [N]: the original index of each sorted point)."""
    n = int(xyz.shape[0])
    lo, hi = (cupy.asnumpy(b).astype(np.float64) for b in column_bounds(xyz))
    extent = float((hi - lo).max())
    scale = 2097151.0 / extent if extent > 0 else 0.0
    codes = cupy.empty(n, dtype=cupy.uint64)
    get_kernel(TREE_CU, "fps_morton_codes", _OPTIONS)(
        (-(-n // 256),), (256,),
        (xyz, np.int32(n), np.float32(lo[0]), np.float32(lo[1]), np.float32(lo[2]), np.float32(scale), codes))
    order = cupy.argsort(codes)
    del codes
    pts = cupy.empty((n, 4), dtype=cupy.float32)
    pts[:, :3] = xyz[order]
    pts[:, 3] = order.astype(cupy.int32).view(cupy.float32)
    return pts, order


def _indices_of_keys(cupy, sel_key, start: int):
    """Keys ((distance bits + 1) << FPS_INDEX_BITS | (2^FPS_INDEX_BITS - 1 - index); sample 0 is the
    start) -> (indices [M] int64, d2 at selection [M] float32, +inf for sample 0)."""
    indices = (np.uint64(_INDEX_MASK) - (sel_key & np.uint64(_INDEX_MASK))).astype(cupy.int64)
    d2 = ((sel_key >> np.uint64(FPS_INDEX_BITS)).astype(cupy.uint32) - np.uint32(1)).view(cupy.float32)
    indices[0] = start
    d2[0] = np.inf
    return indices, d2


def fps_tree(xyz, num_samples: int, start: int, *, leaf_size: int | None = None, blocks_per_sm: int = 1,
             threads: int | None = None, grid: int | None = None, timeout_s: float = 10.0):
    """Exact FPS of one cloud with the persistent kernel. xyz [N, 3] float32
    -> (indices [M] int64, d2 at selection [M] float32 (+inf for sample 0), info dict).
    `grid`: blocks of the launch (default: blocks_per_sm on every SM); fewer blocks hold more
    leaves each and wait on fewer others at each sample's all-gather."""
    cupy = import_cupy()
    n, m = check_one_cloud(cupy, xyz, num_samples, start, "fps_tree")
    if int(blocks_per_sm) < 1:
        raise ValueError(f"blocks_per_sm must be >= 1, got {blocks_per_sm}")
    threads = default_tree_threads(blocks_per_sm) if threads is None else int(threads)
    if threads % 32 or not 64 <= threads <= 1024:
        raise ValueError(f"threads must be a multiple of 32 in [64, 1024], got {threads}")
    device = cupy.cuda.Device()
    num_sms = int(device.attributes["MultiProcessorCount"])
    full_grid = num_sms * int(blocks_per_sm)
    grid = full_grid if grid is None else int(grid)
    if not 1 <= grid <= full_grid:
        raise ValueError(f"grid must be in [1, {full_grid}] ({blocks_per_sm} block(s) on each of {num_sms} SMs), "
                         f"got {grid}")
    leaf = int(leaf_size) if leaf_size is not None else choose_leaf_size(n, grid, threads)
    if not 1 <= leaf <= 32 * MAX_POINTS_PER_LANE:
        raise ValueError(f"leaf_size must be in [1, {32 * MAX_POINTS_PER_LANE}], got {leaf}")
    shape = tree_shape(n, grid, threads, leaf)
    options, leaves_per_block = shape["options"], shape["leaves_per_block"]
    leaves_per_thread, num_poll_warps = shape["leaves_per_thread"], shape["poll_warps"]
    shared = leaves_per_block * TREE_SHARED_BYTES_PER_LEAF
    max_shared = int(device.attributes.get("MaxSharedMemoryPerBlockOptin", 48 * 1024))
    if shared > max_shared - 4096:
        raise ValueError(f"leaf_size {leaf} gives {leaves_per_block} leaves per block ({shared} B of shared "
                         f"memory, the device has {max_shared} B); use a larger leaf_size")
    kernel = get_kernel(TREE_CU, "fps_tree_persistent", options)
    opt_in_shared(kernel, shared)
    per_sm = _max_blocks_per_sm(cupy, kernel, threads, shared)
    if per_sm is not None and per_sm < blocks_per_sm:
        raise MVSError(f"fps_tree: {blocks_per_sm} blocks per SM requested but only {per_sm} fit "
                       f"({threads} threads, {shared} B shared); all blocks must be resident at once")

    pts, _ = _morton_sorted(cupy, xyz)
    start_xyz = cupy.asnumpy(xyz[start]).astype(np.float32)
    mind = cupy.empty(n, dtype=cupy.float32)
    slots = cupy.zeros(2 * grid * 4, dtype=cupy.uint64)
    sel_key = cupy.zeros(m, dtype=cupy.uint64)
    status = cupy.zeros(1, dtype=cupy.int32)
    leaf_updates = cupy.zeros(grid, dtype=cupy.uint64)

    kernel((grid,), (threads,),
           (pts, mind, slots, sel_key, status, leaf_updates, np.int32(n), np.int32(m), np.int32(start),
            np.float32(start_xyz[0]), np.float32(start_xyz[1]), np.float32(start_xyz[2]), np.int32(leaf),
            np.int32(leaves_per_block), np.int32(num_poll_warps), np.int64(int(timeout_s * 1e9))),
           shared_mem=shared)
    raise_if_timed_out(status, "fps_tree_persistent", "a grid barrier", timeout_s, grid)
    indices, d2 = _indices_of_keys(cupy, sel_key, start)
    updated_leaves = int(leaf_updates.sum().get())
    info = {"grid": grid, "threads": threads, "leaf_size": leaf, "leaves_per_block": leaves_per_block,
            "leaves_per_thread": leaves_per_thread, "poll_warps": num_poll_warps, "shared_bytes": shared,
            "max_blocks_per_sm": per_sm, "leaf_updates": updated_leaves,
            # points visited / (N * (M - 1)), the share of a plain FPS's distance work (upper bound:
            # every updated leaf counted full)
            "work_fraction": updated_leaves * leaf / max(1, n * (m - 1))}
    return indices, d2, info
