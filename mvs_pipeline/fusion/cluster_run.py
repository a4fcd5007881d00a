"""The fusion stage on a Dask cluster (`run --cluster`): reference views in contiguous ranges, one task each.

Each task fuses one range of reference views (fusion/stage.py's fuse_chunks, with all maps as
neighbours, read from the shared output folder) into a range file: a complete fused.ply + .vis of
its own under OUT/stereo/fusion_ranges/, written atomically, then a small .json beside them (the
marker: its point and byte counts, per-chunk statistics and per-view pixel counts). The client
places each range into fused.ply + .vis as soon as it and the ranges before it have finished,
while the workers fuse the later ones (FusedCloudWriter.copy_in: file to file, no range held in
memory; on the 2-core test host ~2 s for 10.5 M points, 0.5 GB), and replays the chunks'
statistics in view order, so the preview's float64 sums are the single process's; then the range
files go. Copying is the price of not knowing a range's size before it is fused.

What the cloud is, against the single-process run on the same backend:
  * fusion.consume_pixels false: every reference view's points depend only on the maps, so the
    files are byte-identical, whatever the ranges (4 per worker then, for balance).
  * consume_pixels true: a reference view's candidates depend on what the views before it
    consumed. Each range consumes within itself only, as if fused alone; there is exactly one
    range per worker (the fewest boundaries), and with one worker the cloud is the single
    process's. So: the first range's points are the single process's first bytes exactly; each
    range's are those of fuse_chunks(references=that range); and every view's emitting pixels are
    a subset of those it emits without consumption (consumption only removes candidates and
    agreeing neighbours; the free-space check reads every depth), so the cloud has at most the
    consume_pixels=false count. In practice a later range re-emits parts of the surface that an
    earlier range had consumed in its views: extra points near range boundaries
    (tests/cluster/test_cluster_fusion.py; docs/decisions.md, "Fusion on the cluster").
    fusion.json's counts.cluster.ranges records the ranges, so the cloud can be made again.
A failed task is retried (`cluster.retries`); after that the run stops with one line naming the
range, keeping the finished ranges, and a rerun fuses only the missing ones (a range's file
names carry a hash of the settings, the backend and its views, so no other run's range is reused;
the fingerprint removes the folder when the maps or settings change). Resuming after a finished
fusion does nothing (fused.ply, .vis and fusion.json are there: stage.finished_counts).
Per-worker memory: each task sizes its view cache from the free memory as the single process does
(local CPU workers on one host share it; not measured beyond the tests' scenes).
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import logging
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..cluster.client import error_text, worker_name, worker_state
from ..errors import MVSError
from ..io.atomic import atomic_write_text, remove_leftovers
from ..io.fused_ply import HEADER_BYTES, VIS_HEADER_BYTES, FusedCloudWriter
from ..io.vis_file import colmap_image_indices
from ..scene.scene import Scene
from ..views.selection import ViewSelection
from .params import FusionConfig
from .stage import (PIXEL_COUNTS, finish_outputs, finished_counts, fuse_chunks, fusion_inputs, output_paths,
                    plan_references, record_counts, resolve_config)
from .writer import ChunkWriter

log = logging.getLogger(__name__)

RANGES_DIR = "stereo/fusion_ranges"   # relative to OUT (fingerprints.OUTPUTS lists it with fusion's)
RANGES_PER_WORKER = 4   # without consumption: more ranges than workers, so a slow one does not hold the end


@dataclass(frozen=True)
class FusionJob:
    cfg: FusionConfig      # resolved (no `auto`)
    scene: Scene           # without the sparse points
    sel: ViewSelection
    out_dir: Path
    backend: str
    gpu_memory: float | None = None   # the run's GPU budget (GiB), kept by each worker as by the single process
    token: str = ""        # names this run's state on the workers


class _WorkerTurn:
    """A worker's state for one fusion run: its tasks take turns (`lock`; a range uses every core
    or the whole GPU, as the depth stage's tasks do). Made by the worker's first range, which
    drops the earlier run's state (the depth stage's map caches, which on a GPU would hold device
    memory that fusion's view cache is sized from) and applies the run's GPU budget."""

    def __init__(self, job: FusionJob):
        self.lock = threading.Lock()
        if job.backend == "cuda":
            from ..gpu.loader import import_cupy  # noqa: PLC0415
            from ..gpu.memory_budget import set_budget  # noqa: PLC0415

            gc.collect()   # device arrays of the dropped state that sit in reference cycles
            import_cupy().get_default_memory_pool().free_all_blocks()
            if job.gpu_memory is not None:
                set_budget(job.gpu_memory)


def split_ranges(refs: list[int], workers: int, consume: bool) -> list[list[int]]:
    """Contiguous ranges of the reference views (view_idx order): one per worker with consumption
    (each boundary changes the cloud), else up to RANGES_PER_WORKER per worker."""
    n = max(1, min(len(refs), workers if consume else workers * RANGES_PER_WORKER))
    bounds = np.linspace(0, len(refs), n + 1).round().astype(int)
    return [refs[a:b] for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _range_key(job: FusionJob, views: list[int]) -> str:
    what = json.dumps([dataclasses.asdict(job.cfg), job.backend, views], default=str, sort_keys=True)
    return hashlib.sha1(what.encode()).hexdigest()[:16]


def _range_paths(job: FusionJob, index: int, views: list[int]) -> tuple[Path, Path, Path]:
    stem = job.out_dir / RANGES_DIR / f"range-{index:04d}-{_range_key(job, views)}"
    return stem.with_suffix(".ply"), stem.with_suffix(".ply.vis"), stem.with_suffix(".json")


class _RecordingWriter(FusedCloudWriter):
    """A FusedCloudWriter that also keeps each chunk's statistics, in chunk order, for the client."""

    def __init__(self, *args):
        super().__init__(*args)
        self.chunk_stats: list[list] = []

    def add_stats(self, num_points, bbox_min, bbox_max, xyz_sum) -> None:
        super().add_stats(num_points, bbox_min, bbox_max, xyz_sum)
        self.chunk_stats.append([int(num_points), *(np.asarray(a, float).tolist() for a in (bbox_min, bbox_max,
                                                                                          xyz_sum))])


def fuse_range_task(job: FusionJob, index: int, views: list[int]) -> dict:
    """Fuse reference views `views` (one range) into its range files, unless a finished one is there;
    returns the range's record (what its .json holds)."""
    ply, vis, marker = _range_paths(job, index, views)
    if marker.is_file() and ply.is_file() and vis.is_file():
        record = json.loads(marker.read_text())
        return {**record, "resumed": True, "worker": worker_name()}
    with worker_state(job.token, lambda: _WorkerTurn(job)).lock:
        return _fuse_range(job, index, views, ply, vis, marker)


def _fuse_range(job: FusionJob, index: int, views: list[int], ply: Path, vis: Path, marker: Path) -> dict:
    t0 = time.perf_counter()
    ply.parent.mkdir(parents=True, exist_ok=True)
    stats, pixels = {}, {}
    colmap_idx = colmap_image_indices([v.image_id for v in job.scene.views])
    with _RecordingWriter(ply, vis) as writer, ChunkWriter(writer, colmap_idx) as chunks:
        for chunk in fuse_chunks(job.cfg, job.scene, job.sel, job.out_dir / "stereo", job.backend, progress=False,
                                 stats=stats, keep_on_device=True, references=views, pixels_by_view=pixels):
            chunks.submit(chunk)
        chunks.drain()
        writer.finish()
    record = {"index": index, "views": views, "points": writer.num_points,
              "ply_bytes": ply.stat().st_size - HEADER_BYTES, "vis_bytes": vis.stat().st_size - VIS_HEADER_BYTES,
              "stats": stats, "pixels_by_view": {str(v): c for v, c in pixels.items()},
              "chunk_stats": writer.chunk_stats, "seconds": round(time.perf_counter() - t0, 3)}
    atomic_write_text(marker, json.dumps(record))   # last: the range is finished once this exists
    return {**record, "resumed": False, "worker": worker_name()}


def _merge_stats(records: list[dict]) -> dict:
    """fusion.json's counts from the ranges' (the first's keys, in its order): per-view pixel counts
    once per view (ranges share neighbour views), sums of the points and seconds, the largest cache
    and GPU peak."""
    stats = dict(records[0]["stats"])
    by_view: dict[str, list[int]] = {}
    for r in records:
        by_view.update(r["pixels_by_view"])
    for i, key in enumerate(PIXEL_COUNTS):
        stats[key] = sum(c[i] for c in by_view.values())
    for key in ("points", "reference_views", "reloads", "silhouette_dropped", "load_seconds", "load_wait_seconds",
                "consensus_planes", "consensus_seconds"):
        if key not in records[0]["stats"]:   # consensus_*: only when fusion.weak_plane_consensus is on
            continue
        stats[key] = round(sum(r["stats"].get(key, 0) for r in records), 3) if "seconds" in key else \
            sum(r["stats"].get(key, 0) for r in records)
    loops = [r["stats"].get("loop_seconds", {}) for r in records]
    stats["loop_seconds"] = {k: round(sum(loop.get(k, 0.0) for loop in loops), 3) for k in loops[0]}
    for key in ("cache_views", "gpu_peak_bytes"):
        values = [r["stats"][key] for r in records if r["stats"].get(key) is not None]
        stats[key] = max(values) if values else None
    return stats


def _place_range(out: FusedCloudWriter, job: FusionJob, index: int, views: list[int], rec: dict) -> None:
    """Range `index`'s records and words into fused.ply + .vis after the ranges before it, and its
    chunks' statistics in chunk order, as the single process adds them."""
    ply, vis, _ = _range_paths(job, index, views)
    out.copy_in(out.place(rec["points"], rec["vis_bytes"] // 4), ply, vis)
    for points, lo, hi, total in rec["chunk_stats"]:
        out.add_stats(points, np.array(lo), np.array(hi), np.array(total))


def fuse_depth_maps_on_cluster(cfg: FusionConfig, scene: Scene, selection: ViewSelection, out_dir: Path,
                               backend: str, client, retries: int = 2, overwrite: bool = False,
                               progress: bool = True, gpu_memory: float | None = None) -> dict:
    """fuse_depth_maps's outputs, fused as Dask tasks on `client` (a distributed.Client, or a
    function returning one, called only when there is something to fuse); its counts plus
    counts.cluster (ranges, tasks, per-phase seconds, per-worker tasks and seconds)."""
    from distributed import as_completed  # noqa: PLC0415 (only with --cluster)

    out_dir = Path(out_dir).resolve()
    cfg = resolve_config(cfg, scene, selection)
    done = finished_counts(out_dir, overwrite)
    if done is not None:   # range files a run killed after writing fusion.json left behind go too
        shutil.rmtree(out_dir / RANGES_DIR, ignore_errors=True)
        return done
    t0 = time.perf_counter()
    if overwrite:
        shutil.rmtree(out_dir / RANGES_DIR, ignore_errors=True)
    for path in remove_leftovers(out_dir / RANGES_DIR):
        log.info("fusion: removed %s, left by a worker that died while writing it", path)
    # the reference views, planned here as each task plans them (the same inputs, the same rule);
    # missing maps or a stale views.json fail here, in one line, as in the single process
    inputs, _ = fusion_inputs(cfg, scene, selection, out_dir / "stereo")
    refs, _ = plan_references(inputs, selection, cfg.min_consistent)
    if not hasattr(client, "submit"):
        client = client()
    workers = max(1, len(client.scheduler_info().get("workers", {})))
    ranges = split_ranges(refs, workers, bool(cfg.consume_pixels)) if refs else [[]]
    token = uuid.uuid4().hex
    job = FusionJob(cfg, scene.without_points(), selection, out_dir, backend, gpu_memory, token)
    job_ref = client.scatter(job, broadcast=True, hash=False)   # sent once, not pickled into each task
    t_submit = time.perf_counter()
    futures = {client.submit(fuse_range_task, job_ref, i, views, key=f"fusion-range-{i}-{token}",
                             retries=retries, pure=False): i for i, views in enumerate(ranges)}
    records: list[dict | None] = [None] * len(ranges)
    per_worker: dict[str, dict] = {}
    index = None   # the range whose result is being read: the one named if it failed
    placed, copy_seconds = 0, 0.0   # ranges already in fused.ply (in view order), the seconds that took
    ply_path, vis_path, _ = output_paths(out_dir)
    try:
        with FusedCloudWriter(ply_path, vis_path) as out:
            for fut in tqdm(as_completed(futures), total=len(futures), desc="fusion ranges", disable=not progress):
                index = futures[fut]
                rec = records[index] = fut.result()
                w = per_worker.setdefault(rec["worker"], {"tasks": 0, "seconds": 0.0})
                w["tasks"] += 1
                w["seconds"] = round(w["seconds"] + (0.0 if rec["resumed"] else rec["seconds"]), 3)
                index = None
                # each range goes into fused.ply as soon as those before it are there, while the
                # workers fuse the next ranges (submitted in view order, they mostly end in it)
                t_copy = time.perf_counter()
                while placed < len(ranges) and records[placed] is not None:
                    _place_range(out, job, placed, ranges[placed], records[placed])
                    placed += 1
                copy_seconds += time.perf_counter() - t_copy
            t_finish = time.perf_counter()
            out.finish()
            totals = out.totals()
    except BaseException as exc:
        client.cancel(list(futures))
        if not isinstance(exc, Exception):   # Ctrl-C: the finished ranges stay for the rerun
            raise
        # a task's error after its retries (KilledWorker, a bad map) or the scheduler lost
        which = f"range {index} (views {ranges[index][0]}-{ranges[index][-1]})" if index is not None and ranges[index] \
            else "a range"
        raise MVSError(f"{out_dir}: fusion {which} failed on the cluster ({error_text(exc)}); the ranges "
                       f"finished so far are kept: rerun the same command to resume") from exc
    t_done = time.perf_counter()
    stats = _merge_stats(records)
    stats["cluster"] = {
        "workers": workers,
        # [first view_idx, last, reference views, points] per range, in view order
        "ranges": [[v[0], v[-1], len(v), r["points"]] if v else [] for v, r in zip(ranges, records)],
        "tasks": len(ranges), "resumed_ranges": sum(r["resumed"] for r in records),
        # tasks: submission to the last result (the copies of the ranges that ended meanwhile
        # included); copies: placing the ranges into fused.ply, all of them; finish: the headers
        # and the renames after the last result
        "phase_seconds": {"plan": round(t_submit - t0, 3), "tasks": round(t_finish - t_submit, 3),
                          "copies": round(copy_seconds, 3), "finish": round(t_done - t_finish, 3)},
        "per_worker": per_worker}
    counts = finish_outputs(out_dir, cfg, backend, scene, stats, totals, t0)
    # fused.ply holds the ranges now; removed only after fusion.json, so that a run killed before
    # it resumes from the ranges instead of fusing them again
    shutil.rmtree(out_dir / RANGES_DIR, ignore_errors=True)
    return counts


def run(ctx) -> None:
    """The pipeline's `fusion` stage on `run --cluster`'s cluster (ctx.require_client, asked for
    only when there is something to fuse)."""
    record_counts(ctx, fuse_depth_maps_on_cluster(
        ctx.cfg.fusion, ctx.require_scene(), ctx.require_selection(), ctx.out_dir, ctx.backend, ctx.require_client,
        retries=ctx.cfg.cluster.retries, overwrite=ctx.overwrite, progress=ctx.progress,
        gpu_memory=ctx.cfg.gpu_memory))
