"""A file's identity without reading it: [size, mtime_ns]. The fingerprints (what a stage's outputs
were made from) and the evaluate stage's reuse of its results compare these."""

from __future__ import annotations

import os
from pathlib import Path


def stamp(path: Path) -> list[int] | None:
    """[size, mtime_ns] of a file (None if absent): its identity, without reading it."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def tree_stamps(folder: Path, pattern: str = "*") -> dict[str, list[int]]:
    """Stamps of the files under `folder` matching `pattern`, by path relative to it."""
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    return {p.relative_to(folder).as_posix(): stamp(p) for p in sorted(folder.rglob(pattern)) if p.is_file()}
