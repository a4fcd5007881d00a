"""Fusion's view cache: the views of the current reference view and its neighbours resident (on the GPU for the
cuda engine), the one whose next use lies farthest ahead evicted (the plan is known in advance), loads run ahead
in a thread pool, and each view's consumed marks (1 byte per pixel) kept in host memory while it is evicted.

Beside the depth stage (`gate`: fusion/trailing.MapsGate) a view is loaded only once its final maps are written,
and the views loaded ahead are the written ones nearest in the plan, not simply the next ones: a loader thread
never waits for a map. Why (issue #36): on a 2-GPU cluster run fusion follows the first worker's block of views
in view order while the second worker writes the other block at the same time; with loads in plan order the
loader threads all waited for the first block's next maps, and the second block was read only after the depth
stage, 2.0-2.7 s of fusion after it (300 x 1024x768 on 2 x H200, session 31). Now the written views are read
while fusion waits, and made resident while there is room (`capacity`), so that after the depth stage fusion
mostly fuses. The same while fusion waits for a load: the loads that finished ahead of their step are made resident
and the next written views' loads start, so one slow load does not leave the loader threads idle (session 38).
What is fused does not depend on when a view became resident (fusion/stage.py, "Determinism").
"""

from __future__ import annotations

import bisect
import json
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from .inputs import HostView, ViewInputs, load_view

# the pixels fusion blocks, by reason (HostView's counts): masks, min_texture, min_segment, halo_radius
IGNORED_KINDS = ("masked", "textureless", "speckle", "halo")
# HostView's, per view (planar: depths put onto a weakly textured region's plane, fusion.weak_planes)
PIXEL_COUNTS = ("valid_pixels", *(f"{k}_pixels" for k in IGNORED_KINDS), "planar_pixels")
PREFETCH_PER_THREAD = 2   # views a loader thread has loaded or is loading ahead (host memory)
GATE_POLL_SECONDS = 0.01   # beside the depth stage: how often a waiting loop looks for newly written views
# a folder: each fusion writes fusion_timeline_<pid>.json there, every view's written / load / resident / fused wall
# times (time.time()): where a fusion beside the depth stage waits (a diagnostic, issue #36)
TIMELINE_ENV = "MVS_PIPELINE_FUSION_TIMELINE"


class ViewCache:
    def __init__(self, engine, inputs: list[ViewInputs | None], plan: list[list[int]], capacity: int,
                 prefetch: int, threads: int, stats: dict, load=load_view, gate=None, read_ahead: bool = True):
        self.engine = engine
        self.load = load   # inputs -> HostView (load_view with the config's pixel filters)
        self.gate = gate   # None: every map is written; else loads wait for gate.is_written
        self.read_ahead = read_ahead   # with a gate: the written views past an unwritten one too (fusion.read_ahead)
        self.inputs = inputs
        self.plan = plan
        self.capacity = capacity
        self.prefetch = prefetch
        self.stats = stats
        self.uses: dict[int, list[int]] = {}
        for step, views in enumerate(plan):
            for v in views:
                self.uses.setdefault(v, []).append(step)
        self.resident: dict[int, object] = {}  # view_idx -> engine entry (cupy arrays or a slot number)
        self.blocked_store: dict[int, object] = {}  # marks of evicted views
        self.pending: dict[int, Future] = {}
        self.loaded_once: set[int] = set()
        # each view's pixel counts (PIXEL_COUNTS' order), from its first load: a cluster run's ranges
        # share neighbour views, and the client counts each view once as the single process does
        self.pixels_by_view: dict[int, tuple[int, ...]] = {}
        self.pool = ThreadPoolExecutor(max_workers=threads)
        self._load_lock = threading.Lock()
        self.stats.setdefault("loaded_ahead", 0)   # views made resident before their step, beside the depth stage
        self.timeline = {} if os.environ.get(TIMELINE_ENV) else None   # view_idx -> {event: wall time}

    def mark(self, v: int, event: str) -> None:
        if self.timeline is not None:
            self.timeline.setdefault(int(v), {}).setdefault(event, time.time())

    def write_timeline(self) -> None:
        if self.timeline is None:
            return
        written = getattr(self.gate, "written_at", {})
        for v, t in written.items():
            self.timeline.setdefault(int(v), {})["written"] = t
        path = os.path.join(os.environ[TIMELINE_ENV], f"fusion_timeline_{os.getpid()}.json")
        with open(path, "w") as f:
            json.dump({str(v): e for v, e in sorted(self.timeline.items())}, f)

    def close(self) -> None:
        for fut in self.pending.values():
            fut.cancel()
        self.pool.shutdown(wait=True)

    def _written(self, v: int) -> bool:
        return self.gate is None or self.gate.is_written(v)

    def _next_use(self, v: int, step: int) -> float:
        steps = self.uses.get(v, [])
        i = bisect.bisect_left(steps, step)
        return steps[i] if i < len(steps) else float("inf")

    def _submit(self, v: int) -> None:
        self.pending[v] = self.pool.submit(self._timed_load, self.inputs[v])

    def _timed_load(self, inp: ViewInputs) -> HostView:
        # the loads' wall seconds, summed over the loader threads: beside load_wait_seconds (what
        # the fusion loop waited for them) it tells whether the loaders bound the stage (issue #36)
        t0 = time.perf_counter()
        self.mark(inp.view_idx, "load_start")
        host = self.load(inp)
        self.mark(inp.view_idx, "load_end")
        with self._load_lock:
            self.stats["load_seconds"] += time.perf_counter() - t0
        return host

    def acquire(self, step: int) -> dict[int, object]:
        """Make the views of plan[step] resident; start loading the next steps' views."""
        needed = self.plan[step]
        for v in needed:
            if v not in self.resident and v not in self.pending and self._written(v):
                self._submit(v)
        for v in needed:
            if v in self.resident:
                continue
            t0 = time.perf_counter()
            if self.gate is not None:
                self._wait_for_maps(v, step, needed)
            if v not in self.resident:   # (the wait may have made it resident)
                if v not in self.pending:
                    self._submit(v)
                if self.gate is not None:
                    self._wait_for_load(v, step, needed)
                if v not in self.resident:
                    host: HostView = self.pending.pop(v).result()
                    self._make_resident(v, host, step, needed)
            self.stats["load_wait_seconds"] += time.perf_counter() - t0
        self._prefetch(step)
        return {v: self.resident[v] for v in needed}

    def _wait_for_maps(self, v: int, step: int, needed: list[int]) -> None:
        """Beside the depth stage: until view v's maps are written (DepthStopped if they never will be), read the
        written views of the next steps and make the loaded ones resident while there is room."""
        if not self.read_ahead:
            self.gate.wait(v)
            return
        self._read_ahead_until(lambda: self.gate.wait(v, timeout=GATE_POLL_SECONDS), step, needed)

    def _wait_for_load(self, v: int, step: int, needed: list[int]) -> None:
        """Beside the depth stage, with read-ahead: until view v's load is done, make the other finished loads
        resident while there is room and start the next written views' loads. Why (issue #36): a finished load
        of a later step counts against `prefetch` until its step comes, so while fusion waited for one slow
        load the loader threads ran out of work (300-view street, 2 x H200, session 38: about 4 of 8 busy, the
        maps of 180 views written but not loaded two seconds before the depth stage ended)."""
        if not self.read_ahead:
            return
        fut = self.pending[v]

        def loaded() -> bool:
            try:
                fut.exception(timeout=GATE_POLL_SECONDS)   # returns (the error or None) once the load ended
            except TimeoutError:
                return False
            return True

        self._read_ahead_until(loaded, step, needed, skip=v)

    def _read_ahead_until(self, ready, step: int, needed: list[int], skip: int | None = None) -> None:
        """Until ready() (which waits up to GATE_POLL_SECONDS) says so: the finished loads (but `skip`'s) made
        resident, and the next written views' loads started whenever a load finished or a map was written."""
        seen_written = -1
        while not ready():
            finished = any(u != skip and fut.done() for u, fut in self.pending.items())
            self._make_finished_resident(step, needed, skip)
            if finished or self.gate.written_count() != seen_written:   # else nothing new to load: no scan
                seen_written = self.gate.written_count()
                self._prefetch(step - 1)

    def _make_finished_resident(self, step: int, needed: list[int], skip: int | None = None) -> None:
        """The finished loads made resident, nearest use first, while there is room without evicting."""
        done = [u for u, fut in self.pending.items() if u != skip and fut.done()]
        for u in sorted(done, key=lambda u: self._next_use(u, step)):
            if len(self.resident) >= self.capacity:   # no room: it waits, loaded, for its step
                break
            self._make_resident(u, self.pending.pop(u).result(), step, needed)
            self.stats["loaded_ahead"] += 1

    def _make_resident(self, v: int, host: HostView, step: int, needed: list[int]) -> None:
        while len(self.resident) >= self.capacity:
            self._evict(step, keep=needed)
        blocked = self.blocked_store.pop(v, None)
        if blocked is None:
            blocked = host.blocked
        if v not in self.loaded_once:
            self.loaded_once.add(v)
            for key in PIXEL_COUNTS:
                self.stats[key] += getattr(host, key)
            self.pixels_by_view[v] = tuple(int(getattr(host, k)) for k in PIXEL_COUNTS)
        else:
            self.stats["reloads"] += 1
        self.resident[v] = self.engine.upload(host, blocked)
        self.mark(v, "resident")

    def _evict(self, step: int, keep: list[int]) -> None:
        candidates = [v for v in self.resident if v not in keep]
        if not candidates:
            raise RuntimeError("view cache too small for one reference view and its neighbours")
        victim = max(candidates, key=lambda v: (self._next_use(v, step), v))
        entry = self.resident.pop(victim)
        marks = self.engine.evict(entry, keep_marks=self._next_use(victim, step) != float("inf"))
        if marks is not None:
            self.blocked_store[victim] = marks

    def _prefetch(self, step: int) -> None:
        """Start loading the views of the next steps that are neither resident nor loading (and, beside the depth
        stage, whose maps are written), nearest step first, with at most `prefetch` loads in flight or waiting."""
        for s in range(step + 1, len(self.plan)):
            if len(self.pending) >= self.prefetch:
                return
            for v in self.plan[s]:
                if v in self.resident or v in self.pending or len(self.pending) >= self.prefetch:
                    continue
                if self._written(v):
                    self._submit(v)
                elif not self.read_ahead:   # in plan order only: nothing past a view still to be written
                    return
