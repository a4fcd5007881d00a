"""Host emulation of CUDA kernels for the tests (no GPU needed): a cuda/ source compiled as plain
C++ with a prelude that defines CUDA's keywords away, and wrappers that call a kernel once per thread
index from a loop. Used by tests/evaluation/test_eval_kernels_host.py and
tests/sampling/test_fps_morton_host.py."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest


def build_host_library(tmp_path_factory, name: str, source: str) -> ctypes.CDLL:
    """`source` (prelude, #include of the .cu, wrappers) built as a shared library; the test skips
    where no C++ compiler is found. -ffp-contract=off: no FMA, as the kernels' --fmad=false."""
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler for the host emulation of the CUDA kernels")
    d = tmp_path_factory.mktemp(name)
    src = d / "host.cpp"
    src.write_text(source)
    so = d / "host.so"
    subprocess.run([cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-ffp-contract=off", "-o", str(so), str(src)],
                   check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(so))


def pointer(a) -> ctypes.c_void_p:
    """A NumPy array's data as a C pointer argument."""
    return a.ctypes.data_as(ctypes.c_void_p)
