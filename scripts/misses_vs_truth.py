#!/usr/bin/env python3
"""Where a run's completeness goes, judged with the exact ground truth of a synthetic scene (issue #37).

The completeness side of `floaters_vs_truth.py`: every scan point of the scene (gt/eth3d, in world
coordinates; a seeded sample of --max-points) is judged covered when a fused point lies within the
tolerance of it (per point, not ETH3D's voxels), and each one is joined with what the views knew of it:

  seen        views whose true depth map sees the point (synth/oracle.py's rule)
  incidence   the smallest angle between a seeing view's ray and the true normal (gt/normal), degrees
  map_ok      seeing views whose final depth map (stereo/depth_maps, geometric else photometric) puts the
              surface within the tolerance of the point: |map - true| x |cos incidence| (along the normal)
  map_any     seeing views whose final map has a depth at the point's pixel at all

The missed points then fall into: seen by fewer than two views (no method gets them: the oracle's
share), maps right in two or more views (fusion or its filters dropped them), right in one view only
(fusion needs an agreeing neighbour), maps wrong where they have a depth, and no depth at all. Printed
beside the covered points' shares by best incidence, which tells grazing ground from the rest.

    python scripts/misses_vs_truth.py SCENE RUN [--tolerance 0.02] [--max-points 400000] [--json out.json]

SCENE is `mvs-pipeline synth`'s output, RUN a finished `mvs-pipeline run SCENE -o RUN` (fused.ply and
its final maps).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mvs_pipeline.evaluation.mlp import load_scans  # noqa: E402
from mvs_pipeline.io.colmap_maps import read_colmap_array  # noqa: E402
from mvs_pipeline.io.ply import read_ply  # noqa: E402
from mvs_pipeline.scene.workspace import read_scene  # noqa: E402
from mvs_pipeline.synth.oracle import gt_depth, seen_pixels  # noqa: E402

INCIDENCE_BINS = (0.0, 45.0, 60.0, 70.0, 80.0, 90.01)   # degrees
CATEGORIES = ("seen by < 2 views", "maps right in >= 2 views", "maps right in 1 view", "maps wrong where they have depth",
              "no depth in any seeing view")


def scan_points(scene_dir: Path, max_points: int, seed: int = 0) -> np.ndarray:
    """[N, 3] world points of the scene's scans (a seeded sample of max_points when there are more)."""
    parts = []
    for scan in load_scans(scene_dir / "gt" / "eth3d" / "scan_alignment.mlp"):
        m = scan.world_from_scan
        parts.append(scan.points.astype(np.float64) @ m[:3, :3].T + m[:3, 3])
    points = np.concatenate(parts)
    if len(points) > max_points:
        points = points[np.random.default_rng(seed).choice(len(points), max_points, replace=False)]
    return points


def final_map(run: Path, view) -> np.ndarray | None:
    """The run's final depth map of `view` (geometric, else photometric; None: neither)."""
    for kind in ("geometric", "photometric"):
        path = run / "stereo" / "depth_maps" / f"{view.name}.{kind}.bin"
        if path.is_file():
            return read_colmap_array(path, channels=1)
    return None


def point_table(scene_dir: Path, run: Path, points: np.ndarray, tolerance: float) -> dict:
    """Per scan point: covered, seen, incidence (best), map_ok, map_any."""
    scene = read_scene(run / "images", run / "sparse")
    fused = read_ply(run / "fused.ply").xyz.astype(np.float64)
    covered = cKDTree(fused).query(points, distance_upper_bound=tolerance)[0] <= tolerance
    n = len(points)
    seen, map_ok, map_any = np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n, np.int32)
    incidence = np.full(n, 90.0)
    for view in scene.views:
        truth = gt_depth(scene_dir / "gt" / "depth", view)
        normals = np.load(scene_dir / "gt" / "normal" / f"{Path(view.name).stem}.npy")
        sees, rows, cols = seen_pixels(view, truth, points)
        if not sees.any():
            continue
        r, c = rows[sees], cols[sees]
        ray = np.stack([c + 0.5, r + 0.5, np.ones(len(r))], 1) @ np.linalg.inv(view.K).T
        ray /= np.linalg.norm(ray, axis=1, keepdims=True)
        cos = np.abs((normals[r, c] * ray).sum(1))
        seen[sees] += 1
        incidence[sees] = np.minimum(incidence[sees], np.degrees(np.arccos(np.clip(cos, 0.0, 1.0))))
        estimate = final_map(run, view)
        if estimate is None:
            continue
        z = view.project(points[sees])[1]
        d = estimate[r, c]
        has = np.isfinite(d) & (d > 0)
        map_any[np.flatnonzero(sees)[has]] += 1
        right = has & (np.abs(np.where(has, d, 0.0) - z) * cos <= tolerance)
        map_ok[np.flatnonzero(sees)[right]] += 1
    return {"covered": covered, "seen": seen, "incidence": incidence, "map_ok": map_ok, "map_any": map_any}


def category(t: dict) -> np.ndarray:
    """[N] index into CATEGORIES (the first that applies)."""
    cat = np.full(len(t["seen"]), 4)
    cat[(t["map_any"] > 0) & (t["map_ok"] == 0)] = 3
    cat[t["map_ok"] == 1] = 2
    cat[t["map_ok"] >= 2] = 1
    cat[t["seen"] < 2] = 0
    return cat


def summary(t: dict) -> dict:
    cat, covered, inc = category(t), t["covered"], t["incidence"]
    missed = ~covered
    out = {"points": int(len(covered)), "covered": float(covered.mean()),
           "missed_by_category": {name: float((missed & (cat == k)).mean()) for k, name in enumerate(CATEGORIES)},
           "covered_by_category": {name: float((covered & (cat == k)).mean()) for k, name in enumerate(CATEGORIES)},
           "by_incidence": []}
    for lo, hi in zip(INCIDENCE_BINS[:-1], INCIDENCE_BINS[1:]):
        b = (inc >= lo) & (inc < hi) & (t["seen"] >= 2)
        out["by_incidence"].append({"degrees": [lo, min(hi, 90.0)], "share": float(b.mean()),
                                    "covered": float(covered[b].mean()) if b.any() else None,
                                    "maps_right_2": float((t["map_ok"][b] >= 2).mean()) if b.any() else None})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scene", type=Path)
    ap.add_argument("run", type=Path)
    ap.add_argument("--tolerance", type=float, default=0.02, help="metres")
    ap.add_argument("--max-points", type=int, default=400_000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    points = scan_points(args.scene, args.max_points)
    s = summary(point_table(args.scene, args.run, points, args.tolerance))
    print(f"{s['points']} scan points, covered within {100 * args.tolerance:g} cm: {s['covered']:.3f}")
    print(f"{'category':<36} {'missed':>7} {'covered':>8}")
    for name in CATEGORIES:
        print(f"{name:<36} {s['missed_by_category'][name]:7.3f} {s['covered_by_category'][name]:8.3f}")
    print(f"{'best incidence (seen by >= 2)':<32} {'share':>6} {'covered':>8} {'maps right in >= 2':>19}")
    for row in s["by_incidence"]:
        lo, hi = row["degrees"]
        cov = "-" if row["covered"] is None else f"{row['covered']:.3f}"
        right = "-" if row["maps_right_2"] is None else f"{row['maps_right_2']:.3f}"
        print(f"{lo:4.0f}-{hi:<3.0f} degrees{'':<19} {row['share']:6.3f} {cov:>8} {right:>19}")
    if args.json:
        args.json.write_text(json.dumps(s, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
