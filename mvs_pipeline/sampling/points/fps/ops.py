"""Exact farthest point sampling (FPS): the backend-dispatching public API.

    farthest_point_sampling(xyz [N, 3], M, start_index=0) -> indices [M] int64, in selection order
    farthest_point_sampling_batch(xyz [B, N, 3], M, start_index=0) -> indices [B, M] int64

Every backend and method returns the same sequence (definition in cpu.py):
squared float32 distances, the start index first, ties to the lower index, distinct indices.

Methods: `tree` prunes with spatial bounds (GPU: one persistent launch over all SMs; CPU: a Numba
QuickFPS-style tree), `plain` scans every point per sample (GPU: the one-block kernel), `auto`
picks `tree` above AUTO_TREE_MIN_POINTS points.

Bad input: an empty cloud, NaN/inf coordinates, M < 1, M > N or a start index out of range raise
MVSError. The GPU tree path sorts the points with less memory where its fast sort does not fit
(memory.py: the estimate phase by phase; the same samples). A cloud that does not fit in free GPU
memory even so (or, for `tree`, has TREE_MAX_POINTS = 2^29 points or more, or leaves too many for
the GPU's shared memory) runs on the CPU with a warning when the backend is `auto`, and raises
BackendUnavailable when it is `cuda`.
"""

from __future__ import annotations

import logging

import numpy as np

from mvs_pipeline.errors import BackendUnavailable, MVSError
from mvs_pipeline.gpu.backend import resolve_backend

from .. import validate
from ..validate import array_module, as_points, check_index, check_num_samples, gpu_memory_fallback, is_cupy_array
from . import memory
from .cuda import TREE_MAX_POINTS  # imports no CuPy

log = logging.getLogger(__name__)

AUTO_TREE_MIN_POINTS = 16384
CPU_LEAF_SIZE = 32
METHODS = ("auto", "tree", "plain")


def _twin():
    """The Numba twin (cpu.py), imported on first CPU use: a GPU run never pays Numba's import."""
    from . import cpu  # noqa: PLC0415

    return cpu


def _pick_method(method: str, n: int) -> str:
    if method not in METHODS:
        raise MVSError(f"unknown FPS method {method!r}; choose one of {', '.join(METHODS)}")
    if method == "auto":
        return "tree" if n > AUTO_TREE_MIN_POINTS else "plain"
    return method


def _to_numpy(arr) -> np.ndarray:
    if is_cupy_array(arr):
        return arr.get()
    return np.asarray(arr)


def _like_input(arr, template):
    if is_cupy_array(template) and not is_cupy_array(arr):
        import cupy  # noqa: PLC0415

        return cupy.asarray(arr)
    if not is_cupy_array(template) and is_cupy_array(arr):
        return arr.get()
    return arr


def _oom_fallback(what: str, backend: str, exc: Exception) -> str:
    if backend == "cuda":
        raise BackendUnavailable(f"{what} ran out of GPU memory ({exc}); use backend 'auto' or 'cpu'") from exc
    log.warning("%s ran out of GPU memory (%s); running on the CPU instead", what, exc)
    return "cpu"


def _unfit_fallback(what: str, backend: str, exc: BackendUnavailable) -> str:
    """A kernel that cannot run this cloud on this GPU (fps_batched: the leaves of a very large cloud
    overrun the block's shared memory, e.g. above ~390 M points on an A100): the CPU for `auto`."""
    if backend == "cuda":
        raise exc
    log.warning("%s: %s; running on the CPU instead", what, exc)
    return "cpu"


def gpu_tree_plan(what: str, n: int, m: int, upload: bool, backend: str) -> tuple[str, bool]:
    """(backend, lean) of the tree path on the GPU: the fast sort where it fits the free memory, else
    the lean one (memory.py) where that fits, else the CPU for `auto` (gpu_memory_fallback)."""
    free = validate.gpu_free_bytes()
    variant = memory.choose_variant(n, m, free, upload)
    needs = memory.variant_needs(n, m, upload)
    if variant == memory.LEAN:
        log.info("%s: the fast Morton sort needs about %.2f GiB, more than 90 %% of the %.2f GiB free; "
                 "sorting lean keys (about %.2f GiB)", what, needs[memory.FAST] / 2**30, free / 2**30,
                 needs[memory.LEAN] / 2**30)
    return gpu_memory_fallback(what, needs[variant], backend), variant == memory.LEAN


def farthest_point_sampling(xyz, num_samples: int, start_index: int = 0, *, backend: str = "auto",
                            method: str = "auto", return_d2: bool = False, leaf_size: int | None = None):
    """Exact FPS of xyz [N, 3] (NumPy or CuPy). Returns indices [M] int64 in selection order, and
    with return_d2 also the squared distance of each sample to the earlier ones when it was
    picked ([M] float32, +inf first: the covering radius^2, non-increasing).
    Outputs are CuPy arrays when `xyz` is one."""
    pts = as_points(xyz)
    n = int(pts.shape[0])
    m = check_num_samples(num_samples, n)
    start = check_index(start_index, n)
    meth = _pick_method(method, n)
    what = f"FPS of {n} points"
    if meth == "tree" and n >= TREE_MAX_POINTS and backend != "cpu":
        if backend == "cuda":
            raise BackendUnavailable(f"{what}: the GPU tree kernel handles fewer than {TREE_MAX_POINTS} points")
        log.warning("%s: the GPU tree kernel handles fewer than %d points; using the CPU", what, TREE_MAX_POINTS)
        backend = "cpu"
    resolved = resolve_backend(backend)
    if resolved == "cuda":
        from . import cuda as kfps  # noqa: PLC0415
        from .batched import fps_batched  # noqa: PLC0415

        lean = False
        if meth == "tree":
            resolved, lean = gpu_tree_plan(what, n, m, not is_cupy_array(pts), backend)
        else:
            resolved = gpu_memory_fallback(what, 16 * n + 8 * m, backend)
    if resolved == "cuda":
        import cupy  # noqa: PLC0415

        def on_gpu(lean_sort: bool):
            pts_gpu = cupy.asarray(pts)
            if meth == "tree" and leaf_size is None:   # the same sequence, ~100 samples per exchange
                return fps_batched(pts_gpu, m, start, lean=lean_sort)[:2]
            if meth == "tree":
                return kfps.fps_tree(pts_gpu, m, start, leaf_size=leaf_size, lean=lean_sort)[:2]
            idx, d2b = kfps.fps_block(pts_gpu[None], cupy.asarray([start], dtype=cupy.int32), m)
            return idx[0].astype(cupy.int64), d2b[0]

        try:
            retry_lean = False
            try:
                indices, d2 = on_gpu(lean)
            except cupy.cuda.memory.OutOfMemoryError as exc:
                if meth != "tree" or lean:
                    raise
                # the estimate is not a measurement: the lean sort (same samples) before the CPU
                log.info("%s: the fast Morton sort ran out of GPU memory (%s); sorting lean keys", what, exc)
                retry_lean = True
            if retry_lean:   # outside the handler: the exception's frames (the upload) are gone by now
                cupy.get_default_memory_pool().free_all_blocks()
                indices, d2 = on_gpu(True)
        except cupy.cuda.memory.OutOfMemoryError as exc:
            resolved = _oom_fallback(what, backend, exc)
        except BackendUnavailable as exc:
            resolved = _unfit_fallback(what, backend, exc)
    if resolved == "cpu":
        pts_cpu = _to_numpy(pts)
        if meth == "tree":
            indices, d2 = _twin().fps_tree(pts_cpu, m, start, leaf_size=leaf_size or CPU_LEAF_SIZE)
        else:
            indices, d2 = _twin().fps_plain(pts_cpu, m, start)
    indices, d2 = _like_input(indices, xyz), _like_input(d2, xyz)
    return (indices, d2) if return_d2 else indices


def farthest_point_sampling_batch(xyz, num_samples: int, start_index=0, *, backend: str = "auto"):
    """Exact FPS of each cloud of xyz [B, N, 3] (all clouds the same size). `start_index` is one
    index for all clouds or [B] indices. Returns [B, M] int64 (CuPy when `xyz` is CuPy)."""
    arr = array_module(xyz).asarray(xyz)
    if arr.ndim != 3 or arr.shape[2] != 3:
        raise MVSError(f"xyz: expected a [B, N, 3] batch of clouds, got shape {tuple(arr.shape)}")
    b, n = int(arr.shape[0]), int(arr.shape[1])
    if b == 0:
        raise MVSError("xyz: the batch is empty")
    pts = as_points(arr.reshape(b * n, 3)).reshape(b, n, 3)
    m = check_num_samples(num_samples, n)
    starts = np.broadcast_to(np.asarray(_to_numpy(start_index)), (b,))
    starts = np.array([check_index(s, n, f"start_index[{i}]") for i, s in enumerate(starts)], dtype=np.int32)
    resolved = resolve_backend(backend)
    what = f"batched FPS of {b} x {n} points"
    if resolved == "cuda":
        resolved = gpu_memory_fallback(what, 16 * b * n + 8 * b * m, backend)
    if resolved == "cuda":
        import cupy  # noqa: PLC0415

        from . import cuda as kfps  # noqa: PLC0415

        try:
            idx, _d2 = kfps.fps_block(cupy.ascontiguousarray(cupy.asarray(pts)), cupy.asarray(starts), m)
            out = idx.astype(cupy.int64)
        except cupy.cuda.memory.OutOfMemoryError as exc:
            resolved = _oom_fallback(what, backend, exc)
    if resolved == "cpu":
        pts_cpu = _to_numpy(pts)
        fn = _twin().fps_tree if n > AUTO_TREE_MIN_POINTS else _twin().fps_plain
        out = np.stack([fn(pts_cpu[i], m, int(starts[i]))[0] for i in range(b)])
    return _like_input(out, xyz)
