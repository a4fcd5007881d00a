"""File bytes straight to and from GPU memory through two page-locked chunk buffers.

    data = read_to_device(path, offset, nbytes)   # cupy uint8 [nbytes]
    write_from_device(f, data)                    # data: cupy uint8, contiguous

Why: a pageable copy of fused.ply's body (1.4 GB at 50 M points) goes file -> fresh host buffer
(page faults on every page) -> CUDA's staging buffer -> GPU. Here the file is read into one
pinned chunk while the previous chunk is copied to the GPU asynchronously, so reading and the
PCIe copy overlap and no host array of the whole body exists; a few threads read disjoint chunks
at once, each on its own stream, and the result is ready when the call returns. The way back
likewise: threads download disjoint chunks (after the current stream's kernels that made `data`)
and write each at its place in the file while the next one downloads. The copies are
MemoryPointer's async copies (stable across CuPy versions, unlike ndarray.get's `blocking`).
"""

from __future__ import annotations

import ctypes
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import MVSError
from .writeback import start_writeback

CHUNK_BYTES = 32 << 20
READ_THREADS = 4  # concurrent chunk readers of read_to_device
WRITE_THREADS = 4  # concurrent chunk writers of write_from_device


def _pinned(cupy, nbytes: int) -> np.ndarray:
    """Page-locked uint8 NumPy buffer (cupyx.empty_pinned without importing cupyx, 0.15 s)."""
    mem = cupy.cuda.alloc_pinned_memory(max(1, nbytes))
    return np.ndarray((nbytes,), dtype=np.uint8, buffer=mem)


def _address(buf: np.ndarray) -> ctypes.c_void_p:
    # a c_void_p, not an int: CuPy before v13 reads `mem.value`
    return ctypes.c_void_p(int(buf.ctypes.data))


def _pread_full(fd: int, view: memoryview, offset: int) -> int:
    """Bytes read into `view` from `offset` on: all of it unless the file ends first."""
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], offset + got)
        if n <= 0:
            break
        got += n
    return got


def _chunk_runs(nbytes: int, chunk: int, max_threads: int) -> list[list[int]]:
    """The chunks' start offsets dealt round-robin into runs, one run per thread: up to
    max_threads, and at least 4 chunks a run (a thread costs its own pinned buffers and stream)."""
    starts = list(range(0, nbytes, chunk))
    n_threads = max(1, min(max_threads, (len(starts) + 3) // 4))
    return [starts[k::n_threads] for k in range(n_threads)]


def _run_each(work, runs: list[list[int]]) -> None:
    """work(run) for every run, in threads when there are several; re-raises the first error."""
    if len(runs) == 1:
        work(runs[0])
        return
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        for fut in [pool.submit(work, run) for run in runs]:
            fut.result()


def read_to_device(path: str | os.PathLike, offset: int, nbytes: int, chunk_bytes: int = CHUNK_BYTES,
                   threads: int | None = None):
    """cupy uint8 [nbytes]: bytes offset .. offset + nbytes of the file.

    `threads` (default: up to READ_THREADS, one per 4 chunks) read disjoint runs of chunks, each
    through its own two pinned buffers and CUDA stream: one thread read fused.ply's 1.8 GB at
    ~2.5 GB/s from the page cache (H100 machine), the copy out of the page cache being the limit."""
    import cupy  # noqa: PLC0415

    out = cupy.empty(nbytes, dtype=cupy.uint8)
    if nbytes == 0:
        return out
    chunk = max(1, min(chunk_bytes, nbytes))
    runs = _chunk_runs(nbytes, chunk, threads or READ_THREADS)
    # `out` may reuse memory that kernels still queued on the current stream use: the readers'
    # own streams must not write into it before those finish.
    cupy.cuda.get_current_stream().synchronize()
    device = cupy.cuda.Device().id

    def read_run(run: list[int]) -> None:
        with cupy.cuda.Device(device), open(path, "rb", buffering=0) as f:
            stream = cupy.cuda.Stream(non_blocking=True)
            bufs = [_pinned(cupy, chunk) for _ in range(2)]
            done = [None, None]  # event after the last copy out of each buffer
            for k, pos in enumerate(run):
                count = min(chunk, nbytes - pos)
                buf = bufs[k % 2]
                if done[k % 2] is not None:
                    done[k % 2].synchronize()  # its previous copy to the GPU has finished
                got = _pread_full(f.fileno(), memoryview(buf)[:count], offset + pos)
                if got != count:
                    raise MVSError(f"{path}: file ends {nbytes - pos - got} bytes early")
                (out.data + pos).copy_from_host_async(_address(buf), count, stream)
                done[k % 2] = stream.record()
            stream.synchronize()  # the pinned buffers go back to CuPy's pool when this returns

    _run_each(read_run, runs)
    return out


def write_from_device(f, data, chunk_bytes: int = CHUNK_BYTES, threads: int | None = None) -> None:
    """Write contiguous cupy uint8 `data` to the open binary file `f` at its position (which is
    left after the data). `threads` (default: up to WRITE_THREADS, one per 4 chunks) download and
    write disjoint runs of chunks, each through its own pinned buffers and stream: one thread
    wrote ~1.5 GB/s into the page cache (H100 machine). Each written chunk is handed to the disk
    at once (io/writeback.py, no waiting), so that the disk works while the rest is written and a final fsync (io/atomic.py) has little left to wait for. Until session 26 a
    thread fdatasync'ed the whole file every 64 MB instead, and waited for the disk each time:
    fused_fps.ply's 5 GB at 1000 views took 5.67 s to write (H200)."""
    import cupy  # noqa: PLC0415

    if data.dtype != cupy.uint8 or not data.flags.c_contiguous:
        raise ValueError("data: expected a C-contiguous cupy uint8 array")
    flat = data.reshape(-1)
    n = int(flat.size)
    if n == 0:
        return
    f.flush()
    base = f.tell()
    chunk = max(1, min(chunk_bytes, n))
    runs = _chunk_runs(n, chunk, threads or WRITE_THREADS)
    # the writers' own streams must see every kernel that made `data`
    cupy.cuda.get_current_stream().synchronize()
    device = cupy.cuda.Device().id
    fd = f.fileno()

    def write_run(run: list[int]) -> None:
        def put(buf, pos: int, count: int) -> None:
            _pwrite_full(fd, memoryview(buf)[:count], base + pos)
            start_writeback(fd, base + pos, count)

        with cupy.cuda.Device(device):
            stream = cupy.cuda.Stream(non_blocking=True)
            bufs = [_pinned(cupy, chunk) for _ in range(2)]
            pending = None  # (buffer, position, bytes, event) copied but not yet written
            for k, pos in enumerate(run):
                count = min(chunk, n - pos)
                buf = bufs[k % 2]  # written to the file two steps ago (pwrite returned): free
                (flat.data + pos).copy_to_host_async(_address(buf), count, stream)
                event = stream.record()
                if pending is not None:
                    pending[3].synchronize()
                    put(pending[0], pending[1], pending[2])
                pending = (buf, pos, count, event)
            pending[3].synchronize()
            put(pending[0], pending[1], pending[2])

    _run_each(write_run, runs)
    f.seek(base + n)


def _pwrite_full(fd: int, view: memoryview, offset: int) -> None:
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)
