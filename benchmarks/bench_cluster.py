#!/usr/bin/env python3
"""`run --cluster` against the single-process run: the depth stage's seconds and the whole command's.

On one generated scene (`mvs-pipeline synth`, made once) each mode runs `--stages load,views,depth`
into its own fresh folder:
  none        no --cluster (one process, the configured backend)
  local1      --cluster local with 1 CPU worker process (CPU backend)
  local2      --cluster local with 2 CPU worker processes
  local-cuda  --cluster local-cuda (dask-cuda: one worker per visible GPU; CUDA backend)
  cudaN       --cluster local-cuda with N workers = the first N GPUs (issue #18's scaling: cuda1, cuda2, cuda4)
Each row: the depth stage's seconds (run.json; the cluster's start is outside it, the workers'
first imports and kernel loads inside), the command's wall seconds, the tasks per worker, and
whether every map file is byte-identical to the first mode's of the same backend. The issue's
targets: local-cuda (1 GPU) within 5 % of none's depth stage; local2 >= 1.7x local1 on CPU.
With `--stages` running fusion too, each row also says whether the fused cloud is the first
mode's point set (sorted rows of xyz, normal, colour), and with sampling whether fused_fps.ply
is the first mode's byte for byte and how many pooling tasks the cluster ran; with `--gpu-stats`, nvidia-smi is sampled
every 250 ms during each mode: per GPU the share of samples with the GPU busy, its mean
utilisation over those, and its peak memory.

    python benchmarks/bench_cluster.py --views 40 --width 1600 --height 1200 --modes none,local-cuda
    python benchmarks/bench_cluster.py --work W --modes none,local-cuda --keep   # none from an earlier call
    python benchmarks/bench_cluster.py --views 6 --width 160 --height 120 --modes none,local1,local2 --set backend=cpu
    python benchmarks/bench_cluster.py --views 80 --width 1600 --height 1200 --modes none,cuda1,cuda2 \
        --stages load,views,depth,fusion,sampling --gpu-stats      # issue #18, on a 2-GPU machine
    python benchmarks/bench_cluster.py ... --modes "cuda1,cuda2,cuda2:cluster.unpinned_share=0"   # a setting per mode
"""

from __future__ import annotations

import argparse
import datetime
import functools
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODES = {"none": [], "local1": ["--cluster", "local", "--set", "cluster.workers=1"],
         "local2": ["--cluster", "local", "--set", "cluster.workers=2"], "local-cuda": ["--cluster", "local-cuda"],
         **{f"cuda{n}": ["--cluster", "local-cuda", "--set", f"cluster.workers={n}"] for n in (1, 2, 4, 8)}}


def mvs(*args: str) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mvs_pipeline", *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"mvs-pipeline {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def map_digests(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((out / "stereo").rglob("*.bin"))}


@functools.lru_cache(maxsize=None)   # the reference mode's cloud is compared with every later mode's
def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def same_point_set(a: Path, b: Path) -> bool:
    """Whether two fused.ply hold the same points (xyz, normal, colour) in any order: equal bytes,
    or else equal rows once sorted."""
    if file_digest(a) == file_digest(b):
        return True
    sys.path.insert(0, str(ROOT))   # run as a script from anywhere
    from mvs_pipeline.io.ply import read_ply  # noqa: PLC0415

    if _vertex_count(a) != _vertex_count(b):   # sorting 60 M rows of each took minutes (300-view street)
        return False

    def rows(path: Path) -> np.ndarray:
        cloud = read_ply(path)
        r = np.column_stack([cloud.xyz, cloud.normals, cloud.colors]).astype(np.float64)
        return r[np.lexsort(r.T[::-1])]

    ra, rb = rows(a), rows(b)
    return ra.shape == rb.shape and bool(np.array_equal(ra, rb))


def _vertex_count(path: Path) -> int | None:
    """The `element vertex N` of a PLY header."""
    with path.open("rb") as f:
        for line in iter(f.readline, b""):
            if line.startswith(b"element vertex"):
                return int(line.split()[2])
            if line.strip() == b"end_header":
                return None
    return None


class GpuSampler:
    """nvidia-smi sampling every 250 ms in the background while one mode runs."""

    def __init__(self, path: Path):
        self.path = path
        self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,index,utilization.gpu,memory.used",
                                      "--format=csv,noheader,nounits", "-lms", "250"],
                                     stdout=path.open("w"), stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()

    def stats(self, window: tuple[float, float] | None = None) -> dict:
        """Per GPU, over the samples inside `window` (unix seconds; all when None): the share with
        the GPU busy, its mean utilisation when busy, and the peak memory."""
        per_gpu: dict[str, list] = {}
        for line in self.path.read_text().splitlines():
            parts = [x.strip() for x in line.split(",")]
            if len(parts) != 4 or not all(x.isdigit() for x in parts[1:]):
                continue
            when = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            if window is None or window[0] <= when <= window[1]:
                per_gpu.setdefault(parts[1], []).append((int(parts[2]), int(parts[3])))
        stats = {}
        for gpu, samples in per_gpu.items():
            util = np.array([u for u, _ in samples], float)
            busy = util[util > 0]
            stats[gpu] = {"busy_share": round(float((util > 0).mean()), 3),
                          "util_when_busy": round(float(busy.mean()), 1) if busy.size else 0.0,
                          "mem_peak_mib": max(m for _, m in samples), "samples": len(samples)}
        return stats


def pass_timeline(run: dict) -> dict:
    """Per pass of a cluster run: its phases (tasks, flush, check seconds) and, over the workers,
    the share of the task phase each spent inside a task (the rest its GPU had no task: dispatch,
    imbalance, waiting for the pass's last task)."""
    counts = run["counts"]
    host = counts.get("fusion_beside_depth_worker")   # the worker fusion ran beside (fusion/worker_hosted.py)
    out = {}
    for pass_id, phase in counts.get("depth_cluster_pass_phases", {}).items():
        busy, host_busy = [], None
        for name, w in counts.get("depth_cluster_workers", {}).items():
            spans = [(a, b) for p, a, b in w.get("spans", []) if p == pass_id]
            if spans and phase["tasks"] > 0:
                busy.append(round(sum(b - a for a, b in spans) / phase["tasks"], 2))
                if name == host:
                    host_busy = busy[-1]
        out[pass_id] = {**phase, "worker_busy_share": sorted(busy),
                        **({"fusion_host_busy_share": host_busy} if host_busy is not None else {})}
    return out


def fusion_trail(timeline_dir: Path, run: dict) -> dict | None:
    """Where a fusion beside the depth stage stood as that stage ended (MVS_PIPELINE_FUSION_TIMELINE's
    per-view times): views written / loaded / fused 2 s, 1 s and 0 s before its end, loads started after
    it, and the median load. Why: a fusion tail after the depth stage is either maps not yet written
    (the tasks' order) or written maps not yet loaded (the loaders' rate; session 38)."""
    files = sorted(timeline_dir.glob("fusion_timeline_*.json"))
    times = run.get("stage_unix_times", {}).get("depth")
    if not files or not times:
        return None
    views = json.loads(files[-1].read_text()).values()
    end = times[1]

    def by(event: str) -> list[int]:
        return [sum(1 for v in views if v.get(event, float("inf")) <= end - back) for back in (2, 1, 0)]

    loads = sorted(v["load_end"] - v["load_start"] for v in views if "load_end" in v and "load_start" in v)
    return {"written_by_end_minus_2_1_0_s": by("written"), "loaded": by("load_end"), "fused": by("fused"),
            "loads_started_after": sum(1 for v in views if v.get("load_start", 0) > end),
            "load_ms_median": round(1e3 * loads[len(loads) // 2], 1) if loads else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scene", default="courtyard", help="synthetic scene kind")
    ap.add_argument("--views", type=int, default=40)
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1200)
    ap.add_argument("--modes", default="none,local-cuda",
                    help=f"comma-separated of {','.join(MODES)}, each optionally with ':KEY=V;KEY=V' settings of its own")
    ap.add_argument("-c", "--config", default="default")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--work", type=Path, default=None, help="folder for the scene and outputs (default: a temp dir)")
    ap.add_argument("--keep", action="store_true",
                    help="reuse a mode's earlier output in --work instead of running it again (wall: nan)")
    ap.add_argument("--stages", default="load,views,depth", help="the run's --stages (fusion adds the cloud check)")
    ap.add_argument("--gpu-stats", action="store_true", help="sample nvidia-smi during each mode")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    ap.add_argument("--warm-up", action="store_true",
                    help="(GPU) run `mvs-pipeline doctor --warm-up` first, so that the first mode does not fill CuPy's "
                         "kernel cache (on a fresh machine that cost `none` 7 s of its depth stage, session 11)")
    ap.add_argument("--discard", action="store_true",
                    help="delete each mode's maps once compared (runs on a small tmpfs such as /dev/shm)")
    args = ap.parse_args(argv)
    # `timeout` sends SIGTERM: exit through Python so that subprocess.run kills the mode's command
    # instead of leaving it running beside the next benchmark
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_cluster_"))
    scene = work / f"{args.scene}_{args.views}x{args.width}x{args.height}"
    if not (scene / "sparse").exists():
        mvs("synth", "--scene", args.scene, "--out", str(scene), "--views", str(args.views), "--width",
            str(args.width), "--height", str(args.height), "--no-scans")
    sets = [a for kv in args.overrides for a in ("--set", kv)]
    if args.warm_up:
        print(f"warm-up: {mvs('-q', 'doctor', '--warm-up'):.1f} s", flush=True)
    rows, reference, clouds, samples = [], {}, {}, {}
    gpus = None
    print(f"load average before: {os.getloadavg()}")
    for mode in args.modes.split(","):
        # "cuda2:cluster.unpinned_share=0": a mode with settings of its own on top of --set
        name, _, own = mode.partition(":")
        own_sets = [a for kv in own.split(";") if kv for a in ("--set", kv)]
        out = work / ("out_" + "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in mode))
        trail_dir = work / f"fusion_timeline_{out.name}"   # fusion_trail's input (MVS_PIPELINE_FUSION_TIMELINE)
        if args.keep and (out / "run.json").is_file():   # measured by an earlier call (split over commands)
            wall = float("nan")
        else:
            subprocess.run(["rm", "-rf", str(out)], check=True)
            sampler = GpuSampler(work / f"gpu_{mode}.csv") if args.gpu_stats else None
            subprocess.run(["rm", "-rf", str(trail_dir)], check=True)
            trail_dir.mkdir(parents=True)
            os.environ["MVS_PIPELINE_FUSION_TIMELINE"] = str(trail_dir)
            try:
                wall = mvs("-q", "run", str(scene), "-o", str(out), "-c", args.config, *sets, *own_sets,
                           "--stages", args.stages, *MODES[name])
            finally:
                if sampler:   # the depth stage's window, from run.json
                    sampler.stop()
                    times = json.loads((out / "run.json").read_text()).get("stage_unix_times", {}) \
                        if (out / "run.json").is_file() else {}
                    gpus = {"whole": sampler.stats(), **({"depth": sampler.stats(tuple(times["depth"]))}
                                                         if "depth" in times else {})}
        run = json.loads((out / "run.json").read_text())
        digests = map_digests(out)
        reference.setdefault(run["backend"], (mode, digests))
        ref_mode, ref_digests = reference[run["backend"]]
        workers = run["counts"].get("depth_cluster_workers", {})
        cloud = out / "fused.ply" if (out / "fused.ply").is_file() else None
        ref_cloud = clouds.setdefault(run["backend"], (mode, cloud))
        fps = out / "fused_fps.ply"   # the sampling stage's pooling runs on the cluster too: same bytes
        fps_digest = hashlib.sha256(fps.read_bytes()).hexdigest() if fps.is_file() else None
        ref_fps = samples.setdefault(run["backend"], (mode, fps_digest))
        fusion_record = out / "stereo" / "fusion.json"   # fusion's own seconds (beside depth: its loads' waits)
        fusion_counts = json.loads(fusion_record.read_text()).get("counts", {}) if fusion_record.is_file() else {}
        rows.append({"mode": mode, "backend": run["backend"], "depth_s": run["stage_seconds"]["depth"],
                     "fusion_counts": {k: fusion_counts[k] for k in ("seconds", "load_seconds", "load_wait_seconds",
                                                                     "load_threads", "cache_views", "loop_seconds",
                                                                     "loaded_ahead")
                                       if k in fusion_counts},
                     "cluster_wait_seconds": run["counts"].get("cluster_wait_seconds"),
                     "sampling_step_seconds": run["counts"].get("sampling_step_seconds"),
                     "fusion_beside_depth": {k: run["counts"][f"fusion_beside_depth_{k}"] for k in ("seconds", "worker")
                                             if f"fusion_beside_depth_{k}" in run["counts"]},
                     "wall_s": round(wall, 2), "stage_seconds": run["stage_seconds"],
                     "tasks_per_worker": sorted(w["tasks"] for w in workers.values()),
                     "gpu_pool_peak_gib": {k: round(v / 2**30, 2) for k, v in
                                           run.get("stage_gpu_pool_peak_bytes", {}).items()},
                     "task_seconds_per_worker": sorted(round(w["seconds"], 2) for w in workers.values()),
                     "task_categories_per_worker": [{k: round(v, 2) for k, v in w.get("seconds_by_category", {}).items()}
                                                    for w in workers.values()],
                     "none_categories": {k: round(v, 2) for k, v in
                                         run["counts"].get("depth_seconds_by_category", {}).items()},
                     "depth_pass_seconds": {k: round(v, 2) for k, v in run["counts"].get("depth_pass_seconds", {}).items()},
                     "pass_timeline": pass_timeline(run),
                     "fusion_trail": fusion_trail(trail_dir, run),
                     "maps": len(digests), "identical_to": ref_mode if digests == ref_digests else "DIFFERENT",
                     **({"cloud_points": run["counts"].get("fused_points"),
                         "cloud_same_as": ref_cloud[0] if same_point_set(cloud, ref_cloud[1]) else "DIFFERENT"} if cloud else {}),
                     **({"samples_same_as": ref_fps[0] if fps_digest == ref_fps[1] else "DIFFERENT",
                         "sampling_cluster_tasks": run["counts"].get("sampling_cluster_tasks", 0),
                         "sampling_step_seconds": run["counts"].get("sampling_step_seconds")} if fps_digest else {}),
                     **({"gpus": gpus} if gpus else {})})
        print(json.dumps(rows[-1]), flush=True)
        if args.discard:
            subprocess.run(["rm", "-rf", str(out / "stereo")], check=True)
        rows[-1]["workers"] = workers   # with each task's span: in --json, not printed
        if args.json:   # after every mode: a run stopped by a time limit keeps the rows it finished
            args.json.write_text(json.dumps(rows, indent=1))
    # each mode against the `none` run just before it (else the first one after it): the machine's
    # own drift between runs is as large as a few per cent of overhead (session 12)
    nones = [(i, r) for i, r in enumerate(rows) if r["mode"] == "none"]
    one = next((r["depth_s"] for r in rows if r["mode"] == "local1"), None)
    for i, r in enumerate(rows):
        same = [(j, n) for j, n in nones if n["backend"] == r["backend"]]
        if r["mode"] != "none" and same:
            base = ([n for j, n in same if j < i] or [same[0][1]])[-1]["depth_s"]
            print(f"{r['mode']}: depth stage {r['depth_s']:.2f} s vs the none beside it {base:.2f} s "
                  f"({100 * (r['depth_s'] / base - 1):+.1f} %)")
        if r["mode"] == "local2" and one:
            print(f"local2 speed-up over local1: {one / r['depth_s']:.2f}x")
    gpu1 = next((r for r in rows if r["mode"].partition(":")[0] == "cuda1"), None)
    single = next((r for r in rows if r["mode"] == "none" and r["backend"] == "cuda"), None)
    for r in rows:
        if gpu1 and r["mode"].startswith("cuda") and r is not gpu1:
            print(f"{r['mode']} over cuda1: depth stage {gpu1['depth_s'] / r['depth_s']:.2f}x, "
                  f"whole command {gpu1['wall_s'] / r['wall_s']:.2f}x")
        # issue #36's "against one GPU" read as the single process too (its fusion runs beside the depth stage)
        if single and r["mode"].startswith("cuda"):
            print(f"{r['mode']} over the first none: depth stage {single['depth_s'] / r['depth_s']:.2f}x, "
                  f"whole command {single['wall_s'] / r['wall_s']:.2f}x")
    print(f"load average after: {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(r["identical_to"] != "DIFFERENT" and r.get("cloud_same_as") != "DIFFERENT"
                    and r.get("samples_same_as") != "DIFFERENT" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
