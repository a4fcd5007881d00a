#!/usr/bin/env python3
"""Where a synthetic scene's run loses accuracy and completeness (issue #16's loop).

For a finished `mvs-pipeline run SCENE -o RUN` on a scene made by `mvs-pipeline synth` (exact
ground truth: gt/depth/*.npy per view and the ETH3D scans), three breakdowns:

  points     fused.ply's points by how many views agreed (fused.ply.vis) and by their depth in
             the reference view: the share within TOL of the scanned surface, among the points
             the scans can judge (the ETH3D classes; unweighted here, the official accuracy
             averages per voxel)
  depth      every view's final depth map against its ground truth, pixels binned by true depth:
             the share with a depth, within TOL, within 1 %
  missed     a sample of the scan points that no fused point covers within TOL, classified by
             what the views had there: seen by fewer than two views (no method can), no view
             whose depth at the point's pixel is within TOL of the true depth there, one such
             view (fusion needs an agreeing neighbour), or two or more (fusion dropped a surface
             the maps had right); the same for covered points
  incidence  the scan points two views see, binned by their best incidence (the smallest angle
             between a seeing view's ray and the true normal, gt/normal): the share covered and
             the share with two or more right views, which tells grazing ground from walls

    python benchmarks/analyse_errors.py SCENE RUN [--tolerance 0.02] [--json out.json]

prints the breakdowns as text tables; --json keeps every number.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script from anywhere
from mvs_pipeline.evaluation.depth_metrics import find_run_depth_maps  # noqa: E402
from mvs_pipeline.evaluation.eth3d import evaluate_eth3d  # noqa: E402
from mvs_pipeline.evaluation.mlp import load_scans  # noqa: E402
from mvs_pipeline.io.colmap_maps import read_depth_map  # noqa: E402
from mvs_pipeline.io.ply import read_ply  # noqa: E402
from mvs_pipeline.io.vis_file import colmap_image_indices, read_vis  # noqa: E402
from mvs_pipeline.scene.workspace import read_scene  # noqa: E402
from mvs_pipeline.synth.oracle import gt_depth, seen_pixels  # noqa: E402

DEPTH_BINS = (0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 15.0, 25.0, np.inf)   # metres (synthetic scenes)
ACCURATE, INACCURATE = 0, 1   # eth3d.classify_accuracy's classes (UNOBSERVED = 2)


def bin_label(lo: float, hi: float) -> str:
    return f"{lo:g}-{hi:g} m" if np.isfinite(hi) else f">{lo:g} m"


def point_breakdown(scene, run: Path, scans, tol: float) -> dict:
    cloud = read_ply(run / "fused.ply")
    xyz = np.asarray(cloud.xyz, np.float64)
    res = evaluate_eth3d(xyz, scans, tolerances=[tol], return_point_results=True)
    pts = res["points"]
    judged = (pts["recon_best_dist2"] <= tol * tol) | pts["recon_front"]
    good = pts["recon_best_dist2"] <= tol * tol
    records = read_vis(run / "fused.ply.vis", len(xyz))   # per point: reference first, then agreeing views
    counts = np.array([len(r) for r in records])
    refs = np.array([int(r[0]) for r in records], np.int64)
    view_of_index = np.argsort(colmap_image_indices([v.image_id for v in scene.views]))  # COLMAP index -> view_idx
    ref_views = view_of_index[refs]
    depth = np.zeros(len(xyz))
    for view_idx in np.unique(ref_views):
        sel = ref_views == view_idx
        depth[sel] = scene.views[view_idx].world_to_cam(xyz[sel])[:, 2]
    out = {"eth3d": {k: res[k][0] for k in ("accuracy", "completeness", "f1")}, "points": len(xyz),
           "judged": int(judged.sum()), "accurate_unweighted": float(good.sum() / max(1, judged.sum())),
           "by_views": [], "by_depth": []}
    for n in range(2, int(counts.max()) + 1):
        sel = judged & ((counts == n) if n < 6 else (counts >= n))
        out["by_views"].append({"views": n if n < 6 else f"{n}+", "points": int(sel.sum()),
                                "accurate": float(good[sel].sum() / max(1, sel.sum()))})
        if n >= 6:
            break
    for lo, hi in zip(DEPTH_BINS[:-1], DEPTH_BINS[1:]):
        sel = judged & (depth >= lo) & (depth < hi)
        if sel.any():
            out["by_depth"].append({"depth": bin_label(lo, hi), "points": int(sel.sum()),
                                    "accurate": float(good[sel].sum() / sel.sum()),
                                    "mean_views": float(counts[sel].mean())})
    return out, pts


def load_maps(scene, run: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    found = find_run_depth_maps(run)
    gt_dir = Path(scene.images_dir).parent / "gt" / "depth"
    ours, truth = [], []
    for v in scene.views:
        ours.append(read_depth_map(found[v.name]) if v.name in found else np.zeros((v.height, v.width), np.float32))
        truth.append(gt_depth(gt_dir, v).astype(np.float64))
    return ours, truth


def depth_breakdown(ours, truth, tol: float) -> list[dict]:
    gt = np.concatenate([t.ravel() for t in truth])
    est = np.concatenate([o.ravel().astype(np.float64) for o in ours])
    valid_gt = np.isfinite(gt) & (gt > 0)
    has = np.isfinite(est) & (est > 0)
    err = np.abs(est - gt)
    rows = []
    for lo, hi in zip(DEPTH_BINS[:-1], DEPTH_BINS[1:]):
        sel = valid_gt & (gt >= lo) & (gt < hi)
        if not sel.any():
            continue
        n = int(sel.sum())
        # relative error with its sign (est - gt) / gt where within 2 %: a bias shows in its median
        near = sel & has & (err <= 0.02 * gt)
        rel = (est[near] - gt[near]) / gt[near]
        q = np.percentile(np.abs(rel), [50, 75, 90]) if len(rel) else [np.nan] * 3
        rows.append({"depth": bin_label(lo, hi), "pixels": n, "with_depth": float((sel & has).sum() / n),
                     "within_tol": float((sel & has & (err <= tol)).sum() / n),
                     "within_1pct": float((sel & has & (err <= 0.01 * gt)).sum() / n),
                     "signed_rel_median": float(np.median(rel)) if len(rel) else float("nan"),
                     "abs_rel_p50_p75_p90": [float(x) for x in q]})
    return rows


def view_counts(scene, ours, truth, points: np.ndarray, tol: float,
                scene_dir: Path | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """([N] views that see each point, [N] of them whose depth at its pixel is within tol of the true depth
    there, [N] the smallest angle in degrees between a seeing view's ray and the true normal (gt/normal of
    scene_dir; 90 where none sees it; None without scene_dir))."""
    seen = np.zeros(len(points), np.int32)
    right = np.zeros(len(points), np.int32)
    best = None if scene_dir is None else np.full(len(points), 90.0)
    for view, est, gt in zip(scene.views, ours, truth):
        visible, rows, cols = seen_pixels(view, gt, points)
        seen += visible
        # right: this view's depth at the pixel within tol of the true depth there (not of the
        # point's own depth: on grazing ground one pixel spans more than 2 cm of depth)
        right += visible & (np.abs(est[rows, cols] - gt[rows, cols]) <= tol)
        if best is None or not visible.any():
            continue
        normals = np.load(scene_dir / "gt" / "normal" / f"{Path(view.name).stem}.npy")
        r, c = rows[visible], cols[visible]
        ray = np.stack([c + 0.5, r + 0.5, np.ones(len(r))], 1) @ np.linalg.inv(view.K).T
        cos = np.abs((normals[r, c] * ray).sum(1)) / np.linalg.norm(ray, axis=1)
        best[visible] = np.minimum(best[visible], np.degrees(np.arccos(np.clip(cos, 0.0, 1.0))))
    return seen, right, best


def classify_scan_points(scene, ours, truth, points: np.ndarray, tol: float) -> dict:
    """Share of `points` in each class: seen by <2 views, 0 / 1 / 2+ views with a depth within tol."""
    seen, right, _ = view_counts(scene, ours, truth, points, tol)
    classes = {"seen_by_fewer_than_2": seen < 2, "no_view_right": (seen >= 2) & (right == 0),
               "one_view_right": (seen >= 2) & (right == 1), "two_or_more_right": (seen >= 2) & (right >= 2)}
    return {k: float(m.sum() / max(1, len(points))) for k, m in classes.items()}


INCIDENCE_BINS = (0.0, 45.0, 60.0, 70.0, 80.0, 90.01)   # degrees


def incidence_breakdown(scene, scene_dir: Path, ours, truth, points: np.ndarray, covered: np.ndarray,
                        tol: float) -> list[dict]:
    """Per best-incidence bin of the `points` two views see: their share of all, the share covered, and the share
    with two or more views right (classify_scan_points' rule)."""
    seen, right, best = view_counts(scene, ours, truth, points, tol, scene_dir)
    rows_out = []
    for lo, hi in zip(INCIDENCE_BINS[:-1], INCIDENCE_BINS[1:]):
        sel = (seen >= 2) & (best >= lo) & (best < hi)
        n = int(sel.sum())
        rows_out.append({"incidence": f"{lo:g}-{min(hi, 90.0):g} deg", "share": n / max(1, len(points)),
                         "covered": float(covered[sel].mean()) if n else float("nan"),
                         "two_or_more_right": float((right[sel] >= 2).mean()) if n else float("nan")})
    return rows_out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scene", type=Path, help="a scene made by `mvs-pipeline synth`")
    ap.add_argument("run", type=Path, help="the output folder of `mvs-pipeline run SCENE -o RUN`")
    ap.add_argument("--tolerance", type=float, default=0.02, help="metres (default 0.02)")
    ap.add_argument("--sample", type=int, default=200_000, help="scan points classified per class (missed, covered)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    tol = args.tolerance
    scene = read_scene(args.scene / "images", args.scene / "sparse" / "0")
    scans = load_scans(args.scene / "gt" / "eth3d" / "scan_alignment.mlp")
    out, pts = point_breakdown(scene, args.run, scans, tol)
    ours, truth = load_maps(scene, args.run)
    out["depth"] = depth_breakdown(ours, truth, tol)
    gt = np.concatenate([s.points_in_world() for s in scans])
    missed = pts["gt_dist2"] > tol * tol
    rng = np.random.default_rng(0)
    out["missed_share"] = float(missed.mean())
    for name, mask in (("missed", missed), ("covered", ~missed)):
        idx = np.flatnonzero(mask)
        idx = rng.choice(idx, min(len(idx), args.sample), replace=False) if len(idx) else idx
        out[name] = classify_scan_points(scene, ours, truth, gt[idx], tol)
    idx = rng.choice(len(gt), min(len(gt), args.sample), replace=False)
    out["incidence"] = incidence_breakdown(scene, args.scene, ours, truth, gt[idx], ~missed[idx], tol)
    print(summary(out, tol))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=float))
    return 0


def summary(out: dict, tol: float) -> str:
    """The breakdowns as short text tables (the JSON holds every number)."""
    cm = f"{tol * 100:g} cm"
    e = out["eth3d"]
    lines = [f"fused.ply: {out['points']:,} points; ETH3D @{cm}: accuracy {e['accuracy']:.4f}, completeness "
             f"{e['completeness']:.4f}, F1 {e['f1']:.4f}; within {cm} (unweighted) {out['accurate_unweighted']:.3f} "
             f"of {out['judged']:,} judged points",
             "points by agreeing views:  " + "  ".join(f"{r['views']}: {r['accurate']:.3f} ({r['points']:,})"
                                                      for r in out["by_views"]),
             "points by depth:           " + "  ".join(f"{r['depth']}: {r['accurate']:.3f}" for r in out["by_depth"]),
             f"depth maps, by true depth: within {cm} / within 1 % / median signed relative error"]
    lines += [f"  {r['depth']:>9}: {r['within_tol']:.3f} / {r['within_1pct']:.3f} / {r['signed_rel_median']:+.2e}"
              for r in out["depth"]]
    for name in ("missed", "covered"):
        share = f" ({out['missed_share']:.3f} of the scan points)" if name == "missed" else ""
        lines.append(f"{name} scan surface{share}: " + ", ".join(f"{k} {v:.3f}" for k, v in out[name].items()))
    lines.append("scan points two views see, by best incidence: share / covered / two or more views right")
    lines += [f"  {r['incidence']:>10}: {r['share']:.3f} / {r['covered']:.3f} / {r['two_or_more_right']:.3f}"
              for r in out["incidence"]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
