"""Writing the depth stage's maps in background threads while the next view computes.

On the GPU a view's maps are copied to page-locked host buffers asynchronously (the normal map
laid out planar, as the file wants it, on the device first); a writer thread waits for the copy's
event and writes the files, so neither the host nor the GPU waits for downloads or the disk.
A cost map is downloaded only where it is written or previewed (passes.py writes it only where a
planar pass reads it); the page-locked buffers go back to the system when the writer closes
(CuPy's pinned pool would otherwise keep them, resident, through the later stages).
Every file is written atomically with depth last, so a crash loses at most the views still
queued, which a rerun redoes (`DepthPass.done` also rejects a map left incomplete).
"""

from __future__ import annotations

import logging
import sys
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..gpu.loader import on_gpu
from ..io.colmap_maps import write_colmap_planes, write_previews
from .passes import DepthPass

log = logging.getLogger(__name__)


@dataclass
class ViewMaps:
    """One view's maps of one pass, on the host: depth [H, W], normal planes [3, H, W], cost [H, W]
    (None where the pass neither writes nor previews it)."""
    depth: np.ndarray
    normal_planes: np.ndarray
    cost: np.ndarray | None

    @property
    def nbytes(self) -> int:
        return self.depth.nbytes + self.normal_planes.nbytes + (0 if self.cost is None else self.cost.nbytes)


def _empty_pinned(cp, shape, dtype) -> np.ndarray:
    """A page-locked NumPy array, as cupyx.empty_pinned makes it; importing cupyx (its sparse
    linear algebra and SciPy layer) would cost 0.15 s of every run for this one function."""
    dtype = np.dtype(dtype)
    mem = cp.cuda.alloc_pinned_memory(max(1, int(np.prod(shape)) * dtype.itemsize))
    return np.ndarray(shape, dtype=dtype, buffer=mem)


def start_download(depth, normal, cost):
    """(ViewMaps, event or None): host copies of the maps (cost None: not needed). CuPy inputs are
    copied asynchronously into page-locked buffers on the current stream (wait for the event
    before reading them); NumPy inputs are used as they are."""
    if not on_gpu(depth):
        return ViewMaps(depth, np.moveaxis(normal, 2, 0), cost), None
    import cupy as cp  # noqa: PLC0415

    planes = cp.ascontiguousarray(normal.transpose(2, 0, 1))
    host = []
    for a in (depth, planes, cost):
        if a is None:
            host.append(None)
            continue
        buf = _empty_pinned(cp, a.shape, a.dtype)
        cp.asnumpy(a, out=buf, blocking=False)
        host.append(buf)
    event = cp.cuda.Event(disable_timing=True)
    event.record()
    return ViewMaps(*host), event


def write_view_maps(pss: DepthPass, name: str, maps: ViewMaps, durable: bool) -> None:
    """The pass's map kinds (passes.py: cost only where read or kept), depth last: it marks the view done."""
    planes = {"normal": maps.normal_planes, "cost": maps.cost, "depth": maps.depth}
    for kind in ("normal", "cost", "depth"):
        if kind in pss.kinds:
            a = planes[kind]
            write_colmap_planes(pss.map_path(kind, name), a if a.ndim == 3 else a[None], durable)


class MapWriter:
    """Background writer of view maps; `submit` blocks only while more than `max_pending_bytes`
    of maps are queued (bounded host memory when the disk is slower than the GPU)."""

    def __init__(self, threads: int = 8, durable: bool = False, max_pending_bytes: int = 4 << 30,
                 preview_max_size: int | None = None):
        self._pool = ThreadPoolExecutor(max_workers=threads)
        self._pending: deque = deque()
        self._pending_bytes = 0
        self._barrier = None      # the last after_writes job: later writes wait for it
        self.durable = durable
        self.preview_max_size = preview_max_size
        self.max_pending_bytes = max_pending_bytes
        self.seconds = 0.0        # writing, summed over the writer threads (overlaps with compute)
        self.valid_pixels = 0     # positive depths in the final maps written

    def submit(self, pss: DepthPass, name: str, depth, normal, cost, preview: tuple[Path, tuple] | None = None,
               checks=(), on_written=None) -> None:
        """Queue the maps of one view (NumPy or CuPy arrays); `preview` = (stem, depth range) for
        the final pass's PNG previews; `checks`: the solver's deferred input checks (DeferredCheck),
        which must pass before the maps are written; `on_written()`, if given, is called in the
        writer thread once the maps are in their files (a fusion trailing the stage reads them then)."""
        # the cost map only where it is written or previewed: most passes do neither, and its
        # download was a fifth of the stage's page-locked buffers and copies
        maps, event = start_download(depth, normal, cost if "cost" in pss.kinds or preview is not None else None)
        barrier = self._barrier

        def job():
            if barrier is not None:
                barrier.result()   # the last after_writes first: its removals before these files
            if event is not None:
                event.synchronize()   # the copy follows the view's kernels on the GPU's queue
            for check in checks:
                check.raise_if_failed()
            t0 = time.perf_counter()
            write_view_maps(pss, name, maps, self.durable)
            valid = 0
            if preview is not None:
                stem, depth_range = preview
                write_previews(stem, maps.depth, np.moveaxis(maps.normal_planes, 0, 2), maps.cost, depth_range,
                               self.preview_max_size)
                valid = int((maps.depth > 0).sum())
            if on_written is not None:
                on_written()
            return time.perf_counter() - t0, valid

        paths = frozenset(pss.map_path(kind, name) for kind in pss.kinds)
        self._pending.append((self._pool.submit(job), maps.nbytes, paths))
        self._pending_bytes += maps.nbytes
        while self._pending_bytes > self.max_pending_bytes and len(self._pending) > 1:
            self._wait_oldest()

    def after_writes(self, fn) -> None:
        """Run `fn()` in a writer thread once every write queued so far has finished (not at all
        when one failed: its error is raised here as usual); writes queued later start after it, so
        that the disk never holds both what it removes and what comes next (the peak that
        output_space.py estimates). The jobs it waits for were queued first and so hold threads
        before it does, and the later ones wait for it, which holds one: no job waits for a thread."""
        earlier = [fut for fut, _, _ in self._pending]

        def job():
            for fut in earlier:
                fut.result()
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0, 0

        self._barrier = self._pool.submit(job)
        self._pending.append((self._barrier, 0, frozenset()))

    def _wait_oldest(self) -> None:
        fut, nbytes, _ = self._pending.popleft()
        self._pending_bytes -= nbytes
        seconds, valid = fut.result()   # re-raises a failed write
        self.seconds += seconds
        self.valid_pixels += valid

    def wait_for(self, path: Path) -> None:
        """Return once `path` is not among the maps still queued here (a map read back from its
        file must be complete; a file this writer never queued, e.g. a map another cluster worker
        wrote, needs no wait: flushing everything there would stall each such read behind this
        worker's own queue)."""
        while any(path in paths for _, _, paths in self._pending):
            self._wait_oldest()

    def flush(self) -> None:
        while self._pending:
            self._wait_oldest()

    def close(self, raise_errors: bool = True) -> None:
        try:
            self.flush()
        except Exception as exc:
            if raise_errors:
                raise
            # Already unwinding from an earlier error (often the same full disk): one line, as the
            # error the user sees is that earlier one.
            log.info("depth: writing maps failed too: %s", exc)
        finally:
            self._pool.shutdown(wait=True)
            _release_pinned_blocks()


def _release_pinned_blocks() -> None:
    """Free the page-locked blocks CuPy's pinned pool keeps for reuse once the maps are written:
    up to max_pending_bytes of them (4 GB) stayed resident after the depth stage, through fusion,
    sampling and evaluate. Nothing to do where CuPy was never imported (the CPU backend)."""
    cp = sys.modules.get("cupy")
    if cp is not None:
        cp.get_default_pinned_memory_pool().free_all_blocks()
