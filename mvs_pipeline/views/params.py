"""The `views` stage's parameters (`views/selection.py`): neighbour scores and depth ranges.
(field metadata and what `None` means: mvs_pipeline/field_meta.py)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..field_meta import meta


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
