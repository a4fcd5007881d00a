#!/usr/bin/env python3
"""Benchmark three_nn (grid search) and three_interpolate: 4M queries against 100k known points
on surface-like clouds, GPU kernels against scipy's cKDTree and the Numba twin on the CPU.

    python benchmarks/bench_three_nn.py                    # 4M queries, 100k known, 16 channels
    python benchmarks/bench_three_nn.py --queries 1M --known 1M --methods cpu-grid,ckdtree --json out.json

The GPU results are compared with the CPU twin on a subset of the queries (bit-exact).
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

from mvs_pipeline.sampling.points.grid import choose_grid  # noqa: E402
from mvs_pipeline.sampling.points.three_nn.ops import inverse_distance_weights  # noqa: E402


def timed(fn, sync=None, repeat=1):
    best, out = float("inf"), None
    for _ in range(repeat):
        if sync:
            sync()
        t0 = time.perf_counter()
        out = fn()
        if sync:
            sync()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", default="4M", help="query (unknown) points (default: %(default)s)")
    ap.add_argument("--known", default="100k", help="known points (default: %(default)s)")
    ap.add_argument("--channels", type=int, default=16, help="feature channels interpolated (default: %(default)s)")
    ap.add_argument("--methods", default="gpu,ckdtree,cpu-grid", help="any of gpu, ckdtree, cpu-grid")
    ap.add_argument("--repeat", type=int, default=3, help="GPU runs, best kept (default: %(default)s)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args()
    # after the arguments: Numba's import is ~2 s, which --help need not pay
    from mvs_pipeline.sampling.points.three_nn import cpu as cpu_nn  # noqa: PLC0415
    n, m = parse_count(args.queries), parse_count(args.known)
    methods = [s.strip() for s in args.methods.split(",")]
    queries = surface_cloud(n, seed=1)
    known = surface_cloud(m, seed=2)
    feats = np.random.default_rng(3).normal(size=(m, args.channels)).astype(np.float32)
    t_grid, grid = timed(lambda: choose_grid(known))
    rows = []
    device = "cpu only"
    print(f"{n} queries, {m} known, {args.channels} channels; grid {grid.dims} cells of {grid.cell_size:.4g} "
          f"(chosen in {t_grid:.3f} s on the CPU); commit {commit()}")

    def report(what, seconds, note=""):
        print(f"  {what:<40} {seconds:9.4f} s  {n / seconds / 1e6:9.1f} M queries/s  {note}")
        rows.append({"what": what, "seconds": seconds, "note": note})

    if "gpu" in methods:
        import cupy

        from mvs_pipeline.sampling.points.three_nn import cuda as knn

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        device = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        q_gpu, k_gpu, f_gpu = cupy.asarray(queries), cupy.asarray(known), cupy.asarray(feats)
        sync = cupy.cuda.Device().synchronize
        knn.three_nn(q_gpu[:1000], k_gpu, grid)  # compile outside the timings
        t_build, built = timed(lambda: knn.build_grid(k_gpu, grid), sync, args.repeat)
        t_query, (d, i) = timed(lambda: knn.three_nn(q_gpu, k_gpu, grid, built=built), sync, args.repeat)
        w = cupy.asarray(inverse_distance_weights(d.get(), i.get()))
        knn.three_interpolate(f_gpu, i, w)
        t_fwd, out = timed(lambda: knn.three_interpolate(f_gpu, i, w), sync, args.repeat)
        grad_out = cupy.ones_like(out)
        knn.three_interpolate_backward(grad_out, i, w, m)
        t_bwd, _ = timed(lambda: knn.three_interpolate_backward(grad_out, i, w, m), sync, args.repeat)
        print(f"device: {device}")
        report("gpu grid build (sort known by cell)", t_build)
        report("gpu three_nn query", t_query)
        report(f"gpu three_interpolate forward (C={args.channels})", t_fwd,
               f"{(n * args.channels * 4 + n * 24) / t_fwd / 1e9:.0f} GB/s written+read")
        report(f"gpu three_interpolate backward (C={args.channels})", t_bwd, "atomics")
        check = slice(0, min(n, 200000))
        ref_d, ref_i = cpu_nn.three_nn(queries[check], known, grid)
        if not (np.array_equal(d[check].get(), ref_d) and np.array_equal(i[check].get(), ref_i)):
            print("MISMATCH between the GPU kernel and the CPU twin")
            return 1
        print(f"  (GPU == CPU twin on the first {check.stop} queries)")
    if "ckdtree" in methods:
        from scipy.spatial import cKDTree

        t_tree, tree = timed(lambda: cKDTree(known))
        t_q, _ = timed(lambda: tree.query(queries, k=3, workers=-1))
        report("scipy cKDTree build", t_tree)
        report("scipy cKDTree query k=3 (all cores)", t_q)
    if "cpu-grid" in methods:
        cpu_nn.three_nn(queries[:1000], known, grid)  # compile
        t_c, _ = timed(lambda: cpu_nn.three_nn(queries, known, grid))
        report("numba grid twin (build + query)", t_c)
    if args.json:
        args.json.write_text(json.dumps({"device": device, "commit": commit(), "queries": n, "known": m,
                                         "channels": args.channels, "rows": rows}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
