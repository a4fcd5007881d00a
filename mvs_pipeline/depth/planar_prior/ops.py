"""Planar prior maps from a finished pass (ACMP, Xu & Tao AAAI 2020).

    prior, stats = build_planar_prior(depth, cost, K, settings, sources, backend="cuda", keep_on_device=True)
    init_depth, init_normal = start_maps(prior, depth, normal)

1. support points: per `grid` x `grid` cell (cells from the top-left corner) the pixel of lowest
   cost (the first in row-major order on ties) among its reliable pixels (depth positive and
   finite, cost below `max_cost` in float32) that are geometrically consistent with at least
   `min_consistent` sources' maps of the same pass (forward-backward reprojection through the
   nearest source pixel within `max_reproj_error` px, ACMM's check; no check without sources or
   with min_consistent 0);
2. Delaunay triangulation of their pixels, on the host (triangles.py);
3. per triangle the plane through its vertices' 3-D points, on the host; triangles with an image
   edge longer than `max_edge` px, seen at a grazing angle (typically spanning a depth
   discontinuity) or of zero image area are dropped;
4. each pixel whose centre lies inside or on the edges of kept triangles belongs to the one of
   lowest index (exact integer edge tests); it gets the plane's normal and its depth along the
   pixel's ray (where that is positive and finite), unless it is reliable itself: the term acts
   only where the photometric cost was ambiguous.

Steps 1 and 4 are per pixel and run on the backend (cuda/depth_planar_prior.cu, or its Numba twin
cpu.py, in the same double arithmetic): on the GPU the maps stay on the device and only the
support points (pixel and depth, ~10 bytes each) come to the host and the kept triangles (56
bytes each) go back. The CPU and the GPU run give the same prior.

prior: [H, W, 4] float32 (nx, ny, nz, depth), depth 0 where there is no prior: what
PatchMatchProblem.planar_prior takes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mvs_pipeline.errors import MVSError
from mvs_pipeline.gpu.backend import resolve_backend
from mvs_pipeline.gpu.loader import array_module, on_gpu

from .layout import SourceMaps, source_arrays
from .triangles import triangle_planes, triangulate


@dataclass(frozen=True)
class PriorSettings:
    """The depth section's planar_prior_* keys (depth/params.py gives units and ranges)."""
    max_cost: float
    grid: int
    max_edge: float
    min_consistent: int
    max_reproj_error: float


def _backend(which: str):
    """The kernels' module: cuda.py, or the Numba twin cpu.py (imported only when the CPU runs)."""
    if which == "cuda":
        from . import cuda as kernels  # noqa: PLC0415
    else:
        from . import cpu as kernels  # noqa: PLC0415
    return kernels


def _map(name: str, a, xp, shape=None):
    """`a` as a C-contiguous float32 [H, W] array of module `xp` (`shape` when given)."""
    if on_gpu(a) and xp is np:
        a = a.get()
    a = xp.ascontiguousarray(xp.asarray(a), dtype=xp.float32)
    if a.ndim != 2 or (shape is not None and a.shape != shape):
        raise MVSError(f"planar prior: {name} has shape {a.shape}, expected {shape or '[H, W]'}")
    return a


def support_points(depth, cost, K, settings: PriorSettings, sources: list[SourceMaps] | None = None,
                   backend: str = "auto") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(xs, ys) int64 and z-depths float32 of the support points (step 1), in cell order, on the host."""
    which = resolve_backend(backend)
    xp = array_module(which)
    depth = _map("depth", depth, xp)
    cost = _map("cost", cost, xp, depth.shape)
    return _support(which, xp, depth, cost, np.asarray(K, np.float64), settings, sources)


def _support(which, xp, depth, cost, K, settings, sources):
    """support_points on checked maps of module `xp`: one kernel, then the picks to the host."""
    use = list(sources or []) if settings.min_consistent > 0 else []
    if which != "cuda":
        use = [SourceMaps(s.depth.get() if on_gpu(s.depth) else s.depth, s.K, s.R, s.t) for s in use]
    src = source_arrays(use, xp)
    best = _backend(which).support_cells(
        depth, cost, int(settings.grid), np.float32(settings.max_cost), K.ravel(), np.linalg.inv(K).ravel(),
        int(settings.min_consistent), float(settings.max_reproj_error), src.depth, src.offset, src.size, src.K,
        src.K_inv, src.R, src.t)
    pixel = best[best >= 0]                    # cell order; on the GPU the one wait of the build
    z = depth.ravel()[pixel]
    if which == "cuda":
        pixel, z = pixel.get(), z.get()
    W = depth.shape[1]
    pixel = pixel.astype(np.int64)
    return pixel % W, pixel // W, z


def build_planar_prior(depth, cost, K, settings: PriorSettings, sources: list[SourceMaps] | None = None,
                       backend: str = "auto", keep_on_device: bool = False) -> tuple[object, dict]:
    """Planar prior [H, W, 4] float32 of one view from its depth and cost maps [H, W] (NumPy, or
    CuPy on the CUDA backend) and optional sources' maps of the same pass; a CuPy array with
    `keep_on_device` on the CUDA backend. stats: support points, triangles (all, kept) and
    prior pixels (a 0-d array: on the GPU counting it would wait for the kernels)."""
    which = resolve_backend(backend)
    xp = array_module(which)
    depth = _map("depth", depth, xp)
    H, W = depth.shape
    cost = _map("cost", cost, xp, (H, W))
    K = np.asarray(K, np.float64)
    xs, ys, zs = _support(which, xp, depth, cost, K, settings, sources)
    simplices = triangulate(xs, ys, W, H)
    tri, planes = triangle_planes(K, xs, ys, zs, simplices, settings.max_edge)
    stats = {"support_points": int(len(xs)), "triangles": int(len(simplices)), "triangles_kept": int(len(tri))}
    if len(tri):
        kernels = _backend(which)
        owner = kernels.prior_owner(xp.asarray(tri), W, H)
        prior = kernels.prior_fill(depth, cost, owner, xp.asarray(planes), np.float32(settings.max_cost),
                                   np.linalg.inv(K).ravel())
    else:
        prior = xp.zeros((H, W, 4), xp.float32)
    stats["prior_pixels"] = (prior[..., 3] > 0).sum()
    if which != "cuda":
        stats["prior_pixels"] = int(stats["prior_pixels"])
    elif not keep_on_device:
        prior, stats["prior_pixels"] = prior.get(), int(stats["prior_pixels"])
    return prior, stats


def start_maps(prior, depth, normal):
    """The planar pass's starting maps (ACMP's re-initialisation): the prior's plane wherever there
    is a prior, the previous pass's maps elsewhere; arrays of the prior's module (NumPy or CuPy)."""
    xp = array_module("cuda" if on_gpu(prior) else "cpu")
    has = prior[..., 3] > 0
    init_depth = xp.where(has, prior[..., 3], xp.asarray(depth)).astype(xp.float32)
    init_normal = xp.where(has[..., None], prior[..., :3], xp.asarray(normal)).astype(xp.float32)
    return init_depth, init_normal
