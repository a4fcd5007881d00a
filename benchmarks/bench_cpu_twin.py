#!/usr/bin/env python
"""Replay the depth stage's PatchMatch problems through the CPU twin: CPU seconds per driver, and
whether the maps are byte-identical to the ones captured. The A/B tool of BENCHMARKS.md's
"CPU demo" section: on a shared machine a whole-stage run moves by tens of percent, a replay of
the same problems, alternated between two trees, does not.

    python benchmarks/bench_cpu_twin.py capture SCENE OUT CAPTURE_DIR [--views view_000,view_004]
        runs `mvs-pipeline run SCENE -o OUT -c small --set backend=cpu --stages load,views,depth`
        and pickles every PatchMatch call of the named views (problem, params, seed, result)
    python benchmarks/bench_cpu_twin.py replay 'CAPTURE_DIR/*.pkl'
        solves each again with this tree's twin (warm the Numba cache with a first replay)

CPU seconds are user + system of the process, all threads (getrusage).
"""

from __future__ import annotations

import argparse
import glob
import pickle
import resource
import sys
import time
from pathlib import Path

import numpy as np


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def capture(scene: str, out: str, capture_dir: str, views: list[str]) -> int:
    import mvs_pipeline.depth.stage as depth_stage  # noqa: PLC0415
    from mvs_pipeline.cli import main as cli_main  # noqa: PLC0415

    Path(capture_dir).mkdir(parents=True, exist_ok=True)
    solve = depth_stage.run_patchmatch
    calls: dict[str, int] = {}

    def recording(problem, params, backend, seed, restore_margin, **kw):
        c0 = _cpu()
        res = solve(problem, params, backend=backend, seed=seed, restore_margin=restore_margin, **kw)
        name = next((v for v in views if v in problem.name), None)
        n = calls[problem.name] = calls.get(problem.name, -1) + 1
        print(f"{problem.name} call {n}: {problem.shape}, {problem.num_sources} sources, {_cpu() - c0:.2f} CPU-s",
              flush=True)
        if name is not None:
            scale = problem.shape[1]
            with open(Path(capture_dir) / f"{name}.w{scale}.{n}.pkl", "wb") as f:
                pickle.dump({"problem": problem, "params": params, "seed": seed, "restore_margin": restore_margin,
                             "depth": np.asarray(res.depth), "normal": np.asarray(res.normal),
                             "cost": np.asarray(res.cost), "selected": np.asarray(res.selected_views)}, f)
        return res

    depth_stage.run_patchmatch = recording
    c0 = _cpu()
    rc = cli_main(["run", scene, "-o", out, "-c", "small", "--set", "backend=cpu", "--stages", "load,views,depth"])
    print(f"whole command: {_cpu() - c0:.1f} CPU-s")
    return rc


def replay(pattern: str) -> int:
    from mvs_pipeline.depth.patchmatch import cpu, cpu_solver  # noqa: PLC0415
    from mvs_pipeline.depth.patchmatch.problem import validate_problem  # noqa: PLC0415

    per_driver: dict[str, float] = {}

    def timed(name):
        driver = getattr(cpu, name)

        def run(*args):
            c0 = _cpu()
            driver(*args)
            per_driver[name] = per_driver.get(name, 0.0) + _cpu() - c0
        setattr(cpu, name, run)   # cpu_solver calls them as cpu.<name>

    for name in ("init_all", "propagate_color", "refine_color", "score_all"):
        timed(name)
    total, all_same = 0.0, True
    for path in sorted(glob.glob(pattern)):
        with open(path, "rb") as f:
            d = pickle.load(f)
        p = validate_problem(d["problem"])
        c0, w0 = _cpu(), time.perf_counter()
        res = cpu_solver.solve_cpu(p, d["params"], d["seed"], restore_margin=d["restore_margin"])
        cpu_s = _cpu() - c0
        total += cpu_s
        same = all(np.array_equal(np.asarray(a), d[k]) for a, k in (
            (res.depth, "depth"), (res.normal, "normal"), (res.cost, "cost"), (res.selected_views, "selected")))
        all_same &= same
        print(f"{Path(path).name}: {p.shape}, {p.num_sources} sources: {cpu_s:.2f} CPU-s "
              f"(wall {time.perf_counter() - w0:.2f} s), maps byte-identical to the capture: {same}", flush=True)
    print(f"total {total:.2f} CPU-s; " + ", ".join(f"{k} {v:.2f}" for k, v in per_driver.items()))
    return 0 if all_same else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("scene")
    c.add_argument("out")
    c.add_argument("capture_dir")
    c.add_argument("--views", default="view_000,view_004", help="image names (substrings) whose calls are kept")
    r = sub.add_parser("replay")
    r.add_argument("pattern", help="glob of captured .pkl files (quote it)")
    args = ap.parse_args(argv)
    if args.cmd == "capture":
        return capture(args.scene, args.out, args.capture_dir, args.views.split(","))
    return replay(args.pattern)


if __name__ == "__main__":
    sys.exit(main())
