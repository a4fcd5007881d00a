#!/usr/bin/env python3
"""Time the whole `mvs-pipeline run` command, process start to exit, on synthetic scenes.

For each scene (made with `mvs-pipeline synth` unless it exists) the run is timed:
  cold   a fresh CuPy kernel cache (CUPY_CACHE_DIR in a new folder), precompiled kernels as
         installed (build/kernels or MVS_PIPELINE_KERNEL_DIR): a first run on a new machine;
  nvrtc  cold and without precompiled kernels: what NVRTC compilation costs;
  installed  a fresh CuPy cache that `mvs-pipeline doctor --warm-up` filled first,
         as scripts/setup_env.sh does on a GPU machine (the warm-up's own time is printed);
  warm   the same command again with --overwrite (every stage recomputed, caches warm: when no
         warm or fresh row of this call ran the scene, an untimed run goes first); the
         stages that are redone first remove the previous run's outputs (1.5-3 GB files at
         ETH3D size), which this mode pays;
  fresh  warm caches, into an output folder emptied before the timing starts (a first run on a
         machine that has run before).
Each row: wall (measured here), the stages' sum and the time outside them (run.json), GPU
memory peak, F1 of fused.ply at 2 cm. Scenes: VIEWSxWIDTHxHEIGHT.

    python benchmarks/bench_e2e.py --scenes 20x800x600,40x1600x1200 --modes nvrtc,cold,warm --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def mvs(*args: str, env: dict | None = None) -> float:
    """Run `python -m mvs_pipeline ARGS`; return its wall seconds (raises on failure)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mvs_pipeline", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"mvs-pipeline {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall


def record(out: Path, wall: float, mode: str, scene: str) -> dict:
    run = json.loads((out / "run.json").read_text())
    counts = run["counts"]
    peaks = [*run.get("stage_gpu_pool_peak_bytes", {}).values(), counts.get("depth_gpu_used_peak_bytes", 0)]
    f1 = counts.get("f1_fused")
    tol = run["config"]["evaluate"]["tolerances"]
    f1_2cm = f1[tol.index(0.02)] if isinstance(f1, list) and 0.02 in tol else None
    stages = run["stage_seconds"]
    return {"scene": scene, "mode": mode, "wall_s": round(wall, 2), "run_wall_s": run.get("wall_seconds"),
            "stage_sum_s": round(sum(stages.values()), 2), "outside_stages_s": run.get("outside_stages_seconds"),
            "stage_seconds": stages, "gpu_peak_gib": round(max(peaks) / 2**30, 2) if peaks else None,
            "f1_2cm": f1_2cm, "fused_points": counts.get("fused_points"), "backend": run["backend"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenes", default="20x800x600", help="comma-separated VIEWSxWIDTHxHEIGHT")
    ap.add_argument("--scene", default="courtyard", help="synthetic scene kind")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "bench_e2e")
    ap.add_argument("--modes", default="cold,warm", help="comma-separated, run in this order: nvrtc, cold, "
                    "installed, warm, fresh (default: %(default)s)")
    ap.add_argument("--args", default="", help="extra arguments for `run` (e.g. '--set backend=cpu')")
    ap.add_argument("--no-gt", action="store_true", help="run without the evaluate stage (issue #15's "
                    "timings are of `run` on a workspace without ground truth)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    run_args = args.args.split()
    if args.no_gt:
        run_args += ["--stages", "load,views,depth,fusion,sampling"]
    rows = []
    for spec in args.scenes.split(","):
        views, width, height = (int(v) for v in spec.lower().split("x"))
        name = f"{args.scene}_{views}x{width}x{height}_s{args.seed}"
        scene = args.root / name
        if not (scene / "sparse").exists():
            t = mvs("synth", "--scene", args.scene, "--out", str(scene), "--views", str(views), "--width",
                    str(width), "--height", str(height), "--seed", str(args.seed))
            print(f"{name}: synth {t:.1f} s", flush=True)
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        warmed = False   # a run of this scene with the default caches has filled them in this call
        for mode in modes:
            env = dict(os.environ)
            # An installed package has its bytecode; a checkout copied read-only (or with
            # PYTHONDONTWRITEBYTECODE) would compile ~500 modules per run (0.65 s on the H100 machine).
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env.setdefault("PYTHONPYCACHEPREFIX", str(args.root / "pycache"))
            if mode in ("cold", "nvrtc", "installed"):
                env["CUPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="cupy_cache_")
            if mode == "installed":
                print(f"{name} warm-up (install): {mvs('-q', 'doctor', '--warm-up', env=env):.1f} s", flush=True)
            if mode == "nvrtc":
                env["MVS_PIPELINE_KERNEL_DIR"] = tempfile.mkdtemp(prefix="no_kernels_")
            out = args.root / f"{name}_out"
            if mode in ("warm", "fresh") and not warmed:
                # "warm" is the same command again: on a new machine a first warm row was a cold one
                # (CuPy's kernel cache, the scene's files: 80.6 s against 42.8 s, session 14)
                t = mvs("-q", "run", str(scene), "-o", str(out), "--overwrite", *run_args, env=env)
                print(f"{name}: untimed run before the first {mode} row {t:.1f} s", flush=True)
            warmed = warmed or mode in ("warm", "fresh")   # cold modes use caches of their own
            if mode == "fresh":
                shutil.rmtree(out, ignore_errors=True)
            wall = mvs("-q", "run", str(scene), "-o", str(out), "--overwrite", *run_args, env=env)
            rows.append(record(out, wall, mode if not args.no_gt else f"{mode} (no GT)", name))
            r = rows[-1]
            print(f"{name} {mode}: wall {r['wall_s']} s, stages {r['stage_sum_s']} s, outside "
                  f"{r['outside_stages_s']} s, GPU peak {r['gpu_peak_gib']} GiB, F1@2cm {r['f1_2cm']}, "
                  f"stages {r['stage_seconds']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
