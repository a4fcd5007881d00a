#!/usr/bin/env python3
"""Benchmark the `sampling` stage and exact FPS alone, on a surface-like cloud of N points
(benchmarks/bench_fps.py's `surface_cloud`, 2 mm noise, with normals, colours and a uchar `support`
written in fusion's own 28-byte layout, so the PLY is a fused.ply of that size).

    python benchmarks/bench_sampling.py --sizes 12M,50M --backend cuda
    python benchmarks/bench_sampling.py --sizes 2M --backend cpu --settings default,exact
    python benchmarks/bench_sampling.py --sizes 12M,50M --fps 12M:1.2M,50M:1M --backend cuda
    python benchmarks/bench_sampling.py --sizes 62M --settings default --budget 7 --backend cuda
    python benchmarks/bench_sampling.py --sizes 4M --settings default --backend cpu --cluster-workers 2

Settings: `default` (SamplingConfig's defaults = configs/default.yaml's sampling section: pool at 2x
the spacing, 200k FPS prefix, every pooled point written), `exact` (the old default: exact FPS of
ratio 0.1 of all fused points, no pooling, no cap). Every row prints the stage's wall time (best of
--repeat, outputs overwritten; the first run also compiles/loads kernels), the seconds of its steps
in that best run (read, spacing estimate, pooling, FPS, output order, write, preview) and its output
count, and how long writing and fsyncing the output's bytes again takes there (the disk's share of
`write`). For clouds of at most --f1-max-points points it also prints F1 at --f1-tolerances of fused.ply
and of fused_fps.ply against points on the noiseless surfaces (precision: output points within the
tolerance of a GT point; completeness: GT points within it of an output point; SciPy KD-trees).
`--fps N:M` times farthest_point_sampling alone for N points -> M samples. `--budget GIB` gives the
stage that memory budget (sample_fused_cloud's memory_budget; a GPU run's is what `--gpu-memory`
leaves it): a cloud whose whole-cloud path does not fit is sampled in chunks and parts
(sampling/streamed.py), and the row says so; its output is the unbudgeted one, byte for byte.
`--cluster-workers N` runs every row a second time with the pooling on a Dask LocalCluster of N CPU
worker processes (`run --cluster local`'s, sampling/cluster_pool.py), printing its pooling tasks
and whether its fused_fps.ply is the single-process one byte for byte (CPU backend only).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_fps import commit, parse_count, surface_cloud  # noqa: E402

from mvs_pipeline.io.fused_ply import VERTEX_DTYPE, ply_header  # noqa: E402
from mvs_pipeline.io.ply import read_ply  # noqa: E402
from mvs_pipeline.sampling.params import SamplingConfig  # noqa: E402
from mvs_pipeline.sampling.stage import sample_fused_cloud  # noqa: E402

SETTINGS = {
    "default": {},
    "exact": {"ratio": 0.1, "max_samples": None, "pre_pool_voxel_size": None, "pre_pool_spacing": None,
              "keep_unsampled": False},
}


STEPS = ("read", "spacing", "pooling", "fps", "order", "write", "preview")


def write_fused_like(path: Path, n: int, seed: int = 0) -> None:
    """A fused.ply of n points in fusion's layout (io/fused_ply.py), written in 4 M-point chunks."""
    rng = np.random.default_rng(seed + 1)
    xyz = surface_cloud(n, seed)
    with open(path, "wb") as f:
        f.write(ply_header(n))
        for a in range(0, n, 4_000_000):
            b = min(n, a + 4_000_000)
            rec = np.empty(b - a, VERTEX_DTYPE)
            normals = rng.normal(size=(b - a, 3)).astype(np.float32)
            normals /= np.linalg.norm(normals, axis=1, keepdims=True)
            for i, c in enumerate("xyz"):
                rec[c] = xyz[a:b, i]
                rec["n" + c] = normals[:, i]
            for c in ("red", "green", "blue"):
                rec[c] = rng.integers(0, 256, b - a, dtype=np.uint8)
            rec["support"] = rng.integers(2, 20, b - a, dtype=np.uint8)
            f.write(rec.tobytes())


def sync(backend: str) -> None:
    if backend != "cpu":
        import cupy  # noqa: PLC0415

        cupy.cuda.Device().synchronize()


def time_stage(cfg: SamplingConfig, ply: Path, out: Path, backend: str, repeat: int,
               budget: int | None = None, client=None) -> tuple[float, dict, Path]:
    best, best_steps, paths = np.inf, {}, {}
    for _ in range(repeat):
        steps: dict = {}
        t0 = time.perf_counter()
        paths = sample_fused_cloud(cfg, ply, out, overwrite=True, backend=backend, timings=steps,
                                   memory_budget=budget, client=client)
        sync(backend)
        wall = time.perf_counter() - t0
        if wall < best:
            best, best_steps = wall, steps
    return best, best_steps, paths["samples"]


def disk_check(path: Path) -> tuple[float, float]:
    """(seconds to write `path`'s bytes to a new file in the same folder, seconds of its fsync):
    how much of the stage's `write` step is the disk's (fused_fps.ply is written durably)."""
    data = path.read_bytes()
    probe = path.with_name(".disk_probe")
    t0 = time.perf_counter()
    with open(probe, "wb") as f:
        f.write(data)
        f.flush()
        t1 = time.perf_counter()
        os.fsync(f.fileno())
    t2 = time.perf_counter()
    probe.unlink()
    return t1 - t0, t2 - t1


def f1_scores(xyz: np.ndarray, gt: np.ndarray, gt_tree, tolerances: list[float]) -> list[float]:
    from scipy.spatial import cKDTree  # noqa: PLC0415

    d_prec, _ = gt_tree.query(xyz, k=1, workers=-1)
    d_comp, _ = cKDTree(xyz).query(gt, k=1, workers=-1)
    out = []
    for tol in tolerances:
        p, r = float(np.mean(d_prec <= tol)), float(np.mean(d_comp <= tol))
        out.append(0.0 if p + r == 0 else 2 * p * r / (p + r))
    return out


def time_fps(n: int, m: int, backend: str, repeat: int) -> float:
    from mvs_pipeline.sampling.points.fps.ops import farthest_point_sampling  # noqa: PLC0415

    xyz = surface_cloud(n)
    if backend != "cpu":
        import cupy  # noqa: PLC0415

        xyz = cupy.asarray(xyz)
        farthest_point_sampling(xyz, 2, backend=backend)  # compile/load outside the timing
    best = np.inf
    for _ in range(repeat):
        sync(backend)
        t0 = time.perf_counter()
        farthest_point_sampling(xyz, m, backend=backend)
        sync(backend)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="12M,50M", help="fused cloud sizes N for the stage (default: %(default)s)")
    ap.add_argument("--settings", default="default,exact", help=f"comma list of {', '.join(SETTINGS)}")
    ap.add_argument("--fps", default="", help="comma list of N:M pairs timed with FPS alone, e.g. 12M:1.2M,50M:1M")
    ap.add_argument("--backend", default="cuda", choices=["cuda", "cpu", "auto"])
    ap.add_argument("--repeat", type=int, default=2, help="runs per row, best kept (default: %(default)s)")
    ap.add_argument("--budget", type=float, default=None,
                    help="memory budget of the stage in GiB (default: none on the CPU, what is free on the GPU)")
    ap.add_argument("--f1-max-points", default="2M", help="F1 only for clouds up to this size (default: %(default)s)")
    ap.add_argument("--f1-tolerances", default="0.01,0.02", help="m, comma list (default: %(default)s)")
    ap.add_argument("--tmp", type=Path, default=None, help="folder for the clouds (default: the system's temp)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--cluster-workers", type=int, default=0,
                    help="also run every row with the pooling on a local Dask cluster of this many CPU workers")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="  %(message)s")
    tolerances = [float(t) for t in args.f1_tolerances.split(",") if t]
    f1_max = parse_count(args.f1_max_points)
    rows = []
    for pair in filter(None, args.fps.split(",")):
        n, m = (parse_count(v) for v in pair.split(":"))
        s = time_fps(n, m, args.backend, args.repeat)
        rows.append({"what": "fps", "n": n, "m": m, "seconds": s})
        print(f"FPS {n} -> {m} ({args.backend}): {s:.3f} s", flush=True)
    with contextlib.ExitStack() as stack:
        client = None
        if args.cluster_workers:
            from mvs_pipeline.cluster.client import open_client  # noqa: PLC0415
            from mvs_pipeline.cluster.params import ClusterConfig  # noqa: PLC0415

            client = stack.enter_context(open_client(ClusterConfig(kind="local", workers=args.cluster_workers)))
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_sampling_", dir=args.tmp))
        rows += stage_rows(args, tmp, client, tolerances, f1_max)
    if args.json:
        args.json.write_text(json.dumps({"commit": commit(), "backend": args.backend, "rows": rows}, indent=1))
    return 0


def stage_rows(args, tmp: str, client, tolerances: list[float], f1_max: int) -> list[dict]:
    rows = []
    modes = ["none"] + ([f"local{args.cluster_workers}"] if client is not None else [])
    for size in filter(None, args.sizes.split(",")):
        n = parse_count(size)
        ply = Path(tmp) / f"fused_{n}.ply"
        write_fused_like(ply, n)
        gt = gt_tree = None
        if n <= f1_max and tolerances:
            from scipy.spatial import cKDTree  # noqa: PLC0415

            gt = surface_cloud(max(n, 2_000_000), seed=12345, noise=0.0)
            gt_tree = cKDTree(gt)
            fused_f1 = f1_scores(read_ply(ply).xyz, gt, gt_tree, tolerances)
            print(f"F1 of fused.ply, N = {n}: " + ", ".join(f"@{t} m {f:.4f}" for t, f in zip(tolerances, fused_f1)))
        for name in filter(None, args.settings.split(",")):
            cfg = dataclasses.replace(SamplingConfig(), **SETTINGS[name])
            print(f"stage, N = {n}, {name}: {cfg}", flush=True)
            budget = None if args.budget is None else int(args.budget * 2**30)
            single_digest = None
            for mode in modes:
                s, steps, out = time_stage(cfg, ply, Path(tmp) / f"out_{n}_{name}_{mode}", args.backend, args.repeat,
                                           budget, client if mode != "none" else None)
                row = {"what": "stage", "setting": name, "n": n, "mode": mode, "samples": steps.get("written_points"),
                       "pooled": steps.get("pooled_points"), "seconds": s, "budget_gib": args.budget,
                       "streamed": "chunk_rows" in steps,
                       **{k: steps.get(f"{k}_seconds", 0.0) for k in STEPS}}
                split = ", ".join(f"{k} {row[k]:.2f}" for k in STEPS)
                how = (f", in chunks of {steps['chunk_rows']} and parts of {steps['part_points']}"
                       if row["streamed"] else "")
                print(f"stage, N = {n}, {name} ({args.backend}, {mode}): {s:.3f} s -> {row['samples']} points "
                      f"(pooled {row['pooled']}{how}); steps: {split}", flush=True)
                digest = hashlib.sha256(out.read_bytes()).hexdigest()
                if mode == "none":
                    single_digest = digest
                else:
                    row.update(cluster_tasks=steps.get("cluster_tasks"), pool_tasks=steps.get("pool_tasks_seconds"),
                               same_file=digest == single_digest)
                    print(f"  {row['cluster_tasks']} pooling tasks on the workers ({row['pool_tasks'] or 0:.2f} s "
                          f"from submission to the last part back); the single-process file byte for byte: "
                          f"{row['same_file']}", flush=True)
                row["disk_write"], row["disk_fsync"] = disk_check(out)
                print(f"  the same {out.stat().st_size / 2**30:.2f} GiB written again: {row['disk_write']:.2f} s, "
                      f"fsync {row['disk_fsync']:.2f} s", flush=True)
                if gt is not None:
                    row["f1"] = dict(zip(map(str, tolerances), f1_scores(read_ply(out).xyz, gt, gt_tree, tolerances)))
                    row["f1_fused"] = dict(zip(map(str, tolerances), fused_f1))
                    print("  F1 of fused_fps.ply: " + ", ".join(f"@{t} m {v:.4f}" for t, v in row["f1"].items()))
                rows.append(row)
                out.unlink()
        ply.unlink()
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
