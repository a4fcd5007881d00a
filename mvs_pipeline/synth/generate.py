"""`generate_scene`: render a synthetic scene into a COLMAP project with exact ground truth.

Output layout under `out_dir`:

    images/view_000.png ...            8-bit RGB
    sparse/0/{cameras,images,points3D,rigs,frames}.bin
                                       one PINHOLE camera; image_id = view_idx + 1; sparse points
                                       on the GT surface, tracks of >= 3 views, keypoints < 0.5 px
                                       off the exact projection
    gt/depth/view_000.npy ...          [H, W] float32 z-depth (m), 0 where no surface
    gt/normal/view_000.npy ...         [H, W, 3] float32 camera-frame unit normals facing the
                                       camera, 0 where no surface (not with normals=False)
    gt/mesh.ply                        the triangle mesh, world coordinates
    gt/eth3d/scan_alignment.mlp, scan_XX.ply   simulated laser scans (ETH3D format, see scans.py;
                                       room_seen's and street's kept to what the views see: seen_scans.py)
    gt/scene.json                      parameters, light, image names, depth range; written last

Every file is written atomically, and the same arguments give the same bytes.
"""

from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
import open3d as o3d

from ..errors import MVSError
from ..io.atomic import atomic_path, atomic_write_text
from . import sparse as sparse_mod
from .colmap_writer import write_colmap_model
from .render import SENSOR_NOISE_SIGMA, render_normals
from .scans import simulate_scans, write_scans
from .scene_names import SCENE_NAMES
from .scenes import build_scene
from .seen_scans import keep_seen
from .view_jobs import ViewJob, run_views

log = logging.getLogger(__name__)

EXPOSURE_RANGE = (0.8, 1.2)  # per-image gain, uniform
DEFAULT_MAX_SCAN_POINTS = 3_000_000
SPARSE_POINTS_TARGET = 4000  # candidate points seeded over all views (before track filtering)
SPARSE_SEEDS_PER_VIEW = (150, 800)  # clamp for the per-view share of the target
IMAGE_READ_AHEAD = 4  # images decoded ahead while colouring the sparse points


def _check_args(name: str, views: int, width: int, height: int, seed: int,
                scan_spacing: float | None, max_scan_points: int | None, workers: int = 1, backend: str = "cpu") -> None:
    if name not in SCENE_NAMES:
        raise MVSError(f"synthetic scene '{name}' is unknown; choose one of {', '.join(SCENE_NAMES)}")
    if int(views) != views or views < sparse_mod.MIN_TRACK_LENGTH:
        raise MVSError(f"views = {views}: need an integer >= {sparse_mod.MIN_TRACK_LENGTH} (tracks span 3 views)")
    for key, value in (("width", width), ("height", height)):
        if int(value) != value or not 32 <= value <= 20000:
            raise MVSError(f"{key} = {value}: need an integer pixel count in [32, 20000]")
    if int(seed) != seed or seed < 0:
        raise MVSError(f"seed = {seed}: need a non-negative integer")
    if scan_spacing is not None and not 1e-4 <= scan_spacing <= 1.0:
        raise MVSError(f"scan_spacing = {scan_spacing} m: need a value in [0.0001, 1]")
    if max_scan_points is not None and max_scan_points < 1000:
        raise MVSError(f"max_scan_points = {max_scan_points}: need at least 1000")
    if int(workers) != workers or workers < 1:
        raise MVSError(f"workers = {workers}: need an integer >= 1")
    if backend not in ("cpu", "cuda"):
        raise MVSError(f"backend = {backend!r}: need 'cpu' or 'cuda' (resolve 'auto' first)")


def generate_scene(name: str, out_dir: Path, views: int = 20, width: int = 800, height: int = 600,
                   seed: int = 0, scans: bool = True, *, scan_spacing: float | None = None,
                   max_scan_points: int | None = None, progress: bool = False,
                   workers: int = 1, backend: str = "cpu", timings: dict | None = None, normals: bool = True) -> Path:
    """Render scene `name` (one of SCENE_NAMES) into `out_dir` (layout in the module doc).

    scan_spacing: laser point spacing (m) at the scene's reference distance; None = the
    scene's default (2 mm for object, 1 cm for the others). max_scan_points caps the
    rays of all scans together (None: 3e6, the street 1.5e6 per scanner, so its scans grow with
    it). normals=False writes no gt/normal maps (12 bytes a pixel, the most of a view's bytes).
    workers > 1 renders and writes that many views at once in worker processes (view_jobs.py);
    the files do not depend on `workers`. backend "cuda"
    evaluates the textures with CuPy (resolved by the caller); the images then agree with the
    CPU's up to float64 rounding (tests/synth/test_synth_parallel.py). `timings`, a dict, gets
    each stage's wall time in seconds (benchmarks/bench_synth.py). Returns `out_dir`.
    """
    _check_args(name, views, width, height, seed, scan_spacing, max_scan_points, workers, backend)
    if not isinstance(normals, bool):
        raise MVSError(f"normals = {normals!r}: need True or False")
    views, width, height, seed = int(views), int(width), int(height), int(seed)
    out_dir = Path(out_dir)
    # scene.json marks a finished scene: drop an old one first so a crash cannot leave it
    # describing files of a different run.
    (out_dir / "gt" / "scene.json").unlink(missing_ok=True)
    start = time.perf_counter()
    spec = build_scene(name, views, width, height, seed)
    rc = spec.mesh.raycasting_scene()
    if timings is not None:
        timings["scene"] = time.perf_counter() - start
    names = [f"view_{k:03d}.png" for k in range(views)]
    stems = [Path(n).stem for n in names]
    gains = np.random.default_rng([seed, 0xE7]).uniform(*EXPOSURE_RANGE, size=views)
    seeds_per_view = int(np.clip(round(SPARSE_POINTS_TARGET / views), *SPARSE_SEEDS_PER_VIEW))

    # The mesh and the laser scans need no view: a thread makes them while the views render
    # (in worker processes the main process would otherwise wait idle).
    with ThreadPoolExecutor(max_workers=1) as side:
        side_job = side.submit(_timed, timings, "mesh_and_scans", _write_mesh_and_scans, spec, out_dir, scans,
                               scan_spacing, max_scan_points)
        jobs = [ViewJob((name, views, width, height, seed), k, float(gains[k]), out_dir, stems[k], seeds_per_view,
                        backend, normals) for k in range(views)]
        summaries = _timed(timings, "views", run_views, spec, rc, jobs, int(workers), progress)
        ranges = [v.depth_range for v in summaries if v.depth_range is not None]
        depth_min = min((r[0] for r in ranges), default=np.inf)
        depth_max = max((r[1] for r in ranges), default=0.0)
        candidates = [v.candidates for v in summaries]
        # Each view tests the candidates near the surface it sees only (linear in the views).
        reach = [v.reach for v in summaries]
        model = _timed(timings, "sparse", _build_sparse, spec, rc, candidates, reach, out_dir, stems,
                       seed, seeds_per_view, normals)
        _timed(timings, "sparse", write_colmap_model, out_dir / "sparse" / "0", spec.cameras, names, model.keypoints,
               model.keypoint_point_idx, model.points, model.colors)
        scan_info, scan_list = side_job.result()

    _remove_stale(out_dir, stems, scan_list, normals)
    obs = model.observations_per_view()
    meta = {
        "scene": name, "seed": int(seed), "views": int(views), "width": int(width), "height": int(height),
        "camera": {"model": "PINHOLE", "params": [float(x) for x in (spec.cameras[0].K[0, 0], spec.cameras[0].K[1, 1],
                                                                     spec.cameras[0].K[0, 2], spec.cameras[0].K[1, 2])]},
        "light": spec.light.to_json(),
        "background": spec.background,
        "exposure_gains": [float(g) for g in gains],
        "sensor_noise_sigma_255": SENSOR_NOISE_SIGMA * 255.0,
        "images": names,
        "depth_range_m": [depth_min if np.isfinite(depth_min) else 0.0, depth_max],
        "materials": [m.name for m in spec.mesh.materials],
        "sparse": {"points": int(len(model.points)), "min_observations_per_image": int(obs.min()),
                   "mean_track_length": float(model.visible.sum(axis=1).mean()) if len(model.points) else 0.0},
        "scans": scan_info,
        **({} if normals else {"normals": False}),   # key only when off: the default's bytes stay as they were
    }
    atomic_write_text(out_dir / "gt" / "scene.json", json.dumps(meta, indent=1) + "\n")
    return out_dir


def _timed(timings: dict | None, stage: str, fn, *args):
    """fn(*args), its wall time (s) added to timings[stage] when timings is a dict."""
    start = time.perf_counter()
    try:
        return fn(*args)
    finally:
        if timings is not None:
            timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - start


def _write_mesh_and_scans(spec, out_dir: Path, scans: bool, scan_spacing: float | None,
                          max_scan_points: int) -> tuple[dict | None, list]:
    """gt/mesh.ply and, with `scans`, the laser scans; returns (scene.json's scan entry, scans).

    Runs beside the views, so it casts into a RaycastingScene of its own: Open3D commits a
    scene lazily at its first query, which two threads must not race on."""
    with atomic_path(out_dir / "gt" / "mesh.ply") as tmp:
        if not o3d.io.write_triangle_mesh(str(tmp), spec.mesh.to_legacy(), write_ascii=False):
            raise MVSError(f"{out_dir / 'gt' / 'mesh.ply'}: open3d could not write the mesh")
    if not scans:
        return None, []
    spacing = spec.scan_spacing if scan_spacing is None else float(scan_spacing)
    if max_scan_points is None:
        max_scan_points = (DEFAULT_MAX_SCAN_POINTS if spec.scan_rays_per_scanner is None
                           else spec.scan_rays_per_scanner * len(spec.scanners))
    rc = spec.mesh.raycasting_scene()
    scan_list = simulate_scans(spec, rc, spacing, max_scan_points)
    if spec.scans_seen_by is not None:
        scan_list = keep_seen(scan_list, spec.cameras, rc, spec.scans_seen_by)
    write_scans(out_dir / "gt" / "eth3d", scan_list)
    info = {"count": len(scan_list), "requested_spacing_m": spacing,
            "reference_distance_m": spec.scan_reference_distance,
            "angular_step_rad": [s.angular_step for s in scan_list],
            "points": [len(s.points) for s in scan_list]}
    if spec.scans_seen_by is not None:
        info["kept_where_seen_by_views"] = spec.scans_seen_by
    return info, scan_list


def _remove_stale(out_dir: Path, stems: list[str], scans: list, normals: bool = True) -> None:
    """Delete files an earlier run with more views, scans or normals left behind (only our own names)."""
    keep = set(stems)
    for folder, pattern in (("images", "view_*.png"), ("gt/depth", "view_*.npy"), ("gt/normal", "view_*.npy")):
        for path in (out_dir / folder).glob(pattern):
            if path.stem not in keep or (folder == "gt/normal" and not normals):
                path.unlink()
    if not normals and (out_dir / "gt" / "normal").is_dir() and not any((out_dir / "gt" / "normal").iterdir()):
        (out_dir / "gt" / "normal").rmdir()
    eth3d = out_dir / "gt" / "eth3d"
    scan_names = {s.name for s in scans}
    for path in eth3d.glob("scan_*.ply"):
        if path.stem not in scan_names:
            path.unlink()
    if not scans:
        (eth3d / "scan_alignment.mlp").unlink(missing_ok=True)
        if eth3d.is_dir() and not any(eth3d.iterdir()):
            eth3d.rmdir()


def _build_sparse(spec, rc, candidates, reach, out_dir: Path, stems: list[str], seed: int,
                  seeds_per_view: int, normal_files: bool = True) -> sparse_mod.SparseModel:
    """Track filtering over all seeded candidates, topping up views that see too few points."""
    cameras = spec.cameras
    points = np.concatenate([c.points for c in candidates])
    normals = np.concatenate([c.normals for c in candidates])
    cand = sparse_mod.Candidates(points, normals)
    vis = sparse_mod.visibility(cameras, rc, cand, reach)
    keep = sparse_mod.keep_triangulable(cameras, cand, vis)
    for round_ in range(1, 4):
        short = np.flatnonzero(vis[keep].sum(axis=0) < sparse_mod.MIN_POINTS_PER_IMAGE)
        if len(short) == 0:
            break
        extra = []
        for v in short:  # reseed from the GT of the views that came up short
            depth = np.load(out_dir / "gt" / "depth" / f"{stems[v]}.npy")
            # Without normal files, the same normals again from the mesh (ray casts, no texture).
            normal = (np.load(out_dir / "gt" / "normal" / f"{stems[v]}.npy") if normal_files
                      else render_normals(spec, rc, cameras[v]))
            extra.append(sparse_mod.sample_candidates(cameras[v], depth, normal, seeds_per_view * 2 ** round_,
                                                      np.random.default_rng([seed, 0x5EED, v, round_])))
        more = sparse_mod.Candidates(np.concatenate([e.points for e in extra]),
                                     np.concatenate([e.normals for e in extra]))
        more_vis = sparse_mod.visibility(cameras, rc, more, reach)
        cand = sparse_mod.Candidates(np.concatenate([cand.points, more.points]),
                                     np.concatenate([cand.normals, more.normals]))
        vis = np.concatenate([vis, more_vis])
        keep = np.concatenate([keep, sparse_mod.keep_triangulable(cameras, more, more_vis)])
    points, vis = cand.points[keep], vis[keep]
    short = np.flatnonzero(vis.sum(axis=0) < sparse_mod.MIN_POINTS_PER_IMAGE)
    if len(short):
        log.warning("synthetic sparse model: %d image(s) observe fewer than %d points (%s)", len(short),
                    sparse_mod.MIN_POINTS_PER_IMAGE, ", ".join(stems[v] for v in short[:5]))
    keypoints, point_idx = sparse_mod.observe(cameras, points, vis, np.random.default_rng([seed, 0x0B5]))

    def read_image(v: int) -> np.ndarray:
        img = cv2.imread(os.fspath(out_dir / "images" / f"{stems[v]}.png"), cv2.IMREAD_COLOR)
        return img[:, :, ::-1]

    # point_colors asks for the views in order; decoding a few ahead in threads (cv2 releases the
    # GIL) hides most of the PNG decoding (~0.1 s a view at 3200x2130) and keeps memory bounded.
    with ThreadPoolExecutor(max_workers=IMAGE_READ_AHEAD) as pool:
        ahead: dict[int, object] = {}

        def load_image(v: int) -> np.ndarray:
            for u in range(v, min(v + IMAGE_READ_AHEAD, len(stems))):
                if u not in ahead:
                    ahead[u] = pool.submit(read_image, u)
            for u in [u for u in ahead if u < v]:  # views point_colors skipped
                ahead.pop(u).cancel()
            return ahead.pop(v).result()

        colors = sparse_mod.point_colors(None, len(points), keypoints, point_idx, load_image=load_image)
    return sparse_mod.SparseModel(points=points, visible=vis, keypoints=keypoints,
                                  keypoint_point_idx=point_idx, colors=colors)
