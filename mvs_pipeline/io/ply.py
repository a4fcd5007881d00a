"""Point clouds as PLY files, through `plyfile`.

Written layout (what Open3D, MeshLab, CloudCompare, COLMAP and the ETH3D evaluator read):
binary little-endian, one `vertex` element with x,y,z, then optional float32 nx,ny,nz,
optional uchar red,green,blue, then any extra per-point properties in the order given.
Coordinates keep their dtype both ways: a file with double x,y,z reads as float64 and a float64
cloud is written with double x,y,z (georeferenced clouds, ~5e6 m, lose ~0.25 m in float32);
everything else is float32. The pipeline's own clouds are float32: the ETH3D evaluator silently
scores double coordinates as zero.

Reading accepts ascii/binary, float or double coordinates, and ignores elements other than
`vertex` (laser scans written by PCL carry an extra `camera` element). Binary little-endian files
with vertex first (what the pipeline writes) are read and written without plyfile, the body in
one call (ply_records.py: at 50 M points plyfile's path cost seconds); other files go through
plyfile. `write_ply` also takes a cloud of CuPy arrays: the records are packed on the GPU and
downloaded in one copy.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import plyfile

from ..errors import MVSError
from .point_cloud import PointCloud  # noqa: F401 (re-exported: io.ply.PointCloud is the usual import)
from .ply_records import cloud_dtype, pack_records, read_layout, read_records, write_records


def read_vertex_element(path: str | os.PathLike, what: str = "PLY file") -> np.ndarray:
    """[N] structured array of a PLY's `vertex` element, checked to hold x, y and z.

    `what` names the file in the not-found error (e.g. "reconstruction PLY").
    """
    path = Path(path)
    if not path.is_file():
        raise MVSError(f"{path}: {what} not found")
    try:
        layout = read_layout(path)
    except (OSError, ValueError) as exc:
        raise MVSError(f"{path}: not a readable PLY file ({exc})") from exc
    if layout is not None:
        v = read_records(path, layout)
        missing = [a for a in "xyz" if a not in v.dtype.names]
        if missing:
            raise MVSError(f"{path}: PLY vertex element lacks {', '.join(missing)}")
        return v
    try:
        ply = plyfile.PlyData.read(str(path))
    except Exception as exc:  # plyfile raises several types for corrupt headers/bodies
        raise MVSError(f"{path}: not a readable PLY file ({exc})") from exc
    if "vertex" not in ply:
        raise MVSError(f"{path}: PLY has no 'vertex' element")
    v = ply["vertex"].data
    missing = [a for a in "xyz" if a not in (v.dtype.names or ())]
    if missing:
        raise MVSError(f"{path}: PLY vertex element lacks {', '.join(missing)}")
    return v


def _columns(v: np.ndarray, names, dtype) -> np.ndarray:
    """[N, len(names)] array of `dtype` from fields of structured v (one strided copy per field)."""
    out = np.empty((len(v), len(names)), dtype=dtype)
    for i, name in enumerate(names):
        out[:, i] = v[name]
    return out


def read_ply(path: str | os.PathLike) -> PointCloud:
    v = read_vertex_element(path)
    names = v.dtype.names
    double = any(v.dtype[a].itemsize > 4 and v.dtype[a].kind == "f" for a in "xyz")
    xyz = _columns(v, "xyz", np.float64 if double else np.float32)
    normals = None
    if all(n in names for n in ("nx", "ny", "nz")):
        normals = _columns(v, ("nx", "ny", "nz"), np.float32)
    colors = None
    if all(c in names for c in ("red", "green", "blue")):
        rgb = ("red", "green", "blue")
        if all(v.dtype[c] == np.uint8 for c in rgb):
            colors = _columns(v, rgb, np.uint8)
        else:
            colors = np.clip(np.stack([np.asarray(v[c]) for c in rgb], axis=1), 0, 255).astype(np.uint8)
    known = {"x", "y", "z", "nx", "ny", "nz", "red", "green", "blue"}
    extra = {n: np.array(v[n]) for n in names if n not in known}
    return PointCloud(xyz=xyz, normals=normals, colors=colors, extra=extra)


def write_ply(path: str | os.PathLike, cloud: PointCloud) -> None:
    """Write `cloud` atomically as binary little-endian PLY (double coordinates if xyz is float64,
    else float32). A cloud of CuPy arrays is packed on the GPU (ply_records.pack_records)."""
    dtype = cloud_dtype(cloud, str(path))
    if type(cloud.xyz).__module__.startswith("cupy"):
        write_records(path, dtype, pack_records(cloud, dtype))
        return
    arr = np.empty(len(cloud), dtype=dtype)
    for name, values in (("x", cloud.xyz[:, 0]), ("y", cloud.xyz[:, 1]), ("z", cloud.xyz[:, 2])):
        arr[name] = values
    if cloud.normals is not None:
        for i, name in enumerate(("nx", "ny", "nz")):
            arr[name] = cloud.normals[:, i]
    if cloud.colors is not None:
        for i, name in enumerate(("red", "green", "blue")):
            arr[name] = cloud.colors[:, i]
    for name, values in cloud.extra.items():
        arr[name] = values
    write_records(path, dtype, arr)
