"""Atomic file writes: write to a temporary sibling, fsync, then rename over the target.

A crash or Ctrl-C mid-write leaves either the old file or no file, never a truncated one, which
is what lets every stage treat "output exists" as "output is complete" and resume. `durable`
(default) also fsyncs before the rename, so the file survives a power loss too; the depth
stage's many large maps skip that by default (config `depth.sync_maps`) and check on resume that
each map file is complete instead.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None, durable: bool = True) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; on success rename it onto `path`.

    `suffix` defaults to the target's suffix so libraries that pick a format from the file
    name (cv2.imwrite, open3d) still work.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix is None:
        suffix = path.suffix or ".tmp"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if durable:
            with open(tmp_path, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
