"""The `sampling` stage: a lighter copy of the fused cloud whose first points are an exact
farthest point sample; optional DSM.

Inputs: OUT/fused.ply. Outputs (settings in `SamplingConfig`):
    OUT/fused_fps.ply          the FPS samples in selection order, then (keep_unsampled) the other
                               (pooled) points in their order; same PLY layout as fused.ply
                               (xyz, normals, colours, extra channels such as `support`) when
                               transfer_attributes is on, xyz only otherwise
    OUT/fused_fps_indices.npy  [K] int64 indices of those points in fused.ply (without pooling)
    OUT/dsm.tif, dsm.json, ortho.png, dsm_hillshade.png   with dsm: true (points/dsm.py)

Steps: optional voxel pre-pooling (one point per voxel carrying the voxel's mean position,
normal, colour and extra channels, `support` by its maximum, points/voxel_pool/; the voxel is
pre_pool_voxel_size, or pre_pool_spacing times the cloud's estimated point spacing,
points/spacing.py), FPS (points/fps/) of num_samples points (or ratio * points capped at
max_samples; more than the cloud has keeps all of them, with a warning), then the chosen points
(of the pooled cloud, or copied from fused.ply) in output order. Why the defaults pool and cap:
configs/default.yaml, `sampling:`. The DSM rasterises the full fused cloud. Each part is skipped
when its outputs exist, unless `overwrite`; every file is written atomically.

On the GPU the cloud stays there from fused.ply's records (streamed up, io/device_io.py, and split
there, io/ply_records.py) to fused_fps.ply's (packed there, downloaded while written): pooling, FPS
and the output order run on CuPy arrays and only the spacing estimate's subsample and the preview's
points come to the host. The CPU path runs the same steps on NumPy arrays (the twins of the kernels).

That whole-cloud path is taken where it fits the memory budget (memory_plan.py: on the GPU the
run's, `--gpu-memory`; on the CPU one a caller passes). A larger cloud is sampled in chunks and
parts within the budget, on the same device (streamed.py), into the same fused_fps.ply byte for
byte: before, a cloud over the GPU's budget fell back to the CPU whole (62 M points at
--gpu-memory 8 on an H200: 48.7 s and 14.9 GB of host memory instead of 15.6 s).

On `run --cluster` (a Dask client given), a pooled cloud of the fast layout takes the streamed path
with about one pooling part per worker (memory_plan.cluster_plan) and the parts are pooled as Dask
tasks on the workers (cluster_pool.py); the scan, the key histogram, FPS and the write stay here.
Same file byte for byte: the streamed path's parts do not depend on where, or in how many pieces,
they are pooled. Without pooling (or a PLY of another layout) there is nothing to spread: the stage
runs here, as without --cluster.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from ..errors import MVSError
from ..io.atomic import atomic_path
from ..io.cloud_preview import write_cloud_preview
from ..io.ply import PointCloud, read_ply, write_ply
from ..io.ply_records import read_layout
from .memory_plan import MemoryPlan, min_streamed_budget, plan_memory
from .params import SamplingConfig
from .points.device_cloud import take, to_host_cloud
from .points.validate import array_module, to_host
from .sample_count import pools, resolve_num_samples, with_unsampled  # noqa: F401 (the stage's API)
from .streamed import sample_streamed

log = logging.getLogger(__name__)

SAMPLES_NAME = "fused_fps.ply"
INDICES_NAME = "fused_fps_indices.npy"
DSM_NAMES = {"dsm": "dsm.tif", "dsm_json": "dsm.json", "ortho": "ortho.png", "hillshade": "dsm_hillshade.png"}


def output_paths(cfg: SamplingConfig, out_dir: Path) -> dict[str, Path]:
    out_dir = Path(out_dir)
    paths = {"samples": out_dir / SAMPLES_NAME}
    if not pools(cfg):
        paths["indices"] = out_dir / INDICES_NAME
    if cfg.dsm:
        paths.update({k: out_dir / v for k, v in DSM_NAMES.items()})
    return paths


def subset(cloud: PointCloud, indices) -> PointCloud:
    """Rows `indices` of every array of `cloud` (NumPy or CuPy)."""
    return take(cloud, indices)


class _Clock:
    """Seconds per step into `info`; waits for the GPU's queued work at each step's end so that
    a step's kernels are not billed to the next."""

    def __init__(self, info: dict, xp):
        self.info, self.xp, self.t = info, xp, time.perf_counter()

    def step(self, name: str) -> None:
        if self.xp is not np:
            self.xp.cuda.get_current_stream().synchronize()
        now = time.perf_counter()
        self.info[f"{name}_seconds"] = self.info.get(f"{name}_seconds", 0.0) + now - self.t
        self.t = now


def sample_cloud(cfg: SamplingConfig, cloud: PointCloud, backend: str, info: dict) -> tuple[PointCloud, object]:
    """(the cloud to write, FPS indices into `cloud` or None after pooling). Arrays stay on the
    module `cloud` has (CuPy: the whole step on the GPU); `info` gets counts and step seconds."""
    from .points.fps.ops import farthest_point_sampling  # noqa: PLC0415 (numba import only when sampling)

    clock = _Clock(info, array_module(cloud.xyz))
    info["input_points"] = len(cloud)
    source = cloud
    if pools(cfg):
        from .points.voxel_pool.ops import pool_point_cloud  # noqa: PLC0415

        voxel = cfg.pre_pool_voxel_size
        if voxel is None:
            from .points.spacing import estimate_spacing  # noqa: PLC0415

            info["point_spacing"] = estimate_spacing(cloud.xyz)
            voxel = cfg.pre_pool_spacing * info["point_spacing"]
            log.info("sampling: point spacing %.4g m; pre-pooling in voxels of %.4g m", info["point_spacing"], voxel)
            clock.step("spacing")
        if voxel > 0:
            # mean attributes per voxel (points/voxel_pool/): no interpolation from the fused points
            source = pool_point_cloud(cloud, voxel, backend=backend)
        else:  # most points have an exact duplicate: no spacing to pool at
            log.warning("sampling: the fused cloud's median point spacing is 0; FPS without pre-pooling")
        info.update(pooled_points=len(source), pool_voxel_size=voxel)
        clock.step("pooling")
    m = resolve_num_samples(cfg, len(source))
    if cfg.start_index >= len(source):
        raise MVSError(f"sampling.start_index = {cfg.start_index} is out of range for {len(source)} points")
    indices = farthest_point_sampling(source.xyz, m, cfg.start_index, backend=backend)
    info["num_samples"] = m
    clock.step("fps")
    if cfg.keep_unsampled:
        indices = with_unsampled(indices, len(source))
    if not cfg.transfer_attributes:
        sampled = PointCloud(xyz=take(PointCloud(xyz=source.xyz), indices).xyz)
    else:
        sampled = take(source, indices)  # pooled: the voxel means
    clock.step("order")
    return sampled, (indices if source is cloud else None)


def _plan(backend: str, path: Path, layout, memory_budget: int | None) -> tuple[bool, MemoryPlan]:
    """(whether the stage works on the GPU, how it fits its memory: memory_plan.py).

    The GPU with a CUDA backend and a file of the fast layout: the whole cloud at once where it
    fits the run's budget (gpu/memory_budget.py; `memory_budget` bytes instead when given), else in
    chunks and parts within it; a budget too small even for that falls back to the CPU (backend
    `auto`, with a warning) or fails (`cuda`). The CPU: the whole cloud, or with `memory_budget`
    in chunks and parts within it. A PLY of another layout is read whole on the host, as before."""
    if layout is None or layout.count == 0:
        return False, MemoryPlan(whole=True)
    args = (layout.count, layout.dtype.itemsize, len(layout.dtype.names))
    on_gpu = False
    if backend != "cpu":
        from ..gpu.backend import resolve_backend  # noqa: PLC0415

        on_gpu = resolve_backend(backend) == "cuda"
    if not on_gpu:
        plan = plan_memory(*args, memory_budget)
        if plan is None:
            raise MVSError(f"sampling {path.name} ({layout.count} points): a memory budget of "
                           f"{memory_budget / 2**20:.1f} MiB is too small even in chunks (it needs "
                           f"{min_streamed_budget(*args) / 2**20:.1f} MiB)")
        return False, plan
    from .memory_plan import GPU_WHOLE_SCRATCH_BYTES  # noqa: PLC0415
    from .points.validate import gpu_free_bytes, gpu_memory_fallback  # noqa: PLC0415

    budget = gpu_free_bytes() if memory_budget is None else int(memory_budget)
    plan = plan_memory(*args, budget, GPU_WHOLE_SCRATCH_BYTES)
    if plan is not None:
        return True, plan
    gpu_memory_fallback(f"sampling {path.name} ({layout.count} points) on the GPU in chunks",
                        min_streamed_budget(*args), backend)  # raises for `cuda`
    return False, MemoryPlan(whole=True)


def _read(path: Path, layout, on_gpu: bool) -> PointCloud:
    """fused.ply as a PointCloud: on the GPU (records streamed up and split there) or NumPy arrays."""
    if not on_gpu:
        return read_ply(path)
    from ..io.ply_records import read_cloud_to_device  # noqa: PLC0415

    return read_cloud_to_device(path, layout)


def sample_fused_cloud(cfg, fused_ply: Path, out_dir: Path, overwrite: bool = False,
                       backend: str | None = None, timings: dict | None = None,
                       memory_budget: int | None = None, client=None, retries: int = 2) -> dict[str, Path]:
    """Run the stage. `cfg` is a SamplingConfig (or a PipelineConfig, whose `sampling` section and
    `backend` are used). Returns the output paths by name; `timings`, when given, receives the
    counts and the seconds of each step (read, spacing, pooling, fps, order, write, preview; with a
    `client` also pool_tasks, the part of pooling from the tasks' submission to the last part back,
    cluster_tasks and cluster_workers).
    `memory_budget`: bytes the stage may hold where it works (default: on the GPU what the run's
    budget leaves, on the CPU no limit); the outputs do not depend on it (memory_plan.py).
    `client`: a distributed.Client (or a function returning one, called only when there is pooling to
    do) whose workers pool the key ranges, each task `retries` times at most (cluster_pool.py)."""
    if hasattr(cfg, "sampling"):
        backend = backend or cfg.backend
        cfg = cfg.sampling
    backend = backend or "auto"
    fused_ply, out_dir = Path(fused_ply), Path(out_dir)
    paths = output_paths(cfg, out_dir)
    sample_keys = [k for k in ("samples", "indices") if k in paths]
    dsm_keys = [k for k in DSM_NAMES if k in paths]
    do_samples = overwrite or not all(paths[k].exists() for k in sample_keys)
    do_dsm = bool(dsm_keys) and (overwrite or not all(paths[k].exists() for k in ("dsm", "dsm_json")))
    if not (do_samples or do_dsm):
        log.info("sampling: outputs exist in %s, skipping", out_dir)
        return {k: p for k, p in paths.items() if p.exists()}
    if backend == "auto":
        from ..gpu.backend import resolve_backend  # noqa: PLC0415

        # Warn about a missing GPU once, not in every step; `auto` stays so that a cloud too big
        # for the GPU still falls back to the CPU instead of failing.
        backend = "cpu" if resolve_backend("auto") == "cpu" else "auto"
    info = timings if timings is not None else {}
    t0 = time.perf_counter()
    layout = read_layout(fused_ply) if do_samples and fused_ply.is_file() else None
    if layout is not None and layout.count == 0:
        raise MVSError(f"{fused_ply}: the fused cloud has no points; nothing to sample")
    on_gpu, plan = _plan(backend, fused_ply, layout, memory_budget) if do_samples else (False, MemoryPlan(True))
    pool_ranges = None
    if client is not None and do_samples and layout is not None and pools(cfg):
        plan, pool_ranges = _on_cluster(client, fused_ply, layout, plan, on_gpu, retries, info)
    if not plan.whole:
        written = sample_streamed(cfg, fused_ply, layout, plan, on_gpu, backend, paths, info, pool_ranges)
        info["written_points"] = written
        _log_steps(info, written, paths["samples"])
        do_samples = False
    cloud = _read(fused_ply, layout, on_gpu) if do_samples else read_ply(fused_ply) if do_dsm else None
    info.setdefault("read_seconds", time.perf_counter() - t0)
    if cloud is not None and len(cloud) == 0:
        raise MVSError(f"{fused_ply}: the fused cloud has no points; nothing to sample")
    if do_samples:
        sampled, indices = sample_cloud(cfg, cloud, backend, info)
        t0 = time.perf_counter()
        write_ply(paths["samples"], sampled)
        if "indices" in paths and indices is not None:
            with atomic_path(paths["indices"]) as tmp:
                np.save(tmp, to_host(indices).astype(np.int64))
        t1 = time.perf_counter()
        # what the report draws, so it never reads the whole cloud; from the arrays still in memory
        write_cloud_preview(paths["samples"], cloud=sampled)
        info.update(written_points=len(sampled), write_seconds=t1 - t0, preview_seconds=time.perf_counter() - t1)
        _log_steps(info, len(sampled), paths["samples"])
        del sampled
    if do_dsm:
        from .points.dsm import compute_dsm, write_dsm  # noqa: PLC0415

        host = to_host_cloud(PointCloud(xyz=cloud.xyz, colors=cloud.colors))
        raster = compute_dsm(host.xyz, host.colors, cfg.dsm_cell_size, cfg.dsm_up_axis, cfg.dsm_reduce,
                             backend=backend)
        write_dsm(raster, paths["dsm"], paths["dsm_json"], paths["ortho"], paths["hillshade"])
        log.info("sampling: DSM %d x %d cells of %.4g m -> %s", raster.height.shape[1], raster.height.shape[0],
                 raster.cell_size, paths["dsm"])
    return {k: p for k, p in paths.items() if p.exists()}  # no ortho.png without colours


def _on_cluster(client, fused_ply: Path, layout, plan: MemoryPlan, on_gpu: bool, retries: int, info: dict):
    """(the streamed plan of the cluster path, the pool_ranges that sends the key ranges to the workers)."""
    from .cluster_pool import cluster_pooler, worker_count  # noqa: PLC0415 (distributed, only with --cluster)
    from .memory_plan import cluster_plan  # noqa: PLC0415

    if not hasattr(client, "submit"):
        client = client()
    workers = worker_count(client)
    plan = cluster_plan(plan, layout.count, workers)
    log.info("sampling: pooling on the cluster's %d worker(s), parts of at most %d points", workers,
             plan.part_points)
    return plan, cluster_pooler(client, fused_ply, layout, on_gpu, retries, info)


def _log_steps(info: dict, written: int, path: Path) -> None:
    log.info("sampling: %d FPS samples of %d points, %d written -> %s (seconds: read %.2f, spacing %.2f, "
             "pool %.2f, FPS %.2f, order %.2f, write %.2f, preview %.2f)", info["num_samples"],
             info.get("pooled_points", info["input_points"]), written, path,
             info["read_seconds"], info.get("spacing_seconds", 0.0), info.get("pooling_seconds", 0.0),
             info["fps_seconds"], info["order_seconds"], info["write_seconds"], info["preview_seconds"])


def stage_backend(requested: str, resolved: str) -> str:
    """The backend the stage runs with: `auto` stays `auto` where it resolved to CUDA, so that a
    cloud too big for the GPU falls back to the CPU with a warning (as `auto` promises) instead of
    failing, as it did for 250 M points at 40 x 3200x2130 with fusion.consume_pixels false."""
    return "auto" if requested == "auto" and resolved == "cuda" else resolved


def run(ctx) -> None:
    """The pipeline's `sampling` stage: `ctx` is pipeline.RunContext."""
    info: dict = {}
    # --cluster: the pooling's key ranges on the workers (the client asked for only when pooling is to do)
    client = ctx.require_client if ctx.later_on_workers else None
    sample_fused_cloud(ctx.cfg, ctx.out_dir / "fused.ply", ctx.out_dir, overwrite=ctx.overwrite,
                       backend=stage_backend(ctx.cfg.backend, ctx.backend), timings=info, client=client,
                       retries=ctx.cfg.cluster.retries)
    if "written_points" in info:  # where the stage's time went, for run.json (benchmarks/bench_scale.py)
        ctx.counts["sampled_points"] = info["written_points"]
        ctx.counts["sampling_step_seconds"] = {k[:-len("_seconds")]: round(v, 3) for k, v in info.items()
                                               if k.endswith("_seconds")}
    if "chunk_rows" in info:  # sampled in chunks and parts within the memory budget (streamed.py)
        ctx.counts["sampling_streamed"] = {"chunk_rows": info["chunk_rows"], "part_points": info["part_points"]}
    if "cluster_tasks" in info:   # what ran where: the pooling tasks per worker (cluster_pool.py)
        ctx.counts["sampling_cluster_tasks"] = info["cluster_tasks"]
        ctx.counts["sampling_cluster_workers"] = info["cluster_workers"]
