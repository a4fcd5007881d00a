"""The `sampling` stage: a lighter copy of the fused cloud whose first points are an exact
farthest point sample; optional DSM.

Inputs: OUT/fused.ply. Outputs (settings in `SamplingConfig`):
    OUT/fused_fps.ply          the FPS samples in selection order, then (keep_unsampled) the other
                               (pooled) points in their order; same PLY layout as fused.ply
                               (xyz, normals, colours, extra channels such as `support`) when
                               transfer_attributes is on, xyz only otherwise
    OUT/fused_fps_indices.npy  [K] int64 indices of those points in fused.ply (without pooling)
    OUT/dsm.tif, dsm.json, ortho.png, dsm_hillshade.png   with dsm: true (points/dsm.py)

Steps: optional voxel pre-pooling (mean position/normal/colour per voxel, points/voxel_pool/; the
voxel is pre_pool_voxel_size, or pre_pool_spacing times the cloud's estimated point spacing,
points/spacing.py), FPS (points/fps/) of num_samples points (or ratio * points capped at
max_samples; more than the cloud has keeps all of them, with a warning), attribute transfer
(copies from fused.ply, or after pooling an inverse-distance interpolation from the 3 nearest
fused points, points/three_nn/). Why the defaults pool and cap: configs/default.yaml, `sampling:`.
The DSM rasterises the full fused cloud. Each part is skipped when its outputs exist, unless
`overwrite`; every file is written atomically.
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
from .params import SamplingConfig

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


def with_unsampled(samples: np.ndarray, num_points: int) -> np.ndarray:
    """samples [M] int64 followed by the other indices of range(num_points), increasing."""
    rest = np.ones(num_points, dtype=bool)
    rest[samples] = False
    return np.concatenate([samples, np.flatnonzero(rest)])


def subset(cloud: PointCloud, indices: np.ndarray) -> PointCloud:
    return PointCloud(xyz=cloud.xyz[indices],
                      normals=None if cloud.normals is None else cloud.normals[indices],
                      colors=None if cloud.colors is None else cloud.colors[indices],
                      extra={k: np.asarray(v)[indices] for k, v in cloud.extra.items()})


def _sample(cfg: SamplingConfig, cloud: PointCloud, backend: str) -> tuple[PointCloud, np.ndarray | None, dict]:
    from .points.fps.ops import farthest_point_sampling  # noqa: PLC0415 (numba import only when sampling)

    info: dict = {"input_points": len(cloud)}
    source = cloud
    if pools(cfg):
        from .points.voxel_pool.ops import voxel_downsample  # noqa: PLC0415

        t0 = time.perf_counter()
        voxel = cfg.pre_pool_voxel_size
        if voxel is None:
            from .points.spacing import estimate_spacing  # noqa: PLC0415

            info["point_spacing"] = estimate_spacing(cloud.xyz)
            voxel = cfg.pre_pool_spacing * info["point_spacing"]
            log.info("sampling: point spacing %.4g m; pre-pooling in voxels of %.4g m", info["point_spacing"], voxel)
        if voxel > 0:
            source = voxel_downsample(cloud, voxel, backend=backend)
        else:  # most points have an exact duplicate: no spacing to pool at
            log.warning("sampling: the fused cloud's median point spacing is 0; FPS without pre-pooling")
        info.update(pooled_points=len(source), pool_voxel_size=voxel, pooling_seconds=time.perf_counter() - t0)
    m = resolve_num_samples(cfg, len(source))
    if cfg.start_index >= len(source):
        raise MVSError(f"sampling.start_index = {cfg.start_index} is out of range for {len(source)} points")
    t0 = time.perf_counter()
    indices = farthest_point_sampling(source.xyz, m, cfg.start_index, backend=backend)
    info.update(num_samples=m, fps_seconds=time.perf_counter() - t0)
    if cfg.keep_unsampled:
        indices = with_unsampled(np.asarray(indices, dtype=np.int64), len(source))
    t0 = time.perf_counter()
    if not cfg.transfer_attributes:
        sampled = PointCloud(xyz=source.xyz[indices])
    elif source is cloud:
        sampled = subset(cloud, indices)
    else:
        from .points.three_nn.ops import interpolate_attributes  # noqa: PLC0415

        sampled = interpolate_attributes(cloud, source.xyz[indices], backend=backend)
        sampled.extra["voxel_count"] = source.extra["voxel_count"][indices]
    info["transfer_seconds"] = time.perf_counter() - t0
    return sampled, (indices if source is cloud else None), info


def sample_fused_cloud(cfg, fused_ply: Path, out_dir: Path, overwrite: bool = False,
                       backend: str | None = None) -> dict[str, Path]:
    """Run the stage. `cfg` is a SamplingConfig (or a PipelineConfig, whose `sampling` section and
    `backend` are used). Returns the output paths by name."""
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
    t_read = time.perf_counter()
    cloud = read_ply(fused_ply)
    t_read = time.perf_counter() - t_read
    if len(cloud) == 0:
        raise MVSError(f"{fused_ply}: the fused cloud has no points; nothing to sample")
    if do_samples:
        sampled, indices, info = _sample(cfg, cloud, backend)
        t_write = time.perf_counter()
        write_ply(paths["samples"], sampled)
        write_cloud_preview(paths["samples"])  # what the report draws, so it never reads the whole cloud
        if "indices" in paths and indices is not None:
            with atomic_path(paths["indices"]) as tmp:
                np.save(tmp, np.asarray(indices, dtype=np.int64))
        log.info("sampling: %d FPS samples of %d points, %d written -> %s (seconds: read %.2f, pool %.2f, "
                 "FPS %.2f, attributes %.2f, write %.2f)", info["num_samples"],
                 info.get("pooled_points", info["input_points"]), len(sampled), paths["samples"], t_read,
                 info.get("pooling_seconds", 0.0), info["fps_seconds"], info["transfer_seconds"],
                 time.perf_counter() - t_write)
    if do_dsm:
        from .points.dsm import compute_dsm, write_dsm  # noqa: PLC0415

        raster = compute_dsm(cloud.xyz, cloud.colors, cfg.dsm_cell_size, cfg.dsm_up_axis, cfg.dsm_reduce,
                             backend=backend)
        write_dsm(raster, paths["dsm"], paths["dsm_json"], paths["ortho"], paths["hillshade"])
        log.info("sampling: DSM %d x %d cells of %.4g m -> %s", raster.height.shape[1], raster.height.shape[0],
                 raster.cell_size, paths["dsm"])
    return {k: p for k, p in paths.items() if p.exists()}  # no ortho.png without colours


def run(ctx) -> None:
    """The pipeline's `sampling` stage: `ctx` is pipeline.RunContext."""
    sample_fused_cloud(ctx.cfg, ctx.out_dir / "fused.ply", ctx.out_dir, overwrite=ctx.overwrite, backend=ctx.backend)
