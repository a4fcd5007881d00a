#!/usr/bin/env python3
"""Do other views see a surface in front of a fused point, on its reference ray? (issue #37, item 2; a study)

A point behind a wall (the room's far-wall floaters: 47 k of the 107 k off-mesh points of room_seen lie behind the
surface, BENCHMARKS "Floaters against the exact truth") passes fusion's free-space check, which only asks whether
the point lies in front of what a neighbour sees. The converse: every other view's depth-map points are projected
into the point's reference view (a z-buffer per view pair, one pixel each); a view "occludes" the point when its
nearest point on the reference pixel's ray is nearer than the point by more than `--margin` of its depth, i.e. the
reference camera could not have seen the point past that view's surface (or that view is wrong there). Points
occluded by at least k views are dropped and the rest scored (ETH3D @2 cm), beside the normal agreement's
accuracy / F1 trade-off.

    python scripts/occlusion_rule_study.py SCENE RUN [--margin 0.03] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from depth_precision_bound import final_depth_path, pixel_rays  # noqa: E402
from precision_rule_study import load_run, score_drops  # noqa: E402

from mvs_pipeline.io.colmap_maps import read_colmap_array  # noqa: E402


def final_depths(run: Path, scene) -> list[np.ndarray]:
    """Each view's final depth map (geometric, else photometric), NaN where it has none."""
    maps = []
    for view in scene.views:
        path = final_depth_path(run, view)
        if path is None:
            maps.append(np.full((view.height, view.width), np.nan, np.float32))
        else:
            d = read_colmap_array(path)
            maps.append(np.where(d > 0, d, np.nan))
    return maps


def z_buffers(scene, depths: list[np.ndarray], r: int) -> np.ndarray:
    """[views, H, W] the nearest z-depth (in view r) of each view's points that land on each pixel of r (inf: none;
    r's own row stays inf)."""
    ref = scene.views[r]
    out = np.full((scene.num_views, ref.height, ref.width), np.inf)
    for j, view in enumerate(scene.views):
        if j == r:
            continue
        _, _, points = pixel_rays(view, depths[j])
        uv, z = ref.project(points)
        x, y = np.floor(uv[:, 0]).astype(np.int64), np.floor(uv[:, 1]).astype(np.int64)
        inside = (z > 0) & (x >= 0) & (y >= 0) & (x < ref.width) & (y < ref.height)
        flat = out[j].reshape(-1)
        np.minimum.at(flat, y[inside] * ref.width + x[inside], z[inside])
    return out


def occluding_views(scene, depths, xyz: np.ndarray, refs: np.ndarray, margin: float) -> np.ndarray:
    """[N] how many other views see a surface nearer than each point on its reference pixel's ray."""
    count = np.zeros(len(xyz), np.int64)
    for r in np.unique(refs):
        rows = np.flatnonzero(refs == r)
        ref = scene.views[r]
        buffers = z_buffers(scene, depths, r)
        uv, z = ref.project(xyz[rows])
        x = np.clip(np.floor(uv[:, 0]).astype(np.int64), 0, ref.width - 1)
        y = np.clip(np.floor(uv[:, 1]).astype(np.int64), 0, ref.height - 1)
        count[rows] = (buffers[:, y, x] < (z * (1.0 - margin))[None, :]).sum(axis=0)
    return count


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scene", type=Path, help="a folder made by `mvs-pipeline synth` (gt/eth3d/scan_alignment.mlp)")
    ap.add_argument("run", type=Path, help="a run of it (OUT with fused.ply, fused.ply.vis and the final depth maps)")
    ap.add_argument("--margin", type=float, default=0.03, help="share of the point's depth a surface must be nearer")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    scene, cloud, visibility = load_run(args.run)
    refs = np.array([v[0] for v in visibility])
    count = occluding_views(scene, final_depths(args.run, scene), cloud.xyz.astype(np.float64), refs, args.margin)
    print("points by occluding views:", {int(k): int((count == k).sum()) for k in np.unique(count)})
    # dropped with at least k occluding views: attribute count, threshold k - 1
    rows = score_drops(cloud.xyz, args.scene, count.astype(float), [5, 4, 3, 2, 1, 0], "occluding views")
    if args.json:
        args.json.write_text(json.dumps({"margin": args.margin, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
