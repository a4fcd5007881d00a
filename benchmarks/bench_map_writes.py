#!/usr/bin/env python3
"""How fast a folder takes the depth stage's map files: the stage's write pattern without a GPU.

Each of `--processes` processes (a cluster worker each; 1 = the single-process stage) writes
`--views` views' maps (depth, normal, cost of WxH float32, as write_colmap_planes writes them:
atomically, depth last) with `--threads` writer threads, as MapWriter does. Prints the aggregate
GB/s. The depth stage of 80 views at 1600x1200 writes about 11.5 GB (6 passes), so at 1 GB/s the
disk alone needs 11.5 s whatever the number of GPUs.

    python benchmarks/bench_map_writes.py --dir /tmp/maps --processes 1,4 --views 80
    python benchmarks/bench_map_writes.py --dir /dev/shm/maps --processes 4
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script from anywhere
from mvs_pipeline.io.colmap_maps import write_colmap_planes  # noqa: E402


def write_views(folder: Path, views: range, width: int, height: int, threads: int) -> None:
    depth = np.random.default_rng(0).random((1, height, width), dtype=np.float32)
    normal = np.random.default_rng(1).random((3, height, width), dtype=np.float32)

    def one(v: int) -> None:
        for kind, planes in (("normal", normal), ("cost", depth), ("depth", depth)):
            write_colmap_planes(folder / f"{kind}_{v:05d}.bin", planes, durable=False)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, views))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, required=True, help="folder to write into (emptied, then removed)")
    ap.add_argument("--processes", default="1,4", help="comma-separated process counts, one row each")
    ap.add_argument("--views", type=int, default=80, help="views per row, split over the processes")
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1200)
    ap.add_argument("--threads", type=int, default=8, help="writer threads per process (MapWriter's)")
    ap.add_argument("--repeat", type=int, default=2, help="rows per count (the first may touch fresh memory)")
    args = ap.parse_args(argv)
    view_bytes = 5 * 4 * args.width * args.height
    for procs in (int(p) for p in args.processes.split(",")):
        for rep in range(args.repeat):
            shutil.rmtree(args.dir, ignore_errors=True)
            args.dir.mkdir(parents=True)
            chunks = [range(i, args.views, procs) for i in range(procs)]
            t0 = time.perf_counter()
            workers = [multiprocessing.Process(target=write_views,
                                               args=(args.dir, c, args.width, args.height, args.threads))
                       for c in chunks]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            seconds = time.perf_counter() - t0
            gb = args.views * view_bytes / 1e9
            print(f"{args.dir}: {procs} process(es) x {args.threads} threads, {args.views} views "
                  f"({gb:.2f} GB), run {rep + 1}: {seconds:.2f} s, {gb / seconds:.2f} GB/s", flush=True)
    shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
