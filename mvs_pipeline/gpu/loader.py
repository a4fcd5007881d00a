"""Compile and cache `cuda/*.cu` modules through CuPy, memoized per (device, file, options).

Compile-time constants are passed as `-DNAME=value` options; CUDA code is never generated in
Python strings. `#include "x.cuh"` resolves against the `cuda/` folder.
"""

from __future__ import annotations

import functools
from pathlib import Path

from ..errors import BackendUnavailable
from ..paths import CUDA_DIR


def on_gpu(a) -> bool:
    """True for a CuPy (or any CUDA array interface) array: data already on the device."""
    return hasattr(a, "__cuda_array_interface__")


def import_cupy():
    """Return the cupy module, or raise BackendUnavailable with the reason."""
    try:
        import cupy  # noqa: PLC0415 (optional dependency)
    except Exception as exc:  # ImportError, or CUDA libraries missing at import time
        raise BackendUnavailable(f"CuPy is not importable ({exc}); install mvs-pipeline[cuda12] or [cuda13]") from exc
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        raise BackendUnavailable(f"CuPy found no usable CUDA device ({exc})") from exc
    if n < 1:
        raise BackendUnavailable("CuPy found no CUDA device")
    return cupy


def cuda_usable() -> tuple[bool, str]:
    """(True, "") when CuPy can run kernels on a GPU here, else (False, reason)."""
    try:
        cupy = import_cupy()
        cupy.zeros(1, dtype=cupy.float32).sum().item()  # forces a context and a kernel launch
    except BackendUnavailable as exc:
        return False, str(exc)
    except Exception as exc:
        return False, f"CUDA device not usable ({exc})"
    return True, ""


def cu_path(basename: str) -> Path:
    path = CUDA_DIR / basename
    if not path.is_file():
        raise FileNotFoundError(f"CUDA source {path} not found (set MVS_PIPELINE_CUDA_DIR?)")
    return path


@functools.lru_cache(maxsize=None)
def _load(device_id: int, basename: str, options: tuple[str, ...]):
    cupy = import_cupy()
    source = cu_path(basename).read_text()
    opts = ("-std=c++17", f"-I{CUDA_DIR}", *options)
    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(code=source, options=opts, backend="nvrtc")
        module.compile()
    return module


def load_module(basename: str, options: tuple[str, ...] = ()):
    """The compiled RawModule for `cuda/<basename>` on the current device."""
    cupy = import_cupy()
    return _load(cupy.cuda.Device().id, basename, tuple(options))


def get_kernel(basename: str, name: str, options: tuple[str, ...] = ()):
    return load_module(basename, options).get_function(name)
