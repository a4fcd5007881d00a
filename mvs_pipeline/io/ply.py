"""Point clouds as PLY files, through `plyfile`.

Written layout (what Open3D, MeshLab, CloudCompare, COLMAP and the ETH3D evaluator read):
binary little-endian, one `vertex` element with x,y,z, then optional float32 nx,ny,nz,
optional uchar red,green,blue, then any extra per-point properties in the order given.
Coordinates keep their dtype both ways: a file with double x,y,z reads as float64 and a float64
cloud is written with double x,y,z (georeferenced clouds, ~5e6 m, lose ~0.25 m in float32);
everything else is float32. The pipeline's own clouds are float32: the ETH3D evaluator silently
scores double coordinates as zero.

Reading accepts ascii/binary, float or double coordinates, and ignores elements other than
`vertex` (laser scans written by PCL carry an extra `camera` element).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import plyfile

from ..errors import MVSError
from .atomic import atomic_path


@dataclass
class PointCloud:
    xyz: np.ndarray  # [N, 3] float32, or float64 for clouds read from double coordinates
    normals: np.ndarray | None = None  # [N, 3] float32
    colors: np.ndarray | None = None  # [N, 3] uint8
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # name -> [N] any numeric dtype

    def __len__(self) -> int:
        return int(self.xyz.shape[0])


def read_vertex_element(path: str | os.PathLike, what: str = "PLY file") -> np.ndarray:
    """[N] structured array of a PLY's `vertex` element, checked to hold x, y and z.

    `what` names the file in the not-found error (e.g. "reconstruction PLY").
    """
    path = Path(path)
    if not path.is_file():
        raise MVSError(f"{path}: {what} not found")
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


def read_ply(path: str | os.PathLike) -> PointCloud:
    v = read_vertex_element(path)
    names = v.dtype.names
    double = any(v.dtype[a].itemsize > 4 and v.dtype[a].kind == "f" for a in "xyz")
    xyz = np.stack([np.asarray(v[a], dtype=np.float64) for a in "xyz"], axis=1)
    normals = None
    if all(n in names for n in ("nx", "ny", "nz")):
        normals = np.stack([np.asarray(v[n], dtype=np.float32) for n in ("nx", "ny", "nz")], axis=1)
    colors = None
    if all(c in names for c in ("red", "green", "blue")):
        colors = np.stack([np.asarray(v[c]) for c in ("red", "green", "blue")], axis=1)
        colors = np.clip(colors, 0, 255).astype(np.uint8)
    known = {"x", "y", "z", "nx", "ny", "nz", "red", "green", "blue"}
    extra = {n: np.asarray(v[n]) for n in names if n not in known}
    return PointCloud(xyz=xyz if double else xyz.astype(np.float32), normals=normals, colors=colors, extra=extra)


def write_ply(path: str | os.PathLike, cloud: PointCloud) -> None:
    """Write `cloud` atomically as binary little-endian PLY (double coordinates if xyz is float64,
    else float32)."""
    n = len(cloud)
    fields: list[tuple[str, np.ndarray]] = [(a, cloud.xyz[:, i]) for i, a in enumerate("xyz")]
    if cloud.normals is not None:
        fields += [(a, cloud.normals[:, i]) for i, a in enumerate(("nx", "ny", "nz"))]
    if cloud.colors is not None:
        fields += [(a, cloud.colors[:, i]) for i, a in enumerate(("red", "green", "blue"))]
    fields += list(cloud.extra.items())
    dtype = []
    for name, values in fields:
        if values.shape != (n,):
            raise MVSError(f"{path}: property '{name}' has shape {values.shape}, expected ({n},)")
        if name in ("red", "green", "blue"):
            dtype.append((name, "u1"))
        elif name in ("x", "y", "z") and cloud.xyz.dtype == np.float64:
            dtype.append((name, "<f8"))
        elif name in ("x", "y", "z", "nx", "ny", "nz") or values.dtype.kind == "f":
            dtype.append((name, "<f4"))
        else:
            dtype.append((name, values.dtype.newbyteorder("<").str))
    arr = np.empty(n, dtype=dtype)
    for name, values in fields:
        arr[name] = values
    element = plyfile.PlyElement.describe(arr, "vertex")
    with atomic_path(path) as tmp:
        plyfile.PlyData([element], text=False, byte_order="<").write(str(tmp))
