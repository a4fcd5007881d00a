"""The depth stage on a Dask cluster (`run --cluster`): tasks of a few views of one pass each.

A pass is a barrier: a geometric pass reads its sources' maps of the previous pass, and a finer
scale this view's maps of the coarser one, so pass k+1 is submitted once every task of pass k
has finished and its maps are on disk. A task computes its views one by one exactly as the
single-process stage does (stage.compute_view, same per-(pass, view) seed), so the maps are
byte-identical to a single-process run on the same backend, whichever worker computes which view
and in which order. How many views a task holds: views_per_task (cluster.task_megapixels).

Writing overlaps computing, as in the single-process stage: a task queues its maps on the
worker's background writer (8 threads, as the single-process stage's) and returns, so the GPU
does not sit idle while a view's ~40 MB of maps (1600x1200) reach the disk: waiting for them cost
+143 % on one GPU, waiting for the previous view's +62 % (H200, 80 x 1600x1200). At the end of a
pass every worker flushes its writer; then the client checks that every map of the pass is on
disk and resubmits any view whose maps a dead worker took with it. So:
  * a worker killed mid-pass loses its running task and the maps it had queued (at most the
    writer's byte bound); Dask reruns the task elsewhere (`retries`), the end-of-pass check the rest;
  * a lost scheduler leaves a folder that a rerun resumes (`DepthPass.done`, as after Ctrl-C).
Once a pass has passed that check, the client writes its marker and removes the previous pass's
maps (pass_files.py): no worker reads them any more. It does so in a thread of its own while the next
pass runs, as the single-process stage's writer does: the marker waits for an fsync of the pass's maps,
and inline that took 0.4-1.2 s of each pass (300 x 1024x768 on 2 x H200, session 29).
With fusion beside the depth stage in the client (cluster.later_stages), the final pass's views are
handed to it as their files appear (cluster_final_maps.py).
Each worker keeps its decoded images, earlier maps it computed or read, and (GPU) textures across
tasks of a run (client.worker_state); maps computed elsewhere are read from the shared folder.
A worker's threads share those caches and take turns (WorkerCaches.compute_lock): one task
computes at a time, as the solvers use every core or the whole GPU (a `dask worker` started with
one thread per core would otherwise run that many solvers against each other, each with its own
caches). A second thread holds the next task ready, hiding Dask's ~1.4 ms between a worker's
tasks (H100, 40 x 1600x1200: 0.31-0.39 s of idle spans over 240 tasks down to 0.08-0.14 s), but
the depth stage was no faster: the GPU was still busy with the previous task's queued work
during those gaps (session 12; docs/decisions.md, "One thread per worker, default GIL switch
interval"), so one thread stays the default.
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from ..cluster.client import current_worker, error_text, run_state, worker_name, worker_state
from ..errors import MVSError
from ..io.atomic import remove_leftovers
from ..scene.scene import Scene
from ..views.params import DEFAULT_NUM_NEIGHBORS
from ..views.selection import ViewSelection
from .caches import GreyImageCache, MapCache
from .cluster_final_maps import FinalMapsWatcher
from .fusion_order import fusion_ready_order
from .cluster_locality import lighten_host, neighbourhood_order, worker_blocks
from .pass_files import finish_pass, remove_markers
from .passes import DepthPass, scaled_size
from .stage import Profile, ViewCaches, compute_view, pending_views, plan_depth_run
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
    light = scene.without_points()
    client.run(_prefetch_on_worker, light, _workers_per_host(client), wait=False)


class WorkerCaches:
    """One worker's caches for one run (the single-process stage's, kept across tasks); its
    threads use them one at a time, under `compute_lock`."""

    def __init__(self, job: DepthJob):
        self.compute_lock = threading.Lock()
        self.writer = MapWriter(durable=job.cfg.depth.sync_maps,
                                preview_max_size=job.cfg.depth.preview_max_size)
        self.textures = None
        max_map_bytes, to_device = 1 << 30, None
        if job.backend == "cuda":
            from ..gpu.loader import import_cupy  # noqa: PLC0415
            from ..gpu.memory_budget import set_budget, usable_bytes  # noqa: PLC0415
            from .patchmatch.cuda import TextureCache  # noqa: PLC0415

            if job.cfg.gpu_memory is not None:   # each worker process keeps within the run's budget
                set_budget(job.cfg.gpu_memory)
            self.textures = TextureCache()
            max_map_bytes = usable_bytes() // 4
            to_device = import_cupy().asarray   # maps read back from disk join the ones on the device
        worker = current_worker()
        images = _worker_images(worker, job.scene,
                                _decoder_threads(job.workers_per_host, worker.address if worker else None),
                                start=False)
        self._owns_images = worker is None   # else the worker's, kept for the next run of the scene
        self.caches = ViewCaches(images, MapCache(max_map_bytes, self.writer.wait_for, to_device), self.writer, self.textures)
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


def run_view_task(job: DepthJob, refs: tuple[int, ...], pass_index: int, pass_views: tuple[int, ...] = ()) -> dict:
    """One pass's views `refs` (a batch, computed in that order) on a worker; returns once their maps
    are queued for writing (flush_workers waits for them). `pass_views`: the views of this pass hinted
    to the same worker."""
    state = worker_state(job.token, lambda: WorkerCaches(job))
    with state.compute_lock:   # a task on the worker's other thread waits here for its turn
        t0, started = time.perf_counter(), time.time()
        scale = job.passes[pass_index].scale
        if pass_index not in state.prefetched:
            # The worker's first task of the pass starts decoding the images of every view hinted
            # to this worker (this task's first), as the single-process stage does for the whole
            # pass; decoding runs in threads (OpenCV frees the GIL) under the cache's byte budget.
            state.prefetched.add(pass_index)
            at = pass_views.index(refs[0]) if refs[0] in pass_views else 0
            order = [*refs, *pass_views[at:], *pass_views[:at]]
            state.caches.images.prefetch((v, scale) for r in order for v in [r, *job.sel.neighbors[r]])
        else:
            state.caches.images.prefetch((v, scale) for r in refs for v in [r, *job.sel.neighbors[r]])
        prof = Profile()   # host seconds per category (the GPU's own split would make the host wait)
        prof.seconds["task_setup"] = time.perf_counter() - t0
        for ref in refs:
            compute_view(job.cfg, job.scene, job.sel, ref, job.passes, pass_index, job.out_dir, job.backend,
                         state.caches, prof)
        valid = state.new_valid_pixels()
        seconds, ended = time.perf_counter() - t0, time.time()
    # "seconds" and "span": the task's turn on the worker, not its wait for another thread's task
    return {"worker": worker_name(), "views": list(refs), "seconds": seconds, "valid_pixels": valid,
            "seconds_by_category": prof.seconds, "span": (started, ended)}


def worker_shares(pending: list[int], hints: dict[int, str]) -> dict[str | None, list[int]]:
    """The views of `pending` hinted to each worker (None: unhinted), in `pending`'s order."""
    shares: dict[str | None, list[int]] = {}
    for ref in pending:
        shares.setdefault(hints.get(ref), []).append(ref)
    return shares


def task_batches(pending: list[int], shares: dict[str | None, list[int]], views_per_task: int
                 ) -> list[tuple[int, ...]]:
    """Each worker's share (worker_shares of `pending`) cut into tasks of up to `views_per_task` consecutive
    views; the tasks in `pending`'s order of their first view."""
    k = max(1, views_per_task)
    batches = [tuple(views[i:i + k]) for views in shares.values() for i in range(0, len(views), k)]
    rank = {v: i for i, v in enumerate(pending)}
    return sorted(batches, key=lambda b: rank[b[0]])


def views_per_task(cfg, scene: Scene, pss: DepthPass) -> int:
    """How many views a task of pass `pss` computes: cluster.task_megapixels at the pass's scale (at
    least one). Why: at 512x384 a view takes ~7 ms on an H200, and one task a view left the workers
    idle in 12-33 % of a pass (Dask's submission, dispatch and result per task; session 29)."""
    megapixels = cfg.cluster.task_megapixels
    if not megapixels:
        return 1
    sizes = [scaled_size(v.width, v.height, pss.scale) for v in scene.views]
    mean_pixels = sum(w * h for w, h in sizes) / max(1, len(sizes))
    return max(1, int(megapixels * 1e6 // max(1.0, mean_pixels)))


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


def _job(client, cfg, scene: Scene, sel: ViewSelection, passes: list[DepthPass], out_dir: Path,
         backend: str) -> DepthJob:
    return DepthJob(uuid.uuid4().hex, cfg, scene.without_points(), sel, passes, Path(out_dir).resolve(), backend,
                    _workers_per_host(client))


def submit_in_order(client, fn, tasks: list[tuple], retries: int) -> list:
    """Futures of fn(*args) for `tasks` [(args, key, hinted worker or None)], which each worker runs
    in the list's order (fusion's, beside the final pass), not only submitted in it: tasks submitted within
    the scheduler's fifo_timeout (100 ms for submit) share one generation and equal priorities, and a worker
    ran such a burst in no useful order (300-view street, 1 GPU, session 38: after views 0, 7, 21, 22, 65, 66
    it went on with 143, 149, 141, ... down, so fusion beside the pass fused its first view 3.9 s after the
    first map was written, and ended 1.5 s after the depth stage against 0.6 s in one process). Dask runs a
    higher priority first. The hints are loose (allow_other_workers)."""
    return [client.submit(fn, *args, key=key, retries=retries, pure=False, priority=len(tasks) - i,
                          **({"workers": [worker], "allow_other_workers": True} if worker is not None else {}))
            for i, (args, key, worker) in enumerate(tasks)]


def _run_pass_tasks(client, job: DepthJob, job_ref, pss: DepthPass, pending: list[int], hints: dict[int, str],
                    attempt: int, retries: int, progress: bool, workers: dict, on_task_done) -> tuple[int, int]:
    """Submit `pss`'s pending views as tasks (a batch of views each, views_per_task) and wait for all:
    (views done, valid depths they reported); per-worker task counts, seconds and task spans into `workers`."""
    from distributed import as_completed  # noqa: PLC0415 (only with --cluster)

    submitted = time.time()
    block = worker_shares(pending, hints)   # what each worker's first task of the pass starts decoding
    batches = task_batches(pending, block, views_per_task(job.cfg, job.scene, pss))
    futures = submit_in_order(client, run_view_task, [
        ((job_ref, refs, pss.index, tuple(block[hints.get(refs[0])])), f"depth-{pss.id}-{refs[0]}-{job.token}-{attempt}",
         hints.get(refs[0])) for refs in batches], retries)
    done, valid = 0, 0
    try:
        with tqdm(total=len(pending), desc=f"depth {pss.id} (cluster)", unit="view", disable=not progress) as bar:
            for fut in as_completed(futures):
                result = fut.result()
                bar.update(len(result["views"]))
                w = workers.setdefault(result["worker"], {"tasks": 0, "views": 0, "seconds": 0.0})
                w["tasks"] += 1
                w["views"] += len(result["views"])
                w["seconds"] = round(w["seconds"] + result["seconds"], 3)
                by_category = w.setdefault("seconds_by_category", {})   # where a worker's task time went
                for k, v in result.get("seconds_by_category", {}).items():
                    by_category[k] = round(by_category.get(k, 0.0) + v, 4)
                # (pass, start, end) per task, seconds from the pass's submission: gaps between a
                # worker's tasks are time its GPU had no task (scheduling, imbalance, the barrier)
                w.setdefault("spans", []).append((pss.id, round(result["span"][0] - submitted, 3),
                                                  round(result["span"][1] - submitted, 3)))
                done += len(result["views"])
                valid += result["valid_pixels"]
                if on_task_done is not None:
                    on_task_done(result)
    except BaseException:
        client.cancel(futures)
        raise
    return done, valid


def compute_depth_maps_on_cluster(cfg, scene: Scene, sel: ViewSelection, out_dir: Path, backend: str, client,
                                  retries: int = 2, overwrite: bool = False, progress: bool = True,
                                  on_task_done=None, final_maps=None) -> dict:
    """compute_depth_maps's work as Dask tasks on `client`; the same counts plus per-worker task
    counts and seconds. `client`: a distributed.Client, or a function returning one, called only
    when some map is still to compute (a resumed run with every map on disk needs no cluster).
    `on_task_done(result)` (optional) is called in the client after each task. `final_maps`
    (optional, as compute_depth_maps'): told the views that will have final maps, then each one
    once its final maps are in their files."""
    sel, todo, passes = plan_depth_run(cfg, scene, sel, out_dir)
    if final_maps is not None:
        final_maps.planned(list(todo))
    names = [scene.views[i].name for i in todo]
    if overwrite:
        remove_markers(passes)
    # what each pass lacks is known now (pending_views)
    pending_by_pass = dict(zip((pss.id for pss in passes), pending_views(scene, todo, passes, overwrite)))
    counts = {"depth_views": len(todo), "depth_passes": len(passes), "depth_view_passes_computed": 0,
              "depth_view_passes_resumed": sum(len(todo) - len(p) for p in pending_by_pass.values()),
              "depth_valid_pixels_computed": 0, "depth_pass_seconds": {}, "depth_cluster_pass_phases": {},
              "depth_cluster_workers": {}}
    if final_maps is not None:   # the final maps a resumed run found complete
        for v in sorted(set(todo) - set(pending_by_pass[passes[-1].id])):
            final_maps.written(v)
    if not any(pending_by_pass.values()):
        for pss in passes:   # markers and removals a killed run left to do
            finish_pass(passes, pss, names, cfg.depth.sync_maps)
        return counts
    if not hasattr(client, "submit"):
        client = client()
    job = _job(client, cfg, scene, sel, passes, out_dir, backend)
    # the same blocks of neighbouring views on the same worker in every pass (loose hints, cut along the
    # breadth-first order as measured since session 17), every pass's tasks submitted in fusion's order
    # (cluster_locality.py)
    order = neighbourhood_order(todo, sel.neighbors)
    hints = worker_blocks(order, sorted(client.scheduler_info().get("workers", {})), cfg.cluster.blocks_per_worker)
    # the final pass: the worker that hosts fusion beside it (fusion/worker_hosted.py) computes fewer views
    final_hints = lighten_host(hints, order, getattr(final_maps, "host", None), cfg.cluster.fusion_host_share)
    rank = {v: i for i, v in enumerate(fusion_ready_order(todo, sel.neighbors))}
    pending_by_pass = {k: sorted(p, key=rank.__getitem__) for k, p in pending_by_pass.items()}
    # sent to every worker once, not pickled into each of the (passes x views) tasks
    job_ref = client.scatter(job, broadcast=True, hash=False)
    computed, valid = 0, 0
    seconds: dict[str, float] = counts["depth_pass_seconds"]
    # per pass: tasks (submission to last result), flush, check seconds
    phases: dict[str, dict] = counts["depth_cluster_pass_phases"]
    workers: dict[str, dict] = counts["depth_cluster_workers"]
    with ThreadPoolExecutor(1, thread_name_prefix="depth-finish-pass") as finisher:   # in pass order
        finishing = []
        for pss in passes:   # a failure leaves the queued finishes to end as the executor closes
            computed_pass, valid_pass = _run_pass(client, job, job_ref, pss, pending_by_pass[pss.id],
                                                  final_hints if pss.final else hints,
                                                  retries, progress, workers, phases, seconds, on_task_done,
                                                  final_maps if pss.final else None, scene, out_dir)
            computed, valid = computed + computed_pass, valid + valid_pass
            # every worker flushed its writes: the marker, and the previous pass's maps removed
            finishing.append(finisher.submit(finish_pass, passes, pss, names, cfg.depth.sync_maps))
        for f in finishing:   # a failed marker or removal fails the stage
            f.result()
    counts.update(depth_view_passes_computed=computed, depth_valid_pixels_computed=valid)
    return counts


def _run_pass(client, job: DepthJob, job_ref, pss: DepthPass, pending: list[int], hints: dict[int, str],
              retries: int, progress: bool, workers: dict, phases: dict, seconds: dict, on_task_done,
              final_maps, scene: Scene, out_dir: Path) -> tuple[int, int]:
    """Pass `pss`'s pending views as tasks, until each has its maps on disk (a lost worker's views are
    submitted again, `retries` times): (tasks run, valid depths computed)."""
    computed, valid = 0, 0
    if not pending:
        return computed, valid
    watcher = None
    if final_maps is not None:
        watcher = FinalMapsWatcher(final_maps, pss, {ref: scene.views[ref].name for ref in pending})
        inner = on_task_done

        def on_task_done(result):   # noqa: F811 (the caller's, after the watcher's)
            for v in result["views"]:
                watcher.computed(v)
            if inner is not None:
                inner(result)
    start = time.perf_counter()
    try:
        try:
            for attempt in range(retries + 1):
                t_tasks = time.perf_counter()
                tasks, task_valid = _run_pass_tasks(client, job, job_ref, pss, pending, hints, attempt, retries,
                                                    progress, workers, on_task_done)
                t_flush = time.perf_counter()
                flushed_valid, slowest_flush = flush_workers(client, job.token, pss.index)
                t_check = time.perf_counter()
                # no writer is busy now: a worker killed while writing left its temporary file
                for path in remove_leftovers(job.out_dir / "stereo"):
                    log.info("depth: removed %s, left by a worker that died while writing it", path)
                computed += tasks
                valid += task_valid + flushed_valid
                pending = [ref for ref in pending if not pss.done(scene.views[ref].name)]
                phase = phases.setdefault(pss.id, {"tasks": 0.0, "flush": 0.0, "slowest_worker_flush": 0.0,
                                                   "check": 0.0})
                phase["tasks"] = round(phase["tasks"] + t_flush - t_tasks, 3)
                phase["flush"] = round(phase["flush"] + t_check - t_flush, 3)
                phase["slowest_worker_flush"] = round(phase["slowest_worker_flush"] + slowest_flush, 3)
                phase["check"] = round(phase["check"] + time.perf_counter() - t_check, 3)
                if not pending:
                    break
                log.warning("depth: pass %s: the maps of %d view(s) were lost with a worker; computing them again",
                            pss.id, len(pending))
            if pending:
                raise MVSError(f"{out_dir}: depth pass {pss.id}: the maps of {len(pending)} view(s) were lost "
                               f"{retries + 1} times; rerun the same command to resume")
        except MVSError:
            raise
        except Exception as exc:   # scheduler lost, retries used up (KilledWorker), a worker's error
            raise MVSError(f"{out_dir}: depth pass {pss.id} failed on the cluster ({error_text(exc)}); "
                           f"the maps finished so far are kept: rerun the same command to resume") from exc
    finally:
        if watcher is not None:   # every map of the pass is on disk when pending ran empty
            watcher.close(flushed=not pending)
    seconds[pss.id] = time.perf_counter() - start
    return computed, valid


def run(ctx) -> None:
    """The pipeline's `depth` stage on `run --cluster`'s cluster (ctx.require_client, asked for only
    when some map is still to compute)."""
    ctx.counts.update(compute_depth_maps_on_cluster(
        ctx.cfg, ctx.require_scene(), ctx.require_selection(), ctx.out_dir, ctx.backend, ctx.require_client,
        retries=ctx.cfg.cluster.retries, overwrite=ctx.overwrite, progress=ctx.progress, final_maps=ctx.final_maps))
