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
from .params import SamplingConfig
from .points.device_cloud import take, to_host_cloud
from .points.validate import array_module, to_host

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


def pools(cfg: SamplingConfig) -> bool:
    """Whether the stage voxel-averages the cloud before FPS (then it writes no index file)."""
    return cfg.pre_pool_voxel_size is not None or cfg.pre_pool_spacing is not None


def resolve_num_samples(cfg: SamplingConfig, num_points: int) -> int:
    """The number of samples for a cloud of `num_points` (at least 1, at most num_points):
    num_samples, or else ratio * num_points capped at max_samples."""
    wanted = cfg.num_samples
    if wanted is None:
        wanted = max(1, int(round(cfg.ratio * num_points)))
        if cfg.max_samples is not None and wanted > cfg.max_samples:
            log.info("sampling: ratio %.3g of %d points capped at max_samples = %d", cfg.ratio, num_points,
                     cfg.max_samples)
            wanted = cfg.max_samples
    if wanted > num_points:
        log.warning("sampling.num_samples = %d exceeds the %d points of the cloud; keeping all of them (FPS order)",
                    wanted, num_points)
        return num_points
    return wanted


def with_unsampled(samples, num_points: int):
    """samples [M] int64 followed by the other indices of range(num_points), increasing (NumPy or
    CuPy, like `samples`)."""
    xp = array_module(samples)
    samples = samples.astype(xp.int64)
    rest = xp.ones(num_points, dtype=bool)
    rest[samples] = False
    return xp.concatenate([samples, xp.flatnonzero(rest)])


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


def _sample(cfg: SamplingConfig, cloud: PointCloud, backend: str, info: dict) -> tuple[PointCloud, object]:
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


def _on_gpu(backend: str, path: Path, layout) -> bool:
    """Whether the stage keeps the cloud on the GPU: a CUDA backend, a file of the fast layout and
    room for the records, their columns and the pooling's sort (else the host path, as before)."""
    if backend == "cpu" or layout is None or layout.count == 0:
        return False
    from ..gpu.backend import resolve_backend  # noqa: PLC0415

    if resolve_backend(backend) != "cuda":
        return False
    from .points.validate import gpu_memory_fallback  # noqa: PLC0415

    record = layout.dtype.itemsize
    need = layout.count * (3 * record + 8 * len(layout.dtype.names) + 160)
    return gpu_memory_fallback(f"sampling {path.name} ({layout.count} points) on the GPU", need, backend) == "cuda"


def _read(path: Path, backend: str) -> PointCloud:
    """fused.ply as a PointCloud: on the GPU (records streamed up and split there) when `_on_gpu`,
    else NumPy arrays."""
    layout = read_layout(path) if path.is_file() else None
    if not _on_gpu(backend, path, layout):
        return read_ply(path)
    from ..io.ply_records import read_cloud_to_device  # noqa: PLC0415

    return read_cloud_to_device(path, layout)


def sample_fused_cloud(cfg, fused_ply: Path, out_dir: Path, overwrite: bool = False,
                       backend: str | None = None, timings: dict | None = None) -> dict[str, Path]:
    """Run the stage. `cfg` is a SamplingConfig (or a PipelineConfig, whose `sampling` section and
    `backend` are used). Returns the output paths by name; `timings`, when given, receives the
    counts and the seconds of each step (read, spacing, pooling, fps, order, write, preview)."""
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
    cloud = _read(fused_ply, backend) if do_samples else read_ply(fused_ply)
    info["read_seconds"] = time.perf_counter() - t0
    if len(cloud) == 0:
        raise MVSError(f"{fused_ply}: the fused cloud has no points; nothing to sample")
    if do_samples:
        sampled, indices = _sample(cfg, cloud, backend, info)
        t0 = time.perf_counter()
        write_ply(paths["samples"], sampled)
        if "indices" in paths and indices is not None:
            with atomic_path(paths["indices"]) as tmp:
                np.save(tmp, to_host(indices).astype(np.int64))
        t1 = time.perf_counter()
        # what the report draws, so it never reads the whole cloud; from the arrays still in memory
        write_cloud_preview(paths["samples"], cloud=sampled)
        info.update(written_points=len(sampled), write_seconds=t1 - t0, preview_seconds=time.perf_counter() - t1)
        log.info("sampling: %d FPS samples of %d points, %d written -> %s (seconds: read %.2f, spacing %.2f, "
                 "pool %.2f, FPS %.2f, order %.2f, write %.2f, preview %.2f)", info["num_samples"],
                 info.get("pooled_points", info["input_points"]), len(sampled), paths["samples"],
                 info["read_seconds"], info.get("spacing_seconds", 0.0), info.get("pooling_seconds", 0.0),
                 info["fps_seconds"], info["order_seconds"], info["write_seconds"], info["preview_seconds"])
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


def stage_backend(requested: str, resolved: str) -> str:
    """The backend the stage runs with: `auto` stays `auto` where it resolved to CUDA, so that a
    cloud too big for the GPU falls back to the CPU with a warning (as `auto` promises) instead of
    failing, as it did for 250 M points at 40 x 3200x2130 with fusion.consume_pixels false."""
    return "auto" if requested == "auto" and resolved == "cuda" else resolved


def run(ctx) -> None:
    """The pipeline's `sampling` stage: `ctx` is pipeline.RunContext."""
    info: dict = {}
    sample_fused_cloud(ctx.cfg, ctx.out_dir / "fused.ply", ctx.out_dir, overwrite=ctx.overwrite,
                       backend=stage_backend(ctx.cfg.backend, ctx.backend), timings=info)
    if "written_points" in info:  # where the stage's time went, for run.json (benchmarks/bench_scale.py)
        ctx.counts["sampled_points"] = info["written_points"]
        ctx.counts["sampling_step_seconds"] = {k[:-len("_seconds")]: round(v, 3) for k, v in info.items()
                                               if k.endswith("_seconds")}
