#!/usr/bin/env python3
"""The fusion stage's output path alone: fused.ply + fused.ply.vis written from ready chunks.

`fusion.stage.fuse_depth_maps` runs with its fusion replaced by `--views` prepared chunks of
`--points` points each (random positions, normals, colours; visibility masks with each of
`--neighbors` neighbours agreeing with probability --agree), so what is timed is what the stage
does with fused points: packing the file records and visibility records, writing both files, the
final fsync and the cloud preview. `--device cuda` hands the chunks over as CuPy arrays (what the
CUDA engine yields: packed on the GPU), `cpu` as NumPy arrays (packed in threads on the host).
A row: seconds, points per second, output GB/s, the process's CPU seconds during the call, and the
resident-memory peak of the call (Linux: VmHWM after clear_refs) over what was resident before it.
The chunks are the same arrays for every view, so the memory they take is one view's.

    python benchmarks/bench_fusion_write.py --dir /tmp/fw --views 30 --points 300000
    python benchmarks/bench_fusion_write.py --dir /data/fw --views 200 --points 500000 --device cuda
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run as a script from anywhere
from mvs_pipeline.fusion import stage  # noqa: E402
from mvs_pipeline.fusion.params import FusionConfig  # noqa: E402


def make_chunk_arrays(points: int, neighbors: int, agree: float, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    vis = np.zeros(points, np.uint32)
    for k in range(neighbors):
        vis |= (rng.random(points) < agree).astype(np.uint32) << np.uint32(k)
    normal = rng.normal(size=(points, 3)).astype(np.float32)
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    return {"pixel": np.arange(points, dtype=np.int64), "xyz": rng.uniform(-50, 50, (points, 3)).astype(np.float32),
            "normal": normal, "color": rng.integers(0, 256, (points, 3), dtype=np.uint8),
            "support": (1 + np.unpackbits(vis.view(np.uint8)).reshape(points, 32).sum(1)).astype(np.uint8),
            "vis": vis}


def _rss_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def run_once(out: Path, views: int, arrays: dict, neighbors: int) -> dict:
    scene = SimpleNamespace(views=[SimpleNamespace(image_id=i + 1) for i in range(views)], num_views=views)
    nbrs = {v: [(v + 1 + k) % views for k in range(neighbors)] for v in range(views)}

    def fake_fuse_chunks(cfg, scene_, selection, stereo_dir, backend, progress=True, stats=None, **kw):
        stats = {} if stats is None else stats
        stats.update(points=0, reference_views=views)
        for v in range(views):
            stats["points"] += len(arrays["xyz"])
            yield stage.FusedChunk(view_idx=v, neighbors=nbrs[v], **arrays)

    real = stage.fuse_chunks
    stage.fuse_chunks = fake_fuse_chunks
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    before = _rss_kib("VmRSS")
    _reset_peak()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    try:
        stage.fuse_depth_maps(FusionConfig(min_consistent=2, consume_pixels=True), scene, None, out, "cpu",
                              overwrite=True, progress=False)
    finally:
        stage.fuse_chunks = real
    seconds = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    peak = _rss_kib("VmHWM")
    nbytes = (out / "fused.ply").stat().st_size + (out / "fused.ply.vis").stat().st_size
    points = views * len(arrays["xyz"])
    return {"seconds": round(seconds, 3), "points": points, "mpoints_per_s": round(points / seconds / 1e6, 2),
            "bytes": nbytes, "gb_per_s": round(nbytes / seconds / 1e9, 3),
            "cpu_seconds": round(cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime, 2),
            "rss_peak_over_start_mib": None if peak is None or before is None else round((peak - before) / 1024, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, required=True, help="output folder (emptied, then removed)")
    ap.add_argument("--views", type=int, default=30, help="chunks (reference views)")
    ap.add_argument("--points", type=int, default=300_000, help="points per chunk")
    ap.add_argument("--neighbors", type=int, default=10, help="neighbour views per chunk (bits of the masks)")
    ap.add_argument("--agree", type=float, default=0.4, help="probability that a neighbour agrees with a point")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where the chunks' arrays are")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args(argv)
    arrays = make_chunk_arrays(args.points, args.neighbors, args.agree)
    if args.device == "cuda":
        import cupy as cp  # noqa: PLC0415

        arrays = {k: cp.asarray(v) for k, v in arrays.items()}
    rows = []
    for rep in range(args.repeat):
        row = {"device": args.device, "views": args.views, "points_per_view": args.points, "repeat": rep,
               **run_once(args.dir / "out", args.views, arrays, args.neighbors)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    shutil.rmtree(args.dir, ignore_errors=True)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
