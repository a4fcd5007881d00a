#!/usr/bin/env python
"""Host work the run repeats per view or per run, outside the GPU kernels (issue #36): process
time per call of

  validate   depth/patchmatch/problem.validate_problem, every (pass, view): SOURCES read-only
             WIDTHxHEIGHT images (the depth stage's cached ones), its per-source checks
  drop       depth/stage._drop_non_overlapping at the depth stage's start: VIEWS cameras on a line,
             SOURCES neighbours each
  map_stats  evaluation/depth_stats.map_stats, every view with GT depth: a WIDTHxHEIGHT estimate
             (1 % noise, 25 % holes) against its GT (NumPy; CuPy with --cuda)
  config     config/loader.load_config and dump_config, twice each a run (YAML)

Rows are the best of --repeat rounds, in process time (the machine may be shared; map_stats with
--cuda in wall time).

    python benchmarks/bench_host_checks.py --views 300 --sources 10 --size 1024x768
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np


def timed(fn, calls: int, repeat: int, clock=time.process_time) -> float:
    """Best, over `repeat` rounds, of the seconds per call of `fn()` (one untimed call first)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = clock()
        for _ in range(calls):
            fn()
        best = min(best, (clock() - t0) / calls)
    return best


def _cameras(n: int, w: int, h: int):
    """n cameras along x, 0.3 m apart, turning 0.01 rad each: (K, [R], [t]) cam_from_world."""
    K = np.array([[0.9 * w, 0, w / 2], [0, 0.9 * w, h / 2], [0, 0, 1]])
    Rs, ts = [], []
    for i in range(n):
        c, s = np.cos(0.01 * i), np.sin(0.01 * i)
        R = np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])
        Rs.append(R)
        ts.append(-R @ np.array([0.3 * i, 0.0, 0.0]))
    return K, Rs, ts


def bench_validate(args, w: int, h: int) -> float:
    from mvs_pipeline.depth.patchmatch.problem import PatchMatchProblem, validate_problem

    rng = np.random.default_rng(0)
    S = args.sources

    def image():
        a = rng.uniform(0, 255, (h, w)).astype(np.float32)
        a.flags.writeable = False   # as the depth stage's image cache hands them out
        return a

    K, Rs, ts = _cameras(S + 1, w, h)
    R = np.stack([Rs[i] @ Rs[0].T for i in range(1, S + 1)])
    t = np.stack([ts[i] - R[i - 1] @ ts[0] for i in range(1, S + 1)])
    problem = PatchMatchProblem(image(), [image() for _ in range(S)], K, np.stack([K] * S), R, t, 2.0, 40.0,
                                ref_camera_size=(w, h), src_camera_sizes=[(w, h)] * S)
    return timed(lambda: validate_problem(problem), 50, args.repeat)


def bench_drop(args, w: int, h: int) -> float:
    from mvs_pipeline.depth.stage import _drop_non_overlapping
    from mvs_pipeline.scene.scene import Scene, View
    from mvs_pipeline.views.selection import ViewSelection

    n, S = args.views, args.sources
    K, Rs, ts = _cameras(n, w, h)
    views = [View(i + 1, f"v{i}", Path(f"v{i}"), "PINHOLE", w, h, K, R, t) for i, (R, t) in enumerate(zip(Rs, ts))]
    scene = Scene(views, np.zeros((0, 3)), np.zeros((0, 3), np.uint8), np.zeros(1, np.int64), np.zeros(0, np.int32),
                  Path("."), Path("."))
    half = S // 2 + 1
    neighbors = [[j for j in range(max(0, i - half), min(n, i + half + 1)) if j != i][:S] for i in range(n)]
    sel = ViewSelection(neighbors, [[1.0] * len(s) for s in neighbors], np.array([[2.0, 40.0]] * n))
    logging.disable(logging.WARNING)   # the few end cameras' drops are not the point
    return timed(lambda: _drop_non_overlapping(scene, sel), 1, args.repeat)


def bench_map_stats(args, w: int, h: int) -> float:
    from mvs_pipeline.evaluation.depth_stats import map_stats

    xp = np
    if args.cuda:
        from mvs_pipeline.gpu.loader import import_cupy

        xp = import_cupy()
    rng = np.random.default_rng(0)
    gt = rng.uniform(3, 23, (h, w)).astype(np.float32)
    gt[rng.random((h, w)) < 0.1] = np.inf
    pred = (gt * (1 + rng.normal(0, 0.01, (h, w)))).astype(np.float32)
    pred[(rng.random((h, w)) < 0.25) | ~np.isfinite(gt)] = 0
    pred, gt = xp.asarray(pred), xp.asarray(gt)
    # on the GPU wall seconds (map_stats ends with a download, so the device's work is in them)
    return timed(lambda: map_stats(xp, pred, gt), 10, args.repeat, time.perf_counter if args.cuda else time.process_time)


def bench_config(args) -> tuple[float, float]:
    from mvs_pipeline.config.loader import dump_config, load_config

    cfg = load_config(None)
    return timed(lambda: load_config(None), 20, args.repeat), timed(lambda: dump_config(cfg), 20, args.repeat)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--views", type=int, default=300)
    ap.add_argument("--sources", type=int, default=10)
    ap.add_argument("--size", default="1024x768", help="WxH of the images and depth maps")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cuda", action="store_true", help="map_stats on the GPU (CuPy), in wall seconds")
    args = ap.parse_args()
    w, h = (int(v) for v in args.size.lower().split("x"))
    print(f"validate   {args.sources} sources {w}x{h}: {bench_validate(args, w, h) * 1e3:.2f} ms per call")
    print(f"drop       {args.views} views x {args.sources} sources: {bench_drop(args, w, h) * 1e3:.1f} ms")
    print(f"map_stats  {w}x{h} ({'CuPy' if args.cuda else 'NumPy'}): {bench_map_stats(args, w, h) * 1e3:.1f} ms per view")
    load, dump = bench_config(args)
    print(f"config     load {load * 1e3:.1f} ms, dump {dump * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
