"""Telling fusion beside the depth stage (fusion/trailing.MapsGate) which final maps a `--cluster` run's
workers have written.

A worker's task returns once its maps are queued on the worker's writer (cluster_run.py), so the client
learns from a task's result only that the maps are coming. It watches the files instead: a view counts as
written once its final maps are complete on disk (DepthPass.done: each file is written atomically, depth
last) and its depth map is not the file that was there when the pass began (an --overwrite run finds the
previous run's maps in place until the new ones replace them). At the end of the pass every worker has
flushed its writer, and every view still watched is released at once.

Why (issue #36: the whole `--cluster` command, not only its depth stage): with fusion in the client
(cluster.later_stages) its ~4 s for 300 views of 1024x768 run beside the final pass instead of after it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from .passes import DepthPass

POLL_SECONDS = 0.02   # a view's maps reach the disk within tens of ms of its task's end; a stat is ~10 us


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


class FinalMapsWatcher:
    """Calls gate.written(view_idx) for each computed view of the final pass `pss` once its maps are in
    their files. `names`: view_idx -> image name of the views the pass computes."""

    def __init__(self, gate, pss: DepthPass, names: dict[int, str]):
        self._gate, self._pss, self._names = gate, pss, dict(names)
        self._before = {v: _identity(pss.map_path("depth", n)) for v, n in self._names.items()}
        self._watched: set[int] = set()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._poll, name="final-maps-watcher", daemon=True)
        self._thread.start()

    def computed(self, view_idx: int) -> None:
        """A task of the pass finished view_idx (its maps are queued on some worker)."""
        with self._cond:
            self._watched.add(int(view_idx))
            self._cond.notify()

    def _written(self, v: int) -> bool:
        name = self._names[v]
        identity = _identity(self._pss.map_path("depth", name))
        return identity is not None and identity != self._before[v] and self._pss.done(name)

    def _poll(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._watched or self._closed)
                if self._closed:
                    return
                watched = sorted(self._watched)
            done = [v for v in watched if self._written(v)]
            with self._cond:
                self._watched.difference_update(done)
            for v in done:
                self._gate.written(v)
            with self._cond:
                if not self._closed:
                    self._cond.wait(POLL_SECONDS)

    def close(self, flushed: bool) -> None:
        """Stop watching; with `flushed` (every worker's writes are on disk and checked) release every view
        still watched."""
        with self._cond:
            self._closed = True
            rest = sorted(self._watched) if flushed else []
            self._watched.clear()
            self._cond.notify()
        self._thread.join()
        for v in rest:
            self._gate.written(v)
