#!/usr/bin/env python3
"""Would planes fitted to image segments fix the walls' depths? (issue #37, item 2; a study)

The room's floaters are gross matching errors near weakly textured walls (p75 1.7 px, p90 11.5 px of its best
view; BENCHMARKS, "How precise must the matching be?"), which neither texture nor geometry predicts per pixel.
A wall is a plane over a region of one colour: this segments each reference image (scikit-image's Felzenszwalb),
fits per segment a plane to the final depth map robustly (RANSAC on inverse depth, which is affine in the pixel
for a plane), and where most of the segment's depths lie on it (`--min-inliers`), sets its inliers' depths and
normals to the plane's (`snap`) and/or removes its outliers (`drop`). The maps are written into a copy of the run,
fused again there (`run --stages fusion --overwrite`) and scored with ETH3D @2 cm.

    python scripts/plane_snap_study.py SCENE RUN COPY [--mode snap|drop|both] [--tol 0.03] [--min-inliers 0.6]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mvs_pipeline.evaluation.eth3d import evaluate_eth3d  # noqa: E402
from mvs_pipeline.evaluation.mlp import load_scans  # noqa: E402
from mvs_pipeline.fusion.inputs import local_grey_std  # noqa: E402
from mvs_pipeline.io.colmap_maps import read_depth_map, read_normal_map, write_depth_map, write_normal_map  # noqa: E402
from mvs_pipeline.io.ply import read_ply  # noqa: E402
from mvs_pipeline.scene.workspace import read_scene  # noqa: E402


def fit_inverse_depth_plane(u, v, d, tol: float, rng, iterations: int = 200):
    """(coefficients [3] of 1/d = a u + b v + c, inlier mask) of the best RANSAC plane, refitted on its
    inliers; inliers: |d - d_plane| <= tol * d."""
    inv = 1.0 / d
    design = np.stack([u, v, np.ones_like(u)], axis=1)
    best, best_count = None, -1
    for _ in range(iterations):
        pick = rng.choice(len(d), 3, replace=False)
        try:
            coef = np.linalg.solve(design[pick], inv[pick])
        except np.linalg.LinAlgError:
            continue
        plane = design @ coef
        inl = (plane > 0) & (np.abs(d - 1.0 / np.maximum(plane, 1e-12)) <= tol * d)
        if inl.sum() > best_count:
            best, best_count = inl, int(inl.sum())
    if best is None or best_count < 3:
        return None, None
    coef, *_ = np.linalg.lstsq(design[best], inv[best], rcond=None)
    plane = design @ coef
    inl = (plane > 0) & (np.abs(d - 1.0 / np.maximum(plane, 1e-12)) <= tol * d)
    return coef, inl


def snap_view(depth, normal, image, K, args, rng) -> dict:
    from skimage.segmentation import felzenszwalb  # noqa: PLC0415

    labels = felzenszwalb(image[:, :, ::-1], scale=args.scale, sigma=0.8, min_size=args.min_size)
    texture = local_grey_std(image) if np.isfinite(args.max_texture) else None
    h, w = depth.shape
    vv, uu = np.mgrid[0:h, 0:w]
    stats = {"segments": 0, "snapped": 0, "dropped": 0}
    k_t = K.T   # 1/z = c . K X / z on the plane, so its normal is K^T c
    for lab in np.unique(labels):
        px = (labels == lab) & (depth > 0)
        if px.sum() < args.min_pixels:
            continue
        u, v, d = uu[px].astype(np.float64), vv[px].astype(np.float64), depth[px].astype(np.float64)
        coef, inl = fit_inverse_depth_plane(u, v, d, args.tol, rng)
        if coef is None or inl.mean() < args.min_inliers:
            continue
        ys, xs = vv[px], uu[px]
        if texture is not None and float(np.median(texture[ys, xs])) >= args.max_texture:
            continue
        n = k_t @ coef   # n . X = 1 on the plane, X in camera coordinates
        n = n / np.linalg.norm(n)
        n = -n if n[2] > 0 else n   # facing the camera, as the maps' normals do
        cos = np.clip(normal[ys[inl], xs[inl]] @ n, -1.0, 1.0)
        if np.degrees(np.arccos(np.median(cos))) > args.max_normal_angle:   # the map's own normals: a curved patch
            continue
        stats["segments"] += 1
        if args.mode in ("snap", "both"):
            depth[ys[inl], xs[inl]] = (1.0 / (np.stack([u, v, np.ones_like(u)], 1)[inl] @ coef)).astype(np.float32)
            normal[ys[inl], xs[inl]] = n.astype(np.float32)
            stats["snapped"] += int(inl.sum())
        if args.mode in ("drop", "both"):
            depth[ys[~inl], xs[~inl]] = 0.0
            normal[ys[~inl], xs[~inl]] = 0.0
            stats["dropped"] += int((~inl).sum())
    return stats


def main(argv=None) -> int:
    import cv2  # noqa: PLC0415

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scene", type=Path)
    ap.add_argument("run", type=Path)
    ap.add_argument("copy", type=Path)
    ap.add_argument("--mode", choices=("snap", "drop", "both"), default="snap")
    ap.add_argument("--tol", type=float, default=0.03, help="inlier: depth within this fraction of the plane's")
    ap.add_argument("--min-inliers", type=float, default=0.6, help="share of a segment's depths on its plane")
    ap.add_argument("--min-pixels", type=int, default=200, help="segments with fewer depths are left alone")
    ap.add_argument("--scale", type=float, default=200.0, help="Felzenszwalb's scale (larger: larger segments)")
    ap.add_argument("--min-size", type=int, default=100, help="Felzenszwalb's smallest segment, px")
    ap.add_argument("--max-texture", type=float, default=float("inf"),
                    help="only segments whose median 11x11 grey-level std is below this (weak texture)")
    ap.add_argument("--max-normal-angle", type=float, default=180.0,
                    help="only segments whose inliers' map normals lie within this many degrees of the plane's (median)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for the fusion run (repeatable), e.g. fusion.max_normal_angle=10")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.copy.exists():
        shutil.rmtree(args.copy)
    shutil.copytree(args.run, args.copy)
    sparse = args.copy / "sparse"
    scene = read_scene(args.copy / "images", sparse / "0" if (sparse / "0").is_dir() else sparse)
    stereo = args.copy / "stereo"
    rng = np.random.default_rng(0)
    totals = {"segments": 0, "snapped": 0, "dropped": 0, "valid": 0}
    for view in scene.views:
        dpath = stereo / "depth_maps" / f"{view.name}.geometric.bin"
        npath = stereo / "normal_maps" / f"{view.name}.geometric.bin"
        depth, normal = read_depth_map(dpath), read_normal_map(npath)
        totals["valid"] += int((depth > 0).sum())
        for k, n in snap_view(depth, normal, cv2.imread(str(args.copy / "images" / view.name)), view.K, args,
                              rng).items():
            totals[k] += n
        write_depth_map(dpath, depth, durable=False)
        write_normal_map(npath, normal, durable=False)
    subprocess.run([sys.executable, "-m", "mvs_pipeline", "-q", "run", str(args.scene), "-o", str(args.copy),
                    "--stages", "fusion", "--overwrite", "--set", "backend=cpu",
                    *[a for kv in args.sets for a in ("--set", kv)]], check=True)
    xyz = read_ply(args.copy / "fused.ply").xyz
    s = evaluate_eth3d(xyz, load_scans(args.scene / "gt" / "eth3d" / "scan_alignment.mlp"), [0.02], backend="cpu")
    row = {**vars(args), **totals, "points": len(xyz), "accuracy": round(s["accuracy"][0], 4),
           "completeness": round(s["completeness"][0], 4), "f1": round(s["f1"][0], 4)}
    row = {k: (str(v) if isinstance(v, Path) else v) for k, v in row.items()}
    print(json.dumps({k: row[k] for k in ("mode", "tol", "min_inliers", "scale", "max_texture", "max_normal_angle", "sets", "segments", "snapped", "dropped",
                                          "valid", "points", "accuracy", "completeness", "f1")}), flush=True)
    if args.json:
        args.json.write_text(json.dumps(row, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
