"""One tiny run through every solver path a depth stage takes, to load its kernels ahead of time.

A Dask worker otherwise pays for loading the PatchMatch variants (photometric, geometric, detail
restorer), the scale ops and CuPy's own array kernels inside its first tasks: on one H200 the
first pass of an 80-view 1600x1200 run took 1.9 s in a worker against 0.8 s in one process
(session 8). cluster_run.warm_up_workers runs this on every worker while the client loads the
scene, so that time overlaps work the client does anyway.
"""

from __future__ import annotations

import dataclasses

from ..gpu.loader import import_cupy
from .patchmatch import run_patchmatch
from .patchmatch.detail_restore import restore_mask
from .patchmatch.toy_scene import make_toy_scene
from .scale_ops.ops import jbu_upsample, postfilter_depth


def warm_up_solver(cfg, num_sources: int, backend: str) -> None:
    """Photometric, geometric, upsampled-prior (detail restorer) and post-filter passes on a
    64x48 analytic scene with `num_sources` sources (the kernel variants depend on the count)."""
    toy = make_toy_scene(64, 48, num_sources=max(1, num_sources))
    problem = toy.problem
    params = dataclasses.replace(cfg.patchmatch, iterations=1)
    on_gpu = backend == "cuda"
    photometric = run_patchmatch(problem, params, backend=backend, seed=0, keep_on_device=on_gpu)
    problem.init_depth, problem.init_normal = photometric.depth, photometric.normal
    problem.src_depths = toy.src_gt_depths
    geometric = run_patchmatch(problem, params, backend=backend, seed=0, keep_on_device=on_gpu)
    # the median's kernel loads too unless the config turned it off (`auto` may resolve either way)
    postfilter_depth(geometric.depth, geometric.cost, float("inf"), median=cfg.depth.filter_median is not False,
                     backend=backend, keep_on_device=on_gpu)
    d = cfg.depth
    # a finer scale's start: the coarse maps upsampled onto the reference image, then the restorer
    problem.init_depth, problem.init_normal = jbu_upsample(
        geometric.depth[::2, ::2].copy(), geometric.normal[::2, ::2].copy(), problem.ref_image, radius=d.jbu_radius,
        sigma_spatial=d.jbu_sigma_spatial, sigma_range=d.jbu_sigma_range, backend=backend, keep_on_device=on_gpu)
    problem.src_depths = None
    # depth.detail_texture's mask: CuPy compiles its kernels here too
    guide = import_cupy().asarray(problem.ref_image) if on_gpu and d.detail_texture is not None else problem.ref_image
    restore_only = restore_mask(guide, d.detail_margin, d.detail_texture)
    run_patchmatch(problem, params, backend=backend, seed=0, restore_margin=d.detail_margin, restore_only=restore_only,
                   keep_on_device=on_gpu)
