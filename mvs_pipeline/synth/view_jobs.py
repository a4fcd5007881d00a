"""Render and write the views of a synthetic scene, serially or in worker processes.

Serial: the main process renders view k while a writer thread still encodes view k-1's PNG
and writes its depth and normal maps. Parallel (`workers` > 1): spawned worker processes each
build the (deterministic) scene once, then render *and write* whole views, returning only what
the sparse model needs (depth range, seeded candidate points), so no image crosses a pipe.
Every view draws its noise and candidates from generators seeded by its index, so the files
are the same bytes whatever `workers` is (tests/synth/test_synth_parallel.py).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
from collections import deque
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from tqdm import tqdm

from ..errors import MVSError
from ..io.atomic import atomic_path
from . import render as render_mod
from . import sparse as sparse_mod
from . import texture
from .render import RenderedView, render_view
from .scenes import SceneSpec, build_scene

MAX_PENDING_WRITES = 2  # serial path: views rendered but not yet written (bounds memory at 3200x2130)
# BLAS thread pools of the worker processes: one thread each. OpenBLAS's default (all cores) in
# every one of 16 workers oversubscribes the machine; under load a [N, 3] @ [3, 3] product then
# runs 2.6x slower than single-threaded (measured here at load 8 on 2 cores).
WORKER_THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass(frozen=True)
class ViewJob:
    scene: tuple  # build_scene's arguments (name, views, width, height, seed)
    k: int  # view_idx
    gain: float  # exposure gain
    out_dir: Path
    stem: str  # file stem, "view_000"
    seeds_per_view: int  # sparse candidates seeded from this view
    backend: str  # "cpu" or "cuda" (texture on the GPU)
    normals: bool = True  # write gt/normal/<stem>.npy (12 bytes a pixel: 23 MB a 1600x1200 view)


@dataclass
class ViewSummary:
    depth_range: tuple[float, float] | None  # (min, max) z-depth of the surface pixels, None if none
    candidates: sparse_mod.Candidates
    reach: tuple[np.ndarray, np.ndarray] | None = None  # world box (m) of what the view sees, None if nothing


def usable_cpus() -> int:
    """CPUs this process may run on (a container's cpuset, not the host's count): the default
    number of worker processes, each a whole view's work."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def array_module(backend: str):
    """NumPy for "cpu", CuPy for "cuda" (the caller has resolved the backend)."""
    if backend == "cuda":
        import cupy  # noqa: PLC0415 (only with a GPU)

        return cupy
    return np


def save_npy(path: Path, array: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, array)


def save_png(path: Path, rgb: np.ndarray) -> None:
    with atomic_path(path, suffix=".png") as tmp:
        if not cv2.imwrite(str(tmp), rgb[:, :, ::-1]):
            raise MVSError(f"{path}: could not write PNG")


def _render(spec: SceneSpec, rc, job: ViewJob) -> RenderedView:
    return render_view(spec, rc, spec.cameras[job.k], job.gain, texture_seed=job.scene[4],
                       noise_rng=np.random.default_rng([job.scene[4], 0x401, job.k]),
                       xp=array_module(job.backend))


def _write(job: ViewJob, rv: RenderedView) -> None:
    save_png(job.out_dir / "images" / f"{job.stem}.png", rv.rgb)
    save_npy(job.out_dir / "gt" / "depth" / f"{job.stem}.npy", rv.depth)
    if job.normals:
        save_npy(job.out_dir / "gt" / "normal" / f"{job.stem}.npy", rv.normal)


def _summarise(spec: SceneSpec, job: ViewJob, rv: RenderedView) -> ViewSummary:
    surface = rv.depth[rv.depth > 0]
    rng = (float(surface.min()), float(surface.max())) if len(surface) else None
    cand = sparse_mod.sample_candidates(spec.cameras[job.k], rv.depth, rv.normal, job.seeds_per_view,
                                        np.random.default_rng([job.scene[4], 0x5EED, job.k]))
    return ViewSummary(rng, cand, sparse_mod.surface_box(spec.cameras[job.k], rv.depth))


_WORKER_SCENE: dict = {}


def _view_in_worker(job: ViewJob) -> ViewSummary:
    """One view rendered and written in a worker process (the scene is built once per process)."""
    render_mod.ray_threads = 1
    if job.scene not in _WORKER_SCENE:
        spec = build_scene(*job.scene)
        _WORKER_SCENE.clear()
        _WORKER_SCENE[job.scene] = (spec, spec.mesh.raycasting_scene())
    spec, rc = _WORKER_SCENE[job.scene]
    rv = _render(spec, rc, job)
    _write(job, rv)
    return _summarise(spec, job, rv)


def _compile_texture_kernels(spec: SceneSpec) -> None:
    """Evaluate every material once on a few points, so that CuPy compiles the texture's kernels
    into its disk cache here, once, instead of in every worker process at the same time."""
    xp = array_module("cuda")
    # fine and coarse footprints: every octave runs on all points and on a subset (texture.fbm_bands)
    points, footprint = xp.zeros((4, 3)), xp.asarray([1e-4, 1e-4, 1.0, 1.0])
    for m, material in enumerate(spec.mesh.materials):
        texture.albedo(material, points, footprint, seed=m, xp=xp)
    xp.cuda.Device().synchronize()


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    """os.environ updated with `values` inside the block (inherited by processes started there)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_views(spec: SceneSpec, rc, jobs: list[ViewJob], workers: int, progress: bool) -> list[ViewSummary]:
    """Render and write every job's view; summaries in job order."""
    desc = f"synth {spec.name}"
    if workers > 1 and len(jobs) > 1:
        if jobs[0].backend == "cuda":
            _compile_texture_kernels(spec)
        with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=mp.get_context("spawn")) as pool:
            with _environment(WORKER_THREAD_ENV):  # map submits every job, so all workers start in here
                results = pool.map(_view_in_worker, jobs)
            return list(tqdm(results, total=len(jobs), desc=desc, unit="view", disable=not progress))
    summaries = []
    pending: deque = deque()
    with ThreadPoolExecutor(max_workers=1) as writer:
        for job in tqdm(jobs, desc=desc, unit="view", disable=not progress):
            rv = _render(spec, rc, job)
            pending.append(writer.submit(_write, job, rv))
            summaries.append(_summarise(spec, job, rv))
            while len(pending) >= MAX_PENDING_WRITES:
                pending.popleft().result()
        for f in pending:
            f.result()
    return summaries
