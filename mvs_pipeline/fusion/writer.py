"""Writing fused chunks to fused.ply + fused.ply.vis while the next views fuse.

    with FusedCloudWriter(ply, vis) as out, ChunkWriter(out, colmap_idx) as chunks:
        for chunk in fuse_chunks(..., keep_on_device=True):
            chunks.submit(chunk)
        chunks.drain()
        out.finish()

Each chunk is placed in the files at once, in view order (its byte counts follow from its point
count and its visibility masks), and then packed and written by a pool of threads at those offsets
(io/fused_ply.py), so no thread waits for another's chunk. Where the chunk is:
- on the host (CPU fusion): a thread packs the records and visibility words (NumPy, ~50 ms a
  million points) and writes them.
- on the GPU (CUDA fusion): the records and words are packed on the device (cuda/fusion_records.cu)
  and downloaded with one asynchronous copy into a reused page-locked buffer
  (io/pinned_buffers.py); a thread waits for that copy and writes. The host never touches the
  points themselves: at 100 M points (200 views of 1600x1200, H200 machine) packing them on the
  host in 8 threads was most of the fusion stage's 7.3 s.
At most `max_pending` chunks are in flight (and on the GPU path as many page-locked buffers
exist), so the host memory held does not grow with the number of points.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ..gpu.loader import on_gpu
from ..io.fused_ply import FusedCloudWriter, Placement, pack_chunk
from ..io.vis_file import visibility_records, visibility_word_count

MAX_THREADS = 8  # packing (host chunks) and writing threads
DEVICE_BUFFERS = 4  # page-locked download buffers of the GPU path (and chunks in flight there)


def default_threads() -> int:
    return max(1, min(MAX_THREADS, os.cpu_count() or 1))


class ChunkWriter:
    def __init__(self, out: FusedCloudWriter, colmap_idx: np.ndarray, threads: int | None = None):
        self.out = out
        self.colmap_idx = np.asarray(colmap_idx)
        self.threads = threads or default_threads()
        self.max_pending = self.threads + 2
        self._pool = ThreadPoolExecutor(max_workers=self.threads)
        self._pending: deque[Future] = deque()  # in chunk order; each returns its chunk's statistics
        self._buffers = None  # io.pinned_buffers.PinnedBuffers, made by the first device chunk

    def __enter__(self) -> "ChunkWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            for fut in self._pending:
                fut.cancel()
        self._pool.shutdown(wait=True)  # no thread writes once the files are closed

    def submit(self, chunk) -> None:
        """Place `chunk` (fusion.stage.FusedChunk, NumPy or CuPy arrays) and queue its packing and
        writing; re-raises here the error of an earlier chunk."""
        ref = int(self.colmap_idx[chunk.view_idx])
        nbs = self.colmap_idx[chunk.neighbors]
        if on_gpu(chunk.xyz):
            fut = self._submit_device(chunk, ref, nbs)
        else:
            fut = self._submit_host(chunk, ref, nbs)
        self._pending.append(fut)
        while len(self._pending) > self.max_pending or (self._pending and self._pending[0].done()):
            self._collect()

    def drain(self) -> None:
        """Wait for every chunk submitted (its statistics added in chunk order)."""
        while self._pending:
            self._collect()

    def _collect(self) -> None:
        self.out.add_stats(*self._pending.popleft().result())

    def _submit_host(self, chunk, ref: int, nbs: np.ndarray) -> Future:
        at = self.out.place(len(chunk.xyz), visibility_word_count(len(nbs), chunk.vis))

        def job():
            packed = pack_chunk(chunk.xyz, chunk.normal, chunk.color, chunk.support,
                                visibility_records(ref, nbs, chunk.vis))
            self.out.write(at, packed.records, packed.vis_words)
            return len(packed.records), packed.bbox_min, packed.bbox_max, packed.xyz_sum

        return self._pool.submit(job)

    def _submit_device(self, chunk, ref: int, nbs: np.ndarray) -> Future:
        import cupy as cp  # noqa: PLC0415 (CUDA fusion only)

        from ..io.pinned_buffers import PinnedBuffers  # noqa: PLC0415
        from .cuda import pack_chunk_cuda  # noqa: PLC0415

        if self._buffers is None:
            self._buffers = PinnedBuffers(DEVICE_BUFFERS)
        p = len(chunk.xyz)
        records, words = pack_chunk_cuda(chunk.xyz, chunk.normal, chunk.color, chunk.support, chunk.vis, ref, nbs)
        stats = _device_stats(cp, chunk.xyz)
        at = self.out.place(p, len(words))
        nrec, nvis = at.ply_bytes, at.vis_bytes
        buf = self._buffers.acquire(nrec + nvis)
        try:
            # one stream, the current one: the copies follow the kernels that made records and words,
            # and whatever later reuses their memory follows the copies
            stream = cp.cuda.get_current_stream()
            if nrec:
                records.data.copy_to_host_async(_address(buf, 0), nrec, stream)
            if nvis:
                words.data.copy_to_host_async(_address(buf, nrec), nvis, stream)
            copied = stream.record()
        except BaseException:
            self._buffers.release(buf)
            raise
        return self._pool.submit(self._write_downloaded, at, buf, copied, p, stats)

    def _write_downloaded(self, at: Placement, buf: np.ndarray, copied, p: int, stats) -> tuple:
        try:
            copied.synchronize()
            self.out.write(at, buf[:at.ply_bytes], buf[at.ply_bytes:at.ply_bytes + at.vis_bytes])
        finally:
            self._buffers.release(buf)
        return (p, *stats)


def _device_stats(cp, xyz) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bbox min, bbox max, float64 sum) of CuPy float32 xyz [P, 3], as pack_chunk computes them
    from the values written (min and max exact; the sum in the GPU's order: its last bits may
    differ from NumPy's, which only the report's centroid sees)."""
    from ..arrays import column_bounds, column_sums  # noqa: PLC0415

    if len(xyz) == 0:
        return np.full(3, np.inf), np.full(3, -np.inf), np.zeros(3)
    lo, hi = column_bounds(xyz)
    stacked = cp.stack([lo.astype(cp.float64), hi.astype(cp.float64), column_sums(xyz, dtype=cp.float64)]).get()
    return stacked[0], stacked[1], stacked[2]


def _address(buf: np.ndarray, offset: int):
    import ctypes  # noqa: PLC0415

    # a c_void_p, not an int: CuPy before v13 reads `mem.value` (as io/device_io.py)
    return ctypes.c_void_p(int(buf.ctypes.data) + offset)
