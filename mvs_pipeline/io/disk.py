"""Free space and writability of the output folder, and disk errors as one-line messages.

A full disk or a read-only output folder is a property of the machine, not a bug: the user gets
one line naming the folder or file (and the bytes needed and free), never a traceback. The
checks here run before a stage writes anything; `disk_error_message` covers what they cannot
foresee (another process filling the disk, a file system remounted read-only mid-run).
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from ..errors import MVSError

# The OSErrors that mean "this machine cannot store the output" rather than a bug of ours.
DISK_ERRNOS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
               errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
               errno.EPERM: "operation not permitted"}


def is_disk_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_ERRNOS


def disk_error_message(exc: OSError) -> str:
    """'FILE: cannot write (no space left on device)' for an OSError of DISK_ERRNOS."""
    where = exc.filename if exc.filename is not None else "output file"
    return f"{where}: cannot write ({DISK_ERRNOS.get(exc.errno, exc.strerror)})"


def format_bytes(n: int) -> str:
    """'123456789 bytes (117.7 MiB)': exact for scripts, readable for people."""
    size, unit = float(n), "bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            break
        size /= 1024
    return f"{n} bytes" + (f" ({size:.1f} {unit})" if unit != "bytes" else "")


def existing_ancestor(path: Path) -> Path:
    """`path` or its nearest ancestor that exists (what `mkdir(parents=True)` would create in)."""
    path = Path(os.path.abspath(path))
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def free_bytes(folder: Path) -> int:
    """Bytes free to an unprivileged writer on the file system that holds (or will hold) `folder`."""
    return shutil.disk_usage(existing_ancestor(folder)).free


def check_writable_folder(folder: Path) -> None:
    """Raise naming `folder` when it cannot be created or written: an ancestor (or the folder
    itself) is a regular file, or the nearest existing folder is read-only or not writable."""
    folder = Path(folder)
    base = existing_ancestor(folder)
    itself = base == Path(os.path.abspath(folder))
    if not base.is_dir():
        if itself:
            raise MVSError(f"{folder}: is a file, not a folder; cannot be the output folder")
        raise MVSError(f"{folder}: cannot create the output folder: {base} is a file, not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        read_only = bool(os.statvfs(base).f_flag & os.ST_RDONLY)
        why = "read-only file system" if read_only else "no write permission"
        if itself:
            raise MVSError(f"{folder}: output folder not writable ({why})")
        raise MVSError(f"{base}: not writable ({why}): cannot create the output folder {folder} in it")


def check_free_space(folder: Path, needed: int, what: str) -> None:
    """Raise when the file system of `folder` has fewer than `needed` bytes free; `what` names the
    writer ("stage 'depth'")."""
    free = free_bytes(folder)
    if needed > free:
        raise MVSError(f"{folder}: not enough free space for {what}: needs about {format_bytes(needed)}, "
                       f"{format_bytes(free)} free; free some space (finished outputs are kept) and rerun")
