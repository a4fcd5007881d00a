"""A PointCloud whose arrays live on the GPU (CuPy) or the host (NumPy), and moves between them.

`io.ply.PointCloud` does not care which array module holds its arrays; the sampling stage keeps
the fused cloud, its pooled version and the output order on the GPU from the upload of fused.ply's
records to the download of fused_fps.ply's, so that no step pays a round trip through host memory.

    to_device(cloud) / to_host_cloud(cloud) -> the same cloud on CuPy / NumPy arrays
    take(cloud, indices [M])                -> the rows `indices` of every array (either module)
    take_rows(cloud, start, stop)           -> rows start .. stop - 1 of every array (views)
    empty_rows(cloud, n) / put_rows(dst, src, start)   -> a cloud of n rows like `cloud`, filled by pieces
"""

from __future__ import annotations

import numpy as np

from mvs_pipeline.io.ply import PointCloud

from .validate import array_module, to_host


def _map(cloud: PointCloud, fn) -> PointCloud:
    return PointCloud(xyz=fn(cloud.xyz), normals=None if cloud.normals is None else fn(cloud.normals),
                      colors=None if cloud.colors is None else fn(cloud.colors),
                      extra={k: fn(v) for k, v in cloud.extra.items()})


def to_device(cloud: PointCloud) -> PointCloud:
    import cupy  # noqa: PLC0415

    return _map(cloud, cupy.asarray)


def to_host_cloud(cloud: PointCloud) -> PointCloud:
    return _map(cloud, to_host)


def take(cloud: PointCloud, indices) -> PointCloud:
    """Rows `indices` of every array; `indices` is moved to the cloud's array module first."""
    xp = array_module(cloud.xyz)
    idx = to_host(indices) if xp is np else xp.asarray(indices)
    return _map(cloud, lambda a: a[idx])


def take_rows(cloud: PointCloud, start: int, stop: int) -> PointCloud:
    """Rows start .. stop - 1 of every array (views, no copy)."""
    return _map(cloud, lambda a: a[start:stop])


def empty_rows(cloud: PointCloud, n: int) -> PointCloud:
    """An uninitialised cloud of n rows with `cloud`'s columns, dtypes and array module."""
    xp = array_module(cloud.xyz)
    return _map(cloud, lambda a: xp.empty((n, *a.shape[1:]), dtype=a.dtype))


def put_rows(dst: PointCloud, src: PointCloud, start: int) -> None:
    """dst's rows start .. start + len(src) - 1 = src's rows (same columns; src moved to dst's module)."""
    xp = array_module(dst.xyz)
    stop = start + len(src)
    pairs = [(dst.xyz, src.xyz), (dst.normals, src.normals), (dst.colors, src.colors),
             *((dst.extra[k], v) for k, v in src.extra.items())]
    for d, s in pairs:
        if d is not None:
            d[start:stop] = to_host(s) if xp is np else xp.asarray(s)
