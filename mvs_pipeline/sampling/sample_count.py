"""What FPS picks and in what order the stage writes it; shared by the whole-cloud path (stage.py)
and the streamed one (streamed.py).

    pools(cfg)                          whether the stage voxel-averages the cloud before FPS
    resolve_num_samples(cfg, N)         the number of samples for a cloud of N points
    with_unsampled(samples [M], N)      the samples, then every other index in increasing order
"""

from __future__ import annotations

import logging

from .params import SamplingConfig
from .points.validate import array_module

log = logging.getLogger(__name__)


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
