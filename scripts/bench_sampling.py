#!/usr/bin/env python3
"""Benchmark the `sampling` stage (read fused.ply, spacing estimate, pooling, FPS, attribute
transfer, write) and exact FPS alone, on a surface-like cloud of N points (scripts/bench_fps.py's
`surface_cloud`, with normals and colours so that the PLY is the size of a fused one).

    python scripts/bench_sampling.py --sizes 12M,50M --backend cuda
    python scripts/bench_sampling.py --sizes 2M --backend cpu --settings default,exact
    python scripts/bench_sampling.py --sizes 12M,50M --fps 12M:1.2M,50M:1M --backend cuda

Settings: `default` (configs/default.yaml's sampling section as it is), `exact` (the old default:
exact FPS of ratio 0.1 of all fused points, no pooling, no cap). Every row prints the stage's wall
time (best of --repeat, outputs overwritten), its output count and what the stage logged about
spacing and pooling. `--fps N:M` times farthest_point_sampling alone for N points -> M samples.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_fps import commit, parse_count, surface_cloud  # noqa: E402

from mvs_pipeline.io.ply import PointCloud, read_ply, write_ply  # noqa: E402
from mvs_pipeline.sampling.params import SamplingConfig  # noqa: E402
from mvs_pipeline.sampling.stage import sample_fused_cloud  # noqa: E402

SETTINGS = {
    "default": {},
    "exact": {"ratio": 0.1, "max_samples": None, "pre_pool_voxel_size": None, "pre_pool_spacing": None,
              "keep_unsampled": False},
}


def fused_like(n: int, seed: int = 0) -> PointCloud:
    xyz = surface_cloud(n, seed)
    rng = np.random.default_rng(seed + 1)
    normals = rng.normal(size=(n, 3)).astype(np.float32)
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    return PointCloud(xyz=xyz, normals=normals, colors=rng.integers(0, 256, (n, 3), dtype=np.uint8))


def sync(backend: str) -> None:
    if backend != "cpu":
        import cupy  # noqa: PLC0415

        cupy.cuda.Device().synchronize()


def time_stage(cfg: SamplingConfig, ply: Path, out: Path, backend: str, repeat: int) -> tuple[float, int]:
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        paths = sample_fused_cloud(cfg, ply, out, overwrite=True, backend=backend)
        sync(backend)
        best = min(best, time.perf_counter() - t0)
    return best, len(read_ply(paths["samples"]))


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
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="  %(message)s")
    rows = []
    for pair in filter(None, args.fps.split(",")):
        n, m = (parse_count(v) for v in pair.split(":"))
        s = time_fps(n, m, args.backend, args.repeat)
        rows.append({"what": "fps", "n": n, "m": m, "seconds": s})
        print(f"FPS {n} -> {m} ({args.backend}): {s:.3f} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_sampling_") as tmp:
        for size in filter(None, args.sizes.split(",")):
            n = parse_count(size)
            ply = Path(tmp) / f"fused_{n}.ply"
            write_ply(ply, fused_like(n))
            for name in filter(None, args.settings.split(",")):
                cfg = dataclasses.replace(SamplingConfig(), **SETTINGS[name])
                print(f"stage, N = {n}, {name}: {cfg}", flush=True)
                s, kept = time_stage(cfg, ply, Path(tmp) / f"out_{n}_{name}", args.backend, args.repeat)
                rows.append({"what": "stage", "setting": name, "n": n, "samples": kept, "seconds": s})
                print(f"stage, N = {n}, {name} ({args.backend}): {s:.3f} s -> {kept} points", flush=True)
            ply.unlink()
    if args.json:
        args.json.write_text(json.dumps({"commit": commit(), "backend": args.backend, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
