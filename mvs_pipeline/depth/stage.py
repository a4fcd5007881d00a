"""The `depth` stage: ACMM multi-scale PatchMatch with geometric consistency, maps into OUT/stereo/.

For each pass of `passes.plan_passes` (coarsest scale first) and each view with sources:
    photometric pass, coarsest scale   random initialisation (ACMH)
    photometric pass, finer scale      start from the coarser scale's last maps upsampled by
                                       joint bilateral upsampling; detail restorer
    planar pass (depth.planar_prior)   start from the photometric pass's maps, the planar prior
                                       (planar_prior/) replacing unreliable pixels' planes
                                       and adding its penalty to the cost
    geometric pass                     start from this view's previous pass; the sources' depth
                                       maps of the previous pass add the reprojection term
The finest scale's last pass is post-filtered (median over checkerboard neighbours, optional
cost threshold) and written as `<name>.geometric.bin` (`.photometric.bin` without geometric
passes), which is what fusion reads. Previews of the final maps go to stereo/previews/.

Resume: a pass is done when its marker (or a later pass's) says so, and a (pass, view) when the
maps a later pass reads exist and are complete; each file is written atomically and depth last,
so an interrupted run redoes only the views whose maps were still queued for writing. Every pass
reads only maps of the pass before it (from memory, or from their files after a resume) and draws
from a seed fixed per (pass, view), so a resumed run writes the same maps as an uninterrupted one.
Once a pass has finished, the maps of the pass before it are removed unless kept (pass_files.py).

On the GPU the maps stay on the device from pass to pass (caches.MapCache), and are copied
to the host only to be written, in the background (writer.py).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..gpu.memory_budget import usable_bytes
from ..interrupts import raise_if_interrupted
from ..scene.scene import Scene
from ..views.selection import ViewSelection
from .caches import GreyImageCache, MapCache
from .fusion_order import fusion_ready_order
from .pass_files import finish_pass, remove_markers
from .passes import DepthPass, filter_median_on, pending_per_pass, plan_passes, scaled_K, scaled_size
from .planar_prior import PriorSettings, SourceMaps, build_planar_prior, start_maps
from .patchmatch import PatchMatchProblem, run_patchmatch
from .patchmatch.detail_restore import restore_mask
from .patchmatch.problem import overlap_fractions
from .scale_ops.ops import jbu_upsample, postfilter_depth
from .writer import MapWriter

log = logging.getLogger(__name__)


def view_size(scene: Scene, view_idx: int, scale: int) -> tuple[int, int]:
    v = scene.views[view_idx]
    return scaled_size(v.width, v.height, scale)


def build_problem(scene: Scene, sel: ViewSelection, ref: int, images: GreyImageCache, scale: int = 0,
                  ) -> PatchMatchProblem:
    """Reference + its selected sources at pyramid `scale`, relative poses x_src = R x_ref + t."""
    rv = scene.views[ref]
    srcs = sel.neighbors[ref]
    R = np.stack([scene.views[s].R @ rv.R.T for s in srcs])  # [S, 3, 3]
    t = np.stack([scene.views[s].t - R[i] @ rv.t for i, s in enumerate(srcs)])  # [S, 3]
    lo, hi = sel.depth_ranges[ref]
    ref_size = view_size(scene, ref, scale)
    src_sizes = [view_size(scene, s, scale) for s in srcs]
    K_src = np.stack([scaled_K(scene.views[s].K, scene.views[s].width, scene.views[s].height, size)
                      for s, size in zip(srcs, src_sizes)])
    return PatchMatchProblem(
        ref_image=images.get(ref, scale), src_images=[images.get(s, scale) for s in srcs],
        K_ref=scaled_K(rv.K, rv.width, rv.height, ref_size), K_src=K_src, R_src_from_ref=R, t_src_from_ref=t,
        depth_min=float(lo), depth_max=float(hi),
        ref_camera_size=ref_size, src_camera_sizes=src_sizes, src_keys=[("image", s, scale) for s in srcs],
        ref_key=("image", ref, scale), name=f"image '{rv.name}'" + (f" (scale 1/{2 ** scale})" if scale else ""))


def _pass_inputs(cfg, scene: Scene, sel: ViewSelection, ref: int, pss: DepthPass,
                 previous: DepthPass | None, maps: MapCache, problem: PatchMatchProblem, backend: str,
                 prof: "Profile", device_cache=None) -> tuple[float | None, object]:
    """Fill in the problem's prior and source depth maps for this pass; returns the detail
    restorer's margin (None: no restorer) and the pixels it may restore (None: all; else the
    weakly textured ones, depth.detail_texture). `device_cache` (GPU): the TextureCache that also
    keeps the reference images on the device, used as the upsampling guide."""
    name = scene.views[ref].name
    if previous is None:
        return None, None
    what = f"image '{name}' ({previous.id})"
    prev_size = view_size(scene, ref, previous.scale)
    prev_depth = maps.depth(previous.map_path("depth", name), prev_size[::-1], what)
    prev_normal = maps.normal(previous.map_path("normal", name), prev_size[::-1], what)
    if pss.planar:
        _planar_inputs(cfg, scene, sel, ref, previous, maps, problem, prev_depth, prev_normal, backend, prof)
        return None, None
    if pss.kind == "photometric":   # a finer scale: upsample the coarser scale's last maps
        prof.stop("read_maps")
        d = cfg.depth
        guide = problem.ref_image if device_cache is None else device_cache.reference_image(problem)
        problem.init_depth, problem.init_normal = jbu_upsample(
            prev_depth, prev_normal, guide, radius=d.jbu_radius, sigma_spatial=d.jbu_sigma_spatial,
            sigma_range=d.jbu_sigma_range, backend=backend, keep_on_device=backend == "cuda")
        restore_only = restore_mask(guide, d.detail_margin, d.detail_texture)   # timed with the upsampling
        prof.stop("upsample")
        return d.detail_margin, restore_only
    problem.init_depth, problem.init_normal = prev_depth, prev_normal
    problem.src_depths = [
        maps.depth(previous.map_path("depth", scene.views[s].name), view_size(scene, s, pss.scale)[::-1],
                   f"source image '{scene.views[s].name}' ({previous.id})")
        for s in sel.neighbors[ref]]
    problem.src_depth_keys = [("depth", previous.index, s) for s in sel.neighbors[ref]]
    prof.stop("read_maps")
    return None, None


def _planar_inputs(cfg, scene: Scene, sel: ViewSelection, ref: int, previous: DepthPass, maps: MapCache,
                   problem: PatchMatchProblem, prev_depth, prev_normal, backend: str, prof: "Profile") -> None:
    """The planar pass's problem: the planar prior from the previous (photometric) pass's maps of
    this view, checked against its sources' maps of that pass; the pass starts from the previous
    maps with the prior's plane wherever there is a prior (ACMP's re-initialisation). Built where
    the maps are (planar_prior/: the per-pixel steps as kernels on the GPU, only the support
    points and triangles cross to the host and back), the same prior on both backends."""
    d = cfg.depth
    size = view_size(scene, ref, previous.scale)[::-1]
    name = scene.views[ref].name
    cost = maps.cost(previous.map_path("cost", name), size, f"image '{name}' ({previous.id})")
    sources = []
    if d.planar_prior_min_consistent > 0:
        for k, s in enumerate(sel.neighbors[ref]):
            sname = scene.views[s].name
            sd = maps.depth(previous.map_path("depth", sname), view_size(scene, s, previous.scale)[::-1],
                            f"source image '{sname}' ({previous.id})")
            sources.append(SourceMaps(sd, problem.K_src[k], problem.R_src_from_ref[k], problem.t_src_from_ref[k]))
    prof.stop("read_maps")
    settings = PriorSettings(max_cost=d.planar_prior_max_cost, grid=d.planar_prior_grid,
                             max_edge=d.planar_prior_max_edge, min_consistent=d.planar_prior_min_consistent,
                             max_reproj_error=d.planar_prior_max_reproj_error)
    prior, stats = build_planar_prior(prev_depth, cost, problem.K_ref, settings, sources, backend=backend,
                                      keep_on_device=backend == "cuda")
    log.debug("depth: planar prior of '%s': %s", name, stats)   # prior_pixels waits for the GPU, with -v only
    problem.init_depth, problem.init_normal = start_maps(prior, prev_depth, prev_normal)
    problem.planar_prior = prior
    prof.stop("planar_prior")


class Profile:
    """Where the depth stage's time goes (seconds per category, summed over views and passes)
    and the GPU memory peak; the benchmark reads it, run.json gets the summary."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.solver_ms: dict[str, float] = {}
        self.gpu_used_peak_bytes = 0
        self._start = 0.0
        self._pending: list[tuple[str, dict]] = []

    def start(self):
        self._start = time.perf_counter()

    def stop(self, key: str):
        now = time.perf_counter()
        self.seconds[key] = self.seconds.get(key, 0.0) + now - self._start
        self._start = now

    def add_solver(self, pass_kind: str, timings: dict, memory: dict):
        """Add one solver call's split; GPU phases still running (keep_on_device) are added by
        finish(), so that profiling does not make the host wait for the GPU."""
        if "pending_events" in timings:
            self._pending.append((pass_kind, timings))
        else:
            self._add(pass_kind, timings)
        self.gpu_used_peak_bytes = max(self.gpu_used_peak_bytes, int(memory.get("used_bytes", 0)))

    def _add(self, pass_kind: str, timings: dict):
        for k, v in timings.items():
            key = f"{pass_kind}:{'iterations' if k.startswith('iteration_') else k}"
            self.solver_ms[key] = self.solver_ms.get(key, 0.0) + v

    def finish(self):
        if not self._pending:
            return
        from .patchmatch.cuda_solver import resolve_timings  # noqa: PLC0415 (GPU runs only)

        for pass_kind, timings in self._pending:
            resolve_timings(timings)
            self._add(pass_kind, timings)
        self._pending = []


def compute_depth_maps(cfg, scene: Scene, sel: ViewSelection, out_dir: Path, backend: str,
                       overwrite: bool = False, progress: bool = True, profile: Profile | None = None,
                       final_maps=None) -> dict:
    """Run every pass of the plan for every view with sources; returns counts and timings.

    `profile` (optional) collects the time per category: read_images, read_maps, upsample,
    patchmatch, postfilter, queue_writes / wait_for_writes (maps are written in background
    threads, write_maps_in_background sums their time); on the GPU also the solver's own split (uploads,
    kernels per pass kind, restore, downloads) and the device memory peak. On the GPU the host
    does not wait for each view's kernels, so host categories and the per-pass seconds count host
    time, which includes waiting where a check or copy needs the GPU to catch up.

    `final_maps` (optional; the pipeline's fusion that trails this stage, fusion/trailing.py) is told
    which views will have final maps (`planned(view_idxs)`, before any pass) and when each view's final
    maps are in their files (`written(view_idx)`, from a writer thread; at once for a resumed view).
    """
    out_dir = Path(out_dir)
    prof = profile or Profile()
    sel, todo, passes = plan_depth_run(cfg, scene, sel, out_dir)
    on_gpu = backend == "cuda"
    images = GreyImageCache(scene, threads=min(8, os.cpu_count() or 1))
    writer = MapWriter(durable=cfg.depth.sync_maps, preview_max_size=cfg.depth.preview_max_size)
    textures = None
    if on_gpu:   # sources and reference images stay on the GPU across references and passes
        from ..gpu.loader import import_cupy  # noqa: PLC0415
        from .patchmatch.cuda import TextureCache  # noqa: PLC0415

        textures = TextureCache()
        maps = MapCache(max_bytes=usable_bytes() // 4, before_disk_read=writer.wait_for,   # on the device
                        to_device=import_cupy().asarray)
    else:
        maps = MapCache(before_disk_read=writer.wait_for)
    computed, resumed = 0, 0
    seconds: dict[str, float] = {}
    names = [scene.views[i].name for i in todo]
    if overwrite:
        remove_markers(passes)
    pending_by_pass = pending_views(scene, todo, passes, overwrite)
    if final_maps is not None:
        final_maps.planned(list(todo))
    try:
        for pss, pending in zip(passes, pending_by_pass):
            resumed += len(todo) - len(pending)
            trailing = final_maps if final_maps is not None and pss.final else None
            if trailing is not None:   # the final maps a resumed run found complete
                for v in sorted(set(todo) - set(pending)):
                    trailing.written(v)
            if not pending:   # a resumed pass: its marker and its predecessor's removal may be due still
                writer.after_writes(partial(finish_pass, passes, pss, names, cfg.depth.sync_maps))
                continue
            if trailing is not None:   # the views fusion's first references need come first
                pending = fusion_ready_order(pending, sel.neighbors)
            images.prefetch((v, pss.scale) for ref in pending for v in [ref, *sel.neighbors[ref]])
            start = time.perf_counter()
            for ref in tqdm(pending, desc=f"depth {pss.id}", unit="view", disable=not progress):
                compute_view(cfg, scene, sel, ref, passes, pss.index, out_dir, backend,
                             ViewCaches(images, maps, writer, textures), prof,
                             on_written=None if trailing is None else partial(trailing.written, ref))
                computed += 1
                raise_if_interrupted()   # a Ctrl-C swallowed on its way stops the stage after this view
            # no wait for the writes here: the next pass reads this one's maps from `maps`
            seconds[pss.id] = time.perf_counter() - start
            # a pass reads only the one before it: older maps would only hold memory (at 3200x2130
            # every pass's maps of 40 views are 4.4 GB, and the cache may keep a quarter of the GPU)
            maps.retain(pss.owns)
            # once this pass's maps are written: its marker, and the previous pass's maps removed
            writer.after_writes(partial(finish_pass, passes, pss, names, cfg.depth.sync_maps))
        prof.start()
        writer.flush()
        prof.stop("wait_for_writes")
    except BaseException:
        writer.close(raise_errors=False)   # views already computed still reach the disk
        raise
    finally:
        images.close()
        if textures is not None:
            textures.release()
    writer.close()
    prof.finish()
    prof.seconds["write_maps_in_background"] = writer.seconds
    return {"depth_views": len(todo), "depth_passes": len(passes), "depth_view_passes_computed": computed,
            "depth_view_passes_resumed": resumed, "depth_valid_pixels_computed": writer.valid_pixels,
            "depth_pass_seconds": seconds, "depth_seconds_by_category": dict(prof.seconds),
            **({"depth_gpu_used_peak_bytes": prof.gpu_used_peak_bytes} if prof.gpu_used_peak_bytes else {})}


def plan_depth_run(cfg, scene: Scene, sel: ViewSelection, out_dir: Path
                   ) -> tuple[ViewSelection, list[int], list[DepthPass]]:
    """(selection with unusable sources dropped, view_idx of the views that get maps, passes in
    run order): what both the single-process and the cluster run (cluster_run.py) work through."""
    sel = _drop_non_overlapping(scene, sel)
    todo = [i for i in range(scene.num_views) if sel.neighbors[i]]
    # A geometric pass reads every source's previous maps: a source without sources of its own
    # has none, so it is dropped from every pass's source list (then the reference may have none).
    sel = _restrict_sources(sel, set(todo))
    todo = [i for i in todo if sel.neighbors[i]]
    skipped = scene.num_views - len(todo)
    if skipped:
        log.warning("depth: %d view(s) without usable source views get no depth map", skipped)
    max_side = max(max(v.width, v.height) for v in scene.views)
    passes = plan_passes(cfg.depth, Path(out_dir) / "stereo", max_side, keep_photometric=fuses_photometric(cfg))
    log.info("depth: %d scale(s), passes: %s", passes[0].scale + 1, ", ".join(p.id for p in passes))
    return sel, todo, passes


def fuses_photometric(cfg) -> bool:
    """Whether fusion will read the finest photometric maps, so that the depth stage keeps them
    (fusion.map_type photometric; `auto` takes the geometric ones, which every view has)."""
    fusion = getattr(cfg, "fusion", None)   # a caller may hand over the depth stage's sections only
    return getattr(fusion, "map_type", "auto") == "photometric"


def pending_views(scene: Scene, todo: list[int], passes: list[DepthPass], overwrite: bool) -> list[list[int]]:
    """Per pass, the view_idx of `todo` whose maps are still to compute (passes.pending_per_pass)."""
    pending = [[todo[j] for j in js] for js in pending_per_pass(passes, [scene.views[i].name for i in todo], overwrite)]
    for pss, views in zip(passes, pending):
        if not views:
            log.info("depth: pass %s already done for all %d views; resuming", pss.id, len(todo))
    return pending


@dataclass
class ViewCaches:
    """What one process keeps between views: decoded images, earlier passes' maps, the map
    writer and (GPU) the texture cache. A cluster worker keeps one across its tasks."""
    images: GreyImageCache
    maps: MapCache
    writer: MapWriter
    textures: object = None


def compute_view(cfg, scene: Scene, sel: ViewSelection, ref: int, passes: list[DepthPass], pass_index: int,
                 out_dir: Path, backend: str, caches: ViewCaches, prof: Profile, on_written=None) -> None:
    """One (pass, view): PatchMatch from this pass's inputs, maps queued on `caches.writer` (which
    calls `on_written()` once they are in their files) and kept in `caches.maps`. The seed depends
    only on (cfg.seed, view_idx, pass), so the maps do not depend on which process computes them or
    in which order."""
    pss = passes[pass_index]
    previous = _previous_pass(passes, pss)
    on_gpu = backend == "cuda"
    name = scene.views[ref].name
    prof.start()
    problem = build_problem(scene, sel, ref, caches.images, pss.scale)
    prof.stop("read_images")
    margin, restore_only = _pass_inputs(cfg, scene, sel, ref, pss, previous, caches.maps, problem, backend, prof,
                                        caches.textures)
    seed = (cfg.seed + ref + 7919 * pss.index) & 0x7FFFFFFF
    timings, memory = {}, {}
    result = run_patchmatch(problem, cfg.patchmatch, backend=backend, seed=seed, restore_margin=margin,
                            restore_only=restore_only, timings=timings, memory=memory, texture_cache=caches.textures,
                            keep_on_device=on_gpu)
    prof.stop("patchmatch")
    prof.add_solver(pss.kind, timings, memory)
    depth = result.depth
    if pss.final:
        median = filter_median_on(cfg.depth, max(max(v.width, v.height) for v in scene.views))
        depth = postfilter_depth(depth, result.cost, _max_cost(cfg), median=median,
                                 backend=backend, keep_on_device=on_gpu)
        prof.stop("postfilter")
    preview = (Path(out_dir) / "stereo" / "previews" / name, tuple(sel.depth_ranges[ref])) if pss.final else None
    caches.writer.submit(pss, name, depth, result.normal, result.cost, preview, result.deferred_checks, on_written)
    caches.maps.put(pss.map_path("depth", name), depth)
    caches.maps.put(pss.map_path("normal", name), result.normal)
    if pass_index + 1 < len(passes) and passes[pass_index + 1].planar:   # the planar pass reads it
        caches.maps.put(pss.map_path("cost", name), result.cost)
    prof.stop("queue_writes")


def _max_cost(cfg) -> float:
    return float("inf") if cfg.depth.filter_max_cost is None else float(cfg.depth.filter_max_cost)


def _previous_pass(passes: list[DepthPass], pss: DepthPass) -> DepthPass | None:
    return passes[pss.index - 1] if pss.index > 0 else None


def _filter_sources(sel: ViewSelection, keep) -> ViewSelection:
    """The selection with only the sources s of each reference view ref where keep(ref, s)."""
    kept = [[(s, score) for s, score in zip(srcs, scores) if keep(ref, s)]
            for ref, (srcs, scores) in enumerate(zip(sel.neighbors, sel.scores))]
    return ViewSelection(neighbors=[[s for s, _ in k] for k in kept], scores=[[sc for _, sc in k] for k in kept],
                         depth_ranges=sel.depth_ranges)


def _drop_non_overlapping(scene: Scene, sel: ViewSelection) -> ViewSelection:
    """Drop (with a warning) sources that see nothing of the reference's depth range: the view
    selection scores shared sparse points, which a large neighbour count can exhaust, and
    PatchMatch rejects such a source (every window would cost the maximum). One batched check per
    reference (overlap_fractions): per source it took ~0.3 ms, 0.9 s of a 300-view run's start."""
    overlapping = set()
    for ref, srcs in enumerate(sel.neighbors):
        if not srcs:
            continue
        rv, svs = scene.views[ref], [scene.views[s] for s in srcs]
        lo, hi = sel.depth_ranges[ref]
        R = np.stack([sv.R for sv in svs]) @ rv.R.T                                   # [S, 3, 3]
        t = np.stack([sv.t for sv in svs]) - R @ np.asarray(rv.t, dtype=np.float64)   # [S, 3]
        fractions = overlap_fractions(rv.K, (rv.width, rv.height), np.stack([sv.K for sv in svs]),
                                      [(sv.width, sv.height) for sv in svs], R, t, float(lo), float(hi))
        for s, sv, fraction in zip(srcs, svs, fractions):
            if fraction > 0:
                overlapping.add((ref, s))
            else:
                log.warning("depth: source '%s' of '%s' does not overlap it in its depth range; dropped",
                            sv.name, rv.name)
    return _filter_sources(sel, lambda ref, s: (ref, s) in overlapping)


def _restrict_sources(sel: ViewSelection, with_maps: set[int]) -> ViewSelection:
    """The selection with every view's sources limited to views in `with_maps`, repeated until
    stable (dropping a view's last source takes it out of `with_maps` too)."""
    with_maps = set(with_maps)
    while True:
        restricted = _filter_sources(sel, lambda ref, s: s in with_maps)
        with_maps = {i for i in with_maps if restricted.neighbors[i]}
        if restricted.neighbors == sel.neighbors:
            return restricted
        sel = restricted


def run(ctx) -> None:
    """The pipeline's `depth` stage: `ctx` is pipeline.RunContext (reads cfg.depth, cfg.patchmatch, cfg.seed)."""
    ctx.counts.update(compute_depth_maps(ctx.cfg, ctx.require_scene(), ctx.require_selection(), ctx.out_dir,
                                         ctx.backend, overwrite=ctx.overwrite, progress=ctx.progress,
                                         final_maps=ctx.final_maps))
