#!/usr/bin/env python3
"""How precise must matching be for a synthetic scene's surface to score at 2 cm? (issue #37: check the yardstick)

For every pixel of every view's ground-truth depth map, the point it sees is moved along its viewing ray and
projected into every other view that sees it (oracle.seen_pixels): the number of pixels that view's image
moves per metre of depth is the pixel's depth resolution. The largest over the views (the widest useful
baseline) bounds what any matcher can do: a matching error of e pixels in that view moves the point by
e / (pixels per metre) along the ray, i.e. by that times |ray . normal| off the surface. Printed per scene:
  * the share of pixels whose surface error stays within the tolerance at e pixels (what the accuracy would be
    if every pixel were kept and matched to within e pixels in its best view);
  * the completeness and F1 at the tolerance of the cloud of only those pixels (accuracy 1 by construction)
    against the oracle cloud (every pixel two views see): the most a method that drops its imprecise pixels
    could score at that matching precision.
The best view overstates what PatchMatch gets (its cost mixes the selected sources, and a far wall's best view
may not be among them), so these are upper bounds.
With `--run OUT` (a run of the first scene) the run's final depth maps are read too and each pixel's depth error is
expressed in the same unit, pixels of its best view: the matching error the maps have, to set beside the bounds.

    python scripts/depth_precision_bound.py SCENE [SCENE ...] [--errors 0.1,0.25,0.5,1] [--tolerance 0.02] [--run OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mvs_pipeline.io.colmap_maps import read_colmap_array  # noqa: E402
from mvs_pipeline.scene.workspace import read_scene  # noqa: E402
from mvs_pipeline.synth.oracle import gt_depth, oracle_cloud, seen_pixels  # noqa: E402


def pixel_rays(view, depth: np.ndarray):
    """(valid mask [H, W], camera-frame rays [N, 3] with z = 1, world points [N, 3]) of the pixels with a depth."""
    h, w = depth.shape
    ys, xs = np.mgrid[0:h, 0:w]
    ok = np.isfinite(depth) & (depth > 0)
    pixels = np.stack([xs[ok] + 0.5, ys[ok] + 0.5, np.ones(int(ok.sum()))], -1)
    rays = pixels @ np.linalg.inv(view.K).T
    points = ((rays * depth[ok][:, None].astype(np.float64)) - view.t) @ view.R
    return ok, rays, points


def pixels_per_metre(scene, depths, r: int, rays: np.ndarray, points: np.ndarray, step: float = 1e-3) -> np.ndarray:
    """[N] the largest image motion (px) per metre of z-depth of view r's points over the other views that see
    them (0 where no other view does)."""
    ref = scene.views[r]
    along = rays @ ref.R   # world direction of one metre of z-depth (R^T ray)
    best = np.zeros(len(points))
    for j, view in enumerate(scene.views):
        if j == r:
            continue
        seen, _, _ = seen_pixels(view, depths[j], points)
        if not seen.any():
            continue
        uv0, _ = view.project(points[seen])
        uv1, _ = view.project(points[seen] + step * along[seen])
        rate = np.linalg.norm(uv1 - uv0, axis=1) / step
        best[seen] = np.maximum(best[seen], rate)
    return best


def final_depth_path(run: Path, view) -> Path | None:
    """The run's final depth map of `view`: geometric, else photometric (None: neither)."""
    for kind in ("geometric", "photometric"):
        path = run / "stereo" / "depth_maps" / f"{view.name}.{kind}.bin"
        if path.is_file():
            return path
    return None


def run_errors(run: Path, view, ok: np.ndarray, rate: np.ndarray, keep: np.ndarray, truth: np.ndarray):
    """[M] |estimated - true| z-depth in metres and in pixels of the best view, for view's kept pixels that the
    run's final depth map covers (geometric maps, else photometric)."""
    path = final_depth_path(run, view)
    if path is None:
        return np.zeros(0), np.zeros(0)
    estimate = read_colmap_array(path, channels=1)[ok][keep]
    has = np.isfinite(estimate) & (estimate > 0)
    metres = np.abs(estimate[has] - truth[has])
    return metres, metres * rate[has]


def scene_bound(path: Path, errors: list[float], tolerance: float, run: Path | None = None) -> dict:
    sparse = path / "sparse" / "0" if (path / "sparse" / "0").is_dir() else path / "sparse"
    scene = read_scene(path / "images", sparse)
    depths = [gt_depth(path / "gt" / "depth", v) for v in scene.views]
    oracle = oracle_cloud(scene, path / "gt" / "depth")
    all_points, surface_error_per_px, run_metres, run_pixels = [], [], [], []
    for r, view in enumerate(scene.views):
        ok, rays, points = pixel_rays(view, depths[r])
        normal_path = path / "gt" / "normal" / f"{Path(view.name).stem}.npy"
        rate = pixels_per_metre(scene, depths, r, rays, points)
        if normal_path.is_file():   # camera-frame unit normals: the part of a ray step that leaves the surface
            normals = np.load(normal_path)[ok].astype(np.float64)
            off_surface = np.abs(np.sum(rays * normals, axis=1))
        else:
            off_surface = np.linalg.norm(rays, axis=1)   # along the ray: an overestimate on slanted surfaces
        keep = rate > 0   # seen by another view: stereo can place it at all
        all_points.append(points[keep])
        surface_error_per_px.append(off_surface[keep] / rate[keep])
        if run is not None:
            metres, pixels = run_errors(run, view, ok, rate[keep], keep, depths[r][ok][keep].astype(np.float64))
            run_metres.append(metres)
            run_pixels.append(pixels)
    points = np.concatenate(all_points)
    per_px = np.concatenate(surface_error_per_px)
    result = {"scene": path.name, "views": scene.num_views, "size": [scene.views[0].width, scene.views[0].height],
              "pixels_seen_twice": int(len(points)), "oracle_points": int(len(oracle)),
              "surface_error_per_px_m": {"median": float(np.median(per_px)),
                                          "p75": float(np.percentile(per_px, 75)),
                                          "p90": float(np.percentile(per_px, 90))},
              "by_error": {}}
    if run_pixels and sum(len(p) for p in run_pixels):
        px, m = np.concatenate(run_pixels), np.concatenate(run_metres)
        result["run"] = {"pixels_with_depth": int(len(px)),
                         "depth_error_m": {"median": float(np.median(m)), "p75": float(np.percentile(m, 75))},
                         "error_in_best_view_px": {"median": float(np.median(px)), "p75": float(np.percentile(px, 75)),
                                                   "p90": float(np.percentile(px, 90))},
                         "share_depth_within_tolerance": float(np.mean(m <= tolerance))}
    for e in errors:
        precise = per_px * e <= tolerance
        share = float(precise.mean())
        if precise.any():
            dist, _ = cKDTree(points[precise]).query(oracle, distance_upper_bound=tolerance)
            completeness = float(np.mean(np.isfinite(dist)))
        else:
            completeness = 0.0
        f1 = 2 * completeness / (1 + completeness) if completeness > 0 else 0.0
        result["by_error"][str(e)] = {"share_within_tolerance": round(share, 4),
                                      "drop_imprecise_completeness": round(completeness, 4),
                                      "drop_imprecise_f1": round(f1, 4)}
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenes", nargs="+", type=Path, help="folders made by `mvs-pipeline synth` (gt/depth, gt/normal)")
    ap.add_argument("--errors", default="0.1,0.25,0.5,1", help="matching errors to try, pixels")
    ap.add_argument("--tolerance", type=float, default=0.02, help="metres (ETH3D's 2 cm)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--run", type=Path, default=None, help="a run (OUT) of the first scene: its maps' errors")
    args = ap.parse_args(argv)
    errors = [float(x) for x in args.errors.split(",") if x]
    rows = []
    for i, path in enumerate(args.scenes):
        row = scene_bound(path, errors, args.tolerance, args.run if i == 0 else None)
        rows.append(row)
        med = row["surface_error_per_px_m"]
        print(f"{row['scene']} ({row['views']} x {row['size'][0]}x{row['size'][1]}): surface error a pixel "
              f"median {100 * med['median']:.2f} cm, p75 {100 * med['p75']:.2f}, p90 {100 * med['p90']:.2f}")
        if "run" in row:
            px, m = row["run"]["error_in_best_view_px"], row["run"]["depth_error_m"]
            print(f"  the run's final maps ({row['run']['pixels_with_depth']} pixels): depth error median "
                  f"{100 * m['median']:.2f} cm (within {100 * args.tolerance:.0f} cm: "
                  f"{row['run']['share_depth_within_tolerance']:.3f}); in pixels of the best view median "
                  f"{px['median']:.2f}, p75 {px['p75']:.2f}, p90 {px['p90']:.2f}")
        for e, b in row["by_error"].items():
            print(f"  {e} px: within {100 * args.tolerance:.0f} cm {b['share_within_tolerance']:.3f}; dropping the rest: "
                  f"completeness {b['drop_imprecise_completeness']:.3f}, F1 {b['drop_imprecise_f1']:.3f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
