"""Argument checks shared by the kernel launchers: CuPy checks nothing it passes to a kernel,
so every array is checked for type, dtype, shape, contiguity and device, naming the argument."""

from __future__ import annotations

import numpy as np


def check_array(cp, name: str, a, dtype, shape: tuple) -> None:
    """Raise unless `a` is a C-contiguous cupy array of `dtype` and `shape` on the current device.

    shape: one entry per dimension, None for any size, e.g. (None, 3) for [N, 3].
    TypeError for the wrong type or dtype, ValueError for the wrong shape, layout or device.
    """
    if not isinstance(a, cp.ndarray):
        raise TypeError(f"{name}: expected a cupy array on the GPU, got {type(a).__name__}")
    if a.dtype != dtype:
        raise TypeError(f"{name}: dtype {a.dtype}, expected {np.dtype(dtype)}")
    if len(a.shape) != len(shape) or any(s is not None and s != d for s, d in zip(shape, a.shape)):
        raise ValueError(f"{name}: shape {a.shape}, expected {shape} (None = any)")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name}: must be C-contiguous")
    if a.device.id != cp.cuda.Device().id:
        raise ValueError(f"{name}: lives on GPU {a.device.id}, current device is {cp.cuda.Device().id}")
