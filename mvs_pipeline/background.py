"""Work that runs beside the run's stages, in a daemon thread: its result or error kept for whoever asks.

The run's overlaps (fusion beside the depth stage: fusion/trailing.py; the depth maps' comparison beside
sampling: evaluation/depth_job.py) are such jobs. A daemon thread, so that a run that fails or is
interrupted while one runs exits without waiting for it (each can also be asked to stop), with a Future
of its own rather than a ThreadPoolExecutor's, whose threads the interpreter joins at exit.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future


class DaemonJob:
    """A subclass's `work()` in a daemon thread once started: its return value or exception in
    `_future`, its wall seconds in `seconds` (set before the result, so a caller holding the result
    has both)."""

    def __init__(self, name: str):
        self.seconds: float | None = None
        self._future: Future = Future()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def work(self):
        raise NotImplementedError

    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            result = self.work()
        except BaseException as exc:  # noqa: BLE001 (handed to whoever reads the result)
            self.seconds = time.perf_counter() - t0
            self._future.set_exception(exc)
        else:
            self.seconds = time.perf_counter() - t0
            self._future.set_result(result)
