#!/usr/bin/env python3
"""Would fusion gain from dropping the points whose geometry makes them imprecise? (issue #37, item 2; a study)

depth_precision_bound.py found that on room_seen at 320x240 one pixel of matching error moves a wall's point by
2.9 cm (median) even in its best view, against 0.5 cm on the object. This asks whether a rule that needs no ground
truth can use that: for each fused point, from its .vis record (the reference view and the views that agreed), how
far its surface moves per pixel of matching error in the agreeing view that resolves its depth best
(|ray . normal| / pixels per metre of the reference's depth, the point's own normal). Points above a threshold
(metres per pixel) are dropped and the rest scored with the ETH3D metric, beside fusion's normal-angle rule's
accuracy / F1 trade-off (BENCHMARKS, "Accuracy against F1 through the normal agreement").

    python scripts/precision_rule_study.py SCENE RUN [--thresholds 0.005,0.01,0.02,0.03,0.05] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mvs_pipeline.evaluation.eth3d import evaluate_eth3d  # noqa: E402
from mvs_pipeline.evaluation.mlp import load_scans  # noqa: E402
from mvs_pipeline.io.ply import read_ply  # noqa: E402
from mvs_pipeline.io.vis_file import colmap_image_indices, read_vis  # noqa: E402
from mvs_pipeline.scene.workspace import read_scene  # noqa: E402


def surface_error_per_pixel(scene, xyz: np.ndarray, normals: np.ndarray, visibility: list[np.ndarray],
                            step: float = 1e-3, best_view: np.ndarray | None = None) -> np.ndarray:
    """[N] metres off the surface per pixel of matching error, in the agreeing view that resolves each point's
    depth along its reference ray best (inf for a point no other view agreed on). visibility: .vis records' view
    lists as view_idx (reference first). `best_view` (optional, [N] ints) receives that view (-1: none)."""
    out = np.full(len(xyz), np.inf)
    if best_view is not None:
        best_view[:] = -1
    refs = np.array([v[0] for v in visibility])
    agree = np.zeros((len(xyz), scene.num_views), bool)   # point i, view j agreed (the reference not counted)
    for i, v in enumerate(visibility):
        agree[i, v[1:]] = True
    for r in np.unique(refs):
        rows = np.flatnonzero(refs == r)
        ref = scene.views[r]
        cam = ref.world_to_cam(xyz[rows])
        along = (cam / cam[:, 2:3]) @ ref.R   # world direction of one metre of the reference's z-depth
        off_surface = np.abs(np.sum(along * normals[rows], axis=1))
        best = np.zeros(len(rows))
        for j in range(scene.num_views):
            has = agree[rows, j]
            if j == r or not has.any():
                continue
            view = scene.views[j]
            uv0, _ = view.project(xyz[rows[has]])
            uv1, _ = view.project(xyz[rows[has]] + step * along[has])
            rate = np.linalg.norm(uv1 - uv0, axis=1) / step
            if best_view is not None:
                best_view[rows[has][rate > best[has]]] = j
            best[has] = np.maximum(best[has], rate)
        with np.errstate(divide="ignore"):
            out[rows] = np.where(best > 0, off_surface / best, np.inf)
    return out


def epipolar_texture(scene, images_dir: Path, xyz: np.ndarray, refs: np.ndarray, best_view: np.ndarray,
                     radius: int = 5, step: float = 1e-3) -> np.ndarray:
    """[N] grey-level gradient energy along the epipolar line of each point's best view, summed over the
    reference image's (2 radius + 1)^2 window around the point's pixel (the Lucas-Kanade precision of a match along
    that line: its disparity variance is the image noise's over this), grey levels 0..1. 0 where no view agreed."""
    import cv2  # noqa: PLC0415

    out = np.zeros(len(xyz))
    size = 2 * radius + 1
    for r in np.unique(refs):
        view = scene.views[r]
        grey = cv2.imread(str(images_dir / view.name), cv2.IMREAD_GRAYSCALE).astype(np.float32) / 255.0
        gx = cv2.Sobel(grey, cv2.CV_32F, 1, 0, ksize=3) / 8.0
        gy = cv2.Sobel(grey, cv2.CV_32F, 0, 1, ksize=3) / 8.0
        sums = {k: cv2.boxFilter(a, -1, (size, size), normalize=False, borderType=cv2.BORDER_REPLICATE)
                for k, a in (("xx", gx * gx), ("xy", gx * gy), ("yy", gy * gy))}
        rows = np.flatnonzero((refs == r) & (best_view >= 0))
        if not len(rows):
            continue
        uv, _ = view.project(xyz[rows])
        centres = np.stack([v.center for v in scene.views])[best_view[rows]]
        uv_toward, _ = view.project(xyz[rows] + step * (centres - xyz[rows]))   # the epipolar line's direction
        e = uv_toward - uv
        e /= np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
        x = np.clip(np.round(uv[:, 0]).astype(int), 0, grey.shape[1] - 1)
        y = np.clip(np.round(uv[:, 1]).astype(int), 0, grey.shape[0] - 1)
        out[rows] = (e[:, 0] ** 2 * sums["xx"][y, x] + 2 * e[:, 0] * e[:, 1] * sums["xy"][y, x]
                     + e[:, 1] ** 2 * sums["yy"][y, x])
    return out


def load_run(run: Path):
    """(scene, fused cloud, each point's views as view_idx with its reference first) of a run's folder."""
    sparse = run / "sparse"
    scene = read_scene(run / "images", sparse / "0" if (sparse / "0").is_dir() else sparse)
    cloud = read_ply(run / "fused.ply")
    records = read_vis(run / "fused.ply.vis", len(cloud.xyz))
    # .vis names COLMAP image indices (the rank of image_id); back to view_idx
    to_view = np.argsort(colmap_image_indices([v.image_id for v in scene.views]))
    return scene, cloud, [to_view[np.asarray(r, np.int64)] for r in records]


def score_drops(xyz: np.ndarray, scene_dir: Path, attribute: np.ndarray, thresholds: list[float], name: str) -> list[dict]:
    """ETH3D @2 cm of the points whose `attribute` is at most each threshold (inf first: every point), printed."""
    scans = load_scans(scene_dir / "gt" / "eth3d" / "scan_alignment.mlp")
    rows = []
    for threshold in [float("inf"), *thresholds]:
        keep = attribute <= threshold
        scores = evaluate_eth3d(xyz[keep], scans, [0.02], backend="cpu")
        row = {"threshold": threshold, "points": int(keep.sum()),
               "accuracy": round(scores["accuracy"][0], 4), "completeness": round(scores["completeness"][0], 4),
               "f1": round(scores["f1"][0], 4)}
        rows.append(row)
        print(f"threshold {threshold:g} ({name}): {row['points']} points, accuracy {row['accuracy']:.3f}, "
              f"completeness {row['completeness']:.3f}, F1 {row['f1']:.3f}", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scene", type=Path, help="a folder made by `mvs-pipeline synth` (gt/eth3d/scan_alignment.mlp)")
    ap.add_argument("run", type=Path, help="a run of it (OUT with fused.ply and fused.ply.vis)")
    ap.add_argument("--thresholds", default="0.005,0.0075,0.01,0.015,0.02,0.03,0.05",
                    help="metres of surface per pixel of matching error above which a point is dropped")
    ap.add_argument("--attribute", choices=("geometry", "epipolar", "texture"), default="geometry",
                    help="geometry = metres of surface a pixel of matching error (above); epipolar = that over the "
                         "square root of the reference window's grey-level gradient energy along the best view's "
                         "epipolar line (a predicted surface error); texture = that energy alone")
    ap.add_argument("--drop-shares", default=None, help="instead of --thresholds: drop these shares of the points "
                                                         "with the largest attribute, e.g. 0.1,0.2,0.4")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    scene, cloud, visibility = load_run(args.run)
    best_view = np.full(len(cloud.xyz), -1)
    error = surface_error_per_pixel(scene, cloud.xyz.astype(np.float64), cloud.normals.astype(np.float64), visibility,
                                    best_view=best_view)
    if args.attribute == "epipolar":   # predicted surface error: metres a pixel / sqrt(epipolar gradient energy)
        texture = epipolar_texture(scene, args.run / "images", cloud.xyz.astype(np.float64),
                                   np.array([v[0] for v in visibility]), best_view)
        with np.errstate(divide="ignore", invalid="ignore"):
            error = np.where(texture > 0, error / np.sqrt(texture), np.inf)
    elif args.attribute == "texture":   # the epipolar gradient energy alone (low = ambiguous): dropped below
        texture = epipolar_texture(scene, args.run / "images", cloud.xyz.astype(np.float64),
                                   np.array([v[0] for v in visibility]), best_view)
        with np.errstate(divide="ignore"):
            error = np.where(texture > 0, 1.0 / texture, np.inf)
    thresholds = [float(t) for t in args.thresholds.split(",") if t]
    if args.drop_shares:   # thresholds at these shares of the points dropped (the attribute's own scale)
        finite = np.sort(error[np.isfinite(error)])
        thresholds = [float(finite[int((1 - float(q)) * (len(finite) - 1))]) for q in args.drop_shares.split(",")]
    rows = score_drops(cloud.xyz, args.scene, error, thresholds, args.attribute)
    print(f"surface error a pixel of the fused points: median {100 * np.median(error[np.isfinite(error)]):.2f} cm")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
