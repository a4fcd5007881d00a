"""View selection: source (neighbour) views and a depth range for every reference view.

Pair score (MVSNet/ACMM-style, like COLMAP's `__auto__` but angle-aware): every sparse point
seen by both views adds G(theta), theta its triangulation angle,
    G = exp(-(theta - theta0)^2 / (2 sigma_below^2))  for theta <= theta0
    G = exp(-(theta - theta0)^2 / (2 sigma_above^2))  for theta >  theta0
so near-zero baselines count little. Pairs with fewer than `min_shared_points` shared points or
whose 75th-percentile angle is below `min_triangulation_angle` are dropped; the top K remain.

Depth range: percentiles of the z-depths of the sparse points a view sees, widened by a
relative margins to [low / (1 + m_near), high * (1 + m_far)]. Views with too few points borrow the union of their neighbours' ranges.

"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from dataclasses import dataclass

import numpy as np

from ..errors import MVSError
from ..scene.scene import Scene
from .pair_stats import PAIR_BUDGET, pair_stats
from .params import ViewsConfig, auto_num_neighbors

log = logging.getLogger(__name__)

# The last view graph computed: (weak reference to its scene, the filter settings, neighbours,
# scores). Resolving `auto` (config/auto.py) and the views stage both need the graph of the same
# scene, and it costs up to ~1 s (views/pair_stats.py).
_last_graph: tuple | None = None


@dataclass
class ViewSelection:
    neighbors: list[list[int]]  # per view_idx: source view_idx, best first
    scores: list[list[float]]  # matching pair scores
    depth_ranges: np.ndarray  # [N, 2] float64 (min, max) z-depth in metres

    def to_json(self, scene: Scene) -> dict:
        return {"views": [
            {"view_idx": i, "image_id": v.image_id, "name": v.name,
             "neighbors": self.neighbors[i], "neighbor_names": [scene.views[j].name for j in self.neighbors[i]],
             "scores": [round(s, 6) for s in self.scores[i]],
             "depth_range": [float(self.depth_ranges[i, 0]), float(self.depth_ranges[i, 1])]}
            for i, v in enumerate(scene.views)]}

    @classmethod
    def from_json(cls, data: dict) -> "ViewSelection":
        views = data["views"]
        return cls([v["neighbors"] for v in views], [v["scores"] for v in views],
                   np.array([v["depth_range"] for v in views], dtype=np.float64).reshape(-1, 2))


def angle_weight(theta: np.ndarray, cfg: ViewsConfig) -> np.ndarray:
    sigma = np.where(theta <= cfg.angle_prior, cfg.sigma_below_prior, cfg.sigma_above_prior)
    return np.exp(-((theta - cfg.angle_prior) ** 2) / (2.0 * sigma**2))


def candidate_pairs(scene: Scene, cfg: ViewsConfig) -> tuple[list[list[int]], list[list[float]]]:
    """Per view_idx: every source passing min_shared_points and min_triangulation_angle (in source
    order) and its pair score; the view graph that num_neighbors (and its `auto`) picks from.
    Fresh lists each call (callers trim them); computed once per scene object and settings."""
    global _last_graph
    filters = dataclasses.replace(cfg, num_neighbors=0)   # everything but the count kept
    if _last_graph is not None and _last_graph[0]() is scene and _last_graph[1] == filters:
        neighbors, scores = _last_graph[2], _last_graph[3]
    else:
        neighbors, scores = _candidate_pairs(scene, cfg)
        _last_graph = (weakref.ref(scene), filters, neighbors, scores)
    return [list(c) for c in neighbors], [list(c) for c in scores]


def _candidate_pairs(scene: Scene, cfg: ViewsConfig) -> tuple[list[list[int]], list[list[float]]]:
    centers = np.stack([v.center for v in scene.views])
    stats = pair_stats(centers, scene.points_in_world, scene.track_offsets, scene.track_view_idx,
                       lambda theta: angle_weight(theta, cfg), cfg.min_triangulation_angle)
    if stats.sampled:
        log.info("view graph: long sparse tracks sampled (more than %d point pairs in all; views/pair_stats.py)",
                 PAIR_BUDGET)
    ok = stats.passing(cfg.min_shared_points)
    neighbors = [np.flatnonzero(row).tolist() for row in ok]
    scores = [stats.score[ref, nbrs].tolist() for ref, nbrs in enumerate(neighbors)]
    return neighbors, scores


def resolved_num_neighbors(cfg: ViewsConfig, candidates: list[list[int]]) -> int:
    """cfg.num_neighbors, or the `auto` rule's value for this view graph (views/params.py)."""
    if cfg.num_neighbors != "auto":
        return cfg.num_neighbors
    return auto_num_neighbors(max((len(c) for c in candidates), default=0))[0]


def select_neighbors(scene: Scene, cfg: ViewsConfig) -> tuple[list[list[int]], list[list[float]]]:
    neighbors, scores = candidate_pairs(scene, cfg)
    keep = resolved_num_neighbors(cfg, neighbors)
    for ref in range(scene.num_views):
        rank = sorted(range(len(neighbors[ref])), key=lambda i: (-scores[ref][i], neighbors[ref][i]))
        rank = rank[:keep]
        neighbors[ref] = [neighbors[ref][i] for i in rank]
        scores[ref] = [scores[ref][i] for i in rank]
    return neighbors, scores


def depth_ranges(scene: Scene, neighbors: list[list[int]], cfg: ViewsConfig) -> np.ndarray:
    n = scene.num_views
    ranges = np.full((n, 2), np.nan)
    weak = []
    lo_pct, hi_pct = cfg.depth_percentiles
    points_of_view = points_by_view(scene)
    for i, view in enumerate(scene.views):
        pts = scene.points_in_world[points_of_view[i]]
        z = view.world_to_cam(pts)[:, 2] if len(pts) else np.zeros(0)
        z = z[z > 0]
        if len(z) < cfg.min_points_for_range:
            weak.append(i)
            continue
        lo, hi = np.percentile(z, [lo_pct, hi_pct])
        ranges[i] = (lo / (1.0 + cfg.depth_margin_near), hi * (1.0 + cfg.depth_margin_far))
    for i in weak:
        borrowed = ranges[[j for j in neighbors[i] if not np.isnan(ranges[j, 0])]]
        name = scene.views[i].name
        if len(borrowed) == 0:
            raise MVSError(f"image '{name}': sees too few sparse points for a depth range and no neighbour has one")
        ranges[i] = (borrowed[:, 0].min(), borrowed[:, 1].max())
        log.warning("image '%s' sees fewer than %d sparse points; depth range %.3g..%.3g m taken from its neighbours",
                    name, cfg.min_points_for_range, *ranges[i])
    return ranges


def select_views(scene: Scene, cfg: ViewsConfig) -> ViewSelection:
    neighbors, scores = select_neighbors(scene, cfg)
    lonely = [scene.views[i].name for i in range(scene.num_views) if not neighbors[i]]
    if lonely:
        log.warning("%d view(s) have no usable source view and will get no depth map: %s",
                    len(lonely), ", ".join(lonely[:5]) + (" ..." if len(lonely) > 5 else ""))
    return ViewSelection(neighbors, scores, depth_ranges(scene, neighbors, cfg))


def points_by_view(scene: Scene) -> list[np.ndarray]:
    """Per view_idx, the indices of the sparse points it observes: one sort of the observations
    (a mask per view was O(views x observations): minutes at 500 views with long tracks)."""
    obs_point = np.repeat(np.arange(len(scene.points_in_world)), scene.track_lengths)
    # a stable sort of 16-bit keys is NumPy's radix sort, linear and 5x faster than that of int32
    keys = scene.track_view_idx.astype(np.uint16) if scene.num_views <= 1 << 16 else scene.track_view_idx
    order = np.argsort(keys, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(scene.track_view_idx, minlength=scene.num_views))])
    return [obs_point[order[bounds[i]:bounds[i + 1]]] for i in range(scene.num_views)]
