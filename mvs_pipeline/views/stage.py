"""The `views` stage: select source views (selection.py) and write them where MVS tools look.

Outputs in OUT/stereo/ (all written atomically):
    views.json       our record: per view_idx the image name/id, neighbours, scores, depth range
    pair.txt         MVSNet format, indices are view_idx (views sorted by image name)
    patch-match.cfg  COLMAP format: image name, then a line of comma-separated source names
    fusion.cfg       COLMAP format (as image_undistorter writes it): one image name per line, the
                     views with sources, i.e. those the depth stage makes maps for; COLMAP's
                     stereo_fusion reads it and skips a listed image without maps, with a warning
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..errors import MVSError
from ..io.atomic import atomic_write_text
from ..scene.scene import Scene
from .params import ViewsConfig
from .selection import ViewSelection, select_views

log = logging.getLogger(__name__)


def format_pair_txt(sel: ViewSelection) -> str:
    lines = [str(len(sel.neighbors))]
    for ref, (nbrs, scores) in enumerate(zip(sel.neighbors, sel.scores)):
        lines.append(str(ref))
        lines.append(" ".join([str(len(nbrs))] + [f"{j} {s:.9g}" for j, s in zip(nbrs, scores)]))
    return "\n".join(lines) + "\n"


def parse_pair_txt(text: str) -> tuple[list[list[int]], list[list[float]]]:
    tokens = text.split()
    n = int(tokens[0])
    pos = 1
    neighbors, scores = [[] for _ in range(n)], [[] for _ in range(n)]
    for _ in range(n):
        ref, k = int(tokens[pos]), int(tokens[pos + 1])
        pos += 2
        for _ in range(k):
            neighbors[ref].append(int(tokens[pos]))
            scores[ref].append(float(tokens[pos + 1]))
            pos += 2
    return neighbors, scores


def format_patch_match_cfg(scene: Scene, sel: ViewSelection) -> str:
    lines = []
    for ref, nbrs in enumerate(sel.neighbors):
        lines.append(scene.views[ref].name)
        lines.append(", ".join(scene.views[j].name for j in nbrs) if nbrs else "__auto__, 0")
    return "\n".join(lines) + "\n"


def format_fusion_cfg(scene: Scene, sel: ViewSelection) -> str:
    return "".join(f"{scene.views[ref].name}\n" for ref, nbrs in enumerate(sel.neighbors) if nbrs)


def read_views_json(record: Path, scene: Scene) -> ViewSelection:
    """The selection a finished views stage wrote; a damaged record raises naming it."""
    n = scene.num_views
    try:
        sel = ViewSelection.from_json(json.loads(record.read_text()))
        matches = len(sel.neighbors) == n and all(0 <= j < n for nbrs in sel.neighbors for j in nbrs)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise MVSError(f"{record}: not a complete views record ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
                       f"delete it or rerun with --overwrite") from exc
    if not matches:
        raise MVSError(f"{record}: lists {len(sel.neighbors)} views with neighbours that do not match the "
                       f"{n} views of {scene.sparse_dir}; delete it or rerun with --overwrite")
    return sel


def select_and_write(cfg: ViewsConfig, scene: Scene, out_dir: Path, overwrite: bool = False) -> ViewSelection:
    """Select views and write stereo/{views.json,pair.txt,patch-match.cfg,fusion.cfg}; skip if present."""
    stereo = Path(out_dir) / "stereo"
    record = stereo / "views.json"
    if record.is_file() and not overwrite:
        log.info("views: %s exists; skipping (use --overwrite to redo)", record)
        sel = read_views_json(record, scene)
        if not (stereo / "fusion.cfg").is_file():  # folders made before fusion.cfg was written
            atomic_write_text(stereo / "fusion.cfg", format_fusion_cfg(scene, sel))
        return sel
    sel = select_views(scene, cfg)
    atomic_write_text(stereo / "pair.txt", format_pair_txt(sel))
    atomic_write_text(stereo / "patch-match.cfg", format_patch_match_cfg(scene, sel))
    atomic_write_text(stereo / "fusion.cfg", format_fusion_cfg(scene, sel))
    atomic_write_text(record, json.dumps(sel.to_json(scene), indent=1))  # last: marks the stage done
    return sel


def run(ctx) -> None:
    """The pipeline's `views` stage: `ctx` is pipeline.RunContext."""
    ctx.selection = select_and_write(ctx.cfg.views, ctx.require_scene(), ctx.out_dir, overwrite=ctx.overwrite)
    ctx.counts["views_with_sources"] = sum(1 for n in ctx.selection.neighbors if n)
