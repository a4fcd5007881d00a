"""io/pinned_buffers.PinnedBuffers: at most `count` buffers exist, reused; one too small is
replaced by a larger one, the old one dropped; acquire waits while all are in use."""

from __future__ import annotations

import ctypes
import threading
import time

import numpy as np
import pytest

from mvs_pipeline.io import pinned_buffers
from mvs_pipeline.io.pinned_buffers import ROUND_BYTES, PinnedBuffers


@pytest.fixture
def host_allocator(monkeypatch):
    """Ordinary host memory in place of page-locked memory (no GPU here): the bookkeeping is the same."""
    made = []

    def fake(nbytes):
        made.append(nbytes)
        return np.empty(nbytes, np.uint8)

    monkeypatch.setattr(pinned_buffers, "_page_locked", fake)
    return made


def test_buffers_are_reused_and_grown(host_allocator):
    bufs = PinnedBuffers(2)
    a = bufs.acquire(1000)
    assert a.nbytes == ROUND_BYTES and bufs.allocated_bytes == ROUND_BYTES
    bufs.release(a)
    b = bufs.acquire(500)
    assert b is a and host_allocator == [ROUND_BYTES]  # reused, nothing allocated
    c = bufs.acquire(3 * ROUND_BYTES)  # the second buffer, made large enough at once
    assert c.nbytes >= 3 * ROUND_BYTES
    bufs.release(b)
    bufs.release(c)
    d = bufs.acquire(5 * ROUND_BYTES)  # the last released (c) is too small: replaced, c dropped
    assert d.nbytes >= 5 * ROUND_BYTES and len(host_allocator) == 3
    assert bufs.allocated_bytes == a.nbytes + d.nbytes  # never more than `count` buffers


def test_acquire_waits_for_a_release(host_allocator):
    bufs = PinnedBuffers(1)
    held = bufs.acquire(10)
    got = []
    t = threading.Thread(target=lambda: got.append(bufs.acquire(10)))
    t.start()
    time.sleep(0.2)
    assert got == []  # the only buffer is in use
    bufs.release(held)
    t.join(10)
    assert got and got[0] is held


def test_a_failed_allocation_gives_the_slot_back(monkeypatch):
    bufs = PinnedBuffers(1)

    def failing(nbytes):
        raise MemoryError("no page-locked memory")

    monkeypatch.setattr(pinned_buffers, "_page_locked", failing)
    for _ in range(2):  # the second call would wait forever if the slot had been lost
        with pytest.raises(MemoryError):
            bufs.acquire(10)
    assert bufs.allocated_bytes == 0


@pytest.mark.gpu
def test_page_locked_buffers_take_async_downloads(cupy):
    cp = cupy
    bufs = PinnedBuffers(2)
    src = cp.arange(3 << 18, dtype=cp.uint32)
    buf = bufs.acquire(src.nbytes)
    stream = cp.cuda.get_current_stream()
    src.data.copy_to_host_async(ctypes.c_void_p(buf.ctypes.data), src.nbytes, stream)
    stream.synchronize()
    np.testing.assert_array_equal(buf[:src.nbytes].view(np.uint32), src.get())
    bufs.release(buf)
