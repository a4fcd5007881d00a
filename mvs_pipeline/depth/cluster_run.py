"""The depth stage on a Dask cluster (`run --cluster`): one task per (pass, view).

The passes form a graph, not a sequence of barriers: a task of pass k+1 depends only on the
tasks of pass k whose maps it reads (stage.pass_view_inputs: a geometric pass its view's and its
sources' maps, a finer scale's first pass its view's coarser maps), so a view starts its next
pass as soon as those are on disk, while other views still finish pass k. Every task is submitted
at the start; Dask runs each once its inputs are done, the earlier passes first. Each task
computes one view exactly as the single-process stage does (stage.compute_view, same per-(pass,
view) seed), so the maps are byte-identical to a single-process run on the same backend, whichever
worker computes which view and in which order. Per pass, 2 x H100 and 80 x 1600x1200 (session
11-12, with a barrier at every pass), the workers were busy only 77-85 % of the coarse passes and
66-79 % on 4 GPUs: each pass waited for its slowest view, then flushed and checked.

A task returns once its maps are on disk (a task of another worker reads them there); it waits
for its writes after its turn at the solver (WorkerCaches.compute_lock), so with two threads per
worker (the default, cluster.threads_per_worker) the worker's next task computes meanwhile: the
GPU does not sit idle while a view's ~40 MB of maps (1600x1200) reach the disk (waiting for them
cost +143 % on one GPU, H200, 80 x 1600x1200). Maps a task reads come from the worker's own cache
when it computed or read them before, else from the shared folder. So:
  * a worker killed mid-task loses that task, which Dask reruns elsewhere (`retries`); a finished
    task's maps are already on disk (Dask may still rerun it, if its small result died with the
    worker before a dependent read it: the same seed writes the same bytes again);
  * after the graph, the client checks that every map is on disk and computes any missing view
    again, pass by pass (a worker that died while writing), then removes temporary files left;
  * a lost scheduler leaves a folder that a rerun resumes (`DepthPass.done`, as after Ctrl-C).
Each worker keeps its decoded images, earlier maps it computed or read, and (GPU) textures across
tasks of a run (client.worker_state). A worker's threads share those caches and take turns
(WorkerCaches.compute_lock): one task computes at a time, as the solvers use every core or the
whole GPU (a `dask worker` started with one thread per core would otherwise run that many solvers
against each other, each with its own caches).
The workers start decoding the scene's images as soon as the load stage has prepared them
(prefetch_images_on_workers), while the client selects views: at 3200x2130 decoding in the first
pass took ~3 s of a 10.6 s depth stage on 4 GPUs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..cluster.client import current_worker, run_state, worker_name, worker_state
from ..errors import MVSError
from ..io.atomic import remove_leftovers
from ..scene.scene import Scene
from ..views.params import DEFAULT_NUM_NEIGHBORS
from ..views.selection import ViewSelection
from .caches import GreyImageCache, MapCache
from .cluster_locality import worker_blocks
from .passes import DepthPass
from .stage import Profile, ViewCaches, compute_view, pass_view_inputs, pending_views, plan_depth_run
from .writer import MapWriter

log = logging.getLogger(__name__)

_IMAGES_ATTR = "_mvs_pipeline_images"   # a dask Worker's decoded images: (scene key, GreyImageCache)
_IMAGES_LOCK = threading.Lock()   # a worker's threads (tasks, client.run calls) share its images


@dataclass(frozen=True)
class DepthJob:
    """What every task of one run needs; `token` names this run's caches on the workers."""
    token: str
    cfg: object
    scene: Scene        # without the sparse points (the depth stage reads only the views)
    sel: ViewSelection
    passes: list[DepthPass]
    out_dir: Path
    backend: str
    workers_per_host: dict[str, int] = dataclasses.field(default_factory=dict)


def _images_key(scene: Scene) -> tuple:
    """What makes two scenes' decoded images the same: each view's file and size."""
    return tuple((str(v.image_path), v.width, v.height) for v in scene.views)


def _workers_per_host(client) -> dict[str, int]:
    hosts: dict[str, int] = {}
    for address in client.scheduler_info().get("workers", {}):
        host = _host(address)
        hosts[host] = hosts.get(host, 0) + 1
    return hosts


def _host(address: str) -> str:
    return address.split("://")[-1].rsplit(":", 1)[0]


def _decoder_threads(workers_per_host: dict[str, int], address: str | None) -> int:
    """Image decoder threads for a worker: its host's cores shared by the workers there, 2 to 8 (8
    as the single-process stage; 4 per worker took ~3 s to decode 40 images of 3200x2130)."""
    sharing = workers_per_host.get(_host(address), 1) if address else 1
    return max(2, min(8, (os.cpu_count() or 1) // max(1, sharing)))


def _worker_images(dask_worker, scene: Scene, threads: int, start: bool) -> GreyImageCache:
    """The worker's decoded images of `scene` (one scene at a time: another scene's are dropped);
    with `start`, every view's image starts decoding at full size (as many as the cache's budget
    holds), the size the finer scales are made from."""
    key = _images_key(scene)
    with _IMAGES_LOCK:
        held = dask_worker.__dict__.get(_IMAGES_ATTR) if dask_worker is not None else None
        if held is not None and held[0] == key:
            return held[1]
        if held is not None:
            held[1].close()
        images = GreyImageCache(scene, threads=threads)
        if dask_worker is not None:
            dask_worker.__dict__[_IMAGES_ATTR] = (key, images)
    if start:
        images.prefetch((v, 0) for v in range(scene.num_views))
    return images


async def _prefetch_on_worker(scene: Scene, workers_per_host: dict[str, int], dask_worker=None) -> None:
    # async: client.run(wait=False) takes only coroutines; this returns at once (threads decode)
    _worker_images(dask_worker, scene, _decoder_threads(workers_per_host, dask_worker.address), start=True)


def prefetch_images_on_workers(client, scene: Scene) -> None:
    """Start decoding `scene`'s images on every worker now, in the background (the client goes on
    with the views stage); the depth stage's tasks then find them decoded."""
    light = _light_scene(scene)
    client.run(_prefetch_on_worker, light, _workers_per_host(client), wait=False)


class WorkerCaches:
    """One worker's caches for one run (the single-process stage's, kept across tasks); its
    threads use them one at a time, under `compute_lock`."""

    def __init__(self, job: DepthJob):
        self.compute_lock = threading.Lock()
        self.writer = MapWriter(durable=job.cfg.depth.sync_maps,
                                preview_max_size=job.cfg.depth.preview_max_size)
        self.textures = None
        max_map_bytes = 1 << 30
        if job.backend == "cuda":
            from ..gpu.loader import import_cupy  # noqa: PLC0415
            from .patchmatch.cuda import TextureCache  # noqa: PLC0415

            self.textures = TextureCache()
            max_map_bytes = import_cupy().cuda.runtime.memGetInfo()[0] // 4
        worker = current_worker()
        images = _worker_images(worker, job.scene,
                                _decoder_threads(job.workers_per_host, worker.address if worker else None),
                                start=False)
        self._owns_images = worker is None   # else the worker's, kept for the next run of the scene
        self.caches = ViewCaches(images, MapCache(max_map_bytes, self.writer.wait_for), self.writer, self.textures)
        self.passes = job.passes
        self.prefetched: set[int] = set()   # passes whose images this worker started decoding
        self._reported_valid = 0

    def new_valid_pixels(self) -> int:
        """Valid depths written since the last call (writes finish after the task that queued them)."""
        valid, self._reported_valid = self.writer.valid_pixels - self._reported_valid, self.writer.valid_pixels
        return valid

    def close(self) -> None:
        if self._owns_images:
            self.caches.images.close()
        self.writer.close(raise_errors=False)
        if self.textures is not None:
            self.textures.release()


def run_view_task(job: DepthJob, ref: int, pass_index: int, pass_views: tuple[int, ...] = (), after=()) -> dict:
    """One (pass, view) on a worker; returns once its maps are on disk. `pass_views`: the views of
    this pass hinted to the same worker; `after`: the results of the tasks whose maps this one
    reads (only there so that Dask runs it after them)."""
    del after
    state = worker_state(job.token, lambda: WorkerCaches(job))
    with state.compute_lock:   # a task on the worker's other thread waits here for its turn
        t0, started = time.perf_counter(), time.time()
        scale = job.passes[pass_index].scale
        if pass_index not in state.prefetched:
            # The worker's first task of the pass starts decoding the images of every view hinted
            # to this worker (this view's first), as the single-process stage does for the whole
            # pass; decoding runs in threads (OpenCV frees the GIL) under the cache's byte budget.
            state.prefetched.add(pass_index)
            at = pass_views.index(ref) if ref in pass_views else 0
            order = [ref, *pass_views[at:], *pass_views[:at]]
            state.caches.images.prefetch((v, scale) for r in order for v in [r, *job.sel.neighbors[r]])
        else:
            state.caches.images.prefetch((v, scale) for v in [ref, *job.sel.neighbors[ref]])
        prof = Profile()   # host seconds per category (the GPU's own split would make the host wait)
        prof.seconds["task_setup"] = time.perf_counter() - t0
        written = compute_view(job.cfg, job.scene, job.sel, ref, job.passes, pass_index, job.out_dir,
                               job.backend, state.caches, prof)
        valid = state.new_valid_pixels()   # of the writes the writer has accounted for so far
        seconds, ended = time.perf_counter() - t0, time.time()
    # after its turn: the worker's other thread computes while this one waits for the disk
    t_wait = time.perf_counter()
    written.result()   # re-raises a failed write (full disk, a deferred input check)
    prof.seconds["wait_for_own_writes"] = time.perf_counter() - t_wait
    # "seconds" and "span": the task's turn on the worker, not its wait for another thread's task
    # or for its writes (flush_workers reports the valid depths not accounted for by then)
    return {"worker": worker_name(), "seconds": seconds, "valid_pixels": valid,
            "seconds_by_category": prof.seconds, "span": (started, ended), "pass": job.passes[pass_index].id,
            "view": ref}


def _flush_worker_states(token: str, pass_index: int, dask_worker) -> tuple[int, float]:
    """Write every map a worker queued for run `token` and keep only pass `pass_index`'s in its
    map cache (the next pass reads no older one); (the valid depths not yet reported, seconds the
    flush took: the writes the pass's last tasks left behind)."""
    t0, valid = time.perf_counter(), 0
    state = run_state(token, dask_worker)
    if state is not None:
        with state.compute_lock:   # every task of the pass has ended; this only orders the access
            state.writer.flush()
            state.caches.maps.retain(state.passes[pass_index].owns)
            valid = state.new_valid_pixels()
    return valid, time.perf_counter() - t0


async def _flush_on_worker(token: str, pass_index: int, dask_worker=None) -> tuple[int, float]:
    # in a thread: the worker's event loop keeps answering the scheduler while the disk catches up
    return await asyncio.get_running_loop().run_in_executor(None, _flush_worker_states, token, pass_index,
                                                            dask_worker)


def flush_workers(client, token: str, pass_index: int) -> tuple[int, float]:
    """Every worker's queued maps of run `token` on disk, its cache down to pass `pass_index`; (the
    valid depths they held, the slowest worker's flush seconds). A worker that died meanwhile
    answers with an error, ignored here: the caller finds its maps missing."""
    answers = [v for v in client.run(_flush_on_worker, token, pass_index, on_error="return").values()
               if isinstance(v, tuple)]
    return sum(v for v, _ in answers), max((s for _, s in answers), default=0.0)


def _warm_up(backend: str, cfg) -> None:
    from . import stage  # noqa: F401, PLC0415 (the solver's modules; numba on the CPU backend)

    if backend != "cuda":   # the CPU twins' compilation would compete with the client for the cores
        return
    from .warm_up import warm_up_solver  # noqa: PLC0415

    sources = cfg.views.num_neighbors if isinstance(cfg.views.num_neighbors, int) else DEFAULT_NUM_NEIGHBORS
    try:
        warm_up_solver(cfg, sources, backend)
    except Exception as exc:   # only a head start: the first task meets (and reports) any real problem
        log.debug("depth: worker warm-up failed: %s", exc)


async def _warm_up_on_worker(backend: str, cfg) -> None:
    await asyncio.get_running_loop().run_in_executor(None, _warm_up, backend, cfg)


def warm_up_workers(client, backend: str, cfg) -> None:
    """Start the workers' imports, CUDA context and kernel loads now (in the background, while the
    client loads the scene and selects views) instead of in their first depth tasks."""
    client.run(_warm_up_on_worker, backend, cfg, wait=False)


def _light_scene(scene: Scene) -> Scene:
    """The scene without its sparse points: the workers read only the views."""
    return dataclasses.replace(scene, points_in_world=np.zeros((0, 3)), point_colors=np.zeros((0, 3), np.uint8),
                               track_offsets=np.zeros(1, np.int64), track_view_idx=np.zeros(0, np.int32))


def _job(client, cfg, scene: Scene, sel: ViewSelection, passes: list[DepthPass], out_dir: Path,
         backend: str) -> DepthJob:
    return DepthJob(uuid.uuid4().hex, cfg, _light_scene(scene), sel, passes, Path(out_dir).resolve(), backend,
                    _workers_per_host(client))


def _record_result(result: dict, workers: dict, submitted: float) -> None:
    """Add one task's result to the per-worker counts: tasks, seconds, seconds by category and
    its span (pass id, start, end in seconds from `submitted`, view_idx: gaps between a worker's
    spans are time its GPU had no task: scheduling, imbalance, a pass's inputs not yet written)."""
    w = workers.setdefault(result["worker"], {"tasks": 0, "seconds": 0.0})
    w["tasks"] += 1
    w["seconds"] = round(w["seconds"] + result["seconds"], 3)
    by_category = w.setdefault("seconds_by_category", {})
    for k, v in result.get("seconds_by_category", {}).items():
        by_category[k] = round(by_category.get(k, 0.0) + v, 4)
    w.setdefault("spans", []).append((result["pass"], round(result["span"][0] - submitted, 3),
                                      round(result["span"][1] - submitted, 3), result["view"]))


def _wait_all(client, futures: list, desc: str, progress: bool, workers: dict, submitted: float,
              on_task_done) -> tuple[int, int]:
    """Wait for every future (cancelling all on an error): (tasks done, valid depths reported)."""
    from distributed import as_completed  # noqa: PLC0415 (only with --cluster)

    done, valid = 0, 0
    try:
        for fut in tqdm(as_completed(futures), total=len(futures), desc=desc, unit="view", disable=not progress):
            result = fut.result()
            _record_result(result, workers, submitted)
            done += 1
            valid += result["valid_pixels"]
            if on_task_done is not None:
                on_task_done(result)
    except BaseException:
        client.cancel(futures)
        raise
    return done, valid


def _submit(client, job: DepthJob, job_ref, pss: DepthPass, ref: int, block: dict, hints: dict[int, str],
            after: list, attempt: int, retries: int):
    return client.submit(run_view_task, job_ref, ref, pss.index, tuple(block[hints.get(ref)]), after,
                         key=f"depth-{pss.id}-{ref}-{job.token}-{attempt}", retries=retries, pure=False,
                         **({"workers": [hints[ref]], "allow_other_workers": True} if ref in hints else {}))


def _blocks(pending: list[int], hints: dict[int, str]) -> dict:
    """The views of a pass hinted to each worker: what its first task of the pass starts decoding."""
    block: dict = {}
    for ref in pending:
        block.setdefault(hints.get(ref), []).append(ref)
    return block


def _run_graph(client, job: DepthJob, job_ref, pending: dict[int, list[int]], hints: dict[int, str],
               retries: int, progress: bool, workers: dict, on_task_done) -> tuple[int, int]:
    """Submit every pending (pass, view) task at once, each depending on the pending tasks whose
    maps it reads (maps already on disk need no task), and wait for all: (tasks, valid depths)."""
    submitted = time.time()
    futures: dict[tuple[int, int], object] = {}
    for pss in job.passes:
        views = pending.get(pss.index, [])
        block = _blocks(views, hints)
        for ref in views:
            after = [futures[(pss.index - 1, v)] for v in pass_view_inputs(job.passes, pss.index, ref, job.sel)
                     if (pss.index - 1, v) in futures]
            futures[(pss.index, ref)] = _submit(client, job, job_ref, pss, ref, block, hints, after, 0, retries)
    if not futures:
        return 0, 0
    return _wait_all(client, list(futures.values()), "depth (cluster)", progress, workers, submitted, on_task_done)


def _repair_pass(client, job: DepthJob, job_ref, pss: DepthPass, pending: list[int], hints: dict[int, str],
                 attempt: int, retries: int, progress: bool, workers: dict, on_task_done) -> tuple[int, int]:
    """Compute the views of one pass whose maps are missing after the graph (lost with a worker)."""
    block = _blocks(pending, hints)
    futures = [_submit(client, job, job_ref, pss, ref, block, hints, [], attempt, retries) for ref in pending]
    return _wait_all(client, futures, f"depth {pss.id} (cluster, again)", progress, workers, time.time(),
                     on_task_done)


def _pass_spans(workers: dict) -> dict[str, list[float]]:
    """{pass id: [first task start, last task end]} in seconds from the graph's submission."""
    spans: dict[str, list[float]] = {}
    for w in workers.values():
        for pass_id, start, end, _ in w.get("spans", []):
            s = spans.setdefault(pass_id, [start, end])
            s[0], s[1] = min(s[0], start), max(s[1], end)
    return spans


def _cluster_error(out_dir: Path, exc: Exception) -> MVSError:
    what = " ".join(str(exc).split())   # Dask's messages span lines; ours is one
    if "scheduler-connection-lost" in what or "connection to the scheduler" in what:
        what = "lost the connection to the Dask scheduler"
    return MVSError(f"{out_dir}: the depth stage failed on the cluster ({type(exc).__name__}: {what}); "
                    f"the maps finished so far are kept: rerun the same command to resume")


def compute_depth_maps_on_cluster(cfg, scene: Scene, sel: ViewSelection, out_dir: Path, backend: str, client,
                                  retries: int = 2, overwrite: bool = False, progress: bool = True,
                                  on_task_done=None) -> dict:
    """compute_depth_maps's work as Dask tasks on `client`; the same counts plus per-worker task
    counts and seconds. `on_task_done(result)` (optional) is called in the client after each task."""
    sel, todo, passes = plan_depth_run(cfg, scene, sel, out_dir)
    job = _job(client, cfg, scene, sel, passes, out_dir, backend)
    # the same block of neighbouring views on the same worker in every pass (loose hints)
    hints = worker_blocks(todo, sel.neighbors, sorted(client.scheduler_info().get("workers", {})))
    # sent to every worker once, not pickled into each of the (passes x views) tasks
    job_ref = client.scatter(job, broadcast=True, hash=False)
    pending = {pss.index: pending_views(scene, todo, pss, overwrite) for pss in passes}
    resumed = sum(len(todo) - len(v) for v in pending.values())
    workers: dict[str, dict] = {}
    phases: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        computed, valid = _run_graph(client, job, job_ref, pending, hints, retries, progress, workers, on_task_done)
        t1 = time.perf_counter()
        flushed_valid, slowest_flush = flush_workers(client, job.token, len(passes) - 1)
        valid += flushed_valid
        t2 = time.perf_counter()
        phases.update(graph=round(t1 - t0, 3), flush=round(t2 - t1, 3), slowest_worker_flush=round(slowest_flush, 3))
        # no writer is busy now: a worker killed while writing left its temporary file
        for path in remove_leftovers(job.out_dir / "stereo"):
            log.info("depth: removed %s, left by a worker that died while writing it", path)
        # maps lost with a worker (Dask reran its running task, not the writes it had not finished)
        for pss in passes:
            missing = [ref for ref in pending[pss.index] if not pss.done(scene.views[ref].name)]
            for attempt in range(1, retries + 2):
                if not missing:
                    break
                log.warning("depth: pass %s: the maps of %d view(s) were lost with a worker; computing them again",
                            pss.id, len(missing))
                tasks, task_valid = _repair_pass(client, job, job_ref, pss, missing, hints, attempt, retries,
                                                 progress, workers, on_task_done)
                flushed_valid, _ = flush_workers(client, job.token, len(passes) - 1)
                computed += tasks
                valid += task_valid + flushed_valid
                missing = [ref for ref in missing if not pss.done(scene.views[ref].name)]
            if missing:
                raise MVSError(f"{out_dir}: depth pass {pss.id}: the maps of {len(missing)} view(s) were lost "
                               f"{retries + 1} times; rerun the same command to resume")
        phases["check"] = round(time.perf_counter() - t2, 3)
    except MVSError:
        raise
    except Exception as exc:   # scheduler lost, retries used up (KilledWorker), a worker's error
        raise _cluster_error(out_dir, exc) from exc
    spans = _pass_spans(workers)
    return {"depth_views": len(todo), "depth_passes": len(passes), "depth_view_passes_computed": computed,
            "depth_view_passes_resumed": resumed, "depth_valid_pixels_computed": valid,
            # passes overlap on a cluster: a pass's seconds run from its first task's start to its last's end
            "depth_pass_seconds": {k: round(b - a, 3) for k, (a, b) in spans.items()},
            "depth_cluster_pass_spans": spans, "depth_cluster_phases": phases,
            "depth_cluster_workers": workers}


def run(ctx) -> None:
    """The pipeline's `depth` stage when `run --cluster` started a cluster (ctx.require_client())."""
    ctx.counts.update(compute_depth_maps_on_cluster(
        ctx.cfg, ctx.require_scene(), ctx.require_selection(), ctx.out_dir, ctx.backend, ctx.require_client(),
        retries=ctx.cfg.cluster.retries, overwrite=ctx.overwrite, progress=ctx.progress))
