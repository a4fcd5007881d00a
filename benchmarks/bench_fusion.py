#!/usr/bin/env python
"""Benchmark the fusion stage: wall time of `fusion.stage.fuse_depth_maps` (reading maps and images included) per
backend, and COLMAP's own fusion (pycolmap.stereo_fusion, CPU) on the same maps.

The scene is analytic so that generating 50 views of 1600x1066 takes seconds: a ground plane and
two spheres seen by cameras on a ring, exact depth/normal maps (optionally with outliers),
textured JPEG images, and a sparse model with tracks (COLMAP derives its neighbours from those).
Data is written once into --workdir and reused.

    python benchmarks/bench_fusion.py --views 50 --width 1600 --height 1066 --backends cuda,cpu --colmap
    python benchmarks/bench_fusion.py --views 8 --width 640 --height 426 --backends cpu --json bench.json
    python benchmarks/bench_fusion.py --views 48 --width 640 --height 426 --backends cpu --cluster-workers 2 \
        --consume false        # also fusion/cluster_run.py on a LocalCluster of 2 worker processes

With --cluster-workers N, each backend gets a second row: the same fusion as Dask tasks on a
LocalCluster of N worker processes on this host (`--cluster local`; CUDA: dask-cuda's
LocalCUDACluster, one GPU per worker), started once before the timed runs (its start, outside
the rows as in a `run`, is printed); the row says whether fused.ply and .vis are the single
process's bytes, else the points against the single process's.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pycolmap

from mvs_pipeline.fusion.params import FusionConfig
from mvs_pipeline.fusion.stage import fuse_depth_maps as run_fusion
from mvs_pipeline.io.colmap_maps import read_depth_map, write_colmap_array
from mvs_pipeline.io.fused_ply import HEADER_BYTES, VERTEX_DTYPE
from mvs_pipeline.scene.workspace import read_scene
from mvs_pipeline.synth.camera import look_at
from mvs_pipeline.views.params import ViewsConfig
from mvs_pipeline.views.selection import select_views

SPHERES = [((0.0, 0.0, 0.8), 0.8), ((1.3, -0.9, 0.45), 0.45)]  # (centre, radius), metres; ground z = 0


def ring_poses(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    poses = []
    for k in range(n):
        a = 2 * np.pi * k / n
        center = np.array([4.0 * np.cos(a), 4.0 * np.sin(a), 1.6 + 0.3 * np.sin(3 * a)])
        poses.append(look_at(center, (0.0, 0.0, 0.5)))
    return poses


def render(K, R, t, width, height):
    """Exact z-depth [H, W], camera-frame normals [H, W, 3] and world points [H, W, 3]."""
    u, v = np.meshgrid(np.arange(width, dtype=np.float64) + 0.5, np.arange(height, dtype=np.float64) + 0.5)
    rays = np.stack([u, v, np.ones_like(u)], -1) @ np.linalg.inv(K).T @ R  # world directions, camera z = 1
    C = -R.T @ t
    best = np.full(u.shape, np.inf)
    normal = np.zeros(u.shape + (3,))
    with np.errstate(divide="ignore", invalid="ignore"):
        s = -C[2] / rays[..., 2]  # ground plane z = 0
    hit = (s > 0) & (s < best)
    best[hit], normal[hit] = s[hit], (0.0, 0.0, 1.0)
    for center, radius in SPHERES:
        oc = C - np.asarray(center)
        a = np.einsum("hwc,hwc->hw", rays, rays)
        b = 2 * rays @ oc
        disc = b * b - 4 * a * (oc @ oc - radius**2)
        s = (-b - np.sqrt(np.maximum(disc, 0))) / (2 * a)
        hit = (disc > 0) & (s > 0) & (s < best)
        best[hit] = s[hit]
        p = C + s[hit][:, None] * rays[hit]
        normal[hit] = (p - center) / radius
    valid = np.isfinite(best) & (best < 50)
    depth = np.where(valid, best, 0.0)
    points = C + depth[..., None] * rays
    n_cam = normal @ R.T
    n_cam[~valid] = 0
    return depth.astype(np.float32), n_cam.astype(np.float32), points


def texture(points):
    """Procedural RGB colour of world points (uint8)."""
    f = np.sin(7 * points[..., 0]) * np.sin(5 * points[..., 1] + 2 * points[..., 2]) + 0.3 * np.sin(31 * points.sum(-1))
    rgb = np.stack([0.5 + 0.4 * f, 0.5 + 0.3 * np.sin(3 * points[..., 2] + f), 0.5 - 0.4 * f], -1)
    return (np.clip(rgb, 0, 1) * 255).astype(np.uint8)


def make_workspace(ws: Path, views: int, width: int, height: int, noise: float, seed: int = 0) -> None:
    """COLMAP dense workspace: images/, sparse/ (with tracks), stereo/{depth,normal}_maps, fusion.cfg."""
    rng = np.random.default_rng(seed)
    f = 0.85 * width
    K = np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1.0]])
    rec = pycolmap.Reconstruction()
    rec.add_camera_with_trivial_rig(pycolmap.Camera(camera_id=1, model="PINHOLE", width=width, height=height,
                                                    params=[f, f, width / 2, height / 2]))
    poses = ring_poses(views)
    samples = []  # sparse points: random surface points seen by each view
    for k, (R, t) in enumerate(poses):
        name = f"view_{k:03d}.jpg"
        depth, normal, points = render(K, R, t, width, height)
        rows, cols = np.nonzero(depth > 0)
        pick = rng.choice(len(rows), size=min(200, len(rows)), replace=False)
        samples.append(points[rows[pick], cols[pick]])
        if noise > 0:
            bad = rng.random(depth.shape) < noise
            depth[bad] *= rng.uniform(0.5, 2.0, bad.sum()).astype(np.float32)
        write_colmap_array(ws / "stereo" / "depth_maps" / f"{name}.geometric.bin", depth)
        write_colmap_array(ws / "stereo" / "normal_maps" / f"{name}.geometric.bin", normal)
        (ws / "images").mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(ws / "images" / name), texture(points)[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 92])
    samples = np.concatenate(samples)
    # observations in every view where the point is not occluded (the depth map agrees)
    tracks = [[] for _ in range(len(samples))]
    for k, (R, t) in enumerate(poses):
        depth = read_depth_map(ws / "stereo" / "depth_maps" / f"view_{k:03d}.jpg.geometric.bin")
        cam = samples @ R.T + t
        uv = cam[:, :2] / cam[:, 2:] * f + [width / 2, height / 2]
        ok = (cam[:, 2] > 0) & (uv[:, 0] >= 0) & (uv[:, 0] < width) & (uv[:, 1] >= 0) & (uv[:, 1] < height)
        idx = np.flatnonzero(ok)
        d = depth[uv[idx, 1].astype(int), uv[idx, 0].astype(int)]
        idx = idx[np.abs(d - cam[idx, 2]) < 0.01 * cam[idx, 2]]
        image = pycolmap.Image(name=f"view_{k:03d}.jpg", keypoints=uv[idx], camera_id=1, image_id=k + 1)
        rec.add_image_with_trivial_frame(image, pycolmap.Rigid3d(pycolmap.Rotation3d(poses[k][0]), poses[k][1]))
        for j, p in enumerate(idx):
            tracks[p].append((k + 1, j))
    for p, track in enumerate(tracks):
        if len(track) >= 2:
            tr = pycolmap.Track()
            for image_id, point2d in track:
                tr.add_element(image_id, point2d)
            rec.add_point3D(samples[p], tr, np.array([128, 128, 128], np.uint8))
    (ws / "sparse").mkdir(parents=True, exist_ok=True)
    rec.write_binary(str(ws / "sparse"))
    (ws / "stereo" / "fusion.cfg").write_text("".join(f"view_{k:03d}.jpg\n" for k in range(views)))


def time_ours(ws: Path, backend: str, cfg: FusionConfig, repeat: int) -> dict:
    scene = read_scene(ws / "images", ws / "sparse")
    selection = select_views(scene, ViewsConfig())
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        counts = run_fusion(cfg, scene, selection, ws, backend, overwrite=True, progress=False)
        runs.append(time.perf_counter() - t0)
    return {"method": f"ours-{backend}", "first_s": runs[0], "best_s": min(runs), "points": counts["points"],
            "gpu_peak_mib": (counts["gpu_peak_bytes"] or 0) / 2**20, "reloads": counts["reloads"],
            "cache_views": counts["cache_views"], "host_peak_rss_mib": peak_rss_mib()}


def time_cluster(ws: Path, backend: str, cfg: FusionConfig, repeat: int, workers: int) -> dict:
    from mvs_pipeline.cluster.client import open_client  # noqa: PLC0415 (only with --cluster-workers)
    from mvs_pipeline.cluster.params import ClusterConfig  # noqa: PLC0415
    from mvs_pipeline.fusion.cluster_run import fuse_depth_maps_on_cluster  # noqa: PLC0415

    scene = read_scene(ws / "images", ws / "sparse")
    selection = select_views(scene, ViewsConfig())
    single = {name: (ws / name).read_bytes() for name in ("fused.ply", "fused.ply.vis")}   # time_ours's
    kind = "local-cuda" if backend == "cuda" else "local"
    t0 = time.perf_counter()
    with open_client(ClusterConfig(kind=kind, workers=workers)) as client:
        print(f"cluster {kind} with {workers} workers started in {time.perf_counter() - t0:.2f} s")
        runs = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            counts = fuse_depth_maps_on_cluster(cfg, scene, selection, ws, backend, client, overwrite=True,
                                                progress=False)
            runs.append(time.perf_counter() - t0)
    same = all((ws / name).read_bytes() == data for name, data in single.items())
    single_points = (len(single["fused.ply"]) - HEADER_BYTES) // VERTEX_DTYPE.itemsize
    return {"method": f"ours-{backend}-cluster{workers}", "first_s": runs[0], "best_s": min(runs),
            "points": counts["points"], "gpu_peak_mib": (counts["gpu_peak_bytes"] or 0) / 2**20,
            "reloads": counts["reloads"], "cache_views": counts["cache_views"], "host_peak_rss_mib": peak_rss_mib(),
            "same_bytes": same, "single_points": single_points, "cluster": counts["cluster"]}


def time_colmap(ws: Path, repeat: int) -> dict:
    opts = pycolmap.StereoFusionOptions()
    opts.max_reproj_error, opts.max_depth_error, opts.max_normal_error = 2.0, 0.01, 10.0
    opts.min_num_pixels = 3  # "seen consistently in 3 views", like our min_consistent = 2
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        pycolmap.stereo_fusion(str(ws / "fused_colmap.ply"), str(ws), input_type="geometric", options=opts,
                               output_type="PLY")
        runs.append(time.perf_counter() - t0)
    n = int((ws / "fused_colmap.ply").read_bytes().split(b"element vertex ")[1].split(b"\n")[0])
    return {"method": "colmap-cpu (all threads)", "first_s": runs[0], "best_s": min(runs), "points": n,
            "gpu_peak_mib": 0.0, "reloads": None, "cache_views": None, "host_peak_rss_mib": peak_rss_mib()}


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (so it includes earlier rows of the table)."""
    import resource  # noqa: PLC0415 (POSIX only)

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--views", type=int, default=50)
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1066)
    ap.add_argument("--noise", type=float, default=0.0, help="fraction of depth pixels replaced by outliers")
    ap.add_argument("--backends", default="cuda,cpu", help="comma-separated: cuda, cpu")
    ap.add_argument("--colmap", action="store_true", help="also time pycolmap.stereo_fusion (CPU)")
    ap.add_argument("--aggregate", default="mean", choices=["mean", "median"])
    ap.add_argument("--cache-views", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=2, help="runs per method (first includes kernel compilation)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/bench_fusion"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--cluster-workers", type=int, default=0,
                    help="also fuse on a local Dask cluster of this many worker processes (0: not)")
    ap.add_argument("--consume", default="auto", choices=["auto", "true", "false"], help="fusion.consume_pixels")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    ws = args.workdir / f"ring_{args.views}v_{args.width}x{args.height}_n{args.noise:g}"
    if not (ws / "stereo" / "fusion.cfg").is_file():
        shutil.rmtree(ws, ignore_errors=True)
        t0 = time.perf_counter()
        make_workspace(ws, args.views, args.width, args.height, args.noise)
        print(f"generated {ws} in {time.perf_counter() - t0:.1f} s")
    consume = {"auto": "auto", "true": True, "false": False}[args.consume]
    cfg = FusionConfig(aggregate=args.aggregate, cache_views=args.cache_views, consume_pixels=consume)
    rows = []
    for b in (b.strip() for b in args.backends.split(",") if b.strip()):
        rows.append(time_ours(ws, b, cfg, args.repeat))
        if args.cluster_workers:
            rows.append(time_cluster(ws, b, cfg, args.repeat, args.cluster_workers))
    if args.colmap:
        rows.append(time_colmap(ws, args.repeat))
    print(f"\nfusion of {args.views} views at {args.width}x{args.height} (noise {args.noise:g}), "
          f"reading maps and images included")
    print(f"{'method':<26}{'first s':>9}{'best s':>9}{'points':>11}{'GPU MiB':>9}{'RSS MiB':>9}{'cache':>7}"
          f"{'reloads':>9}")
    for r in rows:
        print(f"{r['method']:<26}{r['first_s']:>9.2f}{r['best_s']:>9.2f}{r['points']:>11d}{r['gpu_peak_mib']:>9.0f}"
              f"{r['host_peak_rss_mib']:>9.0f}{'' if r['cache_views'] is None else r['cache_views']:>7}"
              f"{'' if r['reloads'] is None else r['reloads']:>9}")
        if "same_bytes" in r:
            print(f"{'':<26}same bytes as the single process: {r['same_bytes']} (single process: "
                  f"{r['single_points']} points); phases {r['cluster']['phase_seconds']}")
    if args.json:
        gpu = ""
        try:
            gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
        args.json.write_text(json.dumps({"views": args.views, "width": args.width, "height": args.height,
                                         "noise": args.noise, "cpu_count": os.cpu_count(), "gpu": gpu,
                                         "host": platform.node(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
