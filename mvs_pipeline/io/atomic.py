"""Atomic file writes: write to a temporary sibling, fsync, then rename over the target.

A crash or Ctrl-C mid-write leaves either the old file or no file, never a truncated one, which
is what lets every stage treat "output exists" as "output is complete" and resume. `durable`
(default) also fsyncs before the rename, so the file survives a power loss too; the depth
stage's many large maps skip that by default (config `depth.sync_maps`) and check on resume that
each map file is complete instead.

A process killed with SIGKILL cannot remove its temporary file; the names carry a fixed marker
(`.NAME.tmp-XXXXXXXX.SUFFIX`) so that `remove_leftovers` can find them at the next start.
Temporary files are created mode 0600 (tempfile); they get the umask's mode before the rename,
like any file `open()` creates.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path
from typing import Iterator

from .disk import DISK_ERRNOS

TMP_MARKER = ".tmp-"
# `.NAME.tmp-XXXXXXXX[.SUFFIX]` (this version), and `.NAME.XXXXXXXX.SUFFIX` with SUFFIX the end of
# NAME (versions before the marker); tempfile's random part is 8 characters of [a-z0-9_].
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?:tmp-[a-z0-9_]{8}.*|[a-z0-9_]{8}(?P<suffix>\.[^.]+))$")


def _read_umask() -> int:
    # os.umask can only be read by setting it; done once at import, before any writer thread runs.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_read_umask()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None, durable: bool = True) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; on success rename it onto `path`.

    `suffix` defaults to the target's suffix so libraries that pick a format from the file
    name (cv2.imwrite, open3d) still work.
    """
    path = Path(path)
    tmp_path = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if suffix is None:
            suffix = path.suffix or ".tmp"
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}{TMP_MARKER}", suffix=suffix, dir=path.parent)
        os.fchmod(fd, _FILE_MODE)  # writers that replace the file (np.save, cv2) keep it via the umask anyway
        os.close(fd)
        tmp_path = Path(tmp)
        yield tmp_path
        if durable:
            with open(tmp_path, "rb+") as f:
                os.fsync(f.fileno())
        if (os.stat(tmp_path).st_mode & 0o777) != _FILE_MODE:
            os.chmod(tmp_path, _FILE_MODE)
        os.replace(tmp_path, path)
    except OSError as exc:
        # A full or read-only disk: name the file being written (a failing write() names none, a
        # failing open names the temporary), so the user's one-line message says what was lost.
        if exc.errno in DISK_ERRNOS and exc.filename in (None, str(tmp_path)):
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    finally:
        if tmp_path is not None and tmp_path.exists():
            tmp_path.unlink()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def is_leftover(name: str) -> bool:
    """Whether a file name is an atomic_path temporary (of this version or an earlier one)."""
    m = _LEFTOVER.match(name)
    if m is None:
        return False
    return m.group("suffix") is None or m.group("name").endswith(m.group("suffix")) or m.group("suffix") == ".tmp"


def remove_leftovers(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporary files that killed writers left anywhere under `folder`; return them.

    Only for a folder that no other process is writing into at the same time."""
    removed = []
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            if name.startswith(".") and is_leftover(name):
                path = Path(dirpath) / name
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed
