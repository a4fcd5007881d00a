"""CuPy launcher of `cuda/mesh_tsdf.cu`: add depth maps to a tile's TSDF accumulators (layout.py).
The twin is cpu.py's `tsdf_integrate`, with the same arguments."""

from __future__ import annotations

import numpy as np

from ..gpu.checks import check_array
from ..gpu.loader import get_kernel, import_cupy
from .layout import CAM_STRIDE

_CU = "mesh_tsdf.cu"
THREADS = 256


def tsdf_integrate(depth, rgb, cams, offsets, sizes, view_range, origin, voxel, truncation, shape, acc) -> None:
    """CuPy arrays: depth [P] float32, rgb [P, 3] uint8, cams [V, 12] float32, offsets [V] int64,
    sizes [V, 2] int32; acc the tile's accumulators (cupy, layout.empty_accumulators), updated in place."""
    cp = import_cupy()
    check_array(cp, "depth", depth, np.float32, (None,))
    check_array(cp, "rgb", rgb, np.uint8, (depth.shape[0], 3))
    check_array(cp, "cams", cams, np.float32, (None, CAM_STRIDE))
    num_views = int(cams.shape[0])
    check_array(cp, "offsets", offsets, np.int64, (num_views,))
    check_array(cp, "sizes", sizes, np.int32, (num_views, 2))
    nx, ny, nz = (int(s) for s in shape)
    n = nx * ny * nz
    check_array(cp, "sdf_sum", acc["sdf_sum"], np.float32, (n,))
    check_array(cp, "weight", acc["weight"], np.float32, (n,))
    check_array(cp, "rgb_sum", acc["rgb_sum"], np.float32, (n, 3))
    check_array(cp, "rgb_weight", acc["rgb_weight"], np.float32, (n,))
    v0, v1 = int(view_range[0]), int(view_range[1])
    if not 0 <= v0 <= v1 <= num_views:
        raise ValueError(f"view_range {view_range} outside 0..{num_views}")
    if n == 0 or v0 == v1:
        return
    o = np.asarray(origin, np.float32)
    get_kernel(_CU, "tsdf_integrate")(
        (-(-n // THREADS),), (THREADS,),
        (depth, rgb, cams, offsets, sizes, np.int32(v0), np.int32(v1), o[0], o[1], o[2], np.float32(voxel),
         np.float32(truncation), np.int32(nx), np.int32(ny), np.int32(nz), acc["sdf_sum"], acc["weight"],
         acc["rgb_sum"], acc["rgb_weight"]))


def kernel_variants() -> list[tuple[str, tuple[str, ...]]]:
    """The (file, options) variants `mvs-pipeline build-kernels` precompiles."""
    return [(_CU, ())]
