"""The `views` stage's parameters (`views/selection.py`): neighbour scores and depth ranges.
(field metadata and what `None` means: mvs_pipeline/field_meta.py)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..field_meta import meta

# `auto` (not None, which means "off"/"keep" elsewhere): resolved from the scene by auto_num_neighbors
# below; config/auto.py records the value and the reason with the run.
DEFAULT_NUM_NEIGHBORS = 10  # the default before `auto` (and the eth3d preset's); every measured scene used it


def auto_num_neighbors(max_candidates: int) -> tuple[int, str]:
    """`views.num_neighbors: auto` from the view graph: (value, reason).

    `max_candidates` is the largest number of source candidates any view has (pairs passing
    min_shared_points and min_triangulation_angle). Selection keeps min(K, candidates) per view, so
    K = min(10, max_candidates) selects exactly what K = 10 selects: the same neighbours and results
    as the former default on every scene (10 views give 9 candidates, 50 views up to 49 -> 10). Ten
    stays the cap because nothing measured shows more sources paying for their linear cost
    (the `quality` preset's 16 is a choice, not a measurement)."""
    k = max(1, min(DEFAULT_NUM_NEIGHBORS, int(max_candidates)))
    if max_candidates < DEFAULT_NUM_NEIGHBORS:
        return k, f"every candidate: no view has more than {max_candidates} source views passing the pair filters"
    return k, f"the cap of {DEFAULT_NUM_NEIGHBORS}: views have up to {max_candidates} candidate source views"


@dataclass(frozen=True)
class ViewsConfig:
    num_neighbors: int | Literal["auto"] = field(default="auto", metadata=meta(
        "source views kept per reference view (auto = min(10, most candidates of any view))", "views", (1, 32)))
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
