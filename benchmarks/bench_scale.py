#!/usr/bin/env python3
"""The whole `run` command at growing numbers of views (issue #36): per stage and in total.

For each view count a synthetic scene is made (`synth`, timed, unless it exists under --root),
then `run` goes from scratch into an emptied output folder. Each row records, per stage and in
total: seconds, seconds per view, the GPU memory peak (CuPy pool per stage; the depth stage's
device-wide peak), the host resident-memory peak (per stage from run.json, and the whole
process from wait4), output bytes per input pixel (the output folder after the run, by
subfolder), and points (fused, sampled). The whole command's wall time is measured here, from
process start to exit.

    python benchmarks/bench_scale.py --views 100,300,1000 --scene street --json scale.json
    python benchmarks/bench_scale.py --views 200 --scene courtyard --width 1600 --height 1200 --synth-args=--no-scans
    python benchmarks/bench_scale.py --views 8 --width 160 --height 120 --args "--set backend=cpu"   # CPU smoke
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30


def timed(args: list[str], log: Path) -> tuple[float, int]:
    """Run `python -m mvs_pipeline ARGS` with its output in `log`: (wall seconds, peak RSS bytes of
    the process, from wait4). Exits with the log's tail when it fails."""
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "mvs_pipeline", *args], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"mvs-pipeline {' '.join(args)} failed ({code}):\n{log.read_text()[-3000:]}")
    return wall, usage.ru_maxrss * 1024


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def output_bytes(out: Path) -> dict[str, int]:
    """Bytes by top-level entry (stereo/ by its subfolders); hard-linked input images counted once
    more, as `du` would not (they take no new space: images/ is reported apart)."""
    sizes = {}
    for entry in sorted(out.iterdir()):
        if entry.name == "stereo":
            for sub in sorted(entry.iterdir()):
                sizes[f"stereo/{sub.name}"] = folder_bytes(sub) if sub.is_dir() else sub.stat().st_size
        else:
            sizes[entry.name] = folder_bytes(entry) if entry.is_dir() else entry.stat().st_size
    return sizes


def new_bytes(out: Path, sizes: dict[str, int]) -> int:
    """What the run added to the disk: everything but images/ when its files are hard links."""
    images = out / "images"
    linked = images.is_dir() and all(f.stat().st_nlink > 1 for f in images.rglob("*") if f.is_file())
    return sum(v for k, v in sizes.items() if not (k == "images" and linked))


def row(views: int, width: int, height: int, wall: float, rss: int, out: Path, synth_s: float | None) -> dict:
    run = json.loads((out / "run.json").read_text())
    counts, stages = run["counts"], run["stage_seconds"]
    pixels = views * width * height
    sizes = output_bytes(out)
    gpu = dict(run.get("stage_gpu_pool_peak_bytes", {}))
    if "depth_gpu_used_peak_bytes" in counts:
        gpu["depth"] = max(gpu.get("depth", 0), counts["depth_gpu_used_peak_bytes"])
    return {
        "views": views, "size": f"{width}x{height}", "synth_s": synth_s and round(synth_s, 1),
        "wall_s": round(wall, 2), "wall_s_per_view": round(wall / views, 4),
        "depth_s": stages.get("depth"), "whole_over_depth": round(wall / stages["depth"], 3) if stages.get("depth") else None,
        "stage_s": stages, "stage_s_per_view": {k: round(v / views, 4) for k, v in stages.items()},
        "outside_stages_s": run.get("outside_stages_seconds"),
        "gpu_peak_gib": {k: round(v / GIB, 2) for k, v in gpu.items()},
        "host_rss_peak_gib": {k: round(v / GIB, 2) for k, v in run.get("stage_host_rss_peak_bytes", {}).items()},
        "process_rss_peak_gib": round(rss / GIB, 2),
        "bytes_per_input_pixel": round(new_bytes(out, sizes) / pixels, 2),
        "bytes_per_input_pixel_by_entry": {k: round(v / pixels, 2) for k, v in sizes.items() if v / pixels >= 0.05},
        "fused_points": counts.get("fused_points"), "sampled_points": counts.get("sampled_points"),
        "backend": run["backend"],
        # where the sampling stage's time went and whether it streamed (sampling/streamed.py), and
        # what the earlier stages left free on the device as each stage started
        "sampling_step_s": counts.get("sampling_step_seconds"), "sampling_streamed": counts.get("sampling_streamed"),
        "gpu_free_at_start_gib": {k: round(v / GIB, 2) for k, v in counts.get("stage_gpu_free_at_start_bytes", {}).items()
                                  if v is not None},
        # under --gpu-memory: the pool's limit per stage (the budget less the context, and the textures in depth)
        "gpu_limit_gib": {k: round(v / GIB, 3) for k, v in counts.get("stage_gpu_limit_bytes", {}).items()},
        # whether fusion's loop waited on its loader threads (fusion.load_threads)
        "fusion_loads": fusion_loads(out),
        # fusion beside the depth stage (fusion/trailing.py): its wall seconds there (the fusion column is
        # then what the run waited for after depth); the depth comparison started early (depth_job.py)
        "fusion_beside_depth_s": counts.get("fusion_beside_depth_seconds"),
        "evaluate_depth_early": counts.get("evaluate_depth_early"),
    }


def fusion_loads(out: Path) -> dict:
    """fusion.json's loader counts: threads, the loads' seconds summed over them, the loop's wait."""
    path = out / "stereo" / "fusion.json"
    if not path.is_file():
        return {}
    counts = json.loads(path.read_text()).get("counts", {})
    return {k: counts.get(k) for k in ("load_threads", "load_seconds", "load_wait_seconds")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--views", default="100,300,1000", help="comma-separated view counts (default: %(default)s)")
    ap.add_argument("--scene", default="street", help="synthetic scene kind (default: %(default)s, whose extent "
                    "grows with the views)")
    ap.add_argument("--width", type=int, default=1024, help="image width in px (default: %(default)s)")
    ap.add_argument("--height", type=int, default=768, help="image height in px (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=77)
    ap.add_argument("--synth-args", default="--no-scans", help="extra arguments for `synth` (default: %(default)s)")
    ap.add_argument("--args", default="", help="extra arguments for `run`, e.g. '--gpu-memory 8' or '--set backend=cpu'")
    ap.add_argument("--root", type=Path, default=Path("/tmp/bench_scale"), help="scenes and runs go here")
    ap.add_argument("--keep", action="store_true", help="keep each run's output folder (default: removed after "
                    "its row, so that the next view count has the disk)")
    ap.add_argument("--json", type=Path, help="append the rows to this JSON list")
    args = ap.parse_args(argv)

    rows = []
    for views in (int(v) for v in args.views.split(",")):
        tag = f"{args.scene}_{views}x{args.width}x{args.height}_s{args.seed}"
        scene, out = args.root / tag, args.root / f"{tag}.out"
        args.root.mkdir(parents=True, exist_ok=True)
        synth_s = None
        if not (scene / "sparse").is_dir():
            synth_s, _ = timed(["synth", "--scene", args.scene, "--views", str(views), "--width", str(args.width),
                                "--height", str(args.height), "--seed", str(args.seed), "--out", str(scene),
                                *args.synth_args.split()], args.root / f"{tag}.synth.log")
        shutil.rmtree(out, ignore_errors=True)
        wall, rss = timed(["-q", "run", str(scene), "-o", str(out), *args.args.split()], args.root / f"{tag}.run.log")
        rows.append(row(views, args.width, args.height, wall, rss, out, synth_s))
        print(json.dumps(rows[-1]), flush=True)
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    if args.json:
        old = json.loads(args.json.read_text()) if args.json.is_file() else []
        args.json.write_text(json.dumps(old + rows, indent=1))
    if len(rows) > 1:
        base = rows[0]
        for r in rows[1:]:
            print(f"{r['views']} views: whole-run s/view {r['wall_s_per_view']:.4f} = "
                  f"{r['wall_s_per_view'] / base['wall_s_per_view']:.2f}x that at {base['views']} views")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
