"""A fixed number of page-locked host buffers, reused: the landing place of GPU downloads that
a writer thread then puts into a file.

    buffers = PinnedBuffers(count=4)
    buf = buffers.acquire(nbytes)   # uint8 [>= nbytes]; waits while all `count` are in use
    ...                             # async copy into buf, write buf[:nbytes] to a file
    buffers.release(buf)

Why not CuPy's pinned memory pool (cupy.cuda.alloc_pinned_memory): it keeps every block it ever
handed out for reuse by the same size, so a stream of chunks of varying sizes leaves all of them
allocated, and page-locked memory is resident memory. Here at most `count` buffers exist; one too
small for a chunk is replaced by a larger one (the old one is freed at once), so the host memory
they hold is bounded by `count` times the largest chunk, whatever the number of chunks.
"""

from __future__ import annotations

import threading

import numpy as np

GROWTH = 1.25  # a replaced buffer gets this much more than the chunk that did not fit
ROUND_BYTES = 1 << 20


class PinnedBuffers:
    def __init__(self, count: int):
        if count < 1:
            raise ValueError(f"count: at least one buffer, got {count}")
        self._free: list[np.ndarray | None] = [None] * count  # None: not allocated yet
        self._cond = threading.Condition()
        self.allocated_bytes = 0  # page-locked bytes held now (what bounds the host memory)

    def acquire(self, nbytes: int) -> np.ndarray:
        """A free page-locked uint8 buffer of at least nbytes (blocks until one is released)."""
        with self._cond:
            while not self._free:
                self._cond.wait()
            buf = self._free.pop()
        if buf is None or buf.nbytes < nbytes:
            size = 0 if buf is None else buf.nbytes
            del buf  # freed before its successor is allocated
            want = -(-max(int(nbytes * GROWTH), 1) // ROUND_BYTES) * ROUND_BYTES
            try:
                buf = _page_locked(want)
            except BaseException:
                with self._cond:
                    self.allocated_bytes -= size
                    self._free.append(None)
                    self._cond.notify()
                raise
            with self._cond:
                self.allocated_bytes += want - size
        return buf

    def release(self, buf: np.ndarray) -> None:
        with self._cond:
            self._free.append(buf)
            self._cond.notify()


def _page_locked(nbytes: int) -> np.ndarray:
    """uint8 [nbytes] in page-locked memory of its own (cudaHostAlloc; cudaFreeHost when the array
    and its views are gone)."""
    import cupy  # noqa: PLC0415 (only the GPU path calls this)

    mem = cupy.cuda.PinnedMemory(nbytes)
    return np.ndarray((nbytes,), dtype=np.uint8, buffer=cupy.cuda.PinnedMemoryPointer(mem, 0))
