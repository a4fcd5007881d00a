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
import threading
from concurrent.futures import Future

log = logging.getLogger(__name__)


class BackendStart:
    """`resolve_backend(requested)` (and with CUDA the GPU memory budget, then, if `warm_depth`,
    the depth stage's warm-up: depth/warm_up.py) in a daemon thread."""

    def __init__(self, cfg, requested: str, warm_depth: bool):
        self._backend: Future = Future()
        self._warm_up: Future = Future()
        self._thread = threading.Thread(target=self._run, args=(cfg, requested, warm_depth), name="backend-start",
                                        daemon=True)   # a run that fails early does not wait for CUDA
        self._thread.start()

    def _run(self, cfg, requested: str, warm_depth: bool) -> None:
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
                _warm_up_depth(cfg)
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

    def wait_warm_up(self) -> None:
        self._warm_up.result()


def _warm_up_depth(cfg) -> None:
    """The depth stage's kernels, loaded by one tiny run through its solver paths, with the source
    count a cluster worker's warm-up assumes (`auto` resolves only once the scene is loaded; a
    scene with another kernel variant loads that one in its depth stage as before)."""
    from .depth.warm_up import warm_up_solver  # noqa: PLC0415
    from .views.params import DEFAULT_NUM_NEIGHBORS  # noqa: PLC0415

    sources = cfg.views.num_neighbors if isinstance(cfg.views.num_neighbors, int) else DEFAULT_NUM_NEIGHBORS
    warm_up_solver(cfg, sources, "cuda")
