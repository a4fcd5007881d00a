"""The depth stage on a Dask cluster (`run --cluster`): one task per (pass, view).

A pass is a barrier: a geometric pass reads its sources' maps of the previous pass, and a finer
scale this view's maps of the coarser one, so pass k+1 is submitted once every task of pass k
has finished. Each task computes one view exactly as the single-process stage does
(stage.compute_view, same per-(pass, view) seed) and returns only after its maps are in the
output folder (written atomically, depth last), so:
  * the maps are byte-identical to a single-process run on the same backend, whichever worker
    computes which view and in which order;
  * a worker killed mid-pass loses only its running task, which Dask reruns elsewhere (`retries`);
    finished maps are already on disk;
  * a lost scheduler leaves a folder that a rerun resumes (`DepthPass.done`, as after Ctrl-C).
Each worker keeps its decoded images, earlier maps it computed or read, and (GPU) textures across
tasks of a run (client.worker_state); maps computed elsewhere are read from the shared folder.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..cluster.client import worker_name, worker_state
from ..errors import MVSError
from ..scene.scene import Scene
from ..views.selection import ViewSelection
from .caches import GreyImageCache, MapCache
from .passes import DepthPass
from .stage import Profile, ViewCaches, compute_view, pending_views, plan_depth_run
from .writer import MapWriter

log = logging.getLogger(__name__)


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


class WorkerCaches:
    """One worker thread's caches for one run (the single-process stage's, kept across tasks)."""

    def __init__(self, job: DepthJob):
        self.writer = MapWriter(threads=2, durable=job.cfg.depth.sync_maps,
                                preview_max_size=job.cfg.depth.preview_max_size)
        self.textures = None
        max_map_bytes = 1 << 30
        if job.backend == "cuda":
            from ..gpu.loader import import_cupy  # noqa: PLC0415
            from .patchmatch.cuda import TextureCache  # noqa: PLC0415

            self.textures = TextureCache()
            max_map_bytes = import_cupy().cuda.runtime.memGetInfo()[0] // 4
        self.caches = ViewCaches(GreyImageCache(job.scene, threads=4), MapCache(max_map_bytes, self.writer.flush),
                                 self.writer, self.textures)

    def close(self) -> None:
        self.caches.images.close()
        self.writer.close(raise_errors=False)
        if self.textures is not None:
            self.textures.release()


def run_view_task(job: DepthJob, ref: int, pass_index: int) -> dict:
    """One (pass, view) on a worker; returns when its maps are on disk."""
    t0 = time.perf_counter()
    state = worker_state(job.token, lambda: WorkerCaches(job))
    before = state.writer.valid_pixels
    scale = job.passes[pass_index].scale   # decode this task's images in parallel (OpenCV frees the GIL)
    state.caches.images.prefetch((v, scale) for v in [ref, *job.sel.neighbors[ref]])
    compute_view(job.cfg, job.scene, job.sel, ref, job.passes, pass_index, job.out_dir, job.backend,
                 state.caches, Profile())
    state.writer.flush()   # the task counts as done only once its maps are written
    return {"worker": worker_name(), "seconds": time.perf_counter() - t0,
            "valid_pixels": state.writer.valid_pixels - before}


def _job(cfg, scene: Scene, sel: ViewSelection, passes: list[DepthPass], out_dir: Path, backend: str) -> DepthJob:
    light = dataclasses.replace(scene, points_in_world=np.zeros((0, 3)), point_colors=np.zeros((0, 3), np.uint8),
                                track_offsets=np.zeros(1, np.int64), track_view_idx=np.zeros(0, np.int32))
    return DepthJob(uuid.uuid4().hex, cfg, light, sel, passes, Path(out_dir).resolve(), backend)


def compute_depth_maps_on_cluster(cfg, scene: Scene, sel: ViewSelection, out_dir: Path, backend: str, client,
                                  retries: int = 2, overwrite: bool = False, progress: bool = True,
                                  on_task_done=None) -> dict:
    """compute_depth_maps's work as Dask tasks on `client`; the same counts plus per-worker task
    counts and seconds. `on_task_done(result)` (optional) is called in the client after each task."""
    from distributed import as_completed  # noqa: PLC0415 (only with --cluster)

    sel, todo, passes = plan_depth_run(cfg, scene, sel, out_dir)
    job = _job(cfg, scene, sel, passes, out_dir, backend)
    computed, resumed, valid = 0, 0, 0
    seconds: dict[str, float] = {}
    workers: dict[str, dict] = {}
    for pss in passes:
        pending = pending_views(scene, todo, pss, overwrite)
        resumed += len(todo) - len(pending)
        if not pending:
            continue
        start = time.perf_counter()
        futures = [client.submit(run_view_task, job, ref, pss.index, key=f"depth-{pss.id}-{ref}-{job.token}",
                                 retries=retries, pure=False) for ref in pending]
        try:
            for fut in tqdm(as_completed(futures), total=len(futures), desc=f"depth {pss.id} (cluster)",
                            unit="view", disable=not progress):
                result = fut.result()
                w = workers.setdefault(result["worker"], {"tasks": 0, "seconds": 0.0})
                w["tasks"] += 1
                w["seconds"] = round(w["seconds"] + result["seconds"], 3)
                valid += result["valid_pixels"]
                computed += 1
                if on_task_done is not None:
                    on_task_done(result)
        except MVSError:
            raise
        except Exception as exc:   # scheduler lost, retries used up (KilledWorker), a worker's error
            client.cancel(futures)
            what = " ".join(str(exc).split())   # Dask's messages span lines; ours is one
            if "scheduler-connection-lost" in what or "connection to the scheduler" in what:
                what = "lost the connection to the Dask scheduler"
            raise MVSError(f"{out_dir}: depth pass {pss.id} failed on the cluster ({type(exc).__name__}: {what}); "
                           f"the maps finished so far are kept: rerun the same command to resume") from exc
        seconds[pss.id] = time.perf_counter() - start
    return {"depth_views": len(todo), "depth_passes": len(passes), "depth_view_passes_computed": computed,
            "depth_view_passes_resumed": resumed, "depth_valid_pixels_computed": valid,
            "depth_pass_seconds": seconds, "depth_cluster_workers": workers}


def run(ctx) -> None:
    """The pipeline's `depth` stage when `run --cluster` opened a client (ctx.client)."""
    ctx.counts.update(compute_depth_maps_on_cluster(
        ctx.cfg, ctx.require_scene(), ctx.require_selection(), ctx.out_dir, ctx.backend, ctx.client,
        retries=ctx.cfg.cluster.retries, overwrite=ctx.overwrite, progress=ctx.progress))
