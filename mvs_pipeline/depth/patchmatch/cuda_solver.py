"""The PatchMatch loop on the GPU (CuPy): the same sequence of passes as cpu_solver.

Out-of-memory anywhere (CuPy pool or CUDA arrays for the textures) becomes an MVSError that
suggests lowering `max_image_size`; nothing is written to disk here, so maps already written
by the caller stay as they were.
"""

from __future__ import annotations

import time

from mvs_pipeline.errors import MVSError
from mvs_pipeline.gpu.loader import import_cupy
from mvs_pipeline.gpu.memory_errors import first_line, is_gpu_out_of_memory

from . import cuda as kpm
from .detail_restore import restore_details
from .layout import propagate_pass, refine_pass
from .packing import pack_params
from .params import PatchMatchParams
from .problem import PatchMatchProblem, PatchMatchResult, source_matrices


def resolve_timings(timings: dict) -> None:
    """Turn timings['pending_events'] (solve_cuda with keep_on_device) into GPU ms per phase;
    waits for the last event."""
    cp = import_cupy()
    events = timings.pop("pending_events", None)
    if not events:
        return
    events[-1][1].synchronize()
    for (_, a), (name, b) in zip(events[:-1], events[1:]):
        timings[name] = cp.cuda.get_elapsed_time(a, b)


def solve_cuda(problem: PatchMatchProblem, params: PatchMatchParams, seed: int = 0,
               block_y: int = kpm.BLOCK_Y, timings: dict | None = None, memory: dict | None = None,
               restore_margin: float | None = None, restore_only=None, texture_cache=None,
               keep_on_device: bool = False
               ) -> PatchMatchResult:
    """Run PatchMatch on a validated problem on the current GPU.

    `keep_on_device`: the result's arrays are CuPy arrays and nothing waits for the GPU (the depth
    stage feeds them to the next pass and downloads them in the background for writing, while
    it prepares the next view); input checks that run on the GPU come back as
    result.deferred_checks, and `timings` keeps the GPU events under 'pending_events' until
    resolve_timings().

    `timings`, when given, receives per-pass GPU times in ms (keys 'init', 'iteration_<k>',
    'restore') and wall times in ms of the host<->device copies ('upload', 'download');
    `memory` receives the device's used bytes (total - free, all processes) after the first
    pass, while every buffer and texture is allocated (key 'used_bytes').
    """
    params.validate()   # num_refine must fit the kernel's hypothesis arrays
    cp = import_cupy()
    H, W = problem.shape
    S = problem.num_sources
    options = kpm.compile_options(params.window_radius, params.window_step, S, block_y,
                                  geom=problem.src_depths is not None, planar=problem.planar_prior is not None)
    dev = None
    try:
        t0 = time.perf_counter()
        K_inv, M, e = source_matrices(problem)
        dev = kpm.DeviceProblem(problem, K_inv, M, e, cache=texture_cache)
        plane = cp.full((H, W, 4), cp.nan, dtype=cp.float32)       # poisoned: init must write all
        cost = cp.full((H, W), cp.nan, dtype=cp.float32)
        selected = cp.zeros((H, W), dtype=cp.uint32)
        weights = cp.zeros((S, H, W), dtype=cp.uint8)
        init_depth = init_normal = None
        if problem.init_depth is not None:
            init_depth = cp.asarray(problem.init_depth)
            init_normal = cp.asarray(problem.init_normal)
        events = []

        def mark(name):
            if timings is not None:
                ev = cp.cuda.Event()
                ev.record()
                events.append((name, ev))

        if problem.prior_check is not None and not keep_on_device:
            problem.prior_check.raise_if_failed()
        if timings is not None:
            if not keep_on_device:
                cp.cuda.Device().synchronize()
            timings["upload"] = (time.perf_counter() - t0) * 1e3
        mark("start")
        f, i = kpm.device_params(*pack_params(params, problem, 0, seed))
        kpm.launch_init(dev, options, f, i, init_depth, init_normal, plane, cost, selected)
        prior_plane = plane.copy() if init_depth is not None else None
        mark("init")
        if memory is not None:   # allocations are made by now; no need to wait for the kernels
            free, total = cp.cuda.runtime.memGetInfo()
            memory["used_bytes"] = total - free
        for it in range(params.iterations):
            f, i = kpm.device_params(*pack_params(params, problem, it, seed))
            for color in (0, 1):
                kpm.launch_propagate(dev, options, block_y, f, i, color, propagate_pass(it, color),
                                     plane, cost, selected, weights)
                kpm.launch_refine(dev, options, block_y, f, i, color, refine_pass(it, color),
                                  plane, cost, weights, params.num_refine)
            mark(f"iteration_{it}")
        if restore_margin is not None and prior_plane is not None and params.iterations > 0:
            prior_cost = cp.empty((H, W), dtype=cp.float32)
            kpm.launch_score(dev, options, f, i, prior_plane, weights, prior_cost)
            restore_details(plane, cost, prior_plane, prior_cost, init_depth > 0, restore_margin, restore_only)
            mark("restore")
        if timings is not None and not keep_on_device:
            events[-1][1].synchronize()
        t0 = time.perf_counter()
        # split on the GPU: three plain copies instead of one interleaved download + host copies
        result = PatchMatchResult(depth=cp.ascontiguousarray(plane[..., 3]),
                                  normal=cp.ascontiguousarray(plane[..., :3]), cost=cost, selected_views=selected,
                                  deferred_checks=[problem.prior_check] if problem.prior_check is not None else [])
        if not keep_on_device:
            result = PatchMatchResult(*(cp.asnumpy(a) for a in (result.depth, result.normal, result.cost,
                                                                 result.selected_views)))
        if timings is not None:
            timings["download"] = (time.perf_counter() - t0) * 1e3
            timings["pending_events"] = events
            if not keep_on_device:
                resolve_timings(timings)
        return result
    except Exception as exc:
        if is_gpu_out_of_memory(exc):
            raise MVSError(f"{problem.name}: GPU out of memory for PatchMatch at {W}x{H} with {S} sources "
                           f"({first_line(exc)}); lower max_image_size (or views.num_neighbors)") from exc
        raise
    finally:
        if dev is not None:
            dev.release()
