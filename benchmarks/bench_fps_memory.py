#!/usr/bin/env python3
"""Exact FPS of a large host cloud on the GPU, the fast Morton sort against the lean one
(sampling/points/fps/memory.py): seconds, CuPy's pool peak against each estimate, the same samples.

    python benchmarks/bench_fps_memory.py                      # 155 M points (the 1000-view street), M = 200k
    python benchmarks/bench_fps_memory.py --sizes 20M,155M --samples 200k --json fps_memory.json

Each run starts from an emptied pool cache without a limit; the pool keeps every block it takes,
so its total after the run is the run's held peak (the lean sort empties the cache once itself,
after its sort). The fast sort's held peak also counts blocks it cached and could not reuse (a
limit would have the pool free them), so it may pass its estimate, which counts live arrays. Times
include the upload from the host, as in the sampling stage.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_fps import commit, parse_count, surface_cloud  # noqa: E402

from mvs_pipeline.sampling.points.fps import memory  # noqa: E402

GIB = 2**30


def run_once(cupy, xyz: np.ndarray, m: int, lean: bool) -> tuple[float, int, np.ndarray]:
    """(seconds, pool bytes held at the end above the start, indices) of one upload + fps_batched."""
    from mvs_pipeline.sampling.points.fps.batched import fps_batched  # noqa: PLC0415

    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    before = pool.total_bytes()
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    idx, _d2, _info = fps_batched(cupy.asarray(xyz), m, 0, lean=lean)
    out = idx.get()
    seconds = time.perf_counter() - t0
    return seconds, pool.total_bytes() - before, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="155431438", help="point counts N (default: %(default)s)")
    ap.add_argument("--samples", default="200k", help="samples M (default: %(default)s, the stage's cap)")
    ap.add_argument("--repeat", type=int, default=2, help="runs per variant, best time kept (default: %(default)s)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args()
    import cupy  # noqa: PLC0415

    m = parse_count(args.samples)
    rows = []
    print(f"commit {commit()}; M = {m}\n{'N':>11} {'sort':>5} {'s':>7} {'peak GiB':>9} {'estimate GiB':>13} same")
    for n in (parse_count(s) for s in args.sizes.split(",")):
        xyz = surface_cloud(n, seed=5)
        run_once(cupy, xyz[:100_000], 10, lean=False)   # kernels compiled and loaded outside the timing
        run_once(cupy, xyz[:100_000], 10, lean=True)
        reference = None
        for lean in (False, True):
            best, held = float("inf"), 0
            for _ in range(args.repeat):
                seconds, held_once, idx = run_once(cupy, xyz, m, lean)
                best, held = min(best, seconds), max(held, held_once)
            reference = idx if reference is None else reference
            phases = (memory.lean_phases if lean else memory.fast_phases)(n, m, upload=True)
            row = {"n": n, "m": m, "sort": "lean" if lean else "fast", "seconds": best, "peak_bytes": held,
                   "estimate_bytes": memory.need_bytes(phases), "same_samples": bool(np.array_equal(idx, reference))}
            rows.append(row)
            print(f"{n:>11} {row['sort']:>5} {best:7.3f} {held / GIB:9.2f} {row['estimate_bytes'] / GIB:13.2f} "
                  f"{row['same_samples']}")
    if args.json:
        args.json.write_text(json.dumps({"commit": commit(), "rows": rows}, indent=1))
    return 0 if all(r["same_samples"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
