#!/usr/bin/env python
"""Fusion's host inputs (issue #36): milliseconds per view of `fusion.inputs.load_view` (maps, image, and the
pixel filters of the default config) on a synthetic street's ground truth, damaged the way PatchMatch leaves
its maps, by step and across loader threads.

The scene comes from `mvs-pipeline synth` (made in --scene when that folder has no gt/). Each view's GT depth
and normal become COLMAP maps in --workdir/stereo with: the surfaces' depth carried CARRY px onto the sky (the
halo), 0.3 % relative noise, 5 % scattered holes and a few larger ones, and small speckles of random depth in
the sky. Rows:

  load_view default   the whole call with configs/default.yaml's fusion filters
  load_view plain     no filters (maps, image, RGB copy)
  read_depth ...      each step alone on the same inputs, as load_view runs it (halo_edge is part of halo)
  threads N           wall ms per view of all views loaded REPEAT x ROUNDS times by a pool of N threads
                      (throughput, as fusion's _ViewCache loads them; --cv-threads sets cv2.setNumThreads)
  processes N         the same by a pool of N processes (--processes), each view's arrays pickled back to this
                      one: the ceiling of loads that no GIL of fusion's process holds up (issue #36's 2-GPU tail)

Single calls are timed --repeat times after one untimed call: wall clock (best, median, range) and process
CPU time of all threads (best, median; OpenCV's own threads included), which a shared machine disturbs less.

    python benchmarks/bench_fusion_inputs.py --scene /tmp/lv_scene --workdir /tmp/lv_maps --repeat 7
    python benchmarks/bench_fusion_inputs.py --scene /tmp/lv_scene --threads 1,2,4 --cv-threads -1,1
    python benchmarks/bench_fusion_inputs.py --scene /tmp/lv_scene --views 16 --no-steps --threads 1,4,8,16 --processes 4,8,16
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np

from mvs_pipeline.config.loader import load_config
from mvs_pipeline.fusion.halo import halo_pixels
from mvs_pipeline.fusion.halo_edge import OPEN_BACKGROUND_SHARE, open_regions
from mvs_pipeline.fusion.inputs import ViewInputs, load_view, local_grey_std
from mvs_pipeline.fusion.speckles import min_segment_pixels, small_segments
from mvs_pipeline.fusion.weak_planes import snap_weak_planes, weak_planes_of
from mvs_pipeline.io.colmap_maps import read_depth_map, read_normal_map, write_depth_map, write_normal_map
from mvs_pipeline.io.photos import read_colour
from mvs_pipeline.scene.workspace import read_scene

try:
    from mvs_pipeline.fusion.inputs import low_texture
except ImportError:   # before 2026-11 (session 22): so that the same script measures the earlier commits
    def low_texture(bgr, min_texture):
        return local_grey_std(bgr) < min_texture

CARRY = 4   # px: PatchMatch's window carries a surface's depth about half a window onto the sky


def make_scene(scene: Path, views: int, width: int, height: int) -> None:
    subprocess.run([sys.executable, "-m", "mvs_pipeline", "synth", "--scene", "street", "--views", str(views),
                    "--width", str(width), "--height", str(height), "--no-scans", "--out", str(scene)], check=True)


def damaged(depth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """GT depth as a PatchMatch map might look (see the module's text)."""
    d = depth.astype(np.float32).copy()
    sky = d <= 0
    carried = cv2.dilate(d, np.ones((2 * CARRY + 1, 2 * CARRY + 1), np.uint8))
    d[sky] = carried[sky]
    d *= (1 + rng.normal(0, 0.003, d.shape)).astype(np.float32)
    d[rng.random(d.shape) < 0.05] = 0
    h, w = d.shape
    for _ in range(20):
        cv2.circle(d, (int(rng.integers(w)), int(rng.integers(h))), int(rng.integers(3, 16)), 0.0, -1)
    sky = d <= 0
    seeds = (rng.random(d.shape) < 0.002) & sky
    speckle = cv2.dilate(seeds.astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool) & sky
    d[speckle] = rng.uniform(5, 50, int(speckle.sum())).astype(np.float32)
    return d


def prepare(scene: Path, workdir: Path) -> list[ViewInputs]:
    names = sorted(p.stem for p in (scene / "gt" / "depth").glob("*.npy"))
    views = {v.name: v for v in read_scene(scene / "images", scene / "sparse" / "0").views}   # K: the weak planes
    rng = np.random.default_rng(0)
    inputs = []
    for i, name in enumerate(names):
        image = next((scene / "images").glob(f"{name}.*"))
        depth_path = workdir / "stereo" / "depth_maps" / f"{image.name}.geometric.bin"
        normal_path = workdir / "stereo" / "normal_maps" / f"{image.name}.geometric.bin"
        gt = np.load(scene / "gt" / "depth" / f"{name}.npy")
        h, w = gt.shape
        # written on every run (seeded, so the same files): maps of an earlier scene in that folder are not used
        depth_path.parent.mkdir(parents=True, exist_ok=True)
        normal_path.parent.mkdir(parents=True, exist_ok=True)
        d = damaged(gt, rng)
        n = np.load(scene / "gt" / "normal" / f"{name}.npy").astype(np.float32)
        n[d <= 0] = 0
        write_depth_map(depth_path, d, durable=False)
        write_normal_map(normal_path, n, durable=False)
        K = views[image.name].K
        inputs.append(ViewInputs(i, image.name, w, h, depth_path, normal_path, image, None,
                                 (float(K[0, 0]), float(K[1, 1]), float(K[0, 2]), float(K[1, 2]))))
    return inputs


def timed(fn, repeat: int) -> tuple[list[float], list[float]]:
    """Wall and process (CPU, all threads) ms of `repeat` calls of fn() after one untimed call."""
    fn()
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return wall, cpu


def row(label: str, ms: tuple[list[float], list[float]]) -> str:
    wall, cpu = ms
    return (f"{label:<22} wall best {min(wall):7.2f} median {statistics.median(wall):7.2f} "
            f"range {min(wall):.2f}-{max(wall):.2f} | CPU best {min(cpu):7.2f} median {statistics.median(cpu):7.2f} ms")


def steps(inp: ViewInputs, f: dict, repeat: int) -> list[tuple[str, list[float]]]:
    """Each of load_view's steps alone, on the inputs load_view hands it (the earlier steps' results)."""
    depth = read_depth_map(inp.depth_path)
    bgr = read_colour(inp.image_path)
    color = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    blocked = np.zeros(depth.shape, np.uint8)
    blocked[low_texture(bgr, f["min_texture"])] = 1
    seg = min_segment_pixels(f["min_segment"], inp.width, inp.height)
    blocked[small_segments(depth, blocked == 0, seg, f["segment_depth_step"])] = 1
    usable = (depth > 0) & (blocked == 0)
    background = cv2.morphologyEx((~usable).astype(np.uint8), cv2.MORPH_OPEN,
                                  np.ones((2 * (f["halo_radius"] // 4) + 1,) * 2, np.uint8))

    def read_depth():
        d = read_depth_map(inp.depth_path)
        return np.count_nonzero(~np.isfinite(d))

    rows = [("read_depth", timed(read_depth, repeat)),
            ("read_normal", timed(lambda: read_normal_map(inp.normal_path), repeat)),
            ("read_image", timed(lambda: read_colour(inp.image_path), repeat)),
            ("bgr_to_rgb", timed(lambda: cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), repeat)),
            ("texture", timed(lambda: low_texture(bgr, f["min_texture"]), repeat)),
            ("speckles", timed(lambda: small_segments(depth, blocked == 0, seg, f["segment_depth_step"]),
                               repeat)),
            ("halo (colour only)", timed(lambda: halo_pixels(color, usable, f["halo_radius"]), repeat)),
            ("halo (+ edge)", timed(lambda: halo_pixels(color, usable, f["halo_radius"], f["halo_edge"]),
                                    repeat)),
            ("  open_regions", timed(lambda: open_regions(background, OPEN_BACKGROUND_SHARE * background.size),
                                     repeat))]
    planes = f.get("weak_planes")
    if planes is not None:
        normal = read_normal_map(inp.normal_path)
        weak = low_texture(bgr, planes.texture)
        fx, fy, cx, cy = inp.intrinsics
        K = np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])
        rows.append(("weak_planes", timed(lambda: snap_weak_planes(depth.copy(), normal.copy(), weak, K, planes,
                                                                   seed=inp.view_idx), repeat)))
    return rows


def _load(job: tuple[ViewInputs, dict]):
    inp, f = job
    return load_view(inp, **f)


def processes_row(inputs: list[ViewInputs], f: dict, processes: int, rounds: int) -> tuple[float, float]:
    """Wall ms per view of loading every view `rounds` times in `processes` worker processes (results pickled
    back), and this process's CPU ms per view (unpickling the arrays)."""
    jobs = [(i, f) for i in inputs * rounds]
    with ProcessPoolExecutor(max_workers=processes) as pool:
        list(pool.map(_load, jobs[:processes]))   # start and warm the workers
        t0, c0 = time.perf_counter(), time.process_time()
        list(pool.map(_load, jobs))
        return (time.perf_counter() - t0) * 1e3 / len(jobs), (time.process_time() - c0) * 1e3 / len(jobs)


def threads_row(inputs: list[ViewInputs], f: dict, threads: int, rounds: int) -> tuple[float, float]:
    """Wall and CPU ms per view of loading every view `rounds` times with `threads` loader threads."""
    jobs = inputs * rounds
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(lambda i: load_view(i, **f), inputs[:threads]))   # warm the threads
        t0, c0 = time.perf_counter(), time.process_time()
        list(pool.map(lambda i: load_view(i, **f), jobs))
        return (time.perf_counter() - t0) * 1e3 / len(jobs), (time.process_time() - c0) * 1e3 / len(jobs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scene", type=Path, default=Path("/tmp/lv_scene"), help="synth output (made if missing)")
    ap.add_argument("--workdir", type=Path, default=None, help="where the maps go (default: SCENE/bench_maps)")
    ap.add_argument("--views", type=int, default=4, help="views of a scene made here")
    ap.add_argument("--size", default="1024x768", help="WxH of a scene made here")
    ap.add_argument("--repeat", type=int, default=7, help="timed calls per row")
    ap.add_argument("--threads", default="1,2", help="loader thread counts to measure (empty: none)")
    ap.add_argument("--rounds", type=int, default=3, help="loads of every view per thread-count measurement")
    ap.add_argument("--cv-threads", default="", help="cv2.setNumThreads values for the thread rows (-1: default)")
    ap.add_argument("--processes", default="", help="loader process counts to measure (empty: none)")
    ap.add_argument("--no-steps", action="store_true", help="skip the per-step rows")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    if not (args.scene / "gt" / "depth").is_dir():
        w, h = (int(v) for v in args.size.lower().split("x"))
        make_scene(args.scene, args.views, w, h)
    inputs = prepare(args.scene, args.workdir or args.scene / "bench_maps")
    cfg = load_config(None).fusion
    f = dict(min_texture=cfg.min_texture, min_segment=cfg.min_segment, segment_depth_step=cfg.segment_depth_step,
             halo_radius=cfg.halo_radius, halo_edge=cfg.halo_edge, weak_planes=weak_planes_of(cfg))
    inp = inputs[-1]   # the view with the most sky (the street's last) has the most halo work
    print(f"{len(inputs)} views {inp.width}x{inp.height}, {os.cpu_count()} CPU(s), "
          f"cv2 {cv2.__version__} ({cv2.getNumThreads()} threads), filters {f}")
    print(row("load_view default", timed(lambda: load_view(inp, **f), args.repeat)))
    print(row("load_view plain", timed(lambda: load_view(inp), args.repeat)))
    if not args.no_steps:
        for label, ms in steps(inp, f, args.repeat):
            print(row(label, ms))
    default_cv = cv2.getNumThreads()
    for cv_threads in [int(v) for v in args.cv_threads.split(",") if v] or [None]:
        if cv_threads is not None:
            cv2.setNumThreads(cv_threads)
        for n in [int(v) for v in args.threads.split(",") if v]:
            ms = tuple(zip(*[threads_row(inputs, f, n, args.rounds) for _ in range(max(1, args.repeat // 2))]))
            label = f"threads {n}" + (f" cv {cv_threads}" if cv_threads is not None else "")
            print(row(label, ms) + " per view")
    cv2.setNumThreads(default_cv)
    for n in [int(v) for v in args.processes.split(",") if v]:
        ms = tuple(zip(*[processes_row(inputs, f, n, args.rounds) for _ in range(max(1, args.repeat // 2))]))
        print(row(f"processes {n}", ms) + " per view (CPU: this process's)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
