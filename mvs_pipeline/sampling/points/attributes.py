"""Per-point attributes as float32 columns and back, for operations that average them
(inverse-distance interpolation in three_nn.py, voxel means in voxel_pool.py).

    matrix, layout = attribute_matrix(cloud, names)       # [N, C] float32, [(name, width)]
    ... average rows of `matrix` into `values` [M, C] ...
    restore_attributes(out, values, layout, cloud)        # sets out.normals / colors / extra

Back from the average, normals are re-normalised (0 where they cancel out), colours rounded to
uint8, and integer channels rounded and clipped back to their dtype; float channels stay float32.
Both functions work on NumPy or CuPy arrays alike (the cloud's own array module), so the GPU
voxel pooling restores attributes on the device without a round trip through host memory.
"""

from __future__ import annotations

import numpy as np

from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.ply import PointCloud

from .validate import array_module


def available_attributes(cloud: PointCloud) -> list[str]:
    """Attribute names of `cloud`: normals, colors (where present), then its extra channels."""
    names = [n for n, v in (("normals", cloud.normals), ("colors", cloud.colors)) if v is not None]
    return names + list(cloud.extra)


def attribute_matrix(cloud: PointCloud, names: list[str], lead: int = 0) -> tuple[np.ndarray, list[tuple[str, int]]]:
    """Stack the named attributes as float32 columns: (matrix [N, lead + C], [(name, width)]).
    The first `lead` columns are left for the caller to fill (voxel pooling puts the coordinates
    there): one [N, lead + C] array written column block by column block, instead of a stack of
    converted copies concatenated and then concatenated again behind the coordinates."""
    blocks, layout = [], []
    for name in names:
        if name == "normals":
            values = cloud.normals
        elif name == "colors":
            values = cloud.colors
        else:
            values = cloud.extra.get(name)
        if values is None:
            raise MVSError(f"attribute '{name}' is not in the source cloud "
                           f"(has: {', '.join(available_attributes(cloud)) or 'none'})")
        values = array_module(values).asarray(values)
        width = int(np.prod(values.shape[1:]))  # 1 for a [N] channel; not -1, which fails on an empty cloud
        blocks.append(values.reshape(len(cloud), width))
        layout.append((name, width))
    xp = array_module(cloud.xyz)
    matrix = xp.empty((len(cloud), lead + sum(w for _, w in layout)), dtype=np.float32)
    col = lead
    for block, (_, width) in zip(blocks, layout):
        matrix[:, col:col + width] = block  # converted to float32 on assignment, as astype does
        col += width
    return matrix, layout


def restore_attributes(out: PointCloud, values: np.ndarray, layout: list[tuple[str, int]], source: PointCloud, *,
                       bool_as_fraction: bool = False) -> None:
    """Set `out`'s attributes from averaged columns `values` [M, C] laid out as `layout`.

    Extra channels take their dtype from `source.extra`. A bool channel is rounded back to bool,
    or with `bool_as_fraction` kept as the float32 average (the fraction of points where it is set).
    """
    xp = array_module(values)
    col = 0
    for name, width in layout:
        block = values[:, col:col + width]
        col += width
        if name == "normals":
            # Written out per column, not linalg.norm/sum: a fixed order of float32 operations, so
            # NumPy and CuPy round alike (tests compare the backends bit for bit).
            norm = xp.sqrt(block[:, :1] * block[:, :1] + block[:, 1:2] * block[:, 1:2] + block[:, 2:3] * block[:, 2:3])
            out.normals = xp.where(norm > 0, block / xp.where(norm > 0, norm, np.float32(1)), 0).astype(np.float32)
        elif name == "colors":
            out.colors = xp.clip(xp.rint(block), 0, 255).astype(np.uint8)
        else:
            dtype = np.dtype(source.extra[name].dtype)
            column = block[:, 0] if width == 1 else block
            if dtype.kind in "iu" or (dtype.kind == "b" and not bool_as_fraction):
                column = xp.rint(column)
                if dtype.kind != "b":  # float32 rounding can step past the integer range
                    info = np.iinfo(dtype)
                    column = xp.clip(column, info.min, info.max)
                column = column.astype(dtype)
            out.extra[name] = column
