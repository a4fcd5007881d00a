#!/usr/bin/env python3
"""The planar prior's host build (depth/planar_prior.py) timed by part on one view of a synthetic
scene: its true depth (0.2 % noise) and random costs in 0-0.3 (a third reliable) stand in for a
photometric pass, and the next views' true depths for the sources.

    python scripts/bench_prior_build.py SCENE [--view 0] [--sources 7] [--repeat 3]

Prints the best of --repeat for: the support points (the sources' consistency check of every
reliable pixel, then the lowest cost per cell), Delaunay, `find_simplex` for every pixel, and the
whole build_planar_prior.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script from anywhere
from mvs_pipeline.depth.planar_prior import (  # noqa: E402
    PriorSettings,
    SourceMaps,
    build_planar_prior,
    support_points,
)
from mvs_pipeline.scene.workspace import read_scene  # noqa: E402
from mvs_pipeline.synth.oracle import gt_depth  # noqa: E402


def best_of(repeat: int, fn):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scene", type=Path, help="a scene made by `mvs-pipeline synth`")
    ap.add_argument("--view", type=int, default=0)
    ap.add_argument("--sources", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    from scipy.spatial import Delaunay  # noqa: PLC0415

    scene = read_scene(args.scene / "images", args.scene / "sparse" / "0")
    gt_dir = args.scene / "gt" / "depth"
    ref = scene.views[args.view]
    rng = np.random.default_rng(0)
    truth = gt_depth(gt_dir, ref).astype(np.float32)
    depth = np.where(truth > 0, truth * (1 + rng.normal(0, 0.002, truth.shape)), 0).astype(np.float32)
    cost = rng.uniform(0, 0.3, truth.shape).astype(np.float32)
    sources = []
    for k in [k for k in range(scene.num_views) if k != args.view][:args.sources]:
        src = scene.views[k]
        R = src.R @ ref.R.T
        sources.append(SourceMaps(gt_depth(gt_dir, src).astype(np.float32), src.K, R, src.t - R @ ref.t))
    settings = PriorSettings(max_cost=0.1, grid=5, max_edge=150.0, min_consistent=1, max_reproj_error=2.0)
    t_support, (xs, ys) = best_of(args.repeat, lambda: support_points(depth, cost, ref.K, settings, sources))
    reliable = int((np.isfinite(depth) & (depth > 0) & (cost < settings.max_cost)).sum())
    uv = np.stack([xs + 0.5, ys + 0.5], -1)
    t_tri, tri = best_of(args.repeat, lambda: Delaunay(uv))
    gy, gx = np.mgrid[0:ref.height, 0:ref.width]
    pixels = np.stack([gx.ravel() + 0.5, gy.ravel() + 0.5], -1)
    t_find, _ = best_of(args.repeat, lambda: tri.find_simplex(pixels))
    normal = np.zeros(truth.shape + (3,), np.float32)
    t_build, (_, stats) = best_of(args.repeat, lambda: build_planar_prior(depth, normal, cost, ref.K, settings,
                                                                          sources))
    print(f"{ref.width}x{ref.height}, {len(sources)} sources, {len(xs)} support points, {reliable} reliable "
          f"pixels; seconds (best of {args.repeat}): support points {t_support:.3f}, Delaunay {t_tri:.3f}, "
          f"find_simplex {t_find:.3f}, whole build "
          f"{t_build:.3f}; {stats}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
