#!/usr/bin/env python
"""The planar prior's build (depth/planar_prior/) timed by part on one view of a synthetic scene:
its true depth (0.2 % noise) and random costs in 0-0.3 (a third reliable) stand in for a
photometric pass, the next views' true depths for the sources' maps.

    python benchmarks/bench_prior_build.py [SCENE] [--view 0] [--sources 7] [--repeat 5] [--backend cpu|cuda]

SCENE is made by `mvs-pipeline synth`; without it an 8-view 800x600 courtyard (seed 103) is made
under --work: the size of the one-scale courtyard's planar pass and of DTU's coarse scale. Prints the best of --repeat, in
seconds, for: support points (the per-cell kernel or twin, and the picks' download), the
triangulation and the triangles' planes (host), owners + fill (kernel or twin), the whole
build_planar_prior, and with --scipy scipy's Delaunay of the same points (what the build used
before). On the GPU the maps are uploaded first, as the depth stage keeps them there, and every
part ends with a device synchronisation (the stage itself waits only once per view, for the picks).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mvs_pipeline.depth.planar_prior import PriorSettings, SourceMaps, build_planar_prior, support_points  # noqa: E402
from mvs_pipeline.depth.planar_prior.triangles import triangle_planes, triangulate  # noqa: E402
from mvs_pipeline.gpu.backend import resolve_backend  # noqa: E402
from mvs_pipeline.scene.workspace import read_scene  # noqa: E402
from mvs_pipeline.synth.oracle import gt_depth  # noqa: E402


def best_of(repeat: int, fn, sync):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scene", type=Path, nargs="?", default=None,
                    help="a scene made by `mvs-pipeline synth` (default: a courtyard made under --work)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_prior_build"))
    ap.add_argument("--view", type=int, default=0)
    ap.add_argument("--sources", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--scipy", action="store_true", help="also time scipy's Delaunay of the support points")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    args.backend = resolve_backend(args.backend)
    if args.scene is None:
        args.scene = args.work / "courtyard_v8_800x600_s103"
        if not (args.scene / "sparse").exists():
            from mvs_pipeline.synth import generate_scene  # noqa: PLC0415

            generate_scene("courtyard", args.scene, views=8, width=800, height=600, seed=103, scans=False)

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
    H, W = depth.shape
    K_inv = np.linalg.inv(ref.K).ravel()

    def sync():
        pass

    if args.backend == "cuda":
        from mvs_pipeline.depth.planar_prior import cuda as kernels  # noqa: PLC0415
        from mvs_pipeline.gpu.loader import import_cupy  # noqa: PLC0415

        cp = import_cupy()
        depth, cost = cp.asarray(depth), cp.asarray(cost)
        sources = [SourceMaps(cp.asarray(s.depth), s.K, s.R, s.t) for s in sources]
        xp = cp

        def sync():   # noqa: F811 (the GPU's)
            cp.cuda.Device().synchronize()
    else:
        from mvs_pipeline.depth.planar_prior import cpu as kernels  # noqa: PLC0415

        xp = np
    build_planar_prior(depth, cost, ref.K, settings, sources, backend=args.backend, keep_on_device=True)  # compile
    sync()
    t = {}
    t["support_points"], (xs, ys, zs) = best_of(
        args.repeat, lambda: support_points(depth, cost, ref.K, settings, sources, backend=args.backend), sync)
    t["triangulate"], simp = best_of(args.repeat, lambda: triangulate(xs, ys, W, H), sync)
    t["planes"], (tri, planes) = best_of(
        args.repeat, lambda: triangle_planes(ref.K, xs, ys, zs, simp, settings.max_edge), sync)
    tri_x, planes_x = xp.asarray(tri), xp.asarray(planes)
    t["owner_fill"], _ = best_of(args.repeat, lambda: kernels.prior_fill(
        depth, cost, kernels.prior_owner(tri_x, W, H), planes_x, np.float32(settings.max_cost), K_inv), sync)
    t["whole_build"], (_, stats) = best_of(args.repeat, lambda: build_planar_prior(
        depth, cost, ref.K, settings, sources, backend=args.backend, keep_on_device=True), sync)
    if args.scipy:
        from scipy.spatial import Delaunay  # noqa: PLC0415

        uv = np.stack([xs + 0.5, ys + 0.5], -1)
        t["scipy_delaunay"], _ = best_of(args.repeat, lambda: Delaunay(uv), sync)
    stats["prior_pixels"] = int(stats["prior_pixels"])
    print(f"{W}x{H}, {len(sources)} sources, backend {args.backend}; {stats}; seconds (best of {args.repeat}): "
          + ", ".join(f"{k} {v:.4f}" for k, v in t.items()))
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "stats": stats,
                                         "seconds": t}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
