"""The sampling stage's voxel pooling on `run --cluster`'s Dask workers: one task per key range.

    pool_ranges = cluster_pooler(client, fused_ply, layout, on_gpu, retries, info)
    sample_streamed(..., pool_ranges=pool_ranges)   # streamed.py, with a cluster_plan (memory_plan.py)

The rest of the stage stays in the client's process, as in the streamed path: the scan (bounds,
spacing subsample), the key histogram that plans the ranges, FPS of the pooled coordinates, the
ordered write. Only the pooling of the ranges moves, and the ranges are independent of each other
(voxel_pool/partition.py: disjoint key ranges of whole voxels, each pooled in the whole cloud's
frame with its points in file order), so each task's part is the part the client would have
pooled itself, and the parts in key order are the whole pooling's cloud: fused_fps.ply is the
single-process file byte for byte, on the same backend, whichever worker pools which range. FPS
stays on one device: it is a sequential chain of farthest points over the whole pooled cloud.

Each task reads fused.ply from the shared output folder itself (one pass over the file, to gather
its range's points) and sends its pooled part back as arrays, which the client gathers in key
order. Arrays rather than files in the output folder: a part crosses from the worker to the
client once that way, where a file would cross twice (written to the shared folder, read back by
the client) and would be one more thing to clean up after a killed run; the pooled cloud is what
the client holds for FPS and the write anyway (~32 B per pooled point).

A task whose worker died is rerun by Dask (`cluster.retries`); a task that fails (e.g. a worker
that does not see the output folder at the client's path) fails the stage in one line naming it.
Nothing is written before every part is back, so a failed stage leaves no partial output.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..cluster.client import worker_name, worker_state
from ..errors import MVSError
from ..io.ply import PointCloud
from ..io.ply_records import VertexLayout
from .points.cloud_source import file_source
from .points.voxel_pool.frame import VoxelFrame
from .points.voxel_pool.partition import KeyRange
from .points.voxel_pool.streamed import pool_range


@dataclass(frozen=True)
class PoolJob:
    """What every pooling task of one stage needs (a few hundred bytes: pickled into each task)."""
    fused_ply: Path     # absolute: the workers read it from the shared output folder
    layout: VertexLayout
    frame: VoxelFrame
    centre: np.ndarray
    cap: int
    chunk_rows: int
    on_gpu: bool        # read and pool on the worker's GPU, as the client would on its own
    token: str          # this stage's, as the worker's state (cluster/client.worker_state)


def pool_range_task(job: PoolJob, rng: KeyRange) -> tuple[PointCloud, dict]:
    """One key range pooled on a worker: (its host cloud, what ran where and for how long)."""
    t0, started = time.perf_counter(), time.time()
    # An earlier stage's state on this worker (depth's map cache and textures, on the GPU with
    # local-cuda) is of no further use once sampling runs: closed here, before the pooling needs
    # the memory (worker_state keeps one run's state, dropping any other).
    worker_state(job.token, lambda: None)
    cloud = pool_range(file_source(job.fused_ply, job.layout, job.on_gpu), job.frame, job.centre, rng,
                       job.cap, job.chunk_rows)
    return cloud, {"worker": worker_name(), "seconds": time.perf_counter() - t0, "points": rng.count,
                   "voxels": len(cloud), "span": (started, time.time())}


def worker_count(client) -> int:
    return max(1, len(client.scheduler_info().get("workers", {})))


def _failure(fused_ply: Path, exc: Exception) -> MVSError:
    what = " ".join(str(exc).split())   # Dask's messages span lines; ours is one
    hint = (f" (the workers must see {fused_ply.parent} at the same path)"
            if isinstance(exc, (FileNotFoundError, PermissionError)) else "")
    return MVSError(f"{fused_ply}: sampling's voxel pooling failed on the cluster ({type(exc).__name__}: "
                    f"{what}){hint}; nothing was written: rerun the same command")


def cluster_pooler(client, fused_ply: Path, layout: VertexLayout, on_gpu: bool, retries: int, info: dict):
    """A pool_ranges for voxel_pool/streamed.pool_in_parts that pools each range as a task on
    `client`'s workers; `info` gets cluster_tasks, pool_tasks_seconds (submission to the last
    part back) and per-worker tasks, points and seconds (cluster_workers)."""
    fused_ply = Path(fused_ply).resolve()

    def pool_ranges(frame: VoxelFrame, centre: np.ndarray, ranges: list[KeyRange], cap: int,
                    chunk_rows: int) -> list[PointCloud]:
        token = uuid.uuid4().hex
        job = PoolJob(fused_ply, layout, frame, np.asarray(centre), cap, chunk_rows, on_gpu, token)
        t0, submitted = time.perf_counter(), time.time()
        futures = [client.submit(pool_range_task, job, rng, key=f"sampling-pool-{i}-{token}", retries=retries,
                                 pure=False) for i, rng in enumerate(ranges)]
        try:
            results = client.gather(futures)   # in the ranges' order: the key order the parts need
        except BaseException as exc:   # a task's error, retries used up (KilledWorker), the scheduler lost
            client.cancel(futures)     # (and Ctrl-C: no task left running for a stage that ended)
            if isinstance(exc, Exception):
                raise _failure(fused_ply, exc) from exc
            raise
        info["cluster_tasks"] = info.get("cluster_tasks", 0) + len(results)
        info["pool_tasks_seconds"] = info.get("pool_tasks_seconds", 0.0) + time.perf_counter() - t0
        workers = info.setdefault("cluster_workers", {})
        for _, stats in results:
            w = workers.setdefault(stats["worker"], {"tasks": 0, "points": 0, "seconds": 0.0, "spans": []})
            w["tasks"] += 1
            w["points"] += stats["points"]
            w["seconds"] = round(w["seconds"] + stats["seconds"], 3)
            # seconds from the submission: where the workers waited for each other
            w["spans"].append((round(stats["span"][0] - submitted, 3), round(stats["span"][1] - submitted, 3)))
        return [cloud for cloud, _ in results]

    return pool_ranges
