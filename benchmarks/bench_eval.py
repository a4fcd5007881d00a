#!/usr/bin/env python
"""Benchmark the ETH3D evaluator (CPU and/or CUDA) on a synthetic scanned room.

The default size matches the issue's reference point: ~4M GT scan points, ~2.7M reconstruction
points (the official program takes ~90 s on 2 cores for that). Prints a table; --json PATH
writes the numbers. Optionally runs the official binary on the same data (--eth3d-binary).

    python benchmarks/bench_eval.py --backends cpu,cuda [--gt-points 4e6 --recon-points 2.7e6]

Scans of a synthetic scene instead of the room (issue 21's 25 M-point courtyard):
    mvs-pipeline synth --scene courtyard --out SCENE --scan-spacing 0.002 --max-scan-points 28500000
    python benchmarks/bench_eval.py --backends cpu --mlp SCENE/gt/eth3d/scan_alignment.mlp --recon-points 5e6
Depth-map metrics only (random maps with holes, written to a temporary run folder):
    python benchmarks/bench_eval.py --backends cpu,cuda --depth-maps 16 --depth-size 3200x2130
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gt-points", type=float, default=4e6)
    ap.add_argument("--recon-points", type=float, default=2.7e6)
    ap.add_argument("--scans", type=int, default=4)
    ap.add_argument("--backends", default="cpu,cuda", help="comma-separated: cpu, cuda")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per backend (first CUDA run compiles)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eth3d-binary", default=None, help="also time the official program (writes temp PLYs)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--mlp", type=Path, default=None, help="score against these scans (scan_alignment.mlp)")
    ap.add_argument("--depth-maps", type=int, default=0, help="time the depth-map metrics on this many maps instead")
    ap.add_argument("--depth-size", default="3200x2130", help="WxH of the --depth-maps maps")
    args = ap.parse_args()
    if args.depth_maps:
        return bench_depth(args)

    from mvs_pipeline.evaluation.eth3d import evaluate_eth3d
    from mvs_pipeline.evaluation.toy_scenes import perturbed_reconstruction, room_scene

    t0 = time.perf_counter()
    if args.mlp is not None:
        from mvs_pipeline.evaluation.mlp import load_scans

        scans = load_scans(args.mlp)
    else:
        scans, _, _ = room_scene(int(args.gt_points), n_scans=args.scans, seed=args.seed)
    gt = np.concatenate([s.points_in_world() for s in scans])
    recon = perturbed_reconstruction(gt, int(args.recon_points), seed=args.seed, noise=0.01)
    print(f"scene: {len(gt)} GT points in {len(scans)} scans, {len(recon)} reconstruction points "
          f"(built in {time.perf_counter() - t0:.1f} s)")

    rows = []
    results = {}
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        times = []
        res = None
        for _ in range(max(args.repeat, 1)):
            t0 = time.perf_counter()
            try:
                res = evaluate_eth3d(recon, scans, backend=backend)
            except Exception as exc:  # e.g. no GPU: report and go on with the other backends
                print(f"{backend}: skipped ({exc})")
                break
            times.append(time.perf_counter() - t0)
        if res is None:
            continue
        results[backend] = res
        rows.append({"backend": backend, "best_s": min(times), "first_s": times[0],
                     "phases": res["seconds"], "f1": res["f1"]})

    if args.eth3d_binary:
        from mvs_pipeline.evaluation.official import run_official
        from mvs_pipeline.evaluation.mlp import write_mlp
        from mvs_pipeline.io.ply import PointCloud, write_ply

        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            entries = []
            for s in scans:
                write_ply(tmp / f"{s.name}.ply", PointCloud(xyz=s.points))
                entries.append((f"{s.name}.ply", s.world_from_scan))
            write_mlp(tmp / "scan_alignment.mlp", entries)
            write_ply(tmp / "recon.ply", PointCloud(xyz=recon))
            t0 = time.perf_counter()
            off = run_official(args.eth3d_binary, tmp / "recon.ply", tmp / "scan_alignment.mlp",
                               results[next(iter(results))]["tolerances"] if results else [0.01, 0.02, 0.05, 0.1, 0.2, 0.5])
            rows.append({"backend": "official", "best_s": time.perf_counter() - t0, "first_s": None,
                         "phases": {}, "f1": off["f1"]})
            results["official"] = off

    print(f"\n{'backend':10s} {'best s':>8s} {'first s':>8s}  phases (s)                                 F1 @ tolerances")
    for r in rows:
        first = f"{r['first_s']:8.2f}" if r["first_s"] is not None else "       -"
        phases = " ".join(f"{k}={v:.2f}" for k, v in r["phases"].items())
        print(f"{r['backend']:10s} {r['best_s']:8.2f} {first}  {phases:42s} {np.round(r['f1'], 4).tolist()}")
    if len(results) > 1:
        names = list(results)
        for name in names[1:]:
            diff = max(abs(a - b) for k in ("accuracy", "completeness", "f1")
                       for a, b in zip(results[names[0]][k], results[name][k]))
            print(f"max |{names[0]} - {name}| over accuracy/completeness/F1: {diff:.2e}")
    if args.json:
        args.json.write_text(json.dumps({"gt_points": len(gt), "recon_points": len(recon), "scans": len(scans),
                                         "machine": platform.platform(), "python": sys.version.split()[0],
                                         "rows": rows}, indent=1))
    return 0


def bench_depth(args) -> int:
    """Time evaluate_run_depths (metrics + preview error images) on random full-size maps."""
    from mvs_pipeline.evaluation.depth_metrics import evaluate_run_depths
    from mvs_pipeline.io.colmap_maps import write_colmap_array

    w, h = (int(v) for v in args.depth_size.lower().split("x"))
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        run, gt_dir = Path(tmp) / "run", Path(tmp) / "gt"
        (run / "stereo" / "depth_maps").mkdir(parents=True)
        gt_dir.mkdir()
        for k in range(args.depth_maps):
            gt = rng.uniform(2, 30, (h, w)).astype(np.float32)
            pred = (gt * (1 + rng.normal(scale=0.02, size=gt.shape))).astype(np.float32)
            gt[rng.random(gt.shape) < 0.1] = np.inf
            pred[rng.random(gt.shape) < 0.2] = 0.0
            np.save(gt_dir / f"view_{k:03d}.npy", gt)
            write_colmap_array(run / "stereo" / "depth_maps" / f"view_{k:03d}.png.geometric.bin", pred)
        for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
            times = []
            for _ in range(max(args.repeat, 1)):
                t0 = time.perf_counter()
                try:
                    out = evaluate_run_depths(run, gt_dir, error_image_dir=Path(tmp) / "err", error_images="previews",
                                              preview_views=12, backend=backend)
                except Exception as exc:  # e.g. no GPU
                    print(f"{backend}: skipped ({exc})")
                    break
                times.append(time.perf_counter() - t0)
            if times:
                print(f"{backend}: {args.depth_maps} maps of {w}x{h}: best {min(times):.2f} s, first {times[0]:.2f} s; "
                      f"median rel error {out['overall']['median_rel_error']:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
