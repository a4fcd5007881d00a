#!/usr/bin/env python
"""Benchmark `mvs-pipeline synth` (issue 21 item 4): whole command and per-stage wall times.

Runs generate_scene exactly as the CLI does (same arguments, backend resolved the same way) once
per (size, workers, backend) combination and prints a table: scene build, views (render +
write), sparse model, mesh + scans (in a thread beside the views, so not additive), total, and
seconds per view; cpu_s is the CPU time of this process and its workers (the wall times of a
shared machine depend on its load, the CPU time much less). --views lets a short run be extrapolated: views cost the same each, so
total(40) ~ total(n) + (40 - n) * views/n / concurrency.

    python benchmarks/bench_synth.py --sizes 800x600,1600x1066 --views 6 --workers 1,0 --backends cpu
H100 machine, the issue's reference point (327 s before, goal <= 40 s):
    python benchmarks/bench_synth.py --scene courtyard --sizes 3200x2130 --views 40 --workers 0 --backends cuda,cpu
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path


def _cpu_seconds() -> float:
    """User + system CPU time of this process and its finished (joined) children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scene", default="courtyard")
    ap.add_argument("--sizes", default="800x600,1600x1066", help="comma-separated WxH")
    ap.add_argument("--views", type=int, default=6)
    ap.add_argument("--workers", default="0", help="comma-separated; 0 = one per CPU core (the CLI default)")
    ap.add_argument("--backends", default="cpu", help="comma-separated: cpu, cuda, auto")
    ap.add_argument("--no-scans", dest="scans", action="store_false")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, default=None, help="write the scenes under this folder (kept)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from mvs_pipeline.gpu.backend import resolve_backend  # noqa: PLC0415
    from mvs_pipeline.synth.generate import generate_scene  # noqa: PLC0415
    from mvs_pipeline.synth.view_jobs import usable_cpus  # noqa: PLC0415

    root = args.keep or Path(tempfile.mkdtemp(prefix="bench_synth_"))
    rows = []
    print(f"cpus {os.cpu_count()} (usable {usable_cpus()}), load average {os.getloadavg()[0]:.2f}, scene {args.scene}, {args.views} views")
    print(f"{'size':>10} {'backend':>7} {'workers':>7} {'scene':>6} {'views':>7} {'sparse':>6} "
          f"{'mesh+scans':>10} {'total':>7} {'s/view':>7} {'cpu_s':>7}")
    for size in args.sizes.split(","):
        width, height = (int(x) for x in size.lower().split("x"))
        for requested in args.backends.split(","):
            backend = resolve_backend(requested)
            for w in (int(x) for x in args.workers.split(",")):
                workers = w if w > 0 else usable_cpus()
                out = root / f"{args.scene}_{width}x{height}_{backend}_w{workers}"
                timings: dict = {}
                cpu0 = _cpu_seconds()
                start = time.perf_counter()
                generate_scene(args.scene, out, views=args.views, width=width, height=height, seed=args.seed,
                               scans=args.scans, workers=workers, backend=backend, timings=timings)
                total = time.perf_counter() - start
                cpu = _cpu_seconds() - cpu0
                row = {"size": f"{width}x{height}", "backend": backend, "workers": workers, "views_n": args.views,
                       **{k: round(v, 3) for k, v in timings.items()}, "total": round(total, 3), "cpu_s": round(cpu, 1),
                       "load_avg_1min": os.getloadavg()[0]}
                rows.append(row)
                print(f"{row['size']:>10} {backend:>7} {workers:>7} {timings.get('scene', 0):6.1f} "
                      f"{timings.get('views', 0):7.1f} {timings.get('sparse', 0):6.1f} "
                      f"{timings.get('mesh_and_scans', 0):10.1f} {total:7.1f} {total / args.views:7.2f} {cpu:7.1f}",
                      flush=True)
                if args.keep is None:
                    shutil.rmtree(out, ignore_errors=True)
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
