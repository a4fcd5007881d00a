"""Pick the compute backend: `auto` -> CUDA when CuPy and a GPU are usable, otherwise CPU."""

from __future__ import annotations

import logging
from typing import Literal

from ..errors import BackendUnavailable
from .loader import cuda_usable

log = logging.getLogger(__name__)

Backend = Literal["auto", "cuda", "cpu"]


def resolve_backend(requested: str) -> Literal["cuda", "cpu"]:
    """Resolve `auto`; an explicit `cuda` that cannot run raises BackendUnavailable."""
    if requested == "cpu":
        return "cpu"
    ok, reason = cuda_usable()
    if requested == "cuda":
        if not ok:
            raise BackendUnavailable(f"backend 'cuda' was requested but cannot run: {reason}")
        return "cuda"
    if requested != "auto":
        raise ValueError(f"unknown backend {requested!r}")
    if ok:
        return "cuda"
    log.warning("no usable GPU (%s); using the CPU backend (slow)", reason)
    return "cpu"
