"""The `fusion` stage's parameters (`fusion/stage.py`): when neighbouring depth maps agree.
(field metadata and what `None` means: mvs_pipeline/field_meta.py)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..field_meta import meta


@dataclass(frozen=True)
class FusionConfig:
    # Rules in stage.py and cpu.py; the thresholds mean what COLMAP's stereo_fusion options of similar names mean.
    max_reproj_error: float = field(default=2.0, metadata=meta(
        "a neighbour agrees only if its own 3D point reprojects this close to the reference pixel", "px", (0.0, 100.0)))
    max_depth_diff: float = field(default=0.01, metadata=meta(
        "largest |projected depth - neighbour depth| / neighbour depth for agreement", "fraction", (0.0, 1.0)))
    # Defaults chosen by scripts/sweep_fusion.py (BENCHMARKS.md, session 6): one agreeing neighbour,
    # 30 degrees and at most one free-space violation gave the best F1 at 2 cm on every synthetic
    # scene of the quality suite; DTU scan 24 trades 0.5 pp mask precision for coverage.
    max_normal_angle: float = field(default=30.0, metadata=meta(
        "largest angle between the reference and neighbour normals for agreement", "degrees", (0.0, 180.0)))
    min_consistent: int = field(default=1, metadata=meta(
        "neighbours that must agree to keep a point (2 = seen consistently in 3 views)", "views", (1, 32)))
    max_free_space_violations: int | None = field(default=1, metadata=meta(
        "drop a point lying in front of the surface that more than this many neighbours saw through it "
        "(floaters; null = no free-space check)", "views", (0, 32)))
    free_space_margin: float = field(default=0.05, metadata=meta(
        "a point is in front of a neighbour's surface when its depth there is below (1 - margin) * that "
        "neighbour's depth", "fraction", (0.0, 1.0)))
    min_triangulation_angle: float = field(default=0.0, metadata=meta(
        "drop a point unless some agreeing neighbour's ray meets the reference ray at this angle or more "
        "(0 = no check)", "degrees", (0.0, 90.0)))
    min_texture: float = field(default=0.0, metadata=meta(
        "ignore pixels whose 11x11 neighbourhood in the image has a grey-level standard deviation below this "
        "(textureless sky and blank walls, where matching costs are noise; 0 = keep all)", "grey levels 0-255",
        (0.0, 255.0)))
    aggregate: Literal["mean", "median"] = field(default="mean", metadata=meta(
        "how a point's position, normal and colour combine its observations"))
    map_type: Literal["auto", "geometric", "photometric"] = field(default="auto", metadata=meta(
        "which depth/normal maps to fuse; auto = geometric when every view has them, else photometric"))
    mask_dir: str | None = field(default=None, metadata=meta(
        "folder of COLMAP-style masks MASK_DIR/<image name>.png, zero = ignore the pixel (null = no masks)"))
    cache_views: int | None = field(default=None, metadata=meta(
        "views whose maps are kept loaded at once (null = as many as half the free memory holds)", "views",
        (2, 100000)))
