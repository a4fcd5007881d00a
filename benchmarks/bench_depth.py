#!/usr/bin/env python
"""Benchmark the whole depth stage (ACMM: all scales, photometric + geometric passes, file I/O
included) on synthetic scenes: seconds per image, where the time goes, GPU memory peak.

    python benchmarks/bench_depth.py --sizes 800x600,1600x1066,3200x2130 --json out.json
    python benchmarks/bench_depth.py --sizes 320x240 --views 8 --sources 7 --backend cpu
    python benchmarks/bench_depth.py --scene object --sizes 320x240 --views 8 --sources 7 --backend cpu \
        --set depth.coarsest_max_size=160       # the demo's depth stage (scripts/demo.sh, -c small)

Each size renders the `--scene` scene (default courtyard; `mvs-pipeline synth`, rendering in worker processes) with
`--views` views, runs the load and views stages with `--sources` neighbours, then times the
depth stage alone: per-image time = depth-stage wall time / views. The first pass compiles the
CUDA kernels (NVRTC, cached per process): a warm-up run on a tiny scene happens first so the
timed runs do not include compilation. On the CPU backend the warm-up loads (or, with an empty
Numba cache, compiles) the twin; its CPU seconds are printed. CPU seconds (user + system, all
threads, getrusage) are reported beside the wall time: on a shared machine they move much
less than the wall time does.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent.parent).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _cpu_seconds() -> float:
    """User + system seconds of this process so far, all threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _config(sources: int, backend: str, extra: list[str]):
    from mvs_pipeline.config.loader import load_config  # noqa: PLC0415

    sets = [f"backend={backend}", f"views.num_neighbors={sources}", *extra]
    return load_config(None, sets)


def bench_size(width: int, height: int, views: int, sources: int, backend: str, workdir: Path, workers: int,
               extra: list[str], scene_kind: str = "courtyard") -> dict:
    from mvs_pipeline.depth import stage as depth_stage  # noqa: PLC0415
    from mvs_pipeline.scene import stage as load_stage  # noqa: PLC0415
    from mvs_pipeline.synth import generate_scene  # noqa: PLC0415
    from mvs_pipeline.views import stage as views_stage  # noqa: PLC0415

    scene_dir = workdir / f"{scene_kind}_{width}x{height}_v{views}"
    t0 = time.perf_counter()
    if not (scene_dir / "gt" / "scene.json").is_file():
        generate_scene(scene_kind, scene_dir, views=views, width=width, height=height, seed=0, scans=False,
                       workers=workers)
    synth_s = time.perf_counter() - t0
    cfg = _config(sources, backend, extra)
    out = workdir / f"run_{width}x{height}"
    shutil.rmtree(out, ignore_errors=True)
    scene = load_stage.prepare_workspace(cfg, scene_dir, out, None, None, overwrite=True, progress=False)
    sel = views_stage.select_and_write(cfg.views, scene, out, overwrite=True)
    prof = depth_stage.Profile()
    t0, c0 = time.perf_counter(), _cpu_seconds()
    counts = depth_stage.compute_depth_maps(cfg, scene, sel, out, backend, overwrite=True, progress=False, profile=prof)
    wall, cpu = time.perf_counter() - t0, _cpu_seconds() - c0
    n = counts["depth_views"]
    return {"size": [width, height], "views": views, "sources": sources, "depth_views": n,
            "scales": counts["depth_passes"] // (cfg.depth.geometric_passes + 1),
            "passes": counts["depth_passes"], "wall_s": wall, "per_image_s": wall / max(n, 1),
            "cpu_s": cpu, "cpu_per_image_s": cpu / max(n, 1),
            "seconds_by_category": prof.seconds, "seconds_by_pass": counts["depth_pass_seconds"],
            "solver_ms_by_phase": prof.solver_ms, "gpu_used_peak_bytes": prof.gpu_used_peak_bytes,
            "synth_s": synth_s}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="800x600,1600x1066,3200x2130", help="WxH list")
    ap.add_argument("--scene", default="courtyard", help="synthetic scene kind (mvs-pipeline synth --scene)")
    ap.add_argument("--views", type=int, default=21, help="views per scene (>= sources + 1)")
    ap.add_argument("--sources", type=int, default=20, help="source views per reference")
    ap.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--workdir", default=os.environ.get("TMPDIR", "/tmp") + "/bench_depth")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="rendering processes")
    ap.add_argument("--set", action="append", default=[], help="extra config overrides section.key=value")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--generate-only", action="store_true", help="only render the scenes (into --workdir)")
    args = ap.parse_args(argv)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if args.generate_only:
        from mvs_pipeline.synth import generate_scene  # noqa: PLC0415

        for size in args.sizes.split(","):
            w, h = (int(v) for v in size.lower().split("x"))
            generate_scene(args.scene, workdir / f"{args.scene}_{w}x{h}_v{args.views}", views=args.views, width=w,
                           height=h, seed=0, scans=False, workers=args.workers)
        return 0
    device = "CPU"
    if args.backend == "cuda":
        import cupy as cp  # noqa: PLC0415

        device = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    c0 = _cpu_seconds()
    # warm-up: compile every kernel variant the timed runs use (same source count, so the same
    # PM_MAX_VIEWS variants; two scales: JBU and restore too), or load / compile the Numba twin
    # (any size compiles the same twin: the smallest two-scale one, as the CPU matches slowly)
    w0, h0, c0_size = (160, 120, 80) if args.backend == "cuda" else (64, 48, 32)
    bench_size(w0, h0, args.views, args.sources, args.backend, workdir, args.workers,
               [*args.set, f"depth.coarsest_max_size={c0_size}"], args.scene)
    print(f"warm-up (compiles on an empty cache): {_cpu_seconds() - c0:.1f} CPU-s", flush=True)
    results = {"device": device, "commit": _commit(), "backend": args.backend, "runs": []}
    for size in args.sizes.split(","):
        w, h = (int(v) for v in size.lower().split("x"))
        r = bench_size(w, h, args.views, args.sources, args.backend, workdir, args.workers, args.set, args.scene)
        results["runs"].append(r)
        cats = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["seconds_by_category"].items()))
        print(f"{w}x{h}: {r['depth_views']} views, {r['scales']} scales, {r['passes']} passes: "
              f"{r['per_image_s']:.3f} s/image (wall {r['wall_s']:.1f} s; {cats}); "
              f"{r['cpu_per_image_s']:.2f} CPU-s/image ({r['cpu_s']:.1f} CPU-s); "
              f"GPU used peak {r['gpu_used_peak_bytes'] / 2**30:.2f} GiB", flush=True)
        print("   solver ms: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(r["solver_ms_by_phase"].items())),
              flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
