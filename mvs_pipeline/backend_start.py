"""The compute backend's start, in a thread while the load stage runs.

Resolving `auto` imports CuPy and creates the CUDA context (a probe kernel): on the H200 a 300-view
run spent 0.45 s there (0.31 s the import) before its first stage, and its depth stage then loaded
its kernel modules and CuPy's own kernels in its first views (session 21 profile). None of it needs
the scene, and the load stage is host work (the model files, the images): `BackendStart` does
both in a thread started with the run. The pipeline waits for the backend where it is first read
(RunContext.backend: after the load stage) and for the warm-up before the depth stage starts, so
the depth stage never shares the GPU or CuPy's kernel cache with it.

An explicit `backend: cuda` that cannot run is still one line (BackendUnavailable), raised where
the backend is first read instead of before the load stage.
"""

from __future__ import annotations

import logging
import struct
import threading
from concurrent.futures import Future, wait as futures_wait
from pathlib import Path

log = logging.getLogger(__name__)


class BackendStart:
    """`resolve_backend(requested)` (and with CUDA the GPU memory budget, then, if `warm_depth`,
    the depth stage's warm-up: depth/warm_up.py) in a daemon thread. `sparse_dirs`: where the run's
    sparse model may be (OUT/sparse, the input's), for the warm-up's source count."""

    def __init__(self, cfg, requested: str, warm_depth: bool, sparse_dirs: tuple[Path, ...] = ()):
        self._backend: Future = Future()
        self._warm_up: Future = Future()
        self._thread = threading.Thread(target=self._run, args=(cfg, requested, warm_depth, sparse_dirs),
                                        name="backend-start", daemon=True)   # a run that fails early does not wait
        self._thread.start()

    def _run(self, cfg, requested: str, warm_depth: bool, sparse_dirs: tuple[Path, ...]) -> None:
        from .gpu.backend import resolve_backend  # noqa: PLC0415

        try:
            backend = resolve_backend(requested)
            if backend == "cuda" and cfg.gpu_memory is not None:   # before any stage allocates
                from .gpu.memory_budget import set_budget  # noqa: PLC0415

                set_budget(cfg.gpu_memory)
        except BaseException as exc:   # handed to the thread that reads the backend
            self._backend.set_exception(exc)
            self._warm_up.set_result(None)
            return
        self._backend.set_result(backend)
        try:
            if backend == "cuda" and warm_depth:
                _warm_up_depth(cfg, warm_up_sources(cfg, sparse_dirs))
        except Exception as exc:   # only a head start: the depth stage meets (and reports) any real problem
            log.debug("depth: warm-up failed: %s", exc)
        finally:
            self._warm_up.set_result(None)

    def known(self) -> str | None:
        """The backend if it is resolved already (None while resolving or when resolving failed)."""
        if self._backend.done() and self._backend.exception() is None:
            return self._backend.result()
        return None

    def backend(self) -> str:
        """Wait for the backend; re-raises what resolving it raised (BackendUnavailable)."""
        return self._backend.result()

    def settle(self, timeout: float) -> None:
        """Wait (at most `timeout` s) until resolving has ended, whatever it gave: a run that fails its
        checks lets the resolution's own warning (no GPU: the CPU backend) print first, so that the
        run's one-line error is the last line (the thread printed it after the error at times)."""
        futures_wait([self._backend], timeout=timeout)

    def wait_warm_up(self) -> None:
        self._warm_up.result()


def warm_up_sources(cfg, sparse_dirs: tuple[Path, ...]) -> int:
    """The source count to warm the solver for (its kernels are compiled for 8, 16 or 32 sources):
    views.num_neighbors, or for `auto` (resolved only once the scene is loaded) its cap, lowered to
    the model's image count - 1, read from the first 8 bytes of images.bin (a 6-view scene gets at
    most 5 sources: warming the 16-source kernels would load, or on a cold cache compile, kernels
    its depth stage never uses)."""
    from .views.params import DEFAULT_NUM_NEIGHBORS  # noqa: PLC0415

    if isinstance(cfg.views.num_neighbors, int):
        return cfg.views.num_neighbors
    for folder in sparse_dirs:
        try:
            with open(Path(folder) / "images.bin", "rb") as f:
                (images,) = struct.unpack("<Q", f.read(8))
        except (OSError, struct.error):
            continue
        return max(1, min(DEFAULT_NUM_NEIGHBORS, int(images) - 1))
    return DEFAULT_NUM_NEIGHBORS


def _warm_up_depth(cfg, sources: int) -> None:
    """The depth stage's kernels, loaded by one tiny run through its solver paths
    (a scene whose kernel variant differs loads its own in its depth stage, as before)."""
    from .depth.warm_up import warm_up_solver  # noqa: PLC0415

    warm_up_solver(cfg, sources, "cuda")
