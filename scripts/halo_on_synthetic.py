#!/usr/bin/env python3
"""How fusion's halo filter does on a synthetic scene, against its ground truth (issue #16).

A synthetic scene (`mvs-pipeline synth`) knows which pixels are background (sky or backdrop:
ground-truth depth 0). For a finished run on it, each view's final depth map is loaded the way
fusion loads it (fusion/inputs.load_view: masks, min_texture, min_segment, then the halo) for each
halo setting, and two numbers are counted over all views:

  background kept   pixels with a depth on the background that fusion would still use (the halo
                    and floaters left), and the share of them the halo filter took
  surface taken     pixels on a surface (ground-truth depth > 0) that the halo filter took: what it costs

and for each cloud given with --clouds (default RUN/fused.ply):

  on the sky        fused points that some view sees against its background (floaters:
                    synth/background_points.py), which the ETH3D scores do not see.

    python scripts/halo_on_synthetic.py SCENE RUN [--settings "8:0,8:4,8:6"] [--set fusion.KEY=V ...]
                                        [--clouds A.ply,B.ply]

Each setting is halo_radius:halo_edge; the other fusion keys are the run's config (RUN's
config.resolved.yaml) with any --set.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script from anywhere
from mvs_pipeline.config.loader import load_config  # noqa: E402
from mvs_pipeline.fusion.halo import halo_pixels  # noqa: E402
from mvs_pipeline.fusion.inputs import find_inputs, load_view  # noqa: E402
from mvs_pipeline.io.ply import read_ply  # noqa: E402
from mvs_pipeline.scene.workspace import read_scene  # noqa: E402
from mvs_pipeline.synth.background_points import points_against_background  # noqa: E402
from mvs_pipeline.synth.oracle import gt_depth  # noqa: E402


def count(scene_dir: Path, inputs, fusion_cfg, settings: list[tuple[int, float]]) -> list[dict]:
    """Per (halo_radius, halo_edge) setting, the counts of the module's text over all views. Each
    view is loaded once with the other filters (load_view without the halo); the halo is the
    last filter load_view applies, to the pixels left, so each setting is halo_pixels on those."""
    totals = [{"background_with_depth": 0, "background_kept": 0, "surface_usable": 0, "surface_taken": 0}
              for _ in settings]
    for inp in inputs:
        if inp is None:
            continue
        background = ~(gt_depth(scene_dir / "gt" / "depth", inp) > 0)
        view = load_view(inp, fusion_cfg.min_texture, fusion_cfg.min_segment, fusion_cfg.segment_depth_step, 0)
        usable = (view.depth > 0) & (view.blocked == 0)
        for t, (radius, edge) in zip(totals, settings):
            taken = halo_pixels(view.color, usable, radius, edge)
            t["background_with_depth"] += int(np.count_nonzero(usable & background))
            t["background_kept"] += int(np.count_nonzero(usable & ~taken & background))
            t["surface_usable"] += int(np.count_nonzero(usable & ~background))
            t["surface_taken"] += int(np.count_nonzero(taken & ~background))
    return totals


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scene", type=Path, help="the synthetic scene (with gt/depth)")
    ap.add_argument("run", type=Path, help="the finished run's output folder")
    ap.add_argument("--settings", default="0:0,8:0,8:4,8:6", help="comma-separated halo_radius:halo_edge")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--clouds", default=None, help="comma-separated PLY files (default: RUN/fused.ply)")
    args = ap.parse_args(argv)
    resolved = args.run / "config.resolved.yaml"
    cfg = load_config(str(resolved) if resolved.is_file() else "default", args.overrides)
    scene = read_scene(args.run / "images", args.run / "sparse")
    inputs, map_type = find_inputs(scene, args.run / "stereo", cfg.fusion.map_type, cfg.fusion.mask_dir)
    print(f"{args.scene}: {sum(i is not None for i in inputs)} views, {map_type} maps")
    print("| halo_radius:halo_edge | background pixels with depth kept (share the halo took) | surface pixels taken (share) |")
    print("|---|---|---|")
    settings = [(int(r), float(e)) for r, e in (v.split(":") for v in args.settings.split(","))]
    for (radius, edge), t in zip(settings, count(args.scene, inputs, cfg.fusion, settings)):
        took = 1 - t["background_kept"] / max(t["background_with_depth"], 1)
        print(f"| {radius}:{edge:g} | {t['background_kept']:,} of {t['background_with_depth']:,} ({took:.3f}) | "
              f"{t['surface_taken']:,} of {t['surface_usable']:,} ({t['surface_taken'] / max(t['surface_usable'], 1):.4f}) |")
    clouds = [Path(c) for c in args.clouds.split(",")] if args.clouds else [args.run / "fused.ply"]
    for cloud in clouds:
        if cloud.is_file():
            xyz = read_ply(cloud).xyz.astype(np.float64)
            sky = points_against_background(scene.views, args.scene / "gt" / "depth", xyz)
            print(f"{cloud}: {int(sky.sum()):,} of {len(xyz):,} points on the sky ({sky.mean():.4f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
