#!/usr/bin/env python3
"""Benchmark exact FPS: the persistent multi-block GPU kernel against the one-block kernel and
fpsample's fastest exact CPU variant (bucket_fps_kdline_sampling), on surface-like clouds.

    python benchmarks/bench_fps.py                       # N = 1M, 4M, 16M x M = 1k, 10k, 100k
    python benchmarks/bench_fps.py --sizes 4M --samples 100k --json bench_fps.json
    python benchmarks/bench_fps.py --methods gpu-tree --leaf-sizes 32,64,128 --blocks-per-sm 1,2 --threads 256,512,1024

The one-block kernel costs the same per sample throughout, so it runs a probe of a few hundred
samples and is extrapolated to M (marked `~`). Its probe indices must equal the first samples
of the tree kernel (both are exact): the script checks that and stops on a mismatch.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mvs_pipeline.errors import MVSError  # noqa: E402

H100_BANDWIDTH = 3.35e12  # B/s, HBM3 on an H100 SXM


def parse_count(text: str) -> int:
    text = text.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(text[-1], 1)
    return int(float(text[:-1] if text[-1] in "km" else text) * mult)


def surface_cloud(n: int, seed: int = 0, noise: float = 0.002) -> np.ndarray:
    """Surface-like test cloud (what fused MVS clouds look like): a bumpy sphere over a ground
    plane and two walls, with Gaussian noise of `noise` m per axis (0: points on the surfaces)."""
    rng = np.random.default_rng(seed)
    parts = [n // 2, n // 4, n // 8]
    parts.append(n - sum(parts))
    v = rng.normal(size=(parts[0], 3))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    v *= (1 + 0.05 * np.sin(8 * v[:, :1]) * np.cos(6 * v[:, 1:2]))
    ground = np.c_[rng.uniform(-4, 4, (parts[1], 2)), np.full(parts[1], -1.2)]
    wall1 = np.c_[np.full(parts[2], -4.0), rng.uniform(-4, 4, parts[2]), rng.uniform(-1.2, 2, parts[2])]
    wall2 = np.c_[rng.uniform(-4, 4, parts[3]), np.full(parts[3], 4.0), rng.uniform(-1.2, 2, parts[3])]
    xyz = np.concatenate([v, ground, wall1, wall2]) + rng.normal(0, noise, (n, 3))
    return xyz[rng.permutation(n)].astype(np.float32)


def commit() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "cuda", "mvs_pipeline"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return rev + ("+uncommitted" if dirty else "")
    except Exception:
        return "unknown"


def gpu_tree(cupy, xyz_gpu, m, leaf_size, blocks_per_sm, threads=None, grid=None):
    from mvs_pipeline.sampling.points.fps import cuda as kfps

    kfps.fps_tree(xyz_gpu, 2, 0, leaf_size=leaf_size, blocks_per_sm=blocks_per_sm,
                  threads=threads, grid=grid)  # compiles this kernel shape outside the timing
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    idx, _d2, info = kfps.fps_tree(xyz_gpu, m, 0, leaf_size=leaf_size, blocks_per_sm=blocks_per_sm,
                                   threads=threads, grid=grid)
    cupy.cuda.Device().synchronize()
    return time.perf_counter() - t0, idx.get(), info


def gpu_block_probe(cupy, xyz_gpu, m, budget_s):
    """Time the one-block kernel on a probe and extrapolate to m samples."""
    from mvs_pipeline.sampling.points.fps import cuda as kfps

    start = cupy.zeros(1, dtype=cupy.int32)

    def run(k):
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        idx, _ = kfps.fps_block(xyz_gpu[None], start, k)
        cupy.cuda.Device().synchronize()
        return time.perf_counter() - t0, idx[0].get()

    first = min(m, 32)
    t, idx = run(first)
    probe = first
    per_sample = t / first
    if m > first:
        probe = int(min(m, max(first, budget_s / max(per_sample, 1e-9))))
        if probe > first:
            t, idx = run(probe)
            per_sample = t / probe
    return per_sample * m, idx, probe


def fpsample_kdline(xyz, m):
    import fpsample

    h = 9 if len(xyz) >= 1_000_000 else 7
    t0 = time.perf_counter()
    idx = fpsample.bucket_fps_kdline_sampling(xyz, m, h=h, start_idx=0)
    return time.perf_counter() - t0, np.asarray(idx, dtype=np.int64), h


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1M,4M,16M", help="point counts N (default: %(default)s)")
    ap.add_argument("--samples", default="1k,10k,100k", help="sample counts M (default: %(default)s)")
    ap.add_argument("--methods", default="gpu-tree,gpu-block,fpsample",
                    help="any of gpu-tree, gpu-batched, gpu-block, fpsample, cpu-tree (default: %(default)s)")
    ap.add_argument("--leaf-sizes", default="auto", help="gpu-tree leaf sizes to sweep, or auto")
    ap.add_argument("--blocks-per-sm", default="1", help="gpu-tree blocks per SM to sweep (default: %(default)s)")
    ap.add_argument("--threads", default="auto", help="gpu-tree threads per block to sweep, or auto")
    ap.add_argument("--grids", default="auto",
                    help="gpu-tree launch sizes (blocks) to sweep, or auto (blocks per SM on every SM)")
    ap.add_argument("--block-budget", type=float, default=3.0, help="seconds per one-block probe (default: %(default)s)")
    ap.add_argument("--cpu-max-points", type=str, default="16M", help="skip CPU methods above this N")
    ap.add_argument("--repeat", type=int, default=2, help="gpu-tree runs per setting, best kept (default: %(default)s)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args()
    sizes = [parse_count(s) for s in args.sizes.split(",")]
    samples = [parse_count(s) for s in args.samples.split(",")]
    methods = [m.strip() for m in args.methods.split(",")]
    leaf_sizes = [None] if args.leaf_sizes == "auto" else [int(v) for v in args.leaf_sizes.split(",")]
    blocks = [int(v) for v in args.blocks_per_sm.split(",")]
    thread_counts = [None] if args.threads == "auto" else [int(v) for v in args.threads.split(",")]
    grids = [None if v == "auto" else int(v) for v in args.grids.split(",")]
    cpu_max = parse_count(args.cpu_max_points)
    # imported here, not at the top: Numba's import is ~2 s, which --help and the scripts that
    # import surface_cloud from this file need not pay
    from mvs_pipeline.sampling.points.fps import cpu as cpu_fps  # noqa: PLC0415

    cupy = None
    device = "cpu only"
    if any(m.startswith("gpu") for m in methods):
        import cupy  # noqa: PLC0415

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        device = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        from mvs_pipeline.sampling.points.fps import cuda as kfps

        warm = cupy.asarray(surface_cloud(5000, 1))  # compile outside the timings
        kfps.fps_tree(warm, 100, 0)
        kfps.fps_block(warm[None], cupy.zeros(1, dtype=cupy.int32), 10)
        cupy.cuda.Device().synchronize()

    rows = []
    header = f"{'N':>9} {'M':>8} {'method':<32} {'seconds':>9} {'samples/s':>11} {'vs fpsample':>11}  note"
    print(f"device: {device}; commit {commit()}\n{header}\n{'-' * len(header)}")
    for n in sizes:
        xyz = surface_cloud(n)
        xyz_gpu = cupy.asarray(xyz) if cupy is not None else None
        for m in samples:
            if m > n:
                continue
            ref_time = None
            tree_idx = None
            results = []
            if "fpsample" in methods and n <= cpu_max:
                t, fidx, h = fpsample_kdline(xyz, m)
                ref_time = t
                results.append(("fpsample kdline (CPU, 1 core)", t, f"h={h}, start {int(fidx[0])}"))
            if "cpu-tree" in methods and n <= cpu_max:
                t0 = time.perf_counter()
                _, _, work = cpu_fps.fps_tree(xyz, m, 0, return_work=True)
                results.append(("numba tree (CPU)", time.perf_counter() - t0, f"work {100 * work:.3f}% of N*M"))
            if "gpu-tree" in methods:
                for leaf in leaf_sizes:
                    for bps, threads, grid in ((b, t, g) for b in blocks for t in thread_counts for g in grids):
                        best, info = float("inf"), {}
                        try:
                            for _ in range(max(1, args.repeat)):
                                t, idx, info = gpu_tree(cupy, xyz_gpu, m, leaf, bps, threads, grid)
                                best = min(best, t)
                        except (ValueError, MVSError) as exc:  # a shape that does not fit: skip it
                            print(f"{n:>9} {m:>8} skipped leaf={leaf} blocks/SM={bps} threads={threads} "
                                  f"grid={grid}: {exc}")
                            continue
                        if tree_idx is not None and not np.array_equal(idx, tree_idx):
                            k = int(np.argmax(idx != tree_idx))
                            print(f"MISMATCH: gpu tree settings differ at sample {k} (N={n}, M={m})")
                            return 1
                        tree_idx = idx
                        results.append((f"gpu tree leaf={info['leaf_size']} grid={info['grid']}x"
                                        f"{info['threads']}", best,
                                        f"{info['leaves_per_block']} leaves/block, work "
                                        f"{100 * info['work_fraction']:.3f}% of N*M"))
            if "gpu-batched" in methods:
                from mvs_pipeline.sampling.points.fps.batched import fps_batched  # noqa: PLC0415

                fps_batched(xyz_gpu, 2, 0)   # compiles outside the timing
                for _ in range(args.repeat):
                    cupy.cuda.Device().synchronize()
                    t0 = time.perf_counter()
                    bidx, _d2, binfo = fps_batched(xyz_gpu, m, 0)
                    cupy.cuda.Device().synchronize()
                    t = time.perf_counter() - t0
                    bidx = bidx.get()
                    if tree_idx is not None and not np.array_equal(bidx, tree_idx):
                        k = int(np.argmax(bidx != tree_idx))
                        print(f"MISMATCH: batched and tree kernels differ at sample {k} (N={n}, M={m})")
                        return 1
                    results.append((f"gpu batched T={binfo['offers']} leaf={binfo['leaf_size']}", t,
                                    f"{binfo['rounds']} rounds, {m / max(1, binfo['rounds']):.1f} samples a round"
                                    + ("" if tree_idx is None else ", same sequence as gpu tree")))
            if "gpu-block" in methods:
                est, bidx, probe = gpu_block_probe(cupy, xyz_gpu, m, args.block_budget)
                note = f"~ extrapolated from {probe} samples" if probe < m else ""
                if tree_idx is not None and not np.array_equal(bidx, tree_idx[:probe]):
                    k = int(np.argmax(bidx != tree_idx[:probe]))
                    print(f"MISMATCH: one-block and tree kernels differ at sample {k} (N={n}, M={m})")
                    return 1
                if tree_idx is not None:
                    note += f"{'; ' if note else ''}first {probe} match tree"
                results.append(("gpu one-block (1 SM)", est, note))
            floor = n * 16.0 * m / H100_BANDWIDTH
            for name, t, note in results:
                speed = f"{ref_time / t:10.1f}x" if ref_time else f"{'-':>11}"
                print(f"{n:>9} {m:>8} {name:<32} {t:9.3f} {m / t:11.0f} {speed}  {note}")
                rows.append({"n": n, "m": m, "method": name, "seconds": t, "note": note,
                             "full_pass_floor_s": floor})
            print(f"{'':>9} {'':>8} (a full pass per sample at HBM bandwidth: {floor:.3f} s)")
    if args.json:
        args.json.write_text(json.dumps({"device": device, "commit": commit(), "rows": rows}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
