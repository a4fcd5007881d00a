"""Recognise the GPU running out of memory without importing CuPy (the pipeline's stage loop sees
every stage's errors, also on machines without CuPy)."""

from __future__ import annotations


def is_gpu_out_of_memory(exc: BaseException) -> bool:
    """CuPy's OutOfMemoryError (pool or driver allocation), or a CUDA runtime/driver error that is
    an allocation failure (cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY: "out of memory"),
    not any error that mentions memory (an illegal memory access is a bug, not a full GPU)."""
    for cls in type(exc).__mro__:
        module = getattr(cls, "__module__", "") or ""
        if not module.startswith(("cupy", "cupy_backends")):
            continue
        if cls.__name__ == "OutOfMemoryError":
            return True
        if cls.__name__ in ("CUDARuntimeError", "CUDADriverError"):
            text = str(exc).lower()
            return "out of memory" in text or "memoryallocation" in text
    return False


def first_line(exc: BaseException, limit: int = 160) -> str:
    """The error's first line, at most `limit` characters, without a closing full stop: callers quote
    it in parentheses inside their own sentence (CuPy's "...limit set to: 2,000,000 bytes)." read
    "...bytes).);" there)."""
    text = str(exc).strip().splitlines()[0].rstrip(". ") if str(exc).strip() else ""
    text = text or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
