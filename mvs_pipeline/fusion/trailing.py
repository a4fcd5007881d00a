"""Fusion trailing the depth stage: reference views fused as soon as the depth stage's final maps of
them and of their neighbours are in their files, while the depth stage computes the next views.

Why (issue #36: the whole command within 1.25x its depth stage): at 1000 views of 1024x768 on the H200
fusion took 10-12 s after a 79-87 s depth stage, and its loop keeps eight loader threads busy (load
seconds 71.8 summed over 10.0 s) while the depth stage's last pass leaves the CPU cores mostly idle.
Fusion visits reference views in view_idx order and the depth stage's last pass computes them in the
same order, so on a scene whose neighbours are near in index (a street, a video) fusion ends shortly
after the last map; elsewhere it waits longer and gains less, never more than it costs.

The points do not depend on it: fusion's order and decisions are fixed by the plan, not by when a view
arrives (fusion/stage.py, "Determinism"), so fused.ply and .vis are byte for byte those of a fusion
after the depth stage (tests compare them). The pipeline (pipeline.py) starts it with the depth stage
where it can overlap (the GPU without a `--gpu-memory` budget, no `--cluster`, nothing fused yet) and,
after the depth stage, takes its counts and records fusion's fingerprint; if it failed for any reason,
or found other maps than it expected, fusion runs again as usual after the depth stage. Its GPU work goes
to a non-blocking CUDA stream of its own: on CuPy's default stream each of its waits for the GPU would
also wait for the depth stage's queued PatchMatch kernels (a second thread sharing that stream slowed
fusion more than it saved: docs/decisions.md, "Depth-map metrics stay after the clouds").
"""

from __future__ import annotations

import logging
import threading
import time

from ..background import DaemonJob
from ..cluster.client import error_text

log = logging.getLogger(__name__)


class DepthStopped(Exception):
    """The depth stage ended without writing a view's final maps (it failed or was interrupted)."""


class MapsGate:
    """Which views the depth stage will give final maps, and which it has written. The depth stage
    calls planned() and written() (depth/stage.py's `final_maps`); fusion's view cache asks is_written() and
    wait() (fusion/view_cache.py)."""

    def __init__(self, map_type: str):
        self.map_type = map_type   # the final pass's maps: geometric, or photometric without geometric passes
        self._cond = threading.Condition()
        self._planned: list[int] | None = None
        self._written: set[int] = set()
        self._stopped: str | None = None
        self.written_at: dict[int, float] = {}   # view_idx -> wall time it was announced (view_cache's timeline)

    def planned(self, views: list[int]) -> None:
        with self._cond:
            self._planned = list(views)
            self._cond.notify_all()

    def written(self, view_idx: int) -> None:
        with self._cond:
            self.written_at.setdefault(int(view_idx), time.time())
            self._written.add(int(view_idx))
            self._cond.notify_all()

    def stop(self, why: str) -> None:
        """Release every waiter with DepthStopped (the depth stage failed, or the run is ending)."""
        with self._cond:
            if self._stopped is None:
                self._stopped = why
            self._cond.notify_all()

    def views(self) -> list[int]:
        """The views that will have final maps, once the depth stage has planned them."""
        with self._cond:
            self._cond.wait_for(lambda: self._planned is not None or self._stopped is not None)
            if self._planned is None:
                raise DepthStopped(self._stopped)
            return list(self._planned)

    def wait(self, view_idx: int, timeout: float | None = None) -> bool:
        """Whether view_idx's maps are written, once they are or `timeout` seconds passed (None: no limit);
        DepthStopped if the depth stage stopped without writing them."""
        with self._cond:
            self._cond.wait_for(lambda: view_idx in self._written or self._stopped is not None, timeout)
            if view_idx in self._written:
                return True
            if self._stopped is not None:
                raise DepthStopped(self._stopped)
            return False

    def is_written(self, view_idx: int) -> bool:
        # without the lock: a set's membership test is atomic in CPython, and fusion's loop asks often
        return view_idx in self._written

    def written_count(self) -> int:
        return len(self._written)


def fuse_beside_depth(cfg, scene, selection, out_dir, backend: str, gate: MapsGate) -> dict:
    """fuse_depth_maps fed by `gate`, in the calling thread; on the GPU on a non-blocking stream of its own
    (the depth stage's kernels on the default stream do not hold up its waits). Its fusion.json counts."""
    from .stage import fuse_depth_maps  # noqa: PLC0415

    stream = None
    if backend == "cuda":
        from ..gpu.loader import import_cupy  # noqa: PLC0415

        stream = import_cupy().cuda.Stream(non_blocking=True)
        stream.use()   # this thread's current stream: every launch and copy of the fusion loop
    counts = fuse_depth_maps(cfg, scene, selection, out_dir, backend, overwrite=True, progress=False, gate=gate)
    if stream is not None:
        stream.synchronize()
    return counts


def counts_or_none(future) -> dict | None:
    """A fusion beside the depth stage's counts from its future, or None when it did not finish (logged)."""
    try:
        return future.result()
    except DepthStopped as exc:
        log.info("fusion: the fusion beside the depth stage stopped (%s); fusing after it", exc)
    except Exception as exc:  # noqa: BLE001
        log.warning("fusion: the fusion beside the depth stage failed (%s); fusing after it", error_text(exc))
    return None


class TrailingFusion(DaemonJob):
    """fuse_beside_depth in a thread of this process (the single-process run; fusion/worker_hosted.py hosts
    it in a `--cluster` worker's process instead)."""

    host = None   # this process

    def __init__(self, cfg, scene, selection, out_dir, backend: str, map_type: str):
        super().__init__("trailing-fusion")
        self.gate = MapsGate(map_type)
        self._args = (cfg, scene, selection, out_dir, backend)

    def work(self) -> dict:
        return fuse_beside_depth(*self._args, self.gate)

    def stop(self, why: str) -> None:
        self.gate.stop(why)

    def result(self) -> dict | None:
        """Its fusion.json counts, or None when it did not finish (the reason is logged)."""
        self.gate.stop("the depth stage ended")   # any view still awaited will not come
        return counts_or_none(self._future)
