"""Kernel binaries built ahead of time by `mvs-pipeline build-kernels` (nvcc), found by variant.

A variant is (cuda/<basename>, its -D/compiler options). Its key hashes the basename, the options
and the text of every file in cuda/ the build could have included, so a binary is used only for
exactly the sources and options it was built from; anything else falls back to NVRTC (the
loader's job). The folder holds one fatbin per variant and `manifest.json`:
    {"<key>": {"cu": "depth_patchmatch.cu", "options": [...], "file": "<key>.fatbin", "archs": [...]}}
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

from ..paths import CUDA_DIR, PROJECT_ROOT

KERNEL_DIR = Path(os.environ.get("MVS_PIPELINE_KERNEL_DIR", PROJECT_ROOT / "build" / "kernels"))
MANIFEST = "manifest.json"


@functools.lru_cache(maxsize=None)
def _sources_digest(cuda_dir: Path) -> str:
    """One digest of every .cu/.cuh in cuda/: a header edit invalidates every binary (simple, safe)."""
    h = hashlib.sha256()
    for f in sorted(cuda_dir.glob("*.cu*")):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def variant_key(basename: str, options: tuple[str, ...], cuda_dir: Path = CUDA_DIR) -> str:
    text = "\0".join((basename, *options, _sources_digest(cuda_dir)))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


@functools.lru_cache(maxsize=None)
def read_manifest(kernel_dir: Path = KERNEL_DIR) -> dict:
    """The manifest of `kernel_dir` ({} when there is none or it is unreadable: NVRTC then)."""
    try:
        data = json.loads((kernel_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def find_binary(basename: str, options: tuple[str, ...], kernel_dir: Path = KERNEL_DIR) -> Path | None:
    """The prebuilt fatbin of this variant for the current sources, or None."""
    entry = read_manifest(kernel_dir).get(variant_key(basename, tuple(options)))
    if not isinstance(entry, dict):
        return None
    path = kernel_dir / str(entry.get("file", ""))
    return path if path.is_file() else None
