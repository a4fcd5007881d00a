"""The `sampling` stage's parameters (`sampling/stage.py`): FPS of the fused cloud, optional DSM.
(field metadata and what `None` means: mvs_pipeline/field_meta.py)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..field_meta import meta


@dataclass(frozen=True)
class SamplingConfig:
    # The `sampling` stage (stage.py): OUT/fused.ply pooled at its own spacing into OUT/fused_fps.ply, the
    # first points in exact FPS order; optional DSM. Why these defaults: configs/default.yaml, `sampling:`.
    num_samples: int | None = field(default=None, metadata=meta(
        "points picked by farthest point sampling (null = ratio * (pooled) points capped at max_samples; "
        "more than there are keeps all)",
        "points", (1, 2**31 - 1)))
    ratio: float = field(default=0.1, metadata=meta(
        "FPS samples per (pooled) fused point when num_samples is null", "fraction", (1e-6, 1.0)))
    max_samples: int | None = field(default=200_000, metadata=meta(
        "cap on ratio * points when num_samples is null (null = no cap); exact FPS costs a few "
        "microseconds per sample on the GPU, so the cap bounds the stage's time", "points", (1, 2**31 - 1)))
    keep_unsampled: bool = field(default=True, metadata=meta(
        "the (pooled) points FPS did not pick follow the samples in fused_fps.ply, in their order: the file is "
        "then the whole (pooled) cloud and its first samples an exact FPS sample; false = the samples only"))
    start_index: int = field(default=0, metadata=meta(
        "index of the first sample in the (pooled) fused cloud", "index", (0, 2**31 - 1)))
    pre_pool_voxel_size: float | None = field(default=None, metadata=meta(
        "average the fused cloud per voxel of this edge before FPS (null = pre_pool_spacing decides)", "m",
        (1e-6, 1e3)))
    pre_pool_spacing: float | None = field(default=2.0, metadata=meta(
        "when pre_pool_voxel_size is null: voxel edge as a multiple of the cloud's estimated point spacing "
        "(median nearest-neighbour distance, points/spacing.py); null = no pooling", "spacings", (0.1, 1e3)))
    transfer_attributes: bool = field(default=True, metadata=meta(
        "samples carry the fused normals, colours and extra channels (copied; after pooling the voxel's mean, "
        "normals re-normalised, colours rounded, `support` its maximum); false = coordinates only"))
    dsm: bool = field(default=False, metadata=meta(
        "also rasterise the fused cloud top-down: dsm.tif + dsm.json, ortho.png, dsm_hillshade.png"))
    dsm_cell_size: float | None = field(default=None, metadata=meta(
        "DSM/orthophoto cell edge (null = about 4 fused points per cell)", "m", (1e-6, 1e4)))
    dsm_reduce: Literal["max", "mean"] = field(default="max", metadata=meta(
        "DSM value per cell: height of the highest point, or the mean height"))
    dsm_up_axis: Literal["z", "-z", "y", "-y", "x", "-x"] = field(default="z", metadata=meta(
        "world axis pointing up for the DSM (a COLMAP model that is not geo-registered is often -y up)"))
