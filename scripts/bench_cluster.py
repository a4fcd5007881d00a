#!/usr/bin/env python3
"""`run --cluster` against the single-process run: the depth stage's seconds and the whole command's.

On one generated scene (`mvs-pipeline synth`, made once) each mode runs `--stages load,views,depth`
into its own fresh folder:
  none        no --cluster (one process, the configured backend)
  local1      --cluster local with 1 CPU worker process (CPU backend)
  local2      --cluster local with 2 CPU worker processes
  local-cuda  --cluster local-cuda (dask-cuda: one worker per visible GPU; CUDA backend)
Each row: the depth stage's seconds (run.json; the cluster's start is outside it, the workers'
first imports and kernel loads inside), the command's wall seconds, the tasks per worker, and
whether every map file is byte-identical to the first mode's of the same backend. The issue's
targets: local-cuda (1 GPU) within 5 % of none's depth stage; local2 >= 1.7x local1 on CPU.

    python scripts/bench_cluster.py --views 40 --width 1600 --height 1200 --modes none,local-cuda
    python scripts/bench_cluster.py --work W --modes none,local-cuda --keep   # none from an earlier call
    python scripts/bench_cluster.py --views 6 --width 160 --height 120 --modes none,local1,local2 --set backend=cpu
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = {"none": [], "local1": ["--cluster", "local", "--set", "cluster.workers=1"],
         "local2": ["--cluster", "local", "--set", "cluster.workers=2"], "local-cuda": ["--cluster", "local-cuda"]}


def mvs(*args: str) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mvs_pipeline", *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"mvs-pipeline {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def map_digests(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((out / "stereo").rglob("*.bin"))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scene", default="courtyard", help="synthetic scene kind")
    ap.add_argument("--views", type=int, default=40)
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1200)
    ap.add_argument("--modes", default="none,local-cuda", help=f"comma-separated of {','.join(MODES)}")
    ap.add_argument("-c", "--config", default="default")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--work", type=Path, default=None, help="folder for the scene and outputs (default: a temp dir)")
    ap.add_argument("--keep", action="store_true",
                    help="reuse a mode's earlier output in --work instead of running it again (wall: nan)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_cluster_"))
    scene = work / f"{args.scene}_{args.views}x{args.width}x{args.height}"
    if not (scene / "sparse").exists():
        mvs("synth", "--scene", args.scene, "--out", str(scene), "--views", str(args.views), "--width",
            str(args.width), "--height", str(args.height), "--no-scans")
    sets = [a for kv in args.overrides for a in ("--set", kv)]
    rows, reference = [], {}
    print(f"load average before: {os.getloadavg()}")
    for mode in args.modes.split(","):
        out = work / f"out_{mode}"
        if args.keep and (out / "run.json").is_file():   # measured by an earlier call (split over commands)
            wall = float("nan")
        else:
            subprocess.run(["rm", "-rf", str(out)], check=True)
            wall = mvs("-q", "run", str(scene), "-o", str(out), "-c", args.config, *sets,
                       "--stages", "load,views,depth", *MODES[mode])
        run = json.loads((out / "run.json").read_text())
        digests = map_digests(out)
        reference.setdefault(run["backend"], (mode, digests))
        ref_mode, ref_digests = reference[run["backend"]]
        workers = run["counts"].get("depth_cluster_workers", {})
        rows.append({"mode": mode, "backend": run["backend"], "depth_s": run["stage_seconds"]["depth"],
                     "wall_s": round(wall, 2), "tasks_per_worker": sorted(w["tasks"] for w in workers.values()),
                     "maps": len(digests), "identical_to": ref_mode if digests == ref_digests else "DIFFERENT"})
        print(json.dumps(rows[-1]), flush=True)
    base = {r["backend"]: r["depth_s"] for r in rows if r["mode"] == "none"}
    one = next((r["depth_s"] for r in rows if r["mode"] == "local1"), None)
    for r in rows:
        if r["mode"] != "none" and r["backend"] in base:
            print(f"{r['mode']}: depth stage {r['depth_s']:.2f} s vs none {base[r['backend']]:.2f} s "
                  f"({100 * (r['depth_s'] / base[r['backend']] - 1):+.1f} %)")
        if r["mode"] == "local2" and one:
            print(f"local2 speed-up over local1: {one / r['depth_s']:.2f}x")
    print(f"load average after: {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(r["identical_to"] != "DIFFERENT" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
