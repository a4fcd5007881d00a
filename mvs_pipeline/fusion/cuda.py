"""Launchers for `cuda/fusion.cu`: fuse one reference view against its neighbours on the GPU
(same contract as the CPU twin `cpu.py`: rules, camera blocks, blocked bits; the GPU computes in
float32, the twin in float64); and for `cuda/fusion_records.cu`: a fused chunk's file bytes
(twin: io/fused_ply.pack_chunk and io/vis_file.visibility_records, byte for byte).
"""

from __future__ import annotations

import numpy as np

from ..gpu.checks import check_array
from ..gpu.loader import get_kernel, import_cupy
from .layout import CAM_STRIDE, MAX_NEIGHBORS, free_space_limit, triangulation_limit

BLOCK_2D = (32, 8)  # threads per block of the per-pixel kernel
BLOCK_1D = 256

_EXPECTED = {"depth": ("float32", 2), "normal": ("float32", 3), "color": ("uint8", 3), "blocked": ("uint8", 2)}


def _options(median: bool) -> tuple[str, ...]:
    return (f"-DFUSION_MAX_NEIGHBORS={MAX_NEIGHBORS}", f"-DFUSION_MEDIAN={int(bool(median))}",
            f"-DFUSION_CAM_STRIDE={CAM_STRIDE}")


def _check_view(cp, what: str, view: dict) -> tuple[int, int]:
    depth = view["depth"]
    if not isinstance(depth, cp.ndarray) or depth.ndim != 2:
        raise ValueError(f"{what}.depth: expected a 2-D cupy array, got {type(depth).__name__} "
                         f"{getattr(depth, 'shape', None)}")
    h, w = depth.shape
    if h * w >= 2**31:
        raise ValueError(f"{what}: {w}x{h} px; the kernel indexes pixels with int32 (< 2^31 pixels)")
    shapes = {"depth": (h, w), "normal": (h, w, 3), "color": (h, w, 3), "blocked": (h, w)}
    device = cp.cuda.Device().id
    for key, (dtype, _) in _EXPECTED.items():
        a = view[key]
        if not isinstance(a, cp.ndarray):
            raise ValueError(f"{what}.{key}: expected a cupy array, got {type(a).__name__}")
        if a.dtype != dtype or a.shape != shapes[key] or not a.flags.c_contiguous:
            raise ValueError(f"{what}.{key}: expected C-contiguous {dtype} {shapes[key]}, "
                             f"got {a.dtype} {a.shape} (contiguous={a.flags.c_contiguous})")
        if a.device.id != device:
            raise ValueError(f"{what}.{key}: on device {a.device.id}, the current device is {device}")
    return h, w


def fuse_reference_cuda(ref: dict, neighbors: list[dict], cams: np.ndarray, *, max_reproj_error: float,
                        max_depth_diff: float, max_normal_angle: float, min_consistent: int,
                        median: bool, free_space_margin: float = 0.05,
                        max_free_space_violations: int | None = None, min_triangulation_angle: float = 0.0,
                        consume: bool = True, out: dict | None = None) -> dict:
    """GPU version of `cpu.fuse_reference` (same arguments; arrays are cupy arrays).

    ref / neighbors: dicts of cupy arrays: depth [H, W] float32, normal [H, W, 3] float32,
    color [H, W, 3] uint8, blocked [H, W] uint8 (updated in place).
    cams: [1 + len(neighbors), CAM_STRIDE] (host, any float dtype; cast to float32).
    out: optional preallocated outputs for this reference size (reused across views).
    Returns cupy arrays xyz [H*W, 3] float32, normal [H*W, 3] float32, color [H*W, 3] uint8,
    support [H*W] uint8 (0 = no point), vis [H*W] uint32.
    """
    cp = import_cupy()
    if len(neighbors) > MAX_NEIGHBORS:
        raise ValueError(f"neighbors: {len(neighbors)} views, at most {MAX_NEIGHBORS} are supported")
    h, w = _check_view(cp, "ref", ref)
    sizes = [_check_view(cp, f"neighbors[{k}]", nb) for k, nb in enumerate(neighbors)]
    cams = np.ascontiguousarray(cams, dtype=np.float32).reshape(-1)
    if cams.size != (1 + len(neighbors)) * CAM_STRIDE:
        raise ValueError(f"cams: {cams.size} values, expected {(1 + len(neighbors)) * CAM_STRIDE}")
    for name, value in (("max_reproj_error", max_reproj_error), ("max_depth_diff", max_depth_diff),
                        ("max_normal_angle", max_normal_angle), ("free_space_margin", free_space_margin),
                        ("min_triangulation_angle", min_triangulation_angle)):
        if not np.isfinite(value) or value < 0:
            raise ValueError(f"{name}: must be a finite number >= 0, got {value}")
    n_pix = h * w
    if out is None or out["support"].shape != (n_pix,):
        out = allocate_outputs(n_pix)
    num_nb = len(neighbors)

    def pointers(key):  # [max(num_nb, 1)] uint64 device pointers (one dummy entry when there are none)
        ptrs = [nb[key].data.ptr for nb in neighbors] or [0]
        return cp.asarray(np.asarray(ptrs, dtype=np.uint64))

    nb_size = cp.asarray(np.asarray([(sw, sh) for sh, sw in sizes] or [(0, 0)], dtype=np.int32).reshape(-1))
    kernel = get_kernel("fusion.cu", "fusion_fuse_reference", _options(median))
    grid = ((w + BLOCK_2D[0] - 1) // BLOCK_2D[0], (h + BLOCK_2D[1] - 1) // BLOCK_2D[1])
    kernel(grid, BLOCK_2D, (
        ref["depth"], ref["normal"], ref["color"], ref["blocked"], np.int32(w), np.int32(h),
        cp.asarray(cams), pointers("depth"), pointers("normal"), pointers("color"), pointers("blocked"), nb_size,
        np.int32(num_nb), np.float32(max_reproj_error), np.float32(max_depth_diff),
        np.float32(np.cos(np.radians(max_normal_angle))), np.int32(min_consistent),
        np.float32(free_space_margin), np.int32(free_space_limit(max_free_space_violations)),
        np.float32(triangulation_limit(min_triangulation_angle)), np.int32(bool(consume)),
        out["xyz"], out["normal"], out["color"], out["support"], out["vis"]))
    if consume:
        for nb in neighbors:
            commit_claims_cuda(nb["blocked"])
    return out


def allocate_outputs(n_pix: int) -> dict:
    cp = import_cupy()
    return {"xyz": cp.empty((n_pix, 3), cp.float32), "normal": cp.empty((n_pix, 3), cp.float32),
            "color": cp.empty((n_pix, 3), cp.uint8), "support": cp.empty(n_pix, cp.uint8),
            "vis": cp.empty(n_pix, cp.uint32)}


def commit_claims_cuda(blocked) -> None:
    """Claimed pixels (bit 1) become consumed (bit 0), in place; blocked: cupy uint8, contiguous."""
    cp = import_cupy()
    if not isinstance(blocked, cp.ndarray) or blocked.dtype != cp.uint8 or not blocked.flags.c_contiguous:
        raise ValueError(f"blocked: expected a contiguous cupy uint8 array, got {type(blocked).__name__} "
                         f"{getattr(blocked, 'dtype', None)}")
    n = blocked.size
    if n == 0:
        return
    kernel = get_kernel("fusion.cu", "fusion_commit_claims", _options(False))
    kernel(((n + BLOCK_1D - 1) // BLOCK_1D,), (BLOCK_1D,), (blocked, np.int64(n)))


def pack_chunk_cuda(xyz, normal, color, support, vis, ref_index: int, neighbor_indices) -> tuple:
    """(records, words) of P fused points, on the GPU: records cupy uint8 [P * 28], fused.ply's
    vertex records; words cupy uint32, fused.ply.vis's records of the points (reference
    `ref_index`, neighbour k's COLMAP index neighbor_indices[k] where bit k of vis is set).

    xyz, normal [P, 3] float32; color [P, 3] uint8; support [P] uint8; vis [P] uint32 (cupy).
    One synchronisation: the number of words, which sizes `words`."""
    cp = import_cupy()
    p = int(xyz.shape[0]) if isinstance(xyz, cp.ndarray) and xyz.ndim == 2 else -1
    for name, a, dtype, shape in (("xyz", xyz, cp.float32, (p, 3)), ("normal", normal, cp.float32, (p, 3)),
                                  ("color", color, cp.uint8, (p, 3)), ("support", support, cp.uint8, (p,)),
                                  ("vis", vis, cp.uint32, (p,))):
        check_array(cp, name, a, dtype, shape)
    nb = np.asarray(neighbor_indices, dtype=np.int64)
    if nb.ndim != 1 or len(nb) > MAX_NEIGHBORS or (nb < 0).any() or (nb >= 2**32).any():
        raise ValueError(f"neighbor_indices: expected at most {MAX_NEIGHBORS} uint32 indices, got {nb.tolist()}")
    if not 0 <= int(ref_index) < 2**32:
        raise ValueError(f"ref_index: {ref_index} is not a uint32")
    records = cp.empty((p, 7), cp.uint32)
    if p == 0:
        return records.view(cp.uint8).reshape(-1), cp.empty(0, cp.uint32)
    grid = ((p + BLOCK_1D - 1) // BLOCK_1D,)
    lengths = cp.empty(p, cp.int64)
    get_kernel("fusion_records.cu", "fusion_record_words")(grid, (BLOCK_1D,), (vis, np.int32(len(nb)), np.int64(p),
                                                                                lengths))
    ends = cp.cumsum(lengths)
    words = cp.empty(int(ends[-1]), cp.uint32)  # the synchronisation
    starts = ends - lengths
    neighbors = cp.asarray((nb if len(nb) else np.zeros(1, np.int64)).astype(np.uint32))
    get_kernel("fusion_records.cu", "fusion_pack_records")(grid, (BLOCK_1D,), (
        xyz, normal, color, support, vis, starts, neighbors, np.int32(len(nb)), np.uint32(ref_index), np.int64(p),
        records, words))
    return records.view(cp.uint8).reshape(-1), words


def kernel_variants() -> list[tuple[str, tuple[str, ...]]]:
    """The (file, options) variants `mvs-pipeline build-kernels` precompiles (mean and median
    fusion, and the record packer, which has no options)."""
    return [("fusion.cu", _options(median)) for median in (False, True)] + [("fusion_records.cu", ())]
