"""The `fusion` stage: fuse per-view depth/normal maps into one point cloud, OUT/fused.ply.

Rules (thresholds in `FusionConfig`). Reference views are processed in view_idx order. For a
reference view r, every pixel p with a valid depth and normal that is not yet consumed (nor
masked out) is a candidate, all in parallel: p's centre is back-projected to X and projected
into each neighbour k of r (from stereo/views.json); q is the neighbour pixel under it. k agrees
when q is not consumed, the depth of X in k is within max_depth_diff (relative) of k's depth at
q, q's own 3D point reprojects within max_reproj_error px of p's centre, and the two normals
differ by at most max_normal_angle. X is in the free space of neighbour k when k's depth at q (any
valid depth, consumed or not) lies more than free_space_margin (relative) behind X: k saw a surface
through X. With more than max_free_space_violations such neighbours X is a floater and dropped
(null = no check). A point is also dropped when no agreeing neighbour's ray meets p's ray at X at
min_triangulation_angle or more (far points without parallax, such as the sky at the far end of
the depth range, agree in every view). Otherwise, with at least min_consistent agreeing neighbours, p emits a
point: the mean (or median) of its own and the agreeing observations (positions, world normals
renormalised, image colours), with support = 1 + agreeing views. p and every agreeing q are then
consumed, so later reference views do not emit the same surface again (unless consume_pixels is
false: then nothing is consumed, and every view emits a point from each of its consistent pixels,
a denser cloud of ~3x the points).

Determinism: within a reference view no decision reads a mark written in that view (claims go
to a separate bit that is folded in after the view, see cpu.py), so the points do not
depend on thread timing; when several reference pixels agree with the same neighbour pixel, each
emits its point and the pixel is consumed once. Points are written in (view_idx, pixel) order.

Memory: only the maps of the current reference view and its neighbours must be resident. A cache
of `cache_views` views (GPU memory for the cuda backend, host memory for cpu) evicts the view
whose next use lies farthest ahead (the plan is known in advance), loads run ahead in a thread
pool, and each view's consumed marks (1 byte per pixel) stay in host memory while it is evicted
(view_cache.py).
Points stream to disk per reference view (fusion/writer.py, io/fused_ply.py), so their number is
bounded by disk: on the GPU each view's file bytes are packed on the device and downloaded in one
copy, on the CPU packed in threads, and either is written by a pool of threads while the next views
fuse.

With `run --cluster` the stage runs as Dask tasks, one per contiguous range of reference views
(fusion/cluster_run.py, which calls fuse_chunks with `references` on the workers): the same files without
consumption; with it, consumption within each range only (its docstring states what differs).

Outputs: OUT/fused.ply (float32 xyz, normals, uchar rgb, uchar support), OUT/fused.ply.vis
(COLMAP's visibility format, io/vis_file.py) and OUT/stereo/fusion.json (counts, settings); the
stage is skipped when all three exist, unless overwrite is set. Whether they are still current
(same settings, same maps) is the pipeline's stage fingerprint (fingerprints.py), which removes
them first when the fusion settings or the maps changed (so `--stages fusion` after a new depth
run or with new thresholds fuses again).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Iterator

import numpy as np
from tqdm import tqdm

from ..errors import MVSError
from ..gpu.loader import to_host
from ..gpu.memory_budget import usable_bytes
from ..io.atomic import atomic_write_text
from ..io.cloud_preview import write_cloud_preview
from ..io.fused_ply import FusedCloudWriter
from ..io.image_size import median_focal_px, pixels_in_all
from ..io.vis_file import colmap_image_indices
from ..scene.scene import Scene
from ..views.selection import ViewSelection
from .layout import MAX_NEIGHBORS, camera_block
from .inputs import HostView, ViewInputs, expected_inputs, find_inputs, load_view, weak_plane_inputs
from .params import (FusionConfig, auto_consume_pixels, auto_max_normal_angle, auto_min_consistent,
                     auto_weak_plane_consensus,
                     auto_weak_plane_tolerance)
from .view_cache import IGNORED_KINDS, PIXEL_COUNTS, PREFETCH_PER_THREAD, ViewCache
from .weak_planes import weak_planes_of
from .writer import ChunkWriter

log = logging.getLogger(__name__)

BYTES_PER_PIXEL = 4 + 12 + 3 + 1  # resident depth, normal, colour, blocked
OUTPUT_BYTES_PER_PIXEL = 12 + 12 + 3 + 1 + 4  # per-pixel kernel outputs (GPU)
# Loader threads (load_view): fusion.load_threads (default 8), at most the cores. Kept at 8 in session 22,
# not measured on a 16-core host: load_view releases the GIL nearly all the time (a pure-Python thread beside
# it ran as fast as beside a GIL-free OpenCV loop), so more would scale with cores, but fusion also runs
# ChunkWriter's threads, the main thread that drives the GPU and OpenCV's own pool; load_view's CPU time fell
# by ~38 % (1024x768 street views, 101-103 -> 62-64 ms), i.e. ~1.6x the views a second from the same 8.
# Whether the loop still waits on them: fusion.json's load_wait_seconds (the loop waiting) against
# load_seconds (the loads, summed). PREFETCH_PER_THREAD views a thread are loaded ahead (view_cache.py).


def load_threads(cfg: FusionConfig) -> int:
    return max(1, min(int(cfg.load_threads), os.cpu_count() or 1))


@dataclass
class FusedChunk:
    """The points one reference view emitted, in pixel order (NumPy arrays; CuPy arrays from the
    CUDA engine until to_host)."""
    view_idx: int
    neighbors: list[int]  # view_idx of neighbour k (bit k of `vis`)
    pixel: np.ndarray  # [P] int64, row * width + col of the reference pixel
    xyz: np.ndarray  # [P, 3] float32, world
    normal: np.ndarray  # [P, 3] float32, world, unit
    color: np.ndarray  # [P, 3] uint8
    support: np.ndarray  # [P] uint8, views in the point (reference included)
    vis: np.ndarray  # [P] uint32, bit k = neighbour k agreed

    def to_host(self) -> "FusedChunk":
        arrays = {k: to_host(getattr(self, k)) for k in ("pixel", "xyz", "normal", "color", "support", "vis")}
        arrays["pixel"] = arrays["pixel"].astype(np.int64, copy=False)
        return dataclasses.replace(self, **arrays)


# ---------------------------------------------------------------------------------------------
# Backends: the same four operations on host (numpy/numba) or device (cupy) arrays
# ---------------------------------------------------------------------------------------------

# The share of the free memory the view cache may take; a fusion trailing the depth stage
# (trailing.py) takes half as much, as the depth stage's map cache grows beside it.
CACHE_SHARE, TRAILING_CACHE_SHARE = 0.5, 0.25


class _CpuEngine:
    """Resident views live in slots of one SlabPool (see cpu.py); an entry is a slot number."""
    name = "cpu"

    def __init__(self, share: float = CACHE_SHARE):
        self.peak_bytes = 0
        self.pool = None  # cpu.SlabPool once opened
        self.free: list[int] = []
        self.share = share   # of the free memory the view cache may take

    def budget_bytes(self) -> int:
        return int(self.share * _available_host_memory())

    def open(self, capacity: int, max_pixels: int) -> None:
        from .cpu import SlabPool  # noqa: PLC0415 (Numba: imported only when the CPU backend runs)

        self.pool = SlabPool(capacity, max_pixels)
        self.free = list(range(capacity - 1, -1, -1))

    def upload(self, host: HostView, blocked: np.ndarray) -> int:
        slot = self.free.pop()
        self.pool.put(slot, host.depth, host.normal, host.color, blocked)
        return slot

    def evict(self, slot: int, keep_marks: bool) -> np.ndarray | None:
        marks = self.pool.blocked_view(slot).copy() if keep_marks else None
        self.free.append(slot)
        return marks

    def fuse(self, ref: int, nbs: list[int], cams: np.ndarray, cfg: FusionConfig, silhouettes=None) -> dict:
        from .cpu import fuse_slots  # noqa: PLC0415

        out = fuse_slots(self.pool, ref, nbs, cams, **_thresholds(cfg))
        idx = np.flatnonzero(out["support"])
        emitted = len(idx)
        if silhouettes is not None:   # on the positions as written (float32), as the CUDA engine does
            idx = idx[silhouettes.inside(out["xyz"][idx].astype(np.float32))]
        return {"silhouette_dropped": emitted - len(idx), "pixel": idx, "xyz": out["xyz"][idx].astype(np.float32),
                "normal": out["normal"][idx].astype(np.float32), "color": out["color"][idx],
                "support": out["support"][idx], "vis": out["vis"][idx]}


class _CudaEngine:
    """Resident views are dicts of cupy arrays (the kernel takes a table of device pointers)."""
    name = "cuda"

    def __init__(self, share: float = CACHE_SHARE):
        from ..gpu.loader import import_cupy  # noqa: PLC0415

        self.cp = import_cupy()
        self.pool = self.cp.get_default_memory_pool()
        self.peak_bytes = 0
        self._out: dict | None = None
        self.share = share   # of the free memory the view cache may take

    def budget_bytes(self) -> int:
        return int(self.share * usable_bytes())   # within the run's budget (gpu/memory_budget.py)

    def open(self, capacity: int, max_pixels: int) -> None:
        pass

    def upload(self, host: HostView, blocked: np.ndarray) -> dict:
        cp = self.cp
        entry = {"depth": cp.asarray(host.depth), "normal": cp.asarray(host.normal), "color": cp.asarray(host.color),
                 "blocked": cp.asarray(blocked)}
        self._track()
        return entry

    def evict(self, entry: dict, keep_marks: bool) -> np.ndarray | None:
        return entry["blocked"].get() if keep_marks else None

    def fuse(self, ref: dict, nbs: list[dict], cams: np.ndarray, cfg: FusionConfig, silhouettes=None) -> dict:
        from .cuda import fuse_reference_cuda  # noqa: PLC0415

        cp = self.cp
        out = fuse_reference_cuda(ref, nbs, cams, out=self._out, **_thresholds(cfg))
        self._out = out
        self._track()
        idx = cp.flatnonzero(out["support"])
        emitted = len(idx)
        if silhouettes is not None:
            idx = idx[silhouettes.inside(out["xyz"][idx])]
        # gathered on the device, copies of their own (`out` is reused by the next view): the stage
        # packs them there (fusion/writer.py), other callers download them (FusedChunk.to_host)
        return {"silhouette_dropped": emitted - len(idx), "pixel": idx,
                **{k: out[k][idx] for k in ("xyz", "normal", "color", "support", "vis")}}

    def _track(self) -> None:
        self.peak_bytes = max(self.peak_bytes, int(self.pool.used_bytes()))


def _thresholds(cfg: FusionConfig) -> dict:
    return {"max_reproj_error": cfg.max_reproj_error, "max_depth_diff": cfg.max_depth_diff,
            "max_normal_angle": cfg.max_normal_angle, "min_consistent": cfg.min_consistent,
            "median": cfg.aggregate == "median", "free_space_margin": cfg.free_space_margin,
            "max_free_space_violations": cfg.max_free_space_violations,
            "min_triangulation_angle": cfg.min_triangulation_angle, "consume": cfg.consume_pixels}


def _available_host_memory() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def make_engine(backend: str, share: float = CACHE_SHARE):
    """The fusion engine of `backend`, its view cache within `share` of the free memory."""
    if backend == "cuda":
        return _CudaEngine(share)
    if backend == "cpu":
        return _CpuEngine(share)
    raise ValueError(f"backend must be resolved to 'cuda' or 'cpu', got {backend!r}")




def ignored_pixels(counts: dict) -> dict[str, int]:
    """Pixels each filter blocked, by IGNORED_KINDS, from fusion's counts."""
    return {k: counts.get(f"{k}_pixels", 0) for k in IGNORED_KINDS}


# ---------------------------------------------------------------------------------------------
# The fusion loop and the stage
# ---------------------------------------------------------------------------------------------

def plan_references(inputs: list[ViewInputs | None], selection: ViewSelection,
                    min_consistent: int) -> tuple[list[int], dict[int, list[int]]]:
    """Reference views in view_idx order and their usable neighbours (views with maps, <= 32)."""
    refs, nbrs, too_few = [], {}, []
    for r, inp in enumerate(inputs):
        if inp is None:
            continue
        seen, usable = {r}, []
        for j in selection.neighbors[r]:
            if 0 <= j < len(inputs) and inputs[j] is not None and j not in seen:
                seen.add(j)
                usable.append(j)
        if len(usable) > MAX_NEIGHBORS:
            log.warning("fusion: view %d has %d neighbours; using the best %d", r, len(usable), MAX_NEIGHBORS)
            usable = usable[:MAX_NEIGHBORS]
        if len(usable) < min_consistent:
            too_few.append(inp.name)
            continue
        refs.append(r)
        nbrs[r] = usable
    if too_few:
        log.warning("fusion: %d view(s) have fewer than min_consistent=%d neighbours with maps and are not used as "
                    "reference views (they still support others): %s", len(too_few), min_consistent,
                    ", ".join(too_few[:5]) + (" ..." if len(too_few) > 5 else ""))
    return refs, nbrs


def _capacity(cfg: FusionConfig, engine, inputs: list[ViewInputs | None], plan: list[list[int]]) -> int:
    need = max(len(p) for p in plan)
    n_views = len({v for p in plan for v in p})
    if cfg.cache_views is not None:
        if cfg.cache_views < need:
            log.warning("fusion.cache_views=%d is below the %d views one reference needs; using %d",
                        cfg.cache_views, need, need)
        return max(cfg.cache_views, need)
    per_view = max(inp.width * inp.height for inp in inputs if inp is not None) * BYTES_PER_PIXEL
    budget = engine.budget_bytes()
    if engine.name == "cpu":  # loads in flight share host memory with the resident views
        budget -= PREFETCH_PER_THREAD * load_threads(cfg) * per_view
    fit = max(0, budget) // per_view
    if fit < need:
        log.warning("fusion: about %d views fit in half the free %s memory but one reference needs %d; trying %d",
                    fit, engine.name, need, need)
    return int(min(n_views, max(need, fit)))


def resolve_config(cfg: FusionConfig, scene: Scene, selection: ViewSelection) -> FusionConfig:
    """cfg with `min_consistent`, `consume_pixels`, `max_normal_angle`, `weak_plane_tolerance` and
    `weak_plane_consensus: auto` resolved
    (params.auto_*), for callers that did not resolve the config (the pipeline does, in config/auto.py, from the
    same numbers)."""
    if cfg.min_consistent == "auto":
        most = max((len(n) for n in selection.neighbors), default=0)
        cfg = dataclasses.replace(cfg, min_consistent=auto_min_consistent(scene.views_per_observation(), most)[0])
    if cfg.consume_pixels == "auto":
        cfg = dataclasses.replace(cfg, consume_pixels=auto_consume_pixels(pixels_in_all(scene.views))[0])
    focal = median_focal_px(scene.views)
    if cfg.max_normal_angle == "auto":
        cfg = dataclasses.replace(cfg, max_normal_angle=auto_max_normal_angle(focal)[0])
    if cfg.weak_plane_tolerance == "auto":
        cfg = dataclasses.replace(cfg, weak_plane_tolerance=auto_weak_plane_tolerance(focal)[0])
    if cfg.weak_plane_consensus == "auto":
        cfg = dataclasses.replace(cfg, weak_plane_consensus=auto_weak_plane_consensus(focal)[0])
    return cfg


def fusion_inputs(cfg: FusionConfig, scene: Scene, selection: ViewSelection, stereo_dir: Path,
                  gate=None) -> tuple[list[ViewInputs | None], str]:
    """Each view's map files (None: no maps) and the map type; a one-line error when views.json
    disagrees with the model or no view has maps. With `gate` (fusion/trailing.MapsGate) the maps are
    still being written: the views it plans (it waits for the plan) with its map type."""
    if len(selection.neighbors) != scene.num_views:
        raise MVSError(f"views.json lists {len(selection.neighbors)} views but the model has {scene.num_views}; "
                       f"rerun the views stage with --overwrite")
    if gate is None:
        inputs, map_type = find_inputs(scene, stereo_dir, cfg.map_type, cfg.mask_dir)
    else:
        inputs, map_type = expected_inputs(scene, stereo_dir, gate.map_type, cfg.mask_dir, gate.views()), gate.map_type
    if not any(inp is not None for inp in inputs):
        raise MVSError(f"{Path(stereo_dir) / 'depth_maps'}: no {map_type} depth maps to fuse; run the depth stage first")
    return inputs, map_type


def fuse_chunks(cfg: FusionConfig, scene: Scene, selection: ViewSelection, stereo_dir: Path, backend: str,
                progress: bool = True, stats: dict | None = None, keep_on_device: bool = False,
                references: Collection[int] | None = None,
                pixels_by_view: dict | None = None, gate=None) -> Iterator[FusedChunk]:
    """Fuse the maps in stereo_dir, yielding each reference view's points (view_idx order): NumPy
    arrays, or with keep_on_device the CUDA engine's CuPy arrays (fusion/writer.py packs them there).
    `references` (view_idx): only these of the planned reference views, consuming pixels among
    themselves only (fusion/cluster_run.py's ranges); `pixels_by_view`, if given, receives each
    loaded view's PIXEL_COUNTS. `gate` (fusion/trailing.MapsGate): the maps are still being written
    by the depth stage; the views it plans are taken as the views with maps, and each view is loaded
    once the gate says its maps are in their files."""
    cfg = resolve_config(cfg, scene, selection)
    stats = {} if stats is None else stats
    stats.update(reloads=0, points=0, load_seconds=0.0, load_wait_seconds=0.0, **{k: 0 for k in PIXEL_COUNTS})
    inputs, map_type = fusion_inputs(cfg, scene, selection, stereo_dir, gate)
    stats["map_type"] = map_type
    stats["views_with_maps"] = sum(inp is not None for inp in inputs)
    refs, nbrs = plan_references(inputs, selection, cfg.min_consistent)
    if references is not None:
        wanted = set(references)
        refs = [r for r in refs if r in wanted]
    stats["reference_views"] = len(refs)
    if not refs:
        log.warning("fusion: no view has enough neighbours with maps; the cloud is empty")
        return
    plan = [[r, *nbrs[r]] for r in refs]
    engine = make_engine(backend, CACHE_SHARE if gate is None else TRAILING_CACHE_SHARE)
    capacity = _capacity(cfg, engine, inputs, plan)
    stats["cache_views"] = capacity
    cams = {v: camera_block(view.K, view.R, view.t) for v, view in enumerate(scene.views)}
    log.info("fusion: %d reference views, %s maps, backend %s, cache %d views", len(refs), map_type,
             engine.name, capacity)
    silhouettes = None
    if cfg.silhouettes:
        from .silhouettes import SilhouetteCheck  # noqa: PLC0415

        silhouettes = SilhouetteCheck(scene, cfg.mask_dir, engine.cp if engine.name == "cuda" else np)
        log.info("fusion: masks are object silhouettes (%d views): points outside one are dropped",
                 silhouettes.num_views)
    elif cfg.mask_silhouettes:
        log.warning("fusion.mask_silhouettes is set but fusion.mask_dir is not: no silhouettes to check")
    stats["silhouette_dropped"] = 0
    engine.open(capacity, max(inp.width * inp.height for inp in inputs if inp is not None))
    threads = load_threads(cfg)
    stats["load_threads"] = threads
    load = functools.partial(load_view, min_texture=cfg.min_texture, min_segment=cfg.min_segment,
                             segment_depth_step=cfg.segment_depth_step, halo_radius=cfg.halo_radius,
                             halo_edge=cfg.halo_edge, weak_planes=weak_planes_of(cfg))
    consensus = _plane_consensus(cfg, scene, selection, inputs, gate)
    if consensus is not None:
        load = functools.partial(_load_with_joint_planes, load, consensus)
    cache = ViewCache(engine, inputs, plan, capacity, prefetch=min(capacity, PREFETCH_PER_THREAD * threads),
                      threads=threads, stats=stats, load=load, gate=gate, read_ahead=cfg.read_ahead)
    # the loop's own seconds: making views resident (their loads' waits and uploads), fusing, and the
    # caller's work on each chunk (packing and queueing its bytes): where a slow fusion spends its time
    loop = stats.setdefault("loop_seconds", {"acquire": 0.0, "fuse": 0.0, "consumer": 0.0})
    try:
        for step, r in enumerate(tqdm(refs, desc="fusion", unit="view", disable=not progress)):
            t0 = time.perf_counter()
            views = cache.acquire(step)
            t1 = time.perf_counter()
            cam_stack = np.stack([cams[v] for v in plan[step]])
            out = engine.fuse(views[r], [views[j] for j in nbrs[r]], cam_stack, cfg, silhouettes)
            stats["silhouette_dropped"] += out.pop("silhouette_dropped")
            stats["points"] += len(out["pixel"])
            chunk = FusedChunk(view_idx=r, neighbors=nbrs[r], **out)
            t2 = time.perf_counter()
            cache.mark(r, "fused")
            yield chunk if keep_on_device else chunk.to_host()
            loop["acquire"] += t1 - t0
            loop["fuse"] += t2 - t1
            loop["consumer"] += time.perf_counter() - t2
    finally:
        for k in loop:
            loop[k] = round(loop[k], 3)
        cache.close()
        cache.write_timeline()
        if pixels_by_view is not None:
            pixels_by_view.update(cache.pixels_by_view)
        stats["gpu_peak_bytes"] = engine.peak_bytes if engine.name == "cuda" else None
        stats["load_seconds"] = round(stats["load_seconds"], 3)
        stats["load_wait_seconds"] = round(stats["load_wait_seconds"], 3)
        if consensus is not None:   # counted over the reference views: a cluster's ranges add up to the whole
            stats["consensus_planes"] = consensus.replaced(refs)
            stats["consensus_seconds"] = round(consensus.seconds, 3)


def _plane_consensus(cfg: FusionConfig, scene: Scene, selection: ViewSelection, inputs: list[ViewInputs | None],
                     gate=None):
    """fusion.weak_plane_consensus: a PlaneConsensus for this call's loads (None when off). A view's neighbours
    here are its selection's views with maps, as plan_references takes them, so its planes depend on the view
    alone, not on which range of references this call fuses, nor on whether it runs beside the depth stage."""
    weak = weak_planes_of(cfg)
    if weak is None or not cfg.weak_plane_consensus:
        return None
    from .plane_consensus import PlaneConsensus, view_regions  # noqa: PLC0415

    def neighbours(v: int) -> list[int]:
        return [j for j in selection.neighbors[v]
                if 0 <= j < len(inputs) and inputs[j] is not None and j != v][:MAX_NEIGHBORS]

    def regions_of(v: int) -> list:
        return view_regions(v, *weak_plane_inputs(inputs[v], weak.texture), inputs[v].camera_matrix(), weak)

    def camera(v: int):
        return inputs[v].camera_matrix(), scene.views[v].R, scene.views[v].t

    return PlaneConsensus(neighbours, regions_of, camera, cfg.weak_plane_consensus_angle,
                          cfg.weak_plane_consensus_offset, gate)


def _load_with_joint_planes(load, consensus, inp: ViewInputs) -> HostView:
    """load(inp) with the view's weak planes replaced by their walls' joint fits (plane_consensus.py), on the
    planes the consensus found already."""
    joint, regions = consensus.take(inp.view_idx)
    return load(inp, joint=joint, regions=regions)


def output_paths(out_dir: Path) -> tuple[Path, Path, Path]:
    """fused.ply, fused.ply.vis and stereo/fusion.json under out_dir."""
    out_dir = Path(out_dir)
    return out_dir / "fused.ply", out_dir / "fused.ply.vis", out_dir / "stereo" / "fusion.json"


def finished_counts(out_dir: Path, overwrite: bool) -> dict | None:
    """The counts of a finished fusion in out_dir (all three outputs there), or None: fuse."""
    ply_path, vis_path, record_path = output_paths(out_dir)
    if overwrite or not (ply_path.is_file() and vis_path.is_file() and record_path.is_file()):
        return None
    try:
        previous = json.loads(record_path.read_text())
    except (OSError, ValueError):
        previous = {}
    if isinstance(previous, dict) and "counts" in previous:
        log.info("fusion: %s exists; skipping (use --overwrite to redo)", ply_path)
        return previous["counts"]
    log.info("fusion: %s holds no counts; fusing again", record_path)
    return None


def finish_outputs(out_dir: Path, cfg: FusionConfig, backend: str, scene: Scene, stats: dict, totals: tuple,
                   t0: float) -> dict:
    """After fused.ply and .vis are in place: the preview, fusion.json (its counts returned), the log."""
    ply_path, vis_path, record_path = output_paths(out_dir)
    # what the report draws, so it never reads the whole cloud
    write_cloud_preview(ply_path, totals=totals)
    counts = {"views": scene.num_views, **stats, "seconds": round(time.perf_counter() - t0, 3)}
    settings = json.loads(json.dumps(dataclasses.asdict(cfg)))  # as stored in fusion.json (tuples -> lists)
    record = {"counts": counts, "backend": backend, "config": settings,
              "outputs": {"ply": ply_path.name, "vis": vis_path.name}}
    atomic_write_text(record_path, json.dumps(record, indent=1))
    ignored = ignored_pixels(counts)
    if any(ignored.values()):   # what the pixel filters took, so that a user can tell which one to loosen
        log.info("fusion: pixels ignored: %s", ", ".join(f"{v:,} {k}" for k, v in ignored.items()))
    if counts.get("planar_pixels"):   # fusion.weak_planes: the depths it put onto a weakly textured region's plane
        log.info("fusion: %s depths of weakly textured regions put onto their planes", f"{counts['planar_pixels']:,}")
    log.info("fusion: %d points from %d reference views -> %s", counts["points"], counts.get("reference_views", 0),
             ply_path)
    return counts


def fuse_depth_maps(cfg: FusionConfig, scene: Scene, selection: ViewSelection, out_dir: Path, backend: str,
                    overwrite: bool = False, progress: bool = True, gate=None) -> dict:
    """Fuse OUT/stereo/{depth,normal}_maps into OUT/fused.ply + .vis; returns counts (skips if done).
    `gate`: as fuse_chunks' (a fusion trailing the depth stage)."""
    out_dir = Path(out_dir)
    ply_path, vis_path, _ = output_paths(out_dir)
    cfg = resolve_config(cfg, scene, selection)
    done = finished_counts(out_dir, overwrite)
    if done is not None:
        return done
    t0 = time.perf_counter()
    colmap_idx = colmap_image_indices([v.image_id for v in scene.views])
    stats: dict = {}

    with FusedCloudWriter(ply_path, vis_path) as writer, ChunkWriter(writer, colmap_idx) as chunks:
        for chunk in fuse_chunks(cfg, scene, selection, out_dir / "stereo", backend, progress, stats,
                                 keep_on_device=True, gate=gate):
            chunks.submit(chunk)
        chunks.drain()
        writer.finish()
        totals = writer.totals()
    return finish_outputs(out_dir, cfg, backend, scene, stats, totals, t0)


def run(ctx) -> None:
    """The pipeline's `fusion` stage: `ctx` is pipeline.RunContext (with --cluster the pipeline
    calls fusion/cluster_run.run instead)."""
    record_counts(ctx, fuse_depth_maps(ctx.cfg.fusion, ctx.require_scene(), ctx.require_selection(), ctx.out_dir,
                                       ctx.backend, overwrite=ctx.overwrite, progress=ctx.progress))


def record_counts(ctx, counts: dict) -> None:
    """run.json's fusion counts, from fusion.json's."""
    ctx.counts["fusion_views"] = counts.get("reference_views", 0)
    ctx.counts["fusion_pixels"] = counts.get("valid_pixels", 0)
    ctx.counts["fused_points"] = counts.get("points", 0)
    ctx.counts["fusion_ignored_pixels"] = ignored_pixels(counts)
    ctx.counts["fusion_planar_pixels"] = counts.get("planar_pixels", 0)   # fusion.weak_planes
    if counts.get("gpu_peak_bytes") is not None:
        ctx.counts["fusion_gpu_peak_bytes"] = counts["gpu_peak_bytes"]
    if "cluster" in counts:
        ctx.counts["fusion_cluster"] = counts["cluster"]
