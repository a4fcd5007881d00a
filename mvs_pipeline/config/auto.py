"""`auto` config values resolved from the scene: one call, before any stage reads them.

Each key's rule lives beside its field in the stage's params.py (the stage applies the same rule
when called directly with `auto`); this module gathers the numbers the rules need from the scene
and its view graph, and returns the resolved config with one (key, value, reason) per resolved key.
The pipeline puts those into the log, config.resolved.yaml and run.json, and the fingerprints see
only resolved values, so a resolved value that changes redoes its stage like an edited key; an
explicit value that equals the resolved one redoes nothing.

The rules (the why is in each params.py):
- views.num_neighbors: min(10, the most candidate source views any view has);
- depth.coarsest_max_size: 120 px for images up to 640 px (4 scales at 640 px, 3 at 320 px), else
  1000 (as before);
- depth.filter_median: off for images up to 640 px, on above;
- fusion.min_consistent: 1 per 4 other views seeing a region (median track length - 1, at most
  num_neighbors), at least 1;
- fusion.consume_pixels: false (every view keeps its consistent pixels) up to 32 Mpx of images in
  all, else true;
- fusion.max_normal_angle: 20 degrees up to a 320 px median focal length, 10 from 512 px, linear between;
- fusion.weak_plane_tolerance: 0.03 x 256 / the views' median focal length in px, within 0.01..0.03;
- fusion.weak_plane_consensus: on up to a 320 px median focal length, else off;
- mesh.closed: true with mesh.method poisson and object silhouettes (fusion.mask_silhouettes with a
  fusion.mask_dir), else false (from the config alone, resolved here so that it is recorded like the others).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from ..depth.params import auto_coarsest_max_size, auto_filter_median
from ..fusion.params import (auto_consume_pixels, auto_max_normal_angle, auto_min_consistent,
                             auto_weak_plane_consensus, auto_weak_plane_tolerance)
from ..io.image_size import median_focal_px, pixels_in_all
from ..mesh.params import auto_closed
from ..scene.scene import Scene
from ..views.params import auto_num_neighbors
from ..views.selection import candidate_pairs
from .schema import PipelineConfig

AUTO_KEYS = ("views.num_neighbors", "depth.coarsest_max_size", "depth.filter_median", "fusion.min_consistent",
             "fusion.consume_pixels", "fusion.max_normal_angle", "fusion.weak_plane_tolerance",
             "fusion.weak_plane_consensus", "mesh.closed")


@dataclass(frozen=True)
class AutoValue:
    key: str  # dotted, as in the YAML
    value: int | float | bool
    reason: str

    @property
    def shown(self) -> str:
        """The value as the YAML and run.json spell it (false, not False)."""
        return json.dumps(self.value)


def long_side(cfg: PipelineConfig, scene: Scene) -> int:
    """The largest image's long side in px, as the depth stage will see it: the prepared scene is
    already within max_image_size; an input workspace (`info`) is capped here the same way."""
    side = max(max(v.width, v.height) for v in scene.views)
    return min(side, cfg.max_image_size) if cfg.max_image_size is not None else side


def resolve_auto(cfg: PipelineConfig, scene: Scene) -> tuple[PipelineConfig, list[AutoValue]]:
    """cfg with every `auto` of AUTO_KEYS replaced by its value for `scene`, and what was resolved."""
    resolved: list[AutoValue] = []
    views, depth, fusion, mesh = cfg.views, cfg.depth, cfg.fusion, cfg.mesh
    most_candidates = None
    if views.num_neighbors == "auto" or fusion.min_consistent == "auto":
        candidates, _ = candidate_pairs(scene, views)  # the view graph: pairs passing the views filters
        most_candidates = max((len(c) for c in candidates), default=0)
    if views.num_neighbors == "auto":
        value, reason = auto_num_neighbors(most_candidates)
        views = dataclasses.replace(views, num_neighbors=value)
        resolved.append(AutoValue("views.num_neighbors", value, reason))
    if depth.coarsest_max_size == "auto":
        value, reason = auto_coarsest_max_size(long_side(cfg, scene))
        depth = dataclasses.replace(depth, coarsest_max_size=value)
        resolved.append(AutoValue("depth.coarsest_max_size", value, reason))
    if depth.filter_median == "auto":
        value, reason = auto_filter_median(long_side(cfg, scene))
        depth = dataclasses.replace(depth, filter_median=value)
        resolved.append(AutoValue("depth.filter_median", value, reason))
    if fusion.min_consistent == "auto":
        # the most sources a reference view gets, as the fusion stage counts them (views.json)
        most_sources = min(views.num_neighbors, most_candidates)
        value, reason = auto_min_consistent(scene.views_per_observation(), most_sources)
        fusion = dataclasses.replace(fusion, min_consistent=value)
        resolved.append(AutoValue("fusion.min_consistent", value, reason))
    if fusion.consume_pixels == "auto":
        # as the depth stage will see them: an input workspace (`info`) rescaled by the load stage's rule
        value, reason = auto_consume_pixels(pixels_in_all(scene.views, cfg.max_image_size))
        fusion = dataclasses.replace(fusion, consume_pixels=value)
        resolved.append(AutoValue("fusion.consume_pixels", value, reason))
    if "auto" in (fusion.max_normal_angle, fusion.weak_plane_tolerance, fusion.weak_plane_consensus):
        # as the depth stage will see them: an input workspace (`info`) rescaled by the load stage's rule
        focal = median_focal_px(scene.views, cfg.max_image_size)
    if fusion.max_normal_angle == "auto":
        value, reason = auto_max_normal_angle(focal)
        fusion = dataclasses.replace(fusion, max_normal_angle=value)
        resolved.append(AutoValue("fusion.max_normal_angle", value, reason))
    if fusion.weak_plane_tolerance == "auto":
        value, reason = auto_weak_plane_tolerance(focal)
        fusion = dataclasses.replace(fusion, weak_plane_tolerance=value)
        resolved.append(AutoValue("fusion.weak_plane_tolerance", value, reason))
    if fusion.weak_plane_consensus == "auto":
        value, reason = auto_weak_plane_consensus(focal)
        fusion = dataclasses.replace(fusion, weak_plane_consensus=value)
        resolved.append(AutoValue("fusion.weak_plane_consensus", value, reason))
    if mesh.closed == "auto":
        value, reason = auto_closed(mesh.method, fusion.silhouettes)
        mesh = dataclasses.replace(mesh, closed=value)
        resolved.append(AutoValue("mesh.closed", value, reason))
    return dataclasses.replace(cfg, views=views, depth=depth, fusion=fusion, mesh=mesh), resolved


def unresolved_keys(cfg: PipelineConfig) -> list[str]:
    """The AUTO_KEYS still `auto` in cfg (the fingerprints refuse to record those)."""
    out = []
    for dotted in AUTO_KEYS:
        section, key = dotted.split(".")
        if getattr(getattr(cfg, section), key) == "auto":
            out.append(dotted)
    return out


def annotate_yaml(text: str, resolved: list[AutoValue]) -> str:
    """config.resolved.yaml's text (loader.dump_config) with `# auto: reason` after each resolved
    key and a header listing them, so the file says which values were chosen and why."""
    notes = {a.key: a for a in resolved}
    lines, section = [], ""
    for line in text.splitlines():
        if line and not line.startswith(" "):
            section = line.split(":", 1)[0]
        elif line.startswith("  ") and not line.startswith("   ") and ":" in line:
            dotted = f"{section}.{line.strip().split(':', 1)[0]}"
            if dotted in notes:
                line += f"  # auto: {notes[dotted].reason}"
        lines.append(line)
    head = [f"# auto: {a.key} = {a.shown} ({a.reason})" for a in resolved]
    return "\n".join(head + lines) + "\n"


def notes_resolved_in(text: str) -> list[AutoValue]:
    """The AutoValues a config.resolved.yaml's header (annotate_yaml) records, in its order: what a later
    command on the run (`mesh OUT`) keeps saying about the values it reads pinned from that file."""
    prefix, notes = "# auto: ", []
    for line in text.splitlines():
        if not (line.startswith(prefix) and " = " in line and line.endswith(")") and " (" in line):
            continue
        key, rest = line[len(prefix):].split(" = ", 1)
        shown, reason = rest.split(" (", 1)
        try:
            value = json.loads(shown)
        except ValueError:
            continue
        notes.append(AutoValue(key, value, reason[:-1]))
    return notes
