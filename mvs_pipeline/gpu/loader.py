"""Load `cuda/*.cu` modules through CuPy, memoized per (device, file, options).

A module comes from the binary `mvs-pipeline build-kernels` built with nvcc for exactly this
variant and these sources (precompiled.py) when there is one; otherwise CuPy compiles it with
NVRTC (cached on disk by CuPy), and the log says so once. Compile-time constants are passed as
`-DNAME=value` options; CUDA code is never generated in Python strings. `#include "x.cuh"`
resolves against the `cuda/` folder.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import numpy as np

from ..errors import BackendUnavailable
from ..paths import CUDA_DIR
from .precompiled import KERNEL_DIR, find_binary

log = logging.getLogger(__name__)
_said_nvrtc = False


def on_gpu(a) -> bool:
    """True for a CuPy (or any CUDA array interface) array: data already on the device."""
    return hasattr(a, "__cuda_array_interface__")


def to_host(a):
    """`a` as a NumPy array: a device array (on_gpu) is downloaded, anything else passed to np.asarray."""
    return a.get() if on_gpu(a) else np.asarray(a)


def import_cupy():
    """Return the cupy module, or raise BackendUnavailable with the reason."""
    return _cupy_with_a_device()


def array_module(backend: str):
    """CuPy for a resolved backend "cuda" (import_cupy), NumPy otherwise."""
    return import_cupy() if backend == "cuda" else np


@functools.lru_cache(maxsize=1)
def _cupy_with_a_device():
    """Asked once per process when it succeeds: launchers call import_cupy thousands of times in a
    run and each device count is a driver call (0.1 s per run in all). A failure is not cached."""
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


@functools.lru_cache(maxsize=None)
def cuda_usable() -> tuple[bool, str]:
    """(True, "") when CuPy can run kernels on a GPU here, else (False, reason).

    Probed once per process: the probe launches a kernel and waits for it, and every launcher's
    backend check asks (hundreds of times in a run)."""
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
    with cupy.cuda.Device(device_id):
        binary = find_binary(basename, options)
        if binary is not None:
            try:
                module = cupy.RawModule(path=str(binary))
                module.compile()  # loads the fatbin now, so a bad or foreign binary falls back here
                return module
            except Exception as exc:  # no code for this GPU's architecture, a truncated file, ...
                log.warning("precompiled %s (%s) did not load (%s); compiling with NVRTC", binary.name, basename, exc)
        _say_nvrtc_once(basename, options)
        module = cupy.RawModule(code=source, options=("-std=c++17", f"-I{CUDA_DIR}", *options), backend="nvrtc")
        module.compile()
    return module


def _say_nvrtc_once(basename: str, options: tuple[str, ...]) -> None:
    global _said_nvrtc
    if not _said_nvrtc:
        _said_nvrtc = True
        log.info("no precompiled kernel binary for %s %s in %s: compiling with NVRTC (CuPy caches the result; "
                 "`mvs-pipeline build-kernels` precompiles them)", basename, " ".join(options), KERNEL_DIR)
    else:
        log.debug("compiling %s %s with NVRTC", basename, " ".join(options))


def load_module(basename: str, options: tuple[str, ...] = ()):
    """The compiled RawModule for `cuda/<basename>` on the current device."""
    cupy = import_cupy()
    return _load(cupy.cuda.Device().id, basename, tuple(options))


def get_kernel(basename: str, name: str, options: tuple[str, ...] = ()):
    return load_module(basename, options).get_function(name)
