"""The `evaluate` stage's parameters (`evaluation/stage.py`): ETH3D metric and report.
(field metadata and what `None` means: mvs_pipeline/field_meta.py)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..field_meta import meta


@dataclass(frozen=True)
class EvaluateConfig:
    # The ETH3D metric's parameters default to the official evaluator's (eth3d.py).
    tolerances: tuple[float, ...] = field(default=(0.01, 0.02, 0.05, 0.1, 0.2, 0.5), metadata=meta(
        "ETH3D distance tolerances scored (accuracy, completeness, F1 each)", "m", (0.0, 100.0)))
    voxel_size: float = field(default=0.01, metadata=meta(
        "voxel cell size of the ETH3D score weighting (each occupied cell weighs the same)", "m", (1e-4, 100.0)))
    beam_start_radius: float = field(default=0.001125, metadata=meta(
        "laser beam radius at the scanner, for the free-space (inaccurate) test", "m", (0.0, 1.0)))
    beam_divergence_deg: float = field(default=0.011, metadata=meta(
        "laser beam divergence half-angle", "degrees", (0.0, 10.0)))
    clouds: tuple[str, ...] = field(default=("fused", "fused_fps", "mesh"), metadata=meta(
        "clouds of the run folder scored against the GT (OUT/<name>.ply; missing ones are skipped; a PLY with "
        "faces, such as the mesh stage's mesh.ply, is scored by points sampled uniformly on its surface)"))
    mesh_sample_spacing: float = field(default=0.0025, metadata=meta(
        "a mesh is scored by points sampled uniformly on its surface, 1 / spacing^2 per unit^2 (mean spacing; "
        "a quarter of the smallest default tolerance)", "m", (1e-5, 10.0)))
    mesh_max_samples: int = field(default=20_000_000, metadata=meta(
        "cap on the points sampled on a mesh (the density is lowered to fit and the scores' notes say so)",
        "points", (1000, 2**31 - 1)))
    write_clouds: bool = field(default=False, metadata=meta(
        "also write coloured complete/accurate/inaccurate/unobserved clouds per tolerance to OUT/eval/"))
    mask_dir: str | None = field(default=None, metadata=meta(
        "object masks MASK_DIR/<image name>.png (non-zero = object; the run's image sizes, or the input images' "
        "when max_image_size rescaled them): score the clouds' "
        "mask precision and coverage into OUT/eval/masks_<cloud>.json (null = no mask metrics)"))
    depth_metrics: bool = field(default=True, metadata=meta(
        "compare depth maps with GT depth maps when the workspace has them (gt/depth, ground_truth_depth)"))
    # Decided by measurement (issue #36): a second reader beside fusion slowed fusion more than it saved
    # when it shared CuPy's default stream (d96d387, reverted); now on a stream of its own (depth_job.py).
    depth_metrics_early: bool = field(default=True, metadata=meta(
        "on the GPU without a --gpu-memory budget: compare the depth maps with GT in a thread as soon as the "
        "depth stage ends, beside fusion and sampling (the same numbers; false = in the evaluate stage)"))
    # Full-size error images of every view cost more than the metrics at ETH3D size (issue 21).
    error_images: Literal["previews", "all"] = field(default="previews", metadata=meta(
        "depth error images in OUT/eval/depth_errors/: previews = the report's previewed views "
        "(report_max_views), at most 1600 px wide; all = every view at full size"))
    report: bool = field(default=True, metadata=meta("write OUT/report.html and OUT/report.json at the end"))
    report_max_views: int = field(default=12, metadata=meta(
        "views shown with depth/normal/cost previews in the report", "views", (0, 10000)))
    report_render_points: int = field(default=100000, metadata=meta(
        "points drawn per cloud render in the report (random subsample)", "points", (1000, 10000000)))

    def check(self) -> list[str]:
        return [] if self.tolerances else ["tolerances must list at least one distance"]
