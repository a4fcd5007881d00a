"""The config fields: one frozen dataclass per stage, collected in `PipelineConfig`.

Every field carries `meta(help, unit, range)`; `configs/default.yaml` documents the same fields
with the same defaults (a test keeps the two in step). `None` means "auto": the stage resolves
it, logs the value and saves it with the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .config import meta
from .patchmatch.params import PatchMatchParams  # the `patchmatch` section: one class for API and YAML


@dataclass(frozen=True)
class LoadConfig:
    # The undistortion options are COLMAP's image_undistorter options of the same name.
    blank_pixels: float = field(default=0.0, metadata=meta(
        "fraction of blank pixels allowed in undistorted images (0 = crop to valid pixels)", "fraction", (0.0, 1.0)))
    min_scale: float = field(default=0.2, metadata=meta(
        "smallest scale of the undistorted image relative to the original", "ratio", (0.01, 1.0)))
    max_scale: float = field(default=2.0, metadata=meta(
        "largest scale of the undistorted image relative to the original", "ratio", (1.0, 10.0)))


@dataclass(frozen=True)
class ViewsConfig:
    num_neighbors: int = field(default=10, metadata=meta(
        "source views kept per reference view", "views", (1, 32)))
    min_shared_points: int = field(default=5, metadata=meta(
        "a pair needs at least this many shared sparse points to be considered", "points", (1, 100000)))
    min_triangulation_angle: float = field(default=1.0, metadata=meta(
        "drop pairs whose 75th-percentile triangulation angle is below this", "degrees", (0.0, 45.0)))
    angle_prior: float = field(default=5.0, metadata=meta(
        "triangulation angle that gets full weight in the pair score (MVSNet's theta0)", "degrees", (0.1, 45.0)))
    sigma_below_prior: float = field(default=1.0, metadata=meta(
        "Gaussian width of the score for angles below angle_prior (small angles count little)", "degrees", (0.01, 45.0)))
    sigma_above_prior: float = field(default=10.0, metadata=meta(
        "Gaussian width of the score for angles above angle_prior", "degrees", (0.01, 90.0)))
    depth_percentiles: tuple[float, ...] = field(default=(1.0, 99.0), metadata=meta(
        "low and high percentile of a view's sparse point depths that bound its depth range", "percent", (0.0, 100.0)))
    depth_margin_near: float = field(default=0.5, metadata=meta(
        "relative margin below the low percentile depth: near = low / (1 + margin)", "fraction", (0.0, 10.0)))
    depth_margin_far: float = field(default=1.0, metadata=meta(
        "relative margin above the high percentile depth: far = high * (1 + margin); generous because far "
        "surfaces are often seen in too few views to get sparse points, and cheap in inverse depth",
        "fraction", (0.0, 100.0)))
    min_points_for_range: int = field(default=20, metadata=meta(
        "views seeing fewer sparse points get a warning and a depth range from their neighbours", "points", (1, 100000)))

    def check(self) -> list[str]:
        p = self.depth_percentiles
        if len(p) != 2 or not p[0] < p[1]:
            return [f"depth_percentiles must be two increasing numbers, got {list(p)}"]
        return []


@dataclass(frozen=True)
class DepthConfig:
    # The `depth` stage's orchestration (mvs_pipeline/depth.py, depth_passes.py): ACMM's scales and passes.
    # The per-pass PatchMatch settings (geom_weight, geom_cap included) are the `patchmatch` section.
    multi_scale: bool = field(default=True, metadata=meta(
        "ACMM image pyramid: start at a coarse scale and upsample (false = finest scale only)"))
    coarsest_max_size: int = field(default=1000, metadata=meta(
        "halve the images until the long side is at most this; that is the coarsest scale", "px", (32, 100000)))
    geometric_passes: int = field(default=2, metadata=meta(
        "geometric-consistency passes per scale after the photometric one (ACMM 2)", "passes", (0, 10)))
    jbu_radius: int = field(default=2, metadata=meta(
        "joint bilateral upsampling window half size on the coarser map (2 = 5x5)", "px (coarse)", (1, 5)))
    jbu_sigma_spatial: float = field(default=1.0, metadata=meta(
        "joint bilateral upsampling: spatial Gaussian sigma", "px (coarse)", (0.05, 100.0)))
    jbu_sigma_range: float = field(default=25.5, metadata=meta(
        "joint bilateral upsampling: Gaussian sigma on fine-image intensity differences", "grey levels", (0.1, 1000.0)))
    detail_margin: float | None = field(default=0.3, metadata=meta(
        "detail restorer: at a finer scale a pixel leaves its upsampled hypothesis only if the new one's "
        "photometric cost is lower by more than this (null = always take the new one)", "cost", (0.0, 2.0)))
    filter_median: bool = field(default=True, metadata=meta(
        "post-filter the final depth maps with a median over checkerboard neighbours"))
    filter_max_cost: float | None = field(default=None, metadata=meta(
        "post-filter: drop final depths whose aggregated cost exceeds this (null = keep all)", "cost", (0.0, 10.0)))
    sync_maps: bool = field(default=False, metadata=meta(
        "fsync every map file before it counts as written (survives a power loss; slower: the maps of "
        "21 views at 3200 px are ~11 GB). Off, maps are still written atomically and a rerun redoes any "
        "map found incomplete"))


@dataclass(frozen=True)
class FusionConfig:
    # Rules in mvs_pipeline/fusion.py; the thresholds mean what COLMAP's stereo_fusion options of similar names mean.
    max_reproj_error: float = field(default=2.0, metadata=meta(
        "a neighbour agrees only if its own 3D point reprojects this close to the reference pixel", "px", (0.0, 100.0)))
    max_depth_diff: float = field(default=0.01, metadata=meta(
        "largest |projected depth - neighbour depth| / neighbour depth for agreement", "fraction", (0.0, 1.0)))
    max_normal_angle: float = field(default=10.0, metadata=meta(
        "largest angle between the reference and neighbour normals for agreement", "degrees", (0.0, 180.0)))
    min_consistent: int = field(default=2, metadata=meta(
        "neighbours that must agree to keep a point (2 = seen consistently in 3 views)", "views", (1, 32)))
    aggregate: Literal["mean", "median"] = field(default="mean", metadata=meta(
        "how a point's position, normal and colour combine its observations"))
    map_type: Literal["auto", "geometric", "photometric"] = field(default="auto", metadata=meta(
        "which depth/normal maps to fuse; auto = geometric when every view has them, else photometric"))
    mask_dir: str | None = field(default=None, metadata=meta(
        "folder of COLMAP-style masks MASK_DIR/<image name>.png, zero = ignore the pixel (null = no masks)"))
    cache_views: int | None = field(default=None, metadata=meta(
        "views whose maps are kept loaded at once (null = as many as half the free memory holds)", "views",
        (2, 100000)))


@dataclass(frozen=True)
class EvaluateConfig:
    # The ETH3D metric's parameters default to the official evaluator's (mvs_pipeline/evaluation/eth3d.py).
    tolerances: tuple[float, ...] = field(default=(0.01, 0.02, 0.05, 0.1, 0.2, 0.5), metadata=meta(
        "ETH3D distance tolerances scored (accuracy, completeness, F1 each)", "m", (0.0, 100.0)))
    voxel_size: float = field(default=0.01, metadata=meta(
        "voxel cell size of the ETH3D score weighting (each occupied cell weighs the same)", "m", (1e-4, 100.0)))
    beam_start_radius: float = field(default=0.001125, metadata=meta(
        "laser beam radius at the scanner, for the free-space (inaccurate) test", "m", (0.0, 1.0)))
    beam_divergence_deg: float = field(default=0.011, metadata=meta(
        "laser beam divergence half-angle", "degrees", (0.0, 10.0)))
    clouds: tuple[str, ...] = field(default=("fused", "fused_fps"), metadata=meta(
        "clouds of the run folder scored against the GT (OUT/<name>.ply; missing ones are skipped)"))
    write_clouds: bool = field(default=False, metadata=meta(
        "also write coloured complete/accurate/inaccurate/unobserved clouds per tolerance to OUT/eval/"))
    depth_metrics: bool = field(default=True, metadata=meta(
        "compare depth maps with GT depth maps when the workspace has them (gt/depth, ground_truth_depth)"))
    report: bool = field(default=True, metadata=meta("write OUT/report.html and OUT/report.json at the end"))
    report_max_views: int = field(default=12, metadata=meta(
        "views shown with depth/normal/cost previews in the report", "views", (0, 10000)))
    report_render_points: int = field(default=100000, metadata=meta(
        "points drawn per cloud render in the report (random subsample)", "points", (1000, 10000000)))

    def check(self) -> list[str]:
        return [] if self.tolerances else ["tolerances must list at least one distance"]


@dataclass(frozen=True)
class SamplingConfig:
    # The `sampling` stage (mvs_pipeline/sampling.py): exact FPS of OUT/fused.ply into OUT/fused_fps.ply, optional DSM.
    num_samples: int | None = field(default=None, metadata=meta(
        "points kept by farthest point sampling (null = ratio * fused points; more than there are keeps all)",
        "points", (1, 2**31 - 1)))
    ratio: float = field(default=0.1, metadata=meta(
        "fraction of the (pooled) fused points kept when num_samples is null", "fraction", (1e-6, 1.0)))
    start_index: int = field(default=0, metadata=meta(
        "index of the first sample in the (pooled) fused cloud", "index", (0, 2**31 - 1)))
    pre_pool_voxel_size: float | None = field(default=None, metadata=meta(
        "average the fused cloud per voxel of this edge before FPS (null = no pooling)", "m", (1e-6, 1e3)))
    transfer_attributes: bool = field(default=True, metadata=meta(
        "samples carry the fused normals, colours and extra channels (copied; after pooling interpolated from "
        "the 3 nearest fused points); false = coordinates only"))
    dsm: bool = field(default=False, metadata=meta(
        "also rasterise the fused cloud top-down: dsm.tif + dsm.json, ortho.png, dsm_hillshade.png"))
    dsm_cell_size: float | None = field(default=None, metadata=meta(
        "DSM/orthophoto cell edge (null = about 4 fused points per cell)", "m", (1e-6, 1e4)))
    dsm_reduce: Literal["max", "mean"] = field(default="max", metadata=meta(
        "DSM value per cell: height of the highest point, or the mean height"))
    dsm_up_axis: Literal["z", "-z", "y", "-y", "x", "-x"] = field(default="z", metadata=meta(
        "world axis pointing up for the DSM (a COLMAP model that is not geo-registered is often -y up)"))


@dataclass(frozen=True)
class PipelineConfig:
    backend: Literal["auto", "cuda", "cpu"] = field(default="auto", metadata=meta(
        "compute backend: auto = CUDA when CuPy and a GPU are usable, else CPU with a warning"))
    max_image_size: int | None = field(default=None, metadata=meta(
        "rescale images so the long side is at most this (null = keep the input size)", "px", (16, 100000)))
    seed: int = field(default=0, metadata=meta(
        "seed of every random draw (PatchMatch initialisation, refinement)", None, (0, 2**31 - 1)))
    load: LoadConfig = field(default_factory=LoadConfig)
    views: ViewsConfig = field(default_factory=ViewsConfig)
    patchmatch: PatchMatchParams = field(default_factory=PatchMatchParams)
    depth: DepthConfig = field(default_factory=DepthConfig)
    fusion: FusionConfig = field(default_factory=FusionConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
