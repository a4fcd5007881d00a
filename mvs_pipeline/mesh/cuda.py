"""CuPy launchers of `cuda/mesh_tsdf.cu` (add depth maps to the allocated blocks' TSDF accumulators,
layout.py) and `cuda/mesh_cubes.cu` (marching cubes over the blocks, march.py). The twins are
cpu.py's functions of the same names and arguments."""

from __future__ import annotations

import numpy as np

from ..gpu.checks import check_array
from ..gpu.loader import get_kernel, import_cupy
from .layout import BLOCK, BLOCK_VOXELS, CAM_STRIDE

_CU = "mesh_tsdf.cu"
THREADS = 256
OPTIONS = (f"-DTSDF_BLOCK={BLOCK}", f"-DTSDF_CAM_STRIDE={CAM_STRIDE}")


def tsdf_integrate(depth, rgb, cams, offsets, sizes, view_range, origin, voxel, truncation, blocks, acc,
                   scale=None) -> None:
    """CuPy arrays: depth [P] float32, scale [P] float32 or None (cpu.py), rgb [P, 3] uint8, cams [V, 12]
    float32, offsets [V] int64, sizes [V, 2] int32, blocks [B, 3] int32; acc the blocks' accumulators (cupy,
    layout.empty_accumulators(B * BLOCK^3)), updated in place."""
    cp = import_cupy()
    check_array(cp, "depth", depth, np.float32, (None,))
    check_array(cp, "rgb", rgb, np.uint8, (depth.shape[0], 3))
    use_scale = scale is not None
    scale = scale if use_scale else cp.ones(1, cp.float32)
    check_array(cp, "scale", scale, np.float32, (depth.shape[0] if use_scale else 1,))
    check_array(cp, "cams", cams, np.float32, (None, CAM_STRIDE))
    num_views = int(cams.shape[0])
    check_array(cp, "offsets", offsets, np.int64, (num_views,))
    check_array(cp, "sizes", sizes, np.int32, (num_views, 2))
    num_blocks = int(blocks.shape[0])
    check_array(cp, "blocks", blocks, np.int32, (num_blocks, 3))
    n = num_blocks * BLOCK_VOXELS
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
    get_kernel(_CU, "tsdf_integrate", OPTIONS)(
        (-(-n // THREADS),), (THREADS,),
        (depth, scale, np.int32(use_scale), rgb, cams, offsets, sizes, np.int32(v0), np.int32(v1), o[0], o[1], o[2],
         np.float32(voxel), np.float32(truncation), blocks, np.int64(num_blocks), acc["sdf_sum"], acc["weight"],
         acc["rgb_sum"], acc["rgb_weight"]))




_CUBES = "mesh_cubes.cu"
CUBES_OPTIONS = (f"-DTSDF_BLOCK={BLOCK}",)
_tables: dict = {}


def _device_tables(cp) -> dict:
    """mc_tables' arrays on the device, uploaded once per process."""
    if not _tables:
        from .mc_tables import CORNERS, EDGE_OWNER, TRI_COUNT, TRI_TABLE  # noqa: PLC0415

        _tables.update(corners=cp.asarray(CORNERS), tri_count=cp.asarray(TRI_COUNT), tri_table=cp.asarray(TRI_TABLE),
                       edge_owner=cp.asarray(EDGE_OWNER))
    return _tables


def _check_batch(cp, field, nbr, cases, edges) -> tuple[int, int]:
    """(blocks, voxels) of a batch, after checking what both marching kernels read per voxel."""
    num_blocks = int(nbr.shape[0])
    n = num_blocks * BLOCK_VOXELS
    check_array(cp, "nbr", nbr, np.int32, (num_blocks, 8))
    check_array(cp, "field", field, np.float32, (n,))
    check_array(cp, "cases", cases, np.uint8, (n,))
    check_array(cp, "edges", edges, np.uint8, (n,))
    return num_blocks, n


def cubes_classify(field, nbr, num_cube_blocks, cases, ntri, edges) -> None:
    """CuPy twin of cpu.cubes_classify (same arguments, outputs written in place)."""
    cp = import_cupy()
    num_blocks, n = _check_batch(cp, field, nbr, cases, edges)
    check_array(cp, "ntri", ntri, np.int32, (n,))
    if not 0 <= int(num_cube_blocks) <= num_blocks:
        raise ValueError(f"num_cube_blocks {num_cube_blocks} outside 0..{num_blocks}")
    if n == 0:
        return
    tab = _device_tables(cp)
    get_kernel(_CUBES, "cubes_classify", CUBES_OPTIONS)(
        (-(-n // THREADS),), (THREADS,),
        (field, nbr, np.int64(num_cube_blocks), np.int64(num_blocks), tab["corners"], tab["tri_count"], cases, ntri,
         edges))


def cubes_emit(field, nbr, cases, edges, tri_first, vert_first, faces, vert_edge, vert_t, vert_voxel) -> None:
    """CuPy twin of cpu.cubes_emit (same arguments, outputs written in place)."""
    cp = import_cupy()
    num_blocks, n = _check_batch(cp, field, nbr, cases, edges)
    check_array(cp, "tri_first", tri_first, np.int64, (n,))
    check_array(cp, "vert_first", vert_first, np.int64, (n,))
    check_array(cp, "faces", faces, np.int64, (None, 3))
    check_array(cp, "vert_edge", vert_edge, np.int64, (None,))
    check_array(cp, "vert_t", vert_t, np.float32, (vert_edge.shape[0],))
    check_array(cp, "vert_voxel", vert_voxel, np.int64, (vert_edge.shape[0],))
    if n == 0:
        return
    tab = _device_tables(cp)
    get_kernel(_CUBES, "cubes_emit", CUBES_OPTIONS)(
        (-(-n // THREADS),), (THREADS,),
        (field, nbr, np.int64(num_blocks), tab["corners"], tab["tri_table"], tab["edge_owner"], cases, edges,
         tri_first, vert_first, faces, vert_edge, vert_t, vert_voxel))


def kernel_variants() -> list[tuple[str, tuple[str, ...]]]:
    """The (file, options) variants `mvs-pipeline build-kernels` precompiles."""
    return [(_CU, OPTIONS), (_CUBES, CUBES_OPTIONS)]
