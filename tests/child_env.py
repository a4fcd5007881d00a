"""The environment a test gives the CLI it starts as a child process."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment with the repository first on PYTHONPATH. The caller's PYTHONPATH is
    kept after it: on the GPU machine the staged wheels (plyfile, pycolmap, ...) live there, and a child
    given the repository alone failed to import them."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}
