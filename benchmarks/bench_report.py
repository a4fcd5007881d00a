#!/usr/bin/env python3
"""Time the report on an ETH3D-size run folder: 40 views of 3200x2130 and a 50 M-point cloud.

Builds the folder the stages would leave (previews and per-view statistics as the depth writer
writes them, fused.ply, its preview as fusion writes it, an ETH3D result), then times, each in
a fresh process: the cloud preview (what fusion adds) and `mvs-pipeline report` (process start
to exit). No GPU needed.

    python benchmarks/bench_report.py --views 40 --points 50000000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mvs_pipeline.io.colmap_maps import write_previews  # noqa: E402
from mvs_pipeline.io.ply import PointCloud, write_ply  # noqa: E402


def timed(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--views", type=int, default=40)
    ap.add_argument("--width", type=int, default=3200)
    ap.add_argument("--height", type=int, default=2130)
    ap.add_argument("--points", type=int, default=50_000_000)
    ap.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "bench_report")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    run = args.root
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:args.height, 0:args.width].astype(np.float32)
    for k in range(args.views):
        name = f"view_{k:03d}.jpg"
        depth = 2 + np.sin(xx / 300 + k) + yy / args.height
        (run / "stereo" / "depth_maps").mkdir(parents=True, exist_ok=True)
        (run / "stereo" / "depth_maps" / f"{name}.geometric.bin").write_bytes(b"")  # listed, never read
        normal = np.dstack([np.zeros_like(depth), np.zeros_like(depth), -np.ones_like(depth)])
        write_previews(run / "stereo" / "previews" / name, depth, normal, depth / 4, (1.0, 4.0), 640)
    (run / "eval").mkdir(exist_ok=True)
    tol = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5]
    (run / "eval" / "eth3d_fused.json").write_text(json.dumps(
        {"tolerances": tol, "accuracy": [0.9] * 6, "completeness": [0.8] * 6, "f1": [0.85] * 6}))
    (run / "run.json").write_text(json.dumps({"backend": "cuda", "stage_seconds": {"depth": 30.0}, "counts": {}}))
    n = args.points
    xyz = rng.normal(size=(n, 3)).astype(np.float32)
    colors = rng.integers(0, 256, size=(n, 3), dtype=np.uint8)
    write_ply(run / "fused.ply", PointCloud(xyz=xyz, colors=colors))
    del xyz, colors
    preview_s = timed(f"from mvs_pipeline.io.cloud_preview import write_cloud_preview; "
                      f"write_cloud_preview({str(run / 'fused.ply')!r})")
    report_s = timed(f"import sys; from mvs_pipeline.cli import main; sys.exit(main(['-q', 'report', {str(run)!r}]))")
    html_mb = (run / "report.html").stat().st_size / 2**20
    result = {"views": args.views, "size": f"{args.width}x{args.height}", "points": n,
              "cloud_preview_s": round(preview_s, 2), "report_command_s": round(report_s, 2),
              "report_html_mib": round(html_mb, 1)}
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
