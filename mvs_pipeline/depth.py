"""The `depth` stage: ACMM multi-scale PatchMatch with geometric consistency, maps into OUT/stereo/.

For each pass of `depth_passes.plan_passes` (coarsest scale first) and each view with sources:
    photometric pass, coarsest scale   random initialisation (ACMH)
    photometric pass, finer scale      start from the coarser scale's last maps upsampled by
                                       joint bilateral upsampling; detail restorer
    geometric pass                     start from this view's previous pass; the sources' depth
                                       maps of the previous pass add the reprojection term
The finest scale's last pass is post-filtered (median over checkerboard neighbours, optional
cost threshold) and written as `<name>.geometric.bin` (`.photometric.bin` without geometric
passes), which is what fusion reads. Previews of the final maps go to stereo/previews/.

Resume: a (pass, view) is done when its depth, normal and cost maps exist; each file is
written atomically and depth last, so an interrupted run redoes at most one view of one pass.
Every pass reads only files of earlier passes and draws from a seed fixed per (pass, view), so a
resumed run writes the same maps as an uninterrupted one.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
from tqdm import tqdm

from .config_schema import PipelineConfig
from .depth_passes import DepthPass, plan_passes, scaled_K, scaled_size
from .errors import MVSError
from .io.colmap_maps import read_depth_map, read_normal_map, write_depth_map, write_normal_map, write_previews
from .patchmatch import PatchMatchProblem, run_patchmatch
from .patchmatch.problem import overlap_fraction
from .scale_ops import jbu_upsample, postfilter_depth
from .scene import Scene
from .views import ViewSelection

log = logging.getLogger(__name__)


class GreyImageCache:
    """Decoded grey images (float32, 0..255) per (view, scale), most recently used kept."""

    def __init__(self, scene: Scene, capacity: int = 96):
        self.scene, self.capacity = scene, capacity
        self._cache: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()

    def _full(self, view_idx: int) -> np.ndarray:
        view = self.scene.views[view_idx]
        pixels = cv2.imread(str(view.image_path), cv2.IMREAD_GRAYSCALE)
        if pixels is None:
            raise MVSError(f"{view.image_path}: image '{view.name}' could not be read")
        if pixels.shape != (view.height, view.width):
            raise MVSError(f"{view.image_path}: image '{view.name}' is {pixels.shape[1]}x{pixels.shape[0]} px "
                           f"but its camera says {view.width}x{view.height}")
        return pixels.astype(np.float32)

    def get(self, view_idx: int, scale: int = 0) -> np.ndarray:
        key = (view_idx, scale)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        if scale == 0:
            grey = self._full(view_idx)
        else:
            view = self.scene.views[view_idx]
            # from the cached full image (decoded once per view); area averaging: each pixel
            # counts once, no aliasing of fine texture
            grey = cv2.resize(self.get(view_idx, 0), scaled_size(view.width, view.height, scale),
                              interpolation=cv2.INTER_AREA)
        grey.setflags(write=False)   # shared by many problems; read-only lets PatchMatch skip re-checks
        self._cache[key] = grey
        if len(self._cache) > self.capacity:
            self._cache.popitem(last=False)
        return grey


class MapCache:
    """Maps of earlier passes, most recently used kept up to a byte budget. A pass's maps go in as
    they are written (the next pass reads them without touching the disk: at 3200x2130 reading
    them back took ~7 % of the stage); after a resume they are read from disk on first use."""

    def __init__(self, max_bytes: int = 4 << 30):
        self.max_bytes = max_bytes
        self.bytes = 0
        self._cache: OrderedDict[Path, np.ndarray] = OrderedDict()

    def put(self, path: Path, array: np.ndarray) -> None:
        if path in self._cache:
            self.bytes -= self._cache.pop(path).nbytes
        self._cache[path] = array
        self.bytes += array.nbytes
        while self.bytes > self.max_bytes and len(self._cache) > 1:
            self.bytes -= self._cache.popitem(last=False)[1].nbytes

    def _get(self, path: Path, reader, kind: str, expected_shape: tuple, what: str) -> np.ndarray:
        if path in self._cache:
            self._cache.move_to_end(path)
            return self._cache[path]
        if not path.is_file():
            raise MVSError(f"{path}: {kind} map of {what} is missing (delete stereo/ or run with --overwrite)")
        a = reader(path)
        if a.shape != tuple(expected_shape):
            raise MVSError(f"{path}: {kind} map of {what} is {a.shape[1]}x{a.shape[0]} px, expected "
                           f"{expected_shape[1]}x{expected_shape[0]} for this scale: maps from another "
                           f"configuration; rerun the depth stage with --overwrite")
        self.put(path, a)
        return a

    def depth(self, path: Path, expected_shape: tuple[int, int], what: str) -> np.ndarray:
        return self._get(path, read_depth_map, "depth", tuple(expected_shape), what)

    def normal(self, path: Path, expected_shape: tuple[int, int], what: str) -> np.ndarray:
        return self._get(path, read_normal_map, "normal", (*expected_shape, 3), what)


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
        name=f"image '{rv.name}'" + (f" (scale 1/{2 ** scale})" if scale else ""))


def _pass_inputs(cfg: PipelineConfig, scene: Scene, sel: ViewSelection, ref: int, pss: DepthPass,
                 previous: DepthPass | None, maps: MapCache, problem: PatchMatchProblem, backend: str,
                 prof: "Profile") -> float | None:
    """Fill in the problem's prior and source depth maps for this pass; returns the detail
    restorer's margin (None: no restorer)."""
    name = scene.views[ref].name
    if previous is None:
        return None
    what = f"image '{name}' ({previous.id})"
    prev_size = view_size(scene, ref, previous.scale)
    prev_depth = maps.depth(previous.map_path("depth", name), prev_size[::-1], what)
    prev_normal = maps.normal(previous.map_path("normal", name), prev_size[::-1], what)
    if pss.kind == "photometric":   # a finer scale: upsample the coarser scale's last maps
        prof.stop("read_maps")
        d = cfg.depth
        problem.init_depth, problem.init_normal = jbu_upsample(
            prev_depth, prev_normal, problem.ref_image, radius=d.jbu_radius, sigma_spatial=d.jbu_sigma_spatial,
            sigma_range=d.jbu_sigma_range, backend=backend, keep_on_device=backend == "cuda")
        prof.stop("upsample")
        return d.detail_margin
    problem.init_depth, problem.init_normal = prev_depth, prev_normal
    problem.src_depths = [
        maps.depth(previous.map_path("depth", scene.views[s].name), view_size(scene, s, pss.scale)[::-1],
                   f"source image '{scene.views[s].name}' ({previous.id})")
        for s in sel.neighbors[ref]]
    problem.src_depth_keys = [("depth", previous.index, s) for s in sel.neighbors[ref]]
    prof.stop("read_maps")
    return None


class MapWriter:
    """Writes a view's maps in background threads while the GPU works on the next view.

    A pass reads only maps of earlier passes, so `flush` at the end of every pass is the only
    synchronisation needed; each file is still written atomically (depth last), so a crash
    loses at most the views still queued, which a rerun redoes.
    """

    def __init__(self, threads: int = 2):
        self._pool = ThreadPoolExecutor(max_workers=threads)
        self._pending: list = []
        self.seconds = 0.0   # summed over the writer threads (overlaps with compute)

    def submit(self, fn, *args) -> None:
        def timed():
            t0 = time.perf_counter()
            fn(*args)
            return time.perf_counter() - t0

        self._pending.append(self._pool.submit(timed))

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        for fut in pending:
            self.seconds += fut.result()   # re-raises a failed write

    def close(self, raise_errors: bool = True) -> None:
        try:
            self.flush()
        except Exception:
            if raise_errors:
                raise
            log.exception("depth: writing maps failed")
        finally:
            self._pool.shutdown(wait=True)


class Profile:
    """Where the depth stage's time goes (seconds per category, summed over views and passes)
    and the GPU memory peak; the benchmark reads it, run.json gets the summary."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.solver_ms: dict[str, float] = {}
        self.gpu_used_peak_bytes = 0
        self._start = 0.0

    def start(self):
        self._start = time.perf_counter()

    def stop(self, key: str):
        now = time.perf_counter()
        self.seconds[key] = self.seconds.get(key, 0.0) + now - self._start
        self._start = now

    def add_solver(self, pass_kind: str, timings: dict, memory: dict):
        for k, v in timings.items():
            key = f"{pass_kind}:{'iterations' if k.startswith('iteration_') else k}"
            self.solver_ms[key] = self.solver_ms.get(key, 0.0) + v
        self.gpu_used_peak_bytes = max(self.gpu_used_peak_bytes, int(memory.get("used_bytes", 0)))


def run(cfg: PipelineConfig, scene: Scene, sel: ViewSelection, out_dir: Path, backend: str,
        overwrite: bool = False, progress: bool = True, profile: Profile | None = None) -> dict:
    """Run every pass of the plan for every view with sources; returns counts and timings.

    `profile` (optional) collects the time per category: read_images, read_maps, upsample,
    patchmatch, postfilter, queue_writes / wait_for_writes (maps are written in background
    threads, write_maps_in_background sums their time); on the GPU also the solver's own split (uploads,
    kernels per pass kind, restore, downloads) and the device memory peak.
    """
    out_dir = Path(out_dir)
    prof = profile or Profile()
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
    passes = plan_passes(cfg.depth, out_dir / "stereo", max_side)
    log.info("depth: %d scale(s), passes: %s", passes[0].scale + 1, ", ".join(p.id for p in passes))
    images = GreyImageCache(scene)
    maps = MapCache()
    writer = MapWriter(threads=4)
    textures = None
    if backend == "cuda":   # sources stay on the GPU across references (GPU texture cache)
        from .kernels.patchmatch import TextureCache  # noqa: PLC0415

        textures = TextureCache()
    computed, resumed, valid_pixels = 0, 0, 0
    seconds: dict[str, float] = {}
    try:
        for pss in passes:
            previous = _previous_pass(passes, pss)
            pending = [i for i in todo if overwrite or not pss.done(scene.views[i].name)]
            resumed += len(todo) - len(pending)
            if not pending:
                log.info("depth: pass %s already done for all %d views; resuming", pss.id, len(todo))
                continue
            start = time.perf_counter()
            for ref in tqdm(pending, desc=f"depth {pss.id}", unit="view", disable=not progress):
                name = scene.views[ref].name
                prof.start()
                problem = build_problem(scene, sel, ref, images, pss.scale)
                prof.stop("read_images")
                margin = _pass_inputs(cfg, scene, sel, ref, pss, previous, maps, problem, backend, prof)
                seed = (cfg.seed + ref + 7919 * pss.index) & 0x7FFFFFFF
                timings, memory = {}, {}
                result = run_patchmatch(problem, cfg.patchmatch, backend=backend, seed=seed, restore_margin=margin,
                                        timings=timings, memory=memory, texture_cache=textures)
                prof.stop("patchmatch")
                prof.add_solver(pss.kind, timings, memory)
                depth = result.depth
                if pss.final:
                    depth = postfilter_depth(depth, result.cost, _max_cost(cfg), median=cfg.depth.filter_median,
                                             backend=backend)
                    prof.stop("postfilter")
                writer.submit(_write_maps, pss, name, depth, result.normal, result.cost)
                maps.put(pss.map_path("depth", name), depth)
                maps.put(pss.map_path("normal", name), result.normal)
                if pss.final:
                    writer.submit(write_previews, out_dir / "stereo" / "previews" / name, depth, result.normal,
                                  result.cost, tuple(sel.depth_ranges[ref]))
                    valid_pixels += int((depth > 0).sum())
                prof.stop("queue_writes")
                computed += 1
            prof.start()
            writer.flush()
            prof.stop("wait_for_writes")
            seconds[pss.id] = time.perf_counter() - start
    except BaseException:
        writer.close(raise_errors=False)   # views already computed still reach the disk
        raise
    finally:
        if textures is not None:
            textures.release()
    writer.close()
    prof.seconds["write_maps_in_background"] = writer.seconds
    return {"depth_views": len(todo), "depth_passes": len(passes), "depth_view_passes_computed": computed,
            "depth_view_passes_resumed": resumed, "depth_valid_pixels_computed": valid_pixels,
            "depth_pass_seconds": seconds, "depth_seconds_by_category": dict(prof.seconds),
            **({"depth_gpu_used_peak_bytes": prof.gpu_used_peak_bytes} if prof.gpu_used_peak_bytes else {})}


def _max_cost(cfg: PipelineConfig) -> float:
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
    PatchMatch rejects such a source (every window would cost the maximum)."""
    def overlaps(ref: int, s: int) -> bool:
        rv, sv = scene.views[ref], scene.views[s]
        lo, hi = sel.depth_ranges[ref]
        R = sv.R @ rv.R.T
        if overlap_fraction(rv.K, (rv.width, rv.height), sv.K, (sv.width, sv.height), R, sv.t - R @ rv.t,
                            float(lo), float(hi)) > 0:
            return True
        log.warning("depth: source '%s' of '%s' does not overlap it in its depth range; dropped", sv.name, rv.name)
        return False

    return _filter_sources(sel, overlaps)


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


def _write_maps(pss: DepthPass, name: str, depth: np.ndarray, normal: np.ndarray, cost: np.ndarray) -> None:
    write_normal_map(pss.map_path("normal", name), normal)
    write_depth_map(pss.map_path("cost", name), cost)      # one channel, same layout as depth
    write_depth_map(pss.map_path("depth", name), depth)    # last: with the others it marks the view done
