"""Per-pixel operations between the scales of multi-scale (ACMM) PatchMatch.

Multi-scale PatchMatch solves a downsampled problem first and starts the next finer scale from
its result. Plain bilinear upsampling would average depths across every depth discontinuity and
seed the finer scale with surfaces that exist in no view; joint bilateral upsampling (JBU)
instead weights each coarse sample by how much the fine image at its position resembles the
fine pixel, so depth edges stay where the fine image has its edges. After the finest scale the
post-filter drops poorly matched pixels and replaces isolated outliers by a median.

    depth, normal = jbu_upsample(coarse_depth [h, w], coarse_normal [h, w, 3], guide [H, W])
    depth = postfilter_depth(depth [H, W], cost [H, W], max_cost, median=True)

NumPy in, NumPy out (float32); on the CUDA backend CuPy inputs are accepted and checked on the
device, and `keep_on_device` returns CuPy arrays. Both backends (`cpu`: Numba, cpu.py;
`cuda`: cuda/depth_scale_ops.cu) compute exactly the definitions below in float32.

JBU. For fine pixel (X, Y): c = ((X + 0.5) w / W - 0.5, (Y + 0.5) h / H - 0.5) in coarse pixel
coordinates, centre coarse pixel i = floor(c + 0.5). Every coarse q within `radius` of i (a
(2 radius + 1)^2 window) that lies inside the coarse image and has a positive, finite depth
contributes with weight
    exp(-|q - c|^2 / (2 sigma_spatial^2) - (guide[Y, X] - guide[g(q)])^2 / (2 sigma_range^2)),
g(q) = (floor((q + 0.5) W / w), floor((q + 0.5) H / h)) clamped to the image: the fine pixel under
q's centre. depth = weighted mean depth; normal = normalised weighted sum of normals (the normal
of the largest weight, first in row-major window order on ties, where the sum is exactly zero).
No contributing q: depth 0 and normal (0, 0, 0). Weights are computed relative to the largest
one, which leaves the result unchanged and keeps small sigmas from underflowing to 0 / 0.

Post-filter. d' = depth where cost <= max_cost and depth is positive and finite, else 0 (a NaN
cost drops the pixel even with max_cost = inf). With `median`, each pixel with d' > 0 becomes
the median of its own d' and the positive d' of its 20 other-colour checkerboard neighbours
inside the image (offsets (+-1, 0), (+-3, 0), (+-5, 0), (0, +-1), (0, +-3), (0, +-5), (+-1, +-2),
(+-2, +-1)); an even count takes (a + b) * 0.5 of the two middle values in float32. Pixels with
d' = 0 stay 0. The median reads only d', never its own output.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from mvs_pipeline.errors import MVSError
from mvs_pipeline.gpu.backend import resolve_backend
from mvs_pipeline.gpu.loader import on_gpu


# Largest |log-weight| allowed, with a margin below float32's 3.4e38: keeps every log-weight
# finite, so the largest one is a finite reference and every weight relative to it is defined.
_MAX_LOG_WEIGHT = 1e37


def _float_map(name: str, a, ndim: int, xp, allow_int: bool = False):
    """`a` as a C-contiguous float32 array of `ndim` dimensions with no empty axis, in module `xp`
    (NumPy, or CuPy on the CUDA backend: a CuPy input stays on the device, a NumPy one is uploaded)."""
    device = on_gpu(a)
    if not (isinstance(a, np.ndarray) or device):
        raise MVSError(f"{name}: expected a NumPy array, got {type(a).__name__}")
    kinds = "fiu" if allow_int else "f"
    if a.dtype.kind not in kinds:
        allowed = "a float or integer" if allow_int else "a float"
        raise MVSError(f"{name}: dtype {a.dtype}, expected {allowed} dtype (converted to float32)")
    if a.ndim != ndim or 0 in a.shape:
        want = "[H, W]" if ndim == 2 else "[H, W, 3]"
        raise MVSError(f"{name}: shape {a.shape}, expected a non-empty {want}")
    if device and xp is np:
        a = a.get()
    return xp.ascontiguousarray(xp.asarray(a), dtype=xp.float32)


def _array_module(backend: str):
    """(resolved backend, NumPy or CuPy)."""
    which = resolve_backend(backend)
    if which == "cuda":
        import cupy  # noqa: PLC0415

        return which, cupy
    return which, np


def _positive_finite(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)) or float(v) <= 0:
        raise MVSError(f"{name}: {v!r}, expected a finite number > 0")
    return float(v)


def _float32_at_most(v: float) -> np.float32:
    """The largest float32 t with t <= v: for float32 costs c, c <= t exactly when c <= v."""
    with np.errstate(over="ignore"):
        t = np.float32(v)
    if float(t) > v:
        t = np.nextafter(t, np.float32(-np.inf))
    return t


def jbu_upsample(coarse_depth: np.ndarray, coarse_normal: np.ndarray, guide: np.ndarray, radius: int = 2,
                 sigma_spatial: float = 1.0, sigma_range: float = 25.5,
                 backend: str = "auto", keep_on_device: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Joint bilateral upsampling of a coarse depth + normal map to the guide's resolution.

    coarse_depth [h, w] (0 = no depth), coarse_normal [h, w, 3], guide [H, W] grey (0..255, the
    fine reference image); radius in coarse px (2: a 5 x 5 window), sigma_spatial in coarse px,
    sigma_range in grey levels. Returns (depth [H, W], normal [H, W, 3]) float32; with
    keep_on_device on the CUDA backend as CuPy arrays (the depth stage hands them straight to
    PatchMatch as its prior instead of a download and an upload of the fine maps). Inputs may be
    CuPy arrays (checked on the device).
    """
    which, xp = _array_module(backend)
    depth_c = _float_map("coarse_depth", coarse_depth, 2, xp)
    normal_c = _float_map("coarse_normal", coarse_normal, 3, xp)
    if normal_c.shape != (*depth_c.shape, 3):
        raise MVSError(f"coarse_normal: shape {normal_c.shape}, expected {(*depth_c.shape, 3)} to match coarse_depth")
    guide_f = _float_map("guide", guide, 2, xp, allow_int=True)
    if not bool(xp.isfinite(guide_f).all()):
        raise MVSError("guide: contains NaN or infinite values")
    valid = (depth_c > 0) & xp.isfinite(depth_c)
    if not bool((xp.isfinite(normal_c).all(axis=-1) | ~valid).all()):
        raise MVSError("coarse_normal: NaN or infinite normal at a pixel with a valid depth")
    if isinstance(radius, bool) or not isinstance(radius, numbers.Integral) or radius < 0:
        raise MVSError(f"radius: {radius!r}, expected an integer >= 0")
    radius = int(radius)
    s_s = _positive_finite("sigma_spatial", sigma_spatial)
    s_r = _positive_finite("sigma_range", sigma_range)
    with np.errstate(over="ignore"):
        a_s = np.float32(0.5 / (s_s * s_s))   # 1 / coarse px^2
        a_r = np.float32(0.5 / (s_r * s_r))   # 1 / grey level^2
    span = float(guide_f.max()) - float(guide_f.min())            # grey levels
    worst = float(a_s) * 2.0 * (radius + 1) ** 2 + float(a_r) * span * span
    if not worst < _MAX_LOG_WEIGHT:
        raise MVSError(f"sigma_spatial = {sigma_spatial!r} / sigma_range = {sigma_range!r} are too small for "
                       f"float32 weights (radius {radius}, guide range {span:g})")

    if which == "cuda":
        from . import cuda as kops  # noqa: PLC0415

        d, n = kops.jbu_upsample(depth_c, normal_c, guide_f, radius, a_s, a_r)
        return (d, n) if keep_on_device else (d.get(), n.get())
    from . import cpu as cpu_ops  # noqa: PLC0415 (Numba: imported only when the CPU backend runs)

    return cpu_ops.jbu_upsample(depth_c, normal_c, guide_f, radius, a_s, a_r)


def postfilter_depth(depth: np.ndarray, cost: np.ndarray, max_cost: float, median: bool = True,
                     backend: str = "auto", keep_on_device: bool = False) -> np.ndarray:
    """Drop pixels whose cost exceeds max_cost (inf: keep all), then optionally replace each
    remaining depth by the median over its checkerboard neighbours. [H, W] float32 (0 = none);
    a CuPy array with keep_on_device on the CUDA backend (inputs may be CuPy arrays)."""
    which, xp = _array_module(backend)
    depth_f = _float_map("depth", depth, 2, xp)
    cost_f = _float_map("cost", cost, 2, xp)
    if cost_f.shape != depth_f.shape:
        raise MVSError(f"cost: shape {cost_f.shape}, expected {depth_f.shape} to match depth")
    if isinstance(max_cost, bool) or not isinstance(max_cost, numbers.Real) or math.isnan(float(max_cost)):
        raise MVSError(f"max_cost: {max_cost!r}, expected a number (inf to keep every cost)")
    if not isinstance(median, (bool, np.bool_)):
        raise MVSError(f"median: {median!r}, expected True or False")
    threshold = _float32_at_most(float(max_cost))

    if which == "cuda":
        from . import cuda as kops  # noqa: PLC0415

        out = kops.postfilter_depth(depth_f, cost_f, threshold, bool(median))
        return out if keep_on_device else out.get()
    from . import cpu as cpu_ops  # noqa: PLC0415 (Numba: imported only when the CPU backend runs)

    return cpu_ops.postfilter_depth(depth_f, cost_f, threshold, bool(median))
