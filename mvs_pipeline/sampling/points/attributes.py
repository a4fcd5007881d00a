"""Per-point attributes as float32 columns and back, for operations that average them
(inverse-distance interpolation in three_nn.py, voxel means in voxel_pool.py).

    matrix, layout = attribute_matrix(cloud, names)       # [N, C] float32, [(name, width)]
    ... average rows of `matrix` into `values` [M, C] ...
    restore_attributes(out, values, layout, cloud)        # sets out.normals / colors / extra

Back from the average, normals are re-normalised (0 where they cancel out), colours rounded to
uint8, and integer channels rounded and clipped back to their dtype; float channels stay float32.
"""

from __future__ import annotations

import numpy as np

from mvs_pipeline.errors import MVSError
from mvs_pipeline.io.ply import PointCloud


def available_attributes(cloud: PointCloud) -> list[str]:
    """Attribute names of `cloud`: normals, colors (where present), then its extra channels."""
    names = [n for n, v in (("normals", cloud.normals), ("colors", cloud.colors)) if v is not None]
    return names + list(cloud.extra)


def attribute_matrix(cloud: PointCloud, names: list[str]) -> tuple[np.ndarray, list[tuple[str, int]]]:
    """Stack the named attributes as float32 columns: (matrix [N, C], [(name, width)])."""
    cols, layout = [], []
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
        values = np.asarray(values)
        width = int(np.prod(values.shape[1:]))  # 1 for a [N] channel; not -1, which fails on an empty cloud
        values = values.reshape(len(cloud), width).astype(np.float32)
        cols.append(values)
        layout.append((name, values.shape[1]))
    if not cols:
        return np.zeros((len(cloud), 0), dtype=np.float32), []
    return np.concatenate(cols, axis=1), layout


def restore_attributes(out: PointCloud, values: np.ndarray, layout: list[tuple[str, int]], source: PointCloud, *,
                       bool_as_fraction: bool = False) -> None:
    """Set `out`'s attributes from averaged columns `values` [M, C] laid out as `layout`.

    Extra channels take their dtype from `source.extra`. A bool channel is rounded back to bool,
    or with `bool_as_fraction` kept as the float32 average (the fraction of points where it is set).
    """
    col = 0
    for name, width in layout:
        block = values[:, col:col + width]
        col += width
        if name == "normals":
            norm = np.linalg.norm(block, axis=1, keepdims=True)
            out.normals = np.where(norm > 0, block / np.where(norm > 0, norm, 1), 0).astype(np.float32)
        elif name == "colors":
            out.colors = np.clip(np.rint(block), 0, 255).astype(np.uint8)
        else:
            dtype = np.asarray(source.extra[name]).dtype
            column = block[:, 0] if width == 1 else block
            if dtype.kind in "iu" or (dtype.kind == "b" and not bool_as_fraction):
                column = np.rint(column)
                if dtype.kind != "b":  # float32 rounding can step past the integer range
                    info = np.iinfo(dtype)
                    column = np.clip(column, info.min, info.max)
                column = column.astype(dtype)
            out.extra[name] = column
