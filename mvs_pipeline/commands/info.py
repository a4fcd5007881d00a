"""`mvs-pipeline info WORKSPACE`: cameras, images, points, neighbours and depth ranges as a table."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from ..config.auto import resolve_auto
from ..config.loader import load_config
from ..scene.workspace import detect_layout, read_scene
from ..views.selection import select_views
from .common import add_config_args


def register(sub) -> None:
    p = sub.add_parser("info", help="summarise a COLMAP workspace (no files written)",
                       description="Print cameras, images, sparse points, the neighbour views and depth range "
                                   "that the views stage would choose for every image.")
    p.add_argument("workspace", type=Path)
    p.add_argument("--images", type=Path)
    p.add_argument("--sparse", type=Path)
    add_config_args(p)
    p.set_defaults(func=main)


def format_table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*map(str, r)) for r in rows]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, args.overrides)
    layout = detect_layout(args.workspace, args.images, args.sparse)
    scene = read_scene(layout.images_dir, layout.sparse_dir)
    cfg, resolved = resolve_auto(cfg, scene)  # what `run` would resolve (input images, within max_image_size)
    sel = select_views(scene, cfg.views)
    models = Counter(f"{v.camera_model} {v.width}x{v.height}" for v in scene.views)
    print(f"layout:   {layout.kind}\nimages:   {layout.images_dir}\nmodel:    {layout.sparse_dir}")
    print("cameras:  " + "; ".join(f"{n} x {m}" for m, n in models.items()))
    print(f"views:    {scene.num_views}\npoints:   {len(scene.points_in_world)} "
          f"(mean track length {scene.track_lengths.mean():.2f})")
    for a in resolved:
        print(f"auto:     {a.key} = {a.shown} ({a.reason})")
    print()
    counts = Counter(scene.track_view_idx.tolist())
    rows = []
    for i, v in enumerate(scene.views):
        nbrs = ", ".join(scene.views[j].name for j in sel.neighbors[i][:4])
        more = f" (+{len(sel.neighbors[i]) - 4})" if len(sel.neighbors[i]) > 4 else ""
        lo, hi = sel.depth_ranges[i]
        rows.append([i, v.image_id, v.name, counts.get(i, 0), f"{lo:.3f}-{hi:.3f}", len(sel.neighbors[i]), nbrs + more])
    print(format_table(rows, ["view_idx", "image_id", "name", "points", "depth m", "#src", "sources (best first)"]))
    return 0
