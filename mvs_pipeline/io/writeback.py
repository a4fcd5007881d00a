"""Start writing a range of a file to disk now, without waiting for it (Linux `sync_file_range`).

    start_writeback(fd, offset, nbytes)   # True when the kernel was asked, False where it cannot be

Why: a large output written through the page cache otherwise stays dirty until the final fsync
(io/atomic.py) or until the kernel's background threshold (10 % of memory: hundreds of GB on a
GPU server), so the disk idles while the file is produced and the fsync then waits for all of
it. fused.ply used to fdatasync every 256 MB in its writer thread instead, which makes the writer
wait for the disk at every step (copying into the page cache and writing to disk in turn, never
both at once). Asking the kernel to write each range as soon as it is in the page cache keeps the
disk busy the whole time and blocks nobody.

Only SYNC_FILE_RANGE_WRITE is used: it neither waits for the pages nor consumes a write error,
which the final fsync still reports (a failed write marks the file's mapping). Elsewhere
(macOS, a libc without the call) nothing happens and the final fsync writes everything, as
before this existed.
"""

from __future__ import annotations

import ctypes
import functools
import sys

SYNC_FILE_RANGE_WRITE = 2  # <fcntl.h>: start writeback of the dirty pages in the range, no waiting


@functools.lru_cache(maxsize=1)
def _sync_file_range():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def start_writeback(fd: int, offset: int, nbytes: int) -> bool:
    """Ask the kernel to start writing bytes offset .. offset + nbytes of `fd` to disk. A hint:
    False (and nothing else) where the call is missing or fails, e.g. on a pipe."""
    fn = _sync_file_range()
    if fn is None or nbytes <= 0:
        return False
    # ctypes releases the GIL around the call: other writer threads keep copying meanwhile
    return fn(int(fd), int(offset), int(nbytes), SYNC_FILE_RANGE_WRITE) == 0
