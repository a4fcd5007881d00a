#!/usr/bin/env python
"""Benchmark single-scale PatchMatch: GPU time per red+black iteration, texture-fetch rate,
registers / local memory / occupancy, peak GPU memory, and the CPU backend's time.

    python benchmarks/bench_patchmatch.py                      # everything the GPU and CPU can run
    python benchmarks/bench_patchmatch.py --skip-cpu --json out.json
    python benchmarks/bench_patchmatch.py --ptxas              # also print nvcc -Xptxas -v (needs nvcc)

Scenes are the analytic toy scene (textured planes, mvs_pipeline/patchmatch/toy_scene.py),
rendered at 1600x1066; the 3200x2130 memory case upsamples it 2x (content does not matter for
memory). Fetch counts are an upper bound: every (candidate, source) window is counted, including
those the bounds check rejects without fetching; refinement and the current hypothesis count only
selected sources (popcount of selected_views), as the kernels do.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time

import cv2
import numpy as np

from mvs_pipeline.depth.patchmatch import PatchMatchParams, validate_problem
from mvs_pipeline.depth.patchmatch.toy_scene import make_toy_scene
from mvs_pipeline.depth.patchmatch.window import samples_per_row

# Texture units per SM (Volta..Hopper): the nominal peak of filtered fetches per clock per SM.
TEX_UNITS_PER_SM = 4


def _popcount(a: np.ndarray) -> np.ndarray:
    return np.unpackbits(a.astype("<u4").view(np.uint8).reshape(*a.shape, 4), axis=-1).sum(-1)


def _upsample(problem, factor: int):
    def up(img):
        return cv2.resize(img, (img.shape[1] * factor, img.shape[0] * factor), interpolation=cv2.INTER_LINEAR)

    S = np.diag([factor, factor, 1.0])
    return dataclasses.replace(problem, ref_image=up(problem.ref_image), src_images=[up(s) for s in problem.src_images],
                               K_ref=S @ problem.K_ref, K_src=np.einsum("ij,sjk->sik", S, problem.K_src))


def kernel_report(cp, radius, step, num_sources, block_y, num_refine):
    """num_regs / local bytes / shared memory (pm_refine: static + dynamic for num_refine) and
    the resulting occupancy of the solver kernels."""
    from mvs_pipeline.depth.patchmatch import cuda as kpm  # noqa: PLC0415

    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    opts = kpm.compile_options(radius, step, num_sources, block_y)
    out = {}
    for name, threads in (("pm_propagate", 16 * block_y), ("pm_refine", 16 * block_y), ("pm_init", 256)):
        k = kpm.kernel(name, opts)
        a = k.attributes
        regs = a["num_regs"]
        regs_per_warp = -(-regs * 32 // 256) * 256          # allocation granularity: 256 per warp
        warps = -(-threads // 32)
        by_regs = props["regsPerMultiprocessor"] // (regs_per_warp * warps)
        by_threads = props["maxThreadsPerMultiProcessor"] // threads
        smem = a["shared_size_bytes"]
        if name == "pm_refine":
            smem += kpm.refine_shared_bytes(opts, num_refine, block_y)
        smem += props.get("reservedSharedMemPerBlock", 0)   # the runtime's own 1 KB per block
        by_smem = props["sharedMemPerMultiprocessor"] // smem if smem else 10**9
        blocks = min(by_regs, by_threads, by_smem, 32)
        occ = blocks * warps * 32 / props["maxThreadsPerMultiProcessor"]
        out[name] = {"registers": regs, "local_bytes": a["local_size_bytes"], "shared_bytes": smem,
                     "threads_per_block": threads, "blocks_per_sm": blocks, "occupancy": occ}
    return out


def kernel_split(problem, params, seed, block_y, iterations: int) -> dict:
    """GPU ms of the propagate and the refine launches (both colours) per iteration, averaged over
    iterations 2..n, with their fetch rates: the same launch sequence as solve_cuda, timed
    launch by launch."""
    import cupy as cp  # noqa: PLC0415

    from mvs_pipeline.depth.patchmatch import cpu  # noqa: PLC0415
    from mvs_pipeline.depth.patchmatch import cuda as kpm  # noqa: PLC0415
    from mvs_pipeline.depth.patchmatch.packing import pack_params  # noqa: PLC0415
    from mvs_pipeline.depth.patchmatch.problem import source_matrices  # noqa: PLC0415

    H, W = problem.shape
    S = problem.num_sources
    opts = kpm.compile_options(params.window_radius, params.window_step, S, block_y)
    dev = kpm.DeviceProblem(problem, *source_matrices(problem))
    plane = cp.empty((H, W, 4), cp.float32)
    cost = cp.empty((H, W), cp.float32)
    selected = cp.zeros((H, W), cp.uint32)
    weights = cp.zeros((S, H, W), cp.uint8)
    f, i = kpm.device_params(*pack_params(params, problem, 0, seed))
    kpm.launch_init(dev, opts, f, i, None, None, plane, cost, selected)
    ms = {"propagate": 0.0, "refine": 0.0}
    for it in range(iterations):
        f, i = kpm.device_params(*pack_params(params, problem, it, seed))
        for color in (0, 1):
            for name in ("propagate", "refine"):
                a, b = cp.cuda.Event(), cp.cuda.Event()
                a.record()
                if name == "propagate":
                    kpm.launch_propagate(dev, opts, block_y, f, i, color, cpu.propagate_pass(it, color),
                                         plane, cost, selected, weights)
                else:
                    kpm.launch_refine(dev, opts, block_y, f, i, color, cpu.refine_pass(it, color), plane, cost,
                                      weights, params.num_refine)
                b.record()
                b.synchronize()
                if it > 0:
                    ms[name] += cp.cuda.get_elapsed_time(a, b) / (iterations - 1)
    dev.release()
    return ms


def bench_gpu(width, height, sources, iterations, seed, block_y, num_refine=None):
    import cupy as cp  # noqa: PLC0415

    from mvs_pipeline.depth.patchmatch.cuda_solver import solve_cuda  # noqa: PLC0415

    t0 = time.perf_counter()
    scene = make_toy_scene(width, height, num_sources=sources, seed=seed)
    render_s = time.perf_counter() - t0
    params = PatchMatchParams(iterations=iterations)
    if num_refine is not None:
        params = dataclasses.replace(params, num_refine=num_refine)
    problem = validate_problem(scene.problem)
    solve_cuda(problem, dataclasses.replace(params, iterations=1), seed, block_y)   # compile + warm-up
    timings: dict = {}
    res = solve_cuda(problem, params, seed, block_y, timings=timings)
    iters = [timings[f"iteration_{k}"] for k in range(iterations)]
    ns = samples_per_row(params.window_radius, params.window_step) ** 2
    sel = _popcount(res.selected_views).astype(np.float64)
    fetches_per_iter = float((8 * sources + (1 + params.num_refine) * sel).sum() * ns)
    split = kernel_split(problem, params, seed, block_y, iterations) if iterations > 1 else {}
    if split:   # propagate: 8 candidates x all sources + the current hypothesis x selected ones
        split["propagate_fetches_per_s"] = float((8 * sources + sel).sum() * ns) / (split["propagate"] * 1e-3)
        split["refine_fetches_per_s"] = float((params.num_refine * sel).sum() * ns) / (split["refine"] * 1e-3)
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    clock_hz = props["clockRate"] * 1e3
    peak = props["multiProcessorCount"] * TEX_UNITS_PER_SM * clock_hz
    mean_ms = float(np.mean(iters))
    gt = scene.gt_depth
    within = float((np.abs(res.depth - gt) / gt < 0.01).mean())
    return {
        "case": f"{width}x{height}, {sources} sources", "device": props["name"].decode() if isinstance(
            props["name"], bytes) else str(props["name"]),
        "init_ms": timings["init"], "iteration_ms": iters, "mean_iteration_ms": mean_ms,
        "fetches_per_iteration": fetches_per_iter, "fetches_per_s": fetches_per_iter / (mean_ms * 1e-3),
        "peak_fetches_per_s": peak, "fraction_of_peak": fetches_per_iter / (mean_ms * 1e-3) / peak,
        "mean_selected_views": float(sel.mean()), "within_1pct_after": within, "render_s": render_s,
        "num_refine": params.num_refine, "kernel_split_ms": split,
        "kernels": kernel_report(cp, params.window_radius, params.window_step, sources, block_y, params.num_refine),
    }


def bench_memory(sources, seed):
    import cupy as cp  # noqa: PLC0415

    from mvs_pipeline.depth.patchmatch.cuda_solver import solve_cuda  # noqa: PLC0415

    scene = make_toy_scene(1600, 1065, num_sources=sources, seed=seed)
    problem = validate_problem(_upsample(scene.problem, 2))                          # 3200 x 2130
    cp.get_default_memory_pool().free_all_blocks()
    cp.cuda.Device().synchronize()
    free0, total = cp.cuda.runtime.memGetInfo()
    mem: dict = {}
    solve_cuda(problem, PatchMatchParams(iterations=1), seed, memory=mem)
    used = mem["used_bytes"] - (total - free0)
    return {"case": f"{problem.shape[1]}x{problem.shape[0]}, {sources} sources", "gpu_bytes": int(used),
            "gpu_gib": used / 2**30}


def bench_cpu(width, height, sources, iterations, seed):
    import numba  # noqa: PLC0415

    from mvs_pipeline.depth.patchmatch.cpu_solver import solve_cpu  # noqa: PLC0415

    scene = make_toy_scene(width, height, num_sources=sources, seed=seed)
    problem = validate_problem(scene.problem)
    solve_cpu(validate_problem(make_toy_scene(32, 24, num_sources=sources).problem),
              PatchMatchParams(iterations=1), seed)                                  # JIT warm-up
    t0 = time.perf_counter()
    res = solve_cpu(problem, PatchMatchParams(iterations=iterations), seed)
    sec = time.perf_counter() - t0
    gt = scene.gt_depth
    return {"case": f"{width}x{height}, {sources} sources, {iterations} iterations", "seconds": sec,
            "threads": numba.get_num_threads(), "within_1pct": float((np.abs(res.depth - gt) / gt < 0.01).mean())}


def ptxas_report(radius, step, sources, block_y):
    from mvs_pipeline.depth.patchmatch.cuda import compile_options  # noqa: PLC0415
    from mvs_pipeline.paths import CUDA_DIR  # noqa: PLC0415

    lines = []
    for arch in ("sm_90", "sm_80"):
        cmd = ["nvcc", "-std=c++17", f"-arch={arch}", f"-I{CUDA_DIR}", *compile_options(radius, step, sources, block_y),
               "-c",
               str(CUDA_DIR / "depth_patchmatch.cu"), "-o", "/dev/null", "-Xptxas", "-v"]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except FileNotFoundError:
            return ["nvcc not found"]
        lines += [ln for ln in p.stderr.splitlines() if "pm_" in ln or "registers" in ln or "spill" in ln]
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sources", type=int, nargs="+", default=[10, 20])
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1066)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--block-y", type=int, default=8)
    ap.add_argument("--num-refine", type=int, help="refinement hypotheses (default: the config default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-gpu", action="store_true")
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--ptxas", action="store_true", help="print nvcc -Xptxas -v for sm_90 and sm_80")
    ap.add_argument("--json", help="also write all numbers to this JSON file")
    args = ap.parse_args(argv)
    report: dict = {"gpu": [], "memory": None, "cpu": None}

    if not args.skip_gpu:
        print(f"{'case':28s} {'init ms':>8s} {'iter ms (each)':>22s} {'mean':>7s} {'Gfetch/s':>9s} "
              f"{'% peak':>7s} {'views':>6s} {'regs p/r':>9s} {'local p/r':>10s} {'occ p/r':>10s}")
        for s in args.sources:
            r = bench_gpu(args.width, args.height, s, args.iterations, args.seed, args.block_y, args.num_refine)
            report["gpu"].append(r)
            kp, kr = r["kernels"]["pm_propagate"], r["kernels"]["pm_refine"]
            print(f"{r['case']:28s} {r['init_ms']:8.2f} {' '.join(f'{t:6.2f}' for t in r['iteration_ms']):>22s} "
                  f"{r['mean_iteration_ms']:7.2f} {r['fetches_per_s'] / 1e9:9.1f} {100 * r['fraction_of_peak']:6.1f}% "
                  f"{r['mean_selected_views']:6.2f} {kp['registers']:4d}/{kr['registers']:<4d} "
                  f"{kp['local_bytes']:5d}/{kr['local_bytes']:<4d} {kp['occupancy']:.2f}/{kr['occupancy']:.2f}")
            sp = r["kernel_split_ms"]
            if sp:
                print(f"   per iteration: propagate {sp['propagate']:.2f} ms "
                      f"({sp['propagate_fetches_per_s'] / 1e9:.0f} Gfetch/s), refine {sp['refine']:.2f} ms "
                      f"({sp['refine_fetches_per_s'] / 1e9:.0f} Gfetch/s), num_refine {r['num_refine']}")
        if report["gpu"]:
            print(f"device: {report['gpu'][0]['device']}; peak = SMs x {TEX_UNITS_PER_SM} texture units x clock = "
                  f"{report['gpu'][0]['peak_fetches_per_s'] / 1e9:.0f} Gfetch/s (nominal)")
    if not args.skip_gpu and not args.skip_memory:
        m = bench_memory(20, args.seed)
        report["memory"] = m
        print(f"memory {m['case']}: {m['gpu_gib']:.2f} GiB of GPU memory (goal <= 4 GB)")
    if not args.skip_cpu:
        c = bench_cpu(640, 480, 8, 3, args.seed)
        report["cpu"] = c
        print(f"cpu {c['case']}: {c['seconds']:.1f} s on {c['threads']} threads "
              f"({100 * c['within_1pct']:.1f} % within 1 %)")
    if args.ptxas:
        report["ptxas"] = ptxas_report(5, 2, max(args.sources), args.block_y)
        print("\n".join(report["ptxas"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
