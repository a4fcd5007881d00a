"""Chain the stages; record per-stage wall time, counts and the resolved config in OUT.

Each stage is `<stage>/stage.py`'s `run(ctx)` with the RunContext below; it skips work whose output
already exists (resume), unless `overwrite` is set. This module only composes them.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import fingerprints
from .backend_start import BackendStart
from .config.auto import annotate_yaml, resolve_auto
from .config.loader import config_to_dict, dump_config
from .config.schema import PipelineConfig
from .errors import MVSError
from .gpu.backend import resolve_backend
from .gpu.memory_errors import first_line, is_gpu_out_of_memory
from .interrupts import raise_if_interrupted
from .io.atomic import atomic_write_text, remove_leftovers
from .io.disk import is_disk_error
from .io.folder_lock import output_folder_lock
from .io.object_masks import check_mask_files
from .output_space import check_output_writable, check_stage_space, write_error
from .scene import stage as scene_stage
from .scene.workspace import has_model, read_scene
from .views import stage as views_stage

log = logging.getLogger(__name__)

ALL_STAGES = ("load", "views", "depth", "fusion", "sampling", "mesh", "evaluate")
# Stages whose work runs on `--cluster`'s Dask workers (fusion and sampling with cluster.later_stages on
# the workers): the cluster starts with the run when one of them has work left, and begins shutting down
# as the last of them in the run ends
CLUSTER_STAGES = ("depth", "fusion", "sampling")
# Stages a run without --stages leaves out unless the config enables them (mesh.enabled)
OPTIONAL_STAGES = ("mesh",)


@dataclass
class RunContext:
    cfg: PipelineConfig
    workspace: Path
    out_dir: Path
    overwrite: bool
    progress: bool
    resume_only: bool = False  # refuse to redo a stage whose fingerprint changed (fingerprints.py)
    images: Path | None = None
    sparse: Path | None = None
    gt: Path | None = None  # ETH3D scan_alignment.mlp for the evaluate stage
    cluster: object = None  # cluster/client.ClusterStart once a --cluster run has started its cluster
    cluster_wanted: bool = False  # --cluster and one of CLUSTER_STAGES in this run: start_cluster may be called
    stage_unix_times: dict = field(default_factory=dict)  # stage -> [start, end], seconds since the epoch
    host_peaks: dict = field(default_factory=dict)  # stage -> resident-memory peak during it, bytes
    # `backend` (the property below) is resolved_backend; run_pipeline leaves it None while its
    # BackendStart resolves it in a thread (backend_start.py), kept until its depth warm-up is waited for
    resolved_backend: str | None = "cpu"
    backend_start: BackendStart | None = None
    scene: object = None
    selection: object = None
    counts: dict = field(default_factory=dict)
    auto: list | None = None  # config/auto.py's AutoValues once cfg's `auto` keys are resolved (resolve_auto)
    # AutoValues an earlier run resolved into the config this one reads pinned (`mesh OUT` reads the run's
    # config.resolved.yaml): kept in this run's notes beside its own
    auto_inherited: list = field(default_factory=list)
    masks_checked: bool = False  # the mask folders' files against the prepared images (_check_masks_once)
    # called as the depth stage starts (ctx, stages), returns what ends it at the end of the run (or
    # None): commands/run.py compiles the later stages' CPU twins in the background (compile_ahead.py)
    before_depth: Callable | None = None
    # evaluation/depth_job.py's comparison of the depth maps with GT, started as the depth stage ends
    # (_start_early_evaluation); the evaluate stage takes its result
    early_depth_metrics: object = None
    # fusion/trailing.py's fusion beside the depth stage (_start_trailing_fusion)
    trailing_fusion: object = None

    @property
    def later_on_workers(self) -> bool:
        """Whether fusion and the sampling stage's pooling run on the cluster's workers (cluster.later_stages);
        else they run in this process, as without --cluster."""
        from .cluster.params import later_stages_on_workers  # noqa: PLC0415

        return self.cluster_wanted and later_stages_on_workers(self.cfg.cluster)

    @property
    def final_maps(self):
        """The gate the depth stage tells which final maps are written (compute_depth_maps' final_maps):
        the trailing fusion's, if one runs."""
        return None if self.trailing_fusion is None else self.trailing_fusion.gate

    @property
    def backend(self) -> str:
        """The resolved backend ("cuda" or "cpu"); the first read waits for run_pipeline's BackendStart."""
        if self.resolved_backend is None:
            self.resolved_backend = self.backend_start.backend()   # BackendUnavailable: `cuda` cannot run
            log.info("backend: %s (requested %s)", self.resolved_backend, self.cfg.backend)
            if self.resolved_backend == "cuda" and self.cfg.gpu_memory is not None:   # set by BackendStart
                log.info("GPU memory budget: %.3g GiB", self.cfg.gpu_memory)
        return self.resolved_backend

    @backend.setter
    def backend(self, value: str) -> None:
        self.resolved_backend = value

    def known_backend(self) -> str | None:
        """The backend if it is resolved already, without waiting (None while it resolves)."""
        if self.resolved_backend is not None or self.backend_start is None:
            return self.resolved_backend
        return self.backend_start.known()

    def wait_warm_up(self) -> None:
        """Wait for BackendStart's depth warm-up, so that the depth stage has the GPU to itself."""
        if self.backend_start is not None:
            _ = self.backend
            self.backend_start.wait_warm_up()
            self.backend_start = None

    def require_scene(self):
        if self.scene is None:
            if not has_model(self.out_dir / "sparse"):
                raise MVSError(f"{self.out_dir}: no prepared workspace; run the 'load' stage first")
            self.scene = read_scene(self.out_dir / "images", self.out_dir / "sparse")
        return self.scene

    def resolve_auto(self) -> None:
        """Replace cfg's `auto` values by what they resolve to for the prepared scene (config/auto.py),
        once: every stage after load and every fingerprint reads the resolved values."""
        if self.auto is not None:
            return
        self.cfg, resolved = resolve_auto(self.cfg, self.require_scene())
        for a in resolved:
            log.info("auto: %s = %s (%s)", a.key, a.shown, a.reason)
        again = {a.key for a in resolved}
        self.auto = [a for a in self.auto_inherited if a.key not in again] + resolved

    def start_cluster(self) -> None:
        """Start `--cluster`'s cluster in the background (cluster/client.ClusterStart): its workers
        start, import and load their kernels while this process goes on."""
        if self.cluster is not None:
            return
        from .cluster.client import ClusterStart  # noqa: PLC0415 (imports distributed)
        from .depth.cluster_run import warm_up_workers  # noqa: PLC0415

        self.cluster = ClusterStart(self.cfg.cluster, lambda client: warm_up_workers(client, self.backend, self.cfg))

    def require_client(self):
        """The Dask client of `--cluster`, once its start has finished (begun with the run, or now);
        the first wait for it goes into counts.cluster_wait_seconds (inside the stage that waited)."""
        if not self.cluster_wanted:
            raise MVSError("this stage needs --cluster (no Dask client is open)")
        t0 = time.perf_counter()
        self.start_cluster()
        client = self.cluster.client()
        self.counts.setdefault("cluster_wait_seconds", round(time.perf_counter() - t0, 3))
        return client

    def require_selection(self):
        if self.selection is None:
            self.selection = views_stage.select_and_write(self.cfg.views, self.require_scene(), self.out_dir,
                                                          overwrite=False)
        return self.selection


# Stages are imported when they run: the heavy ones pull in numba and CuPy.
def _run_load(ctx: RunContext) -> None:
    scene_stage.run(ctx)
    # --cluster: the workers decode the images while views run here, unless depth is done (a
    # cluster started for the later stages alone, e.g. sampling's pooling, has no use for them;
    # a finished depth stage redone for a changed input decodes them in its tasks instead)
    if ctx.cluster is not None and (ctx.overwrite or not fingerprints.finished(ctx.out_dir, "depth")):
        from .depth.cluster_run import prefetch_images_on_workers  # noqa: PLC0415 (imports distributed)

        prefetch_images_on_workers(ctx.require_client(), ctx.scene)


def _run_views(ctx: RunContext) -> None:
    views_stage.run(ctx)


def _run_depth(ctx: RunContext) -> None:
    if ctx.cluster_wanted:   # --cluster: Dask tasks of a few views of one pass each
        from .depth import cluster_run  # noqa: PLC0415 (imports distributed)

        cluster_run.run(ctx)
        return
    from .depth import stage  # noqa: PLC0415 (imports numba/cupy only when needed)

    stage.run(ctx)


def _run_fusion(ctx: RunContext) -> None:
    if ctx.later_on_workers:   # --cluster, cluster.later_stages on the workers: one Dask task per range of views
        from .fusion import cluster_run  # noqa: PLC0415 (imports distributed)

        cluster_run.run(ctx)
        return
    from .fusion import stage  # noqa: PLC0415 (imports numba; only when fusing)

    stage.run(ctx)


def _run_sampling(ctx: RunContext) -> None:
    from .sampling import stage  # noqa: PLC0415

    stage.run(ctx)


def _run_mesh(ctx: RunContext) -> None:
    from .mesh import stage  # noqa: PLC0415 (imports Open3D or the TSDF kernels only when meshing)

    stage.run(ctx)


def _run_evaluate(ctx: RunContext) -> None:
    from .evaluation import stage  # noqa: PLC0415

    stage.run(ctx)


STAGE_RUNNERS: dict[str, Callable[[RunContext], None]] = {"load": _run_load, "views": _run_views,
                                                          "depth": _run_depth, "fusion": _run_fusion,
                                                          "sampling": _run_sampling, "mesh": _run_mesh,
                                                          "evaluate": _run_evaluate}


def parse_stages(text: str | None, optional: tuple[str, ...] = ()) -> list[str]:
    """`load,views` -> ordered list; unknown or not-yet-available stages are errors.

    The default is the chain of available stages from the first one up to the first stage this
    version lacks (a run cannot jump over a missing stage, e.g. fuse without a depth stage),
    without the OPTIONAL_STAGES other than those in `optional` (the ones the config enables).
    """
    if not text:
        chain = []
        for s in ALL_STAGES:
            if s not in STAGE_RUNNERS:
                break
            if s in OPTIONAL_STAGES and s not in optional:
                continue
            chain.append(s)
        return chain
    names = [s.strip() for s in text.split(",") if s.strip()]
    for s in names:
        if s not in ALL_STAGES:
            raise MVSError(f"--stages: unknown stage '{s}' (stages: {', '.join(ALL_STAGES)})")
        if s not in STAGE_RUNNERS:
            raise MVSError(f"--stages: stage '{s}' is not available in this version "
                           f"(available: {', '.join(x for x in ALL_STAGES if x in STAGE_RUNNERS)})")
    return sorted(set(names), key=ALL_STAGES.index)


def _reset_gpu_pool(backend: str):
    """CuPy's default memory pool, emptied, when running on CUDA (else None).

    The pool keeps freed blocks cached, so its size after a stage that started from an empty pool
    is the stage's peak of CuPy allocations (textures live outside it: the depth stage reports
    its device-wide peak separately as counts.depth_gpu_used_peak_bytes)."""
    if backend != "cuda":
        return None
    from .gpu.loader import import_cupy  # noqa: PLC0415

    # device arrays an earlier stage left in reference cycles would be freed only when the cycle
    # collector next ran: collected now, so each stage plans with what is really free (whether any
    # were held is not known: runs before b250105 did not record the free memory)
    gc.collect()
    pool = import_cupy().get_default_memory_pool()
    pool.free_all_blocks()
    return pool


def _stage_gpu_limit(ctx, name: str) -> None:
    """Under --gpu-memory: the pool's limit for this stage (the texture share only in depth, what the
    process holds outside the pool measured now), recorded in counts.stage_gpu_limit_bytes."""
    from .gpu.memory_budget import stage_limit  # noqa: PLC0415

    limit = stage_limit(textures=name == "depth")
    if limit is not None:
        ctx.counts.setdefault("stage_gpu_limit_bytes", {})[name] = limit


def _gpu_free_bytes() -> int:
    """The device's free bytes (cudaMemGetInfo) as a stage starts: what earlier stages left held."""
    from .gpu.loader import import_cupy  # noqa: PLC0415

    return int(import_cupy().cuda.runtime.memGetInfo()[0])


def process_seconds() -> float | None:
    """Seconds since this process started (Linux /proc; None elsewhere)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time in clock ticks
    except (OSError, ValueError, IndexError):
        return None


def check_inputs(ctx: RunContext, stages: list[str]) -> None:
    """What the run will read from outside OUT, checked before OUT is created or written to, so a
    typo fails in a second instead of after the depth stage."""
    if "load" in stages:
        # overwrite=True: the layout is read even when OUT holds a finished load, because the load
        # stage's fingerprint names the input it was made from (a different workspace redoes it)
        scene_stage.check_workspace(ctx.workspace, ctx.out_dir, ctx.images, ctx.sparse, overwrite=True)
    if ctx.gt is not None:
        from .evaluation.mlp import check_mlp  # noqa: PLC0415

        check_mlp(ctx.gt)


def _kept(out_dir: Path, done: list[str], stopped: str | None) -> str:
    """One line for an interrupted run: what stays in OUT."""
    finished = f"the finished stages {', '.join(done)}" if done else "no finished stage"
    partly = f" and the files stage '{stopped}' completed" if stopped else ""
    return f"kept in {out_dir}: {finished}{partly}"


def _start_backend(ctx: RunContext, stages: list[str]) -> None:
    """Resolve the backend: at once where `--cluster local` (CPU worker processes) turns `auto` into
    `cpu` or `backend` is `cpu`; else in a thread (backend_start.py) that also loads the depth stage's
    kernels when this run computes depth maps in this process."""
    cfg = ctx.cfg
    if cfg.cluster.kind == "local":
        if cfg.backend == "cuda":
            raise MVSError("--cluster local runs CPU workers: use --cluster local-cuda for the GPU, or backend cpu")
        ctx.backend = "cpu"
    elif cfg.backend == "cpu":
        ctx.backend = resolve_backend(cfg.backend)
    else:
        warm_depth = "depth" in stages and cfg.cluster.kind == "none" and (
            ctx.overwrite or not fingerprints.finished(ctx.out_dir, "depth"))
        # the model the depth stage will read: OUT's once load has run, else the input's (COLMAP's
        # layouts; other layouts warm for the default source count)
        sparse_dirs = (ctx.out_dir / "sparse", *((ctx.sparse,) if ctx.sparse is not None else ()),
                       Path(ctx.workspace) / "sparse", Path(ctx.workspace) / "sparse" / "0")
        ctx.resolved_backend, ctx.backend_start = None, BackendStart(cfg, cfg.backend, warm_depth, sparse_dirs)
        return
    log.info("backend: %s (requested %s)", ctx.backend, cfg.backend)


def write_resolved_config(ctx: RunContext, wait_for_backend: bool = True) -> None:
    """OUT/config.resolved.yaml: the config as the stages read it, `auto` values resolved and explained
    (until the scene is prepared they read `auto`). Without `wait_for_backend` (the write before the
    load stage, which is rewritten after it) a backend still starting is named as such."""
    backend = ctx.backend if wait_for_backend else ctx.known_backend()
    head = (f"# resolved configuration of this run; backend resolved to: {backend}\n" if backend is not None else
            f"# resolved configuration of this run; backend {ctx.cfg.backend}: resolved after the load stage\n")
    if ctx.auto is None:
        head += "# `auto` values are resolved once the load stage has prepared the scene\n"
    atomic_write_text(ctx.out_dir / "config.resolved.yaml", head + annotate_yaml(dump_config(ctx.cfg), ctx.auto or []))


def _resolve_auto(ctx: RunContext) -> None:
    if ctx.auto is None:
        ctx.resolve_auto()
        write_resolved_config(ctx)


def _cluster_stages(stages: list[str], cfg) -> list[str]:
    """The stages of this run that use `--cluster`'s workers, in run order (fusion and sampling only
    with cluster.later_stages on the workers)."""
    from .cluster.params import later_stages_on_workers  # noqa: PLC0415

    on_workers = CLUSTER_STAGES if later_stages_on_workers(cfg.cluster) else ("depth",)
    return [s for s in stages if s in on_workers]


def _run_stages(ctx: RunContext, stages: list[str], timings: dict, gpu_peaks: dict, done: list[str],
                stack: contextlib.ExitStack) -> None:
    last_cluster_stage = (_cluster_stages(stages, ctx.cfg) or [None])[-1]
    try:
        for name in stages:
            raise_if_interrupted()   # a Ctrl-C that a stage's code swallowed stops the run here (interrupts.py)
            t0 = time.perf_counter()
            started = time.time()
            if name != "load":  # the stages after load read the resolved values (the views stage's own run too)
                _resolve_auto(ctx)
                _check_masks_once(ctx, stages)
            if name == "depth":   # the GPU to the depth stage alone (its kernels loaded meanwhile: backend_start.py)
                ctx.wait_warm_up()
            if name == "depth" and ctx.before_depth is not None:
                end = ctx.before_depth(ctx, stages)
                if end is not None:
                    stack.callback(end)
            log.info("stage %s ...", name)
            if name == "fusion" and _take_trailing_fusion(ctx, timings, started, t0):
                done.append(name)
                continue
            # load uses no GPU, and the backend may still be starting (backend_start.py) as it runs; the
            # depth warm-up's few MB may still come and go during views, which are counted there
            pool = _reset_gpu_pool(ctx.backend) if name != "load" else None
            if pool is not None:
                ctx.counts.setdefault("stage_gpu_free_at_start_bytes", {})[name] = _gpu_free_bytes()
                _stage_gpu_limit(ctx, name)
            _reset_host_peak()
            # fingerprints: redo the stage (and so the later ones) when what it reads changed
            chain = fingerprints.before_stage(ctx, name)
            check_stage_space(ctx, name)  # a full disk fails here, not after the stage's work
            if name == "depth" and "fusion" in stages:
                _start_trailing_fusion(ctx, stack)
            STAGE_RUNNERS[name](ctx)
            raise_if_interrupted()   # before the record: a stage that lost an interrupt is not taken as done
            fingerprints.after_stage(ctx, name, chain)
            if name == "depth" and "evaluate" in stages:
                _start_early_evaluation(ctx, stack)
            if _cluster_done(ctx, name, last_cluster_stage):   # no later stage uses it:
                ctx.cluster.begin_close()                      # it shuts down while they run
            if name == "load":  # resolved as soon as the scene exists, so a load-only run records them too
                _resolve_auto(ctx)
            timings[name] = round(time.perf_counter() - t0, 3)
            ctx.stage_unix_times[name] = [round(started, 3), round(time.time(), 3)]   # to line up with e.g. nvidia-smi logs
            if pool is not None:
                # a stage that frees the pool's cache as it goes reports its own peak (`<stage>_pool_peak_held_bytes`)
                gpu_peaks[name] = max(int(pool.total_bytes()), int(ctx.counts.get(f"{name}_pool_peak_held_bytes", 0)))
            ctx.host_peaks[name] = _host_peak_bytes()
            log.info("stage %s done in %.2f s", name, timings[name])
            done.append(name)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM through errors.Interrupted
        exc.kept = _kept(ctx.out_dir, done, None if len(done) == len(stages) else stages[len(done)])
        raise
    except OSError as exc:  # the disk filled up or became read-only while a stage wrote
        if not is_disk_error(exc):
            raise
        raise write_error(exc, _kept(ctx.out_dir, done, stages[len(done)])) from exc
    except Exception as exc:  # a stage's GPU allocation failed: one line, not CuPy's traceback
        if not is_gpu_out_of_memory(exc):
            raise
        stage = stages[len(done)]
        raise MVSError(f"stage {stage}: the GPU ran out of memory ({first_line(exc)}); rerun with --set "
                       f"backend=cpu (slower) or a smaller max_image_size"
                       f"{_fewer_points_hint(ctx) if stage != 'depth' else _beside_depth_hint(ctx)}; "
                       f"{_kept(ctx.out_dir, done, stage)}") from exc


# Where fusion runs beside the depth stage: on the GPU, whose depth stage leaves the CPU cores mostly idle.
# On the CPU both stages' Numba loops use every core (the tests add "cpu" to check the same outputs).
TRAILING_BACKENDS = ("cuda",)


def _start_trailing_fusion(ctx: RunContext, stack: contextlib.ExitStack) -> None:
    """Fusion beside the depth stage (fusion/trailing.py), where it can overlap: the GPU without a
    budget, fusion not on the workers (cluster.later_stages), no --resume-only, fusion.during_depth, maps of
    the final pass's type, nothing fused yet. In this process, or, on a `--cluster` run that started its
    cluster, in the first worker's process (fusion/worker_hosted.py). The run's end releases it if the depth
    stage never wrote what it waits for."""
    from .depth.passes import final_map_type  # noqa: PLC0415
    from .fusion.stage import output_paths  # noqa: PLC0415
    from .fusion.trailing import TrailingFusion  # noqa: PLC0415

    cfg = ctx.cfg
    final_type = final_map_type(cfg.depth)
    # --resume-only: fusion's fingerprint check decides whether it may run, which this would bypass
    if not cfg.fusion.during_depth or ctx.backend not in TRAILING_BACKENDS or cfg.gpu_memory is not None or ctx.later_on_workers \
            or ctx.resume_only or cfg.fusion.map_type not in ("auto", final_type) \
            or any(p.exists() for p in output_paths(ctx.out_dir)):
        return
    if ctx.cluster is not None:   # the cluster's depth stage: fusion in a worker's process (one GPU context)
        from .fusion.worker_hosted import WorkerHostedFusion  # noqa: PLC0415 (imports distributed)

        trailing = WorkerHostedFusion(ctx.require_client, cfg.fusion, ctx.require_scene(), ctx.require_selection(),
                                      ctx.out_dir, ctx.backend, final_type)
    else:
        trailing = TrailingFusion(cfg.fusion, ctx.require_scene(), ctx.require_selection(), ctx.out_dir, ctx.backend,
                                  final_type)
    trailing.start()
    ctx.trailing_fusion = trailing
    stack.callback(trailing.stop, "the run ended")
    log.info("fusion: fusing beside the depth stage%s, each view once its final maps are written",
             "" if trailing.host is None else f" on the worker {trailing.host}")


def _cluster_done(ctx: RunContext, name: str, last_cluster_stage: str | None) -> bool:
    """Whether the cluster's last stage in this run just ended; a fusion hosted on a worker beside the depth
    stage (fusion/worker_hosted.py) keeps it open until the fusion stage takes its result."""
    hosting = ctx.trailing_fusion is not None and ctx.trailing_fusion.host is not None
    return ctx.cluster is not None and name == last_cluster_stage and not hosting


def _take_trailing_fusion(ctx: RunContext, timings: dict, started: float, t0: float) -> bool:
    """After the depth stage: the trailing fusion's outputs as the fusion stage's, with its
    fingerprint, when it finished and fused the maps the depth stage left (the views and map type
    find_inputs now finds); else False, and fusion runs as usual (its fingerprint check removes
    anything the trailing fusion left)."""
    trailing = ctx.trailing_fusion
    if trailing is None:
        return False
    ctx.trailing_fusion = None
    counts = trailing.result()
    if trailing.host is not None and ctx.cluster is not None:   # the cluster kept open for it (_cluster_done)
        ctx.cluster.begin_close()
    if counts is None:
        return False
    from .fusion.inputs import find_inputs  # noqa: PLC0415
    from .fusion.stage import record_counts  # noqa: PLC0415

    cfg = ctx.cfg.fusion
    inputs, map_type = find_inputs(ctx.require_scene(), ctx.out_dir / "stereo", cfg.map_type, cfg.mask_dir)
    found = [i for i, inp in enumerate(inputs) if inp is not None]
    if map_type != trailing.gate.map_type or found != sorted(trailing.gate.views()):
        log.warning("fusion: the depth stage left other maps (%s, %d views) than the fusion beside it fused "
                    "(%s, %d views); fusing again", map_type, len(found), trailing.gate.map_type,
                    len(trailing.gate.views()))
        return False
    chain = fingerprints.stage_chain("fusion", ctx)
    record_counts(ctx, counts)
    fingerprints.after_stage(ctx, "fusion", chain)
    ctx.counts["fusion_beside_depth_seconds"] = round(trailing.seconds, 3)
    if trailing.host is not None:
        ctx.counts["fusion_beside_depth_worker"] = trailing.host
    timings["fusion"] = round(time.perf_counter() - t0, 3)   # what the run waited for after the depth stage
    ctx.stage_unix_times["fusion"] = [round(started, 3), round(time.time(), 3)]
    log.info("stage fusion done in %.2f s after the depth stage (%.2f s beside it)", timings["fusion"],
             trailing.seconds)
    return True


def _start_early_evaluation(ctx: RunContext, stack: contextlib.ExitStack) -> None:
    """Compare the depth maps with GT beside fusion and sampling where that overlaps (evaluation/depth_job.py);
    the run's end stops the comparison if the evaluate stage never came to take it."""
    from .evaluation.depth_job import start_early  # noqa: PLC0415

    early = start_early(ctx.cfg.evaluate, ctx.out_dir, ctx.workspace, ctx.backend, ctx.cfg.gpu_memory, ctx.overwrite)
    if early is not None:
        ctx.early_depth_metrics = early
        stack.callback(early.stop)


def _reset_host_peak() -> None:
    """Start a new high-water mark of this process's resident memory (Linux: writing 5 to
    clear_refs resets VmHWM), so that each stage's peak is its own; elsewhere the peaks are the
    process's so far."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _host_peak_bytes() -> int:
    """The resident-memory high-water mark since the last _reset_host_peak (bytes)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource  # noqa: PLC0415  (no /proc: the process's peak so far; ru_maxrss is KiB on Linux, bytes on macOS)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _close_cluster(ctx: RunContext) -> None:
    cluster, ctx.cluster, ctx.cluster_wanted = ctx.cluster, None, False
    if cluster is not None:
        cluster.close()


def _check_masks_once(ctx: RunContext, stages: list[str]) -> None:
    """The mask folders of the stages still to run, checked against the prepared images before the
    first stage after load: a wrong mask size used to stop the run in fusion, after the depth stage."""
    if ctx.masks_checked:
        return
    views = ctx.require_scene().views
    if "fusion" in stages and ctx.cfg.fusion.mask_dir is not None:   # views without a mask use all pixels
        check_mask_files(ctx.cfg.fusion.mask_dir, views, "fusion.mask_dir", required=False)
    if "evaluate" in stages and ctx.cfg.evaluate.mask_dir is not None:   # the metrics need every view's
        check_mask_files(ctx.cfg.evaluate.mask_dir, views, "evaluate.mask_dir", required=True)
    ctx.masks_checked = True


def _beside_depth_hint(ctx: RunContext) -> str:
    """For the depth stage with fusion beside it (fusion/trailing.py): its view cache shared the GPU."""
    return ", or fusion.during_depth=false (fusion after the depth stage)" if ctx.trailing_fusion is not None else ""


def _fewer_points_hint(ctx: RunContext) -> str:
    """For the stages after depth: the denser fusion's 3x points are the first thing to give up."""
    return ", or fusion.consume_pixels=true (1/3 of the points)" if ctx.cfg.fusion.consume_pixels is False else ""


def run_pipeline(ctx: RunContext, stages: list[str]) -> dict:
    _start_backend(ctx, stages)   # first: CuPy's import and the CUDA context overlap the checks and the load stage
    try:
        check_inputs(ctx, stages)
        check_output_writable(ctx.out_dir)  # a read-only OUT, or one under a file, fails before any work
        fingerprints.check_resume_only(ctx, stages)  # refused before anything in OUT is written
    except MVSError:
        if ctx.backend_start is not None:   # its warning before the error line, not after it
            ctx.backend_start.settle(timeout=10.0)
        raise
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    with output_folder_lock(ctx.out_dir):   # before the leftovers go: they may be another run's files
        return _run_locked(ctx, stages)


def _run_locked(ctx: RunContext, stages: list[str]) -> dict:
    for path in remove_leftovers(ctx.out_dir):  # writers killed with SIGKILL cannot clean up
        log.info("removed %s, left by an interrupted write", path)
    # rewritten with the backend after the load stage (_resolve_auto), unless `auto` is resolved already
    write_resolved_config(ctx, wait_for_backend=ctx.auto is not None)
    timings, gpu_peaks, done = {}, {}, []
    with contextlib.ExitStack() as stack:
        # no --cluster, or none of the CLUSTER_STAGES in this run: no dask
        cluster_stages = _cluster_stages(stages, ctx.cfg)
        ctx.cluster_wanted = ctx.cfg.cluster.kind != "none" and bool(cluster_stages)
        if ctx.cluster_wanted:
            stack.callback(_close_cluster, ctx)
            if ctx.overwrite or not all(fingerprints.finished(ctx.out_dir, s) for s in cluster_stages):
                ctx.start_cluster()   # now, so that it starts while load and views run here
            # else a stage starts it only if a changed input or key leaves work to do (require_client)
        _run_stages(ctx, stages, timings, gpu_peaks, done, stack)
    record = {"workspace": str(ctx.workspace), "out_dir": str(ctx.out_dir), "stages": stages,
              "backend": ctx.backend, "cluster": ctx.cfg.cluster.kind, "stage_seconds": timings,
              "stage_unix_times": ctx.stage_unix_times, "counts": ctx.counts,
              "config": config_to_dict(ctx.cfg),
              "auto": {a.key: {"value": a.value, "reason": a.reason} for a in ctx.auto or []}}
    wall = process_seconds()
    if wall is not None:  # from the process's start: interpreter, imports and set-up count too
        record["wall_seconds"] = round(wall, 3)
        record["outside_stages_seconds"] = round(wall - sum(timings.values()), 3)
    if gpu_peaks:
        record["stage_gpu_pool_peak_bytes"] = gpu_peaks
    record["stage_host_rss_peak_bytes"] = ctx.host_peaks
    atomic_write_text(ctx.out_dir / "run.json", json.dumps(record, indent=1))
    if "evaluate" in stages and ctx.cfg.evaluate.report:  # after run.json so the report shows this run's timings
        from .evaluation.stage import write_final_report  # noqa: PLC0415

        write_final_report(ctx.cfg.evaluate, ctx.out_dir)
    return record
