"""One run at a time per output folder: an advisory lock on OUT/.mvs-pipeline.lock for the whole run.

Two runs writing one folder would delete each other's half-written files (a run starts by removing
the temporaries that interrupted writers left, atomic.remove_leftovers) and mix their stages'
outputs and fingerprints. The lock is the kernel's `flock`: it ends with the process however the
process ends (Ctrl-C, SIGKILL, os._exit, a crash), so no stale lock is ever left to clear by hand.
The file stays in the folder (hidden, a few bytes: the holder's pid); removing it while held would
let a third run lock a new file beside the old one.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from ..errors import MVSError

LOCK_NAME = ".mvs-pipeline.lock"
# file systems without flock support (some NFS mounts) answer with these: the run goes on unlocked
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


def _holder_pid(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""


@contextlib.contextmanager
def output_folder_lock(out_dir: Path):
    """Hold OUT's lock for the block; a one-line MVSError when another process holds it."""
    try:
        import fcntl  # noqa: PLC0415 (POSIX only)
    except ImportError:
        fcntl = None
    if fcntl is None:
        yield
        return
    fd = os.open(Path(out_dir) / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        locked = True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder_pid(fd)
            raise MVSError(f"{out_dir}: another mvs-pipeline run is using this output folder"
                           f"{f' (pid {pid})' if pid.isdigit() else ''}; wait for it to end, or give another -o") from None
        except OSError as exc:
            if exc.errno not in _NO_LOCKS:
                raise
            locked = False
        if locked:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)   # releases the lock
